//! Which read-only regions a loop keeps on the device when its data does not fit.
//!
//! A loop that reads more data than the budget holds (the layers of a decoder, streamed every
//! pass) moves about the same bytes whichever part of it stays resident, but not in the same
//! time. Belady's rule keeps a run of whole layers: those run with the host-to-device side of
//! the link idle, and the layers it streams arrive one behind another, each kernel waiting for
//! its own. Keeping a share of every kernel's data instead spreads the streamed bytes over the
//! loop, so the link stays busy through every kernel; and the room for data in flight is then
//! a share of two kernels' data rather than two whole layers, so more stays.
//!
//! [`keep_set`] is a pure function of one pass of a loop (its kernels in order: compute time,
//! the read-only regions each reads, the bytes of everything else it touches), the budget and
//! the link's rate. Its candidates keep, for a share `f` from 0 to 1, either `f` of each
//! kernel's read-only bytes or `f` of those met so far in the pass (kernels of one region each
//! then keep every so many), largest regions first and whole regions (a restore of part of a
//! managed region takes the slow path: `docs/decisions.md`). Each candidate is timed by a
//! model of the loop's steady state ([`pass_time`]), beside the runs of whole kernels that
//! Belady keeps; a share is chosen only if it beats every run by [`MIN_GAIN`]. Where none
//! does, a policy that applies Belady's rule itself keeps nothing ([`Runs::Belady`]), and one
//! whose forecast is shorter than the loop's reuse keeps the best run ([`Runs::Beyond`]).
//! Either way the set moves at most [`MAX_EXTRA_BYTES`] more than Belady's rule in a pass
//! (simulated over two passes), so a pattern that is not a loop (whose data Belady's rule
//! keeps better than any fixed set) keeps nothing.
//!
//! Only data the loop never writes is kept this way: its host copy stays valid, so streaming it
//! moves it one way only and evicting it drops it.

use std::hash::Hash;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::access::{AccessMode, RangeAccess};
use crate::bound::Program;
use crate::op::Op;
use crate::region::RegionId;

/// One kernel of a loop, as [`keep_set`] sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopKernel<K> {
    /// Its compute time with its data resident, in nanoseconds (0 where it is not known, as
    /// for a program's operators: the model then times the link alone).
    pub dur_ns: u64,
    /// Regions it reads that the loop never writes, with their device bytes.
    pub read_only: Vec<(K, u64)>,
    /// Device bytes of everything else it touches.
    pub other: u64,
}

/// A step's kernels as [`keep_set`] needs them, recorded as they run (the advisor) or as a
/// window shows them (the oracle): each kernel's time and regions, and the regions the step
/// wrote or freed, which are not candidates. At most [`MAX_STEP_KERNELS`] kernels are
/// recorded: a longer step (a program that never marks one) keeps nothing, and its record
/// stops growing.
///
/// It also measures the step's longest reuse of data it has not written ([`Self::longest_reuse`]):
/// a loop whose data does not fit shows itself by a reuse longer than the budget as soon as its
/// second pass begins.
#[derive(Debug, Clone)]
pub struct StepKernels<K> {
    kernels: Vec<(u64, Vec<(K, u64)>)>,
    changed: FxHashSet<K>,
    overflowed: bool,
    /// Bytes of the distinct regions met so far in the step.
    met_bytes: u64,
    /// Per region, `met_bytes` when it was last touched: what was met since is a lower bound
    /// on its reuse distance.
    last_touch: FxHashMap<K, u64>,
    longest_reuse: u64,
}

/// Kernels a step may have for [`StepKernels`] to choose what it keeps.
pub const MAX_STEP_KERNELS: usize = 16_384;

impl<K> Default for StepKernels<K> {
    fn default() -> Self {
        Self {
            kernels: Vec::new(),
            changed: FxHashSet::default(),
            overflowed: false,
            met_bytes: 0,
            last_touch: FxHashMap::default(),
            longest_reuse: 0,
        }
    }
}

impl<K: Copy + Eq + Hash + Ord> StepKernels<K> {
    /// A kernel of `dur_ns` touching each of `regions` (key, device bytes, whether it writes).
    pub fn kernel(&mut self, dur_ns: u64, regions: impl IntoIterator<Item = (K, u64, bool)>) {
        if self.kernels.len() == MAX_STEP_KERNELS {
            self.overflowed = true;
            self.kernels = Vec::new();
            self.changed = FxHashSet::default();
            self.last_touch = FxHashMap::default();
        }
        if self.overflowed {
            return;
        }
        let mut seen: Vec<(K, u64)> = Vec::new();
        for (key, bytes, writes) in regions {
            if writes {
                self.changed.insert(key);
            }
            if !seen.iter().any(|r| r.0 == key) {
                seen.push((key, bytes));
            }
        }
        for &(key, bytes) in &seen {
            match self.last_touch.get(&key) {
                Some(&at) if !self.changed.contains(&key) => {
                    self.longest_reuse = self.longest_reuse.max(self.met_bytes - at);
                }
                Some(_) => {}
                None => self.met_bytes += bytes,
            }
            self.last_touch.insert(key, self.met_bytes);
        }
        self.kernels.push((dur_ns, seen));
    }

    /// The longest reuse so far of a region the step has only read: the bytes of other
    /// regions first met between two of its uses (a lower bound on what the device would have
    /// to hold to keep it). A loop longer than the budget has one longer than the budget once
    /// its second pass starts. 0 once the step has passed [`MAX_STEP_KERNELS`].
    pub fn longest_reuse(&self) -> u64 {
        if self.overflowed {
            0
        } else {
            self.longest_reuse
        }
    }

    /// A kernel of `dur_ns` with its declared `accesses`, each region by its key (`key`; a
    /// region without one is left out) and device bytes (its size in `sizes`, in whole pages).
    pub(crate) fn accesses(
        &mut self,
        dur_ns: u64,
        accesses: &[RangeAccess],
        sizes: &super::units::Sizes,
        key: impl Fn(RegionId) -> Option<K>,
    ) {
        self.kernel(
            dur_ns,
            accesses.iter().filter_map(|a| {
                let bytes = sizes.held(sizes.get(a.region));
                key(a.region).map(|k| (k, bytes, a.mode.writes()))
            }),
        );
    }

    /// A region the step frees.
    pub fn freed(&mut self, key: K) {
        if !self.overflowed {
            self.changed.insert(key);
        }
    }

    /// Whether [`Self::keep_set`] chooses the same from `other` as from this record (same
    /// settings): the same kernels in order and the same regions changed. A loop's steps
    /// record alike, so a policy choosing at every step's end can reuse the last choice.
    pub fn same_choice(&self, other: &Self) -> bool {
        self.overflowed == other.overflowed && self.kernels == other.kernels && self.changed == other.changed
    }

    /// Kernels recorded (none once the step has passed [`MAX_STEP_KERNELS`]).
    pub fn len(&self) -> usize {
        self.kernels.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }

    /// What the step keeps within `budget` over a link of `rate_gbps` ([`keep_set`]), regions
    /// under `min_bytes` (left to faults) counting as other data.
    pub fn keep_set(&self, budget: u64, rate_gbps: f64, min_bytes: u64, runs: Runs) -> FxHashSet<K> {
        if self.overflowed {
            return FxHashSet::default();
        }
        let kernels: Vec<LoopKernel<K>> = self
            .kernels
            .iter()
            .map(|(dur_ns, regions)| {
                let mut k = LoopKernel { dur_ns: *dur_ns, read_only: Vec::new(), other: 0 };
                for &(key, bytes) in regions {
                    if self.changed.contains(&key) || bytes < min_bytes {
                        k.other += bytes;
                    } else {
                        k.read_only.push((key, bytes));
                    }
                }
                k
            })
            .collect();
        keep_set(&kernels, budget, rate_gbps, runs)
    }
}

/// Shares of the read-only bytes tried, from none to all.
const SHARES: u32 = 64;
/// Kernels a run of whole kernels' data is tried from.
const RUN_STARTS: usize = 4;
/// Lengths of run tried from each.
const RUN_LENGTHS: usize = 64;
/// A share is kept only if the model puts it this much under the best run of whole kernels.
pub const MIN_GAIN: f64 = 0.03;
/// ... and it moves at most this much more than Belady's rule in a pass.
pub const MAX_EXTRA_BYTES: f64 = 0.25;

/// The regions to keep resident through `kernels` (one pass of a loop, in order) within
/// `budget` bytes over a link of `rate_gbps` (bytes per nanosecond); empty when the loop's data
/// fits, or when keeping a share does not pay. See the module documentation.
pub fn keep_set<K: Copy + Eq + Hash + Ord>(
    kernels: &[LoopKernel<K>],
    budget: u64,
    rate_gbps: f64,
    runs_too: Runs,
) -> FxHashSet<K> {
    let mut bytes: FxHashMap<K, u64> = FxHashMap::default();
    for k in kernels {
        for &(r, b) in &k.read_only {
            bytes.insert(r, b);
        }
    }
    let total: u64 = bytes.values().sum();
    let most_other = kernels.iter().map(|k| k.other).max().unwrap_or(0);
    if kernels.is_empty() || total.saturating_add(2 * most_other) <= budget || rate_gbps <= 0.0 {
        return FxHashSet::default();
    }
    let time = |kept: &FxHashSet<K>| pass_time(kernels, kept, &bytes, budget, rate_gbps);
    // Belady's steady state in a loop: a run of whole kernels' data kept, the rest streamed.
    // Runs from a few starting points stand for all of them in a loop of alike kernels (the
    // model costs a pass's length per candidate); from the longest whose data fits, shorter
    // ones until two fit beside the data in flight (or `RUN_LENGTHS` were tried).
    let mut runs: Option<(f64, FxHashSet<K>)> = None;
    for first in 0..kernels.len().min(RUN_STARTS) {
        let order: Vec<&LoopKernel<K>> = kernels[first..].iter().chain(&kernels[..first]).collect();
        let (mut seen, mut held, mut longest) = (FxHashSet::default(), 0u64, 0usize);
        for k in &order {
            for &(r, b) in &k.read_only {
                if seen.insert(r) {
                    held += b;
                }
            }
            if held > budget {
                break;
            }
            longest += 1;
        }
        let mut timed = 0;
        for len in (0..=longest).rev().take(RUN_LENGTHS) {
            let kept: FxHashSet<K> =
                order[..len].iter().flat_map(|k| k.read_only.iter().map(|r| r.0)).collect();
            if let Some(t) = time(&kept) {
                if runs.as_ref().is_none_or(|r| t < r.0) {
                    runs = Some((t, kept));
                }
                timed += 1;
                if timed == 2 {
                    break;
                }
            }
        }
    }
    let mut best: Option<(f64, FxHashSet<K>)> = None;
    for step in 1..SHARES {
        let share = step as f64 / SHARES as f64;
        for cumulative in [false, true] {
            let kept = kept_at(kernels, share, cumulative);
            if let Some(t) = time(&kept) {
                if best.as_ref().is_none_or(|b| t < b.0) {
                    best = Some((t, kept));
                }
            }
        }
    }
    let run_time = runs.as_ref().map_or(f64::INFINITY, |r| r.0);
    let chosen = match (best, runs) {
        (Some((t, kept)), _) if t <= run_time * (1.0 - MIN_GAIN) => kept,
        (_, Some((_, run))) if matches!(runs_too, Runs::Beyond(h) if reuse_distance(kernels) > h) => run,
        _ => return FxHashSet::default(),
    };
    let belady = belady_bytes(kernels, &bytes, budget.saturating_sub(2 * most_other));
    if streamed_bytes(kernels, &chosen) as f64 > belady as f64 * (1.0 + MAX_EXTRA_BYTES) {
        return FxHashSet::default();
    }
    chosen
}

/// What [`keep_set`] returns where no share beats the runs of whole kernels Belady's rule
/// settles into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// Nothing: the policy applies Belady's rule itself (the oracle, which sees the whole step).
    Belady,
    /// The best run, where the loop reuses its data further apart than this many kernels: for
    /// a policy whose forecast is that long (the advisor), which ranks what it does not foresee
    /// least recently used first, and so evicts in a longer loop just what comes next. The
    /// run is kept even where the model times streaming everything as fast (the device arena):
    /// it moves fewer bytes, and every move costs host time and copies the model does not count
    /// (`docs/decisions.md`, "A loop keeps a share of every kernel's read-only data").
    Beyond(u64),
}

/// How far apart, in kernels, the loop reads its read-only regions again: the median over
/// regions of each one's shortest gap between reads, the pass wrapping round.
fn reuse_distance<K: Copy + Eq + Hash + Ord>(kernels: &[LoopKernel<K>]) -> u64 {
    let n = kernels.len() as u64;
    let mut reads: FxHashMap<K, (u64, u64, u64)> = FxHashMap::default(); // first, last, gap
    for (i, k) in kernels.iter().enumerate() {
        let i = i as u64;
        for &(r, _) in &k.read_only {
            reads
                .entry(r)
                .and_modify(|(_, last, gap)| {
                    if i > *last {
                        *gap = (*gap).min(i - *last);
                        *last = i;
                    }
                })
                .or_insert((i, i, u64::MAX));
        }
    }
    let mut gaps: Vec<u64> = reads.values().map(|&(first, last, gap)| gap.min(n - last + first)).collect();
    gaps.sort_unstable();
    gaps.get(gaps.len() / 2).copied().unwrap_or(0)
}

/// The regions kept at `share`: each kernel in turn keeps its undecided read-only regions,
/// largest first, while its kept bytes stay within `share` of its read-only bytes
/// (`cumulative`: the bytes kept so far within `share` of those met so far). A region shared
/// by several kernels is decided by the first.
fn kept_at<K: Copy + Eq + Hash + Ord>(
    kernels: &[LoopKernel<K>],
    share: f64,
    cumulative: bool,
) -> FxHashSet<K> {
    let mut kept = FxHashSet::default();
    let mut decided = FxHashSet::default();
    let mut undecided: Vec<(K, u64)> = Vec::new();
    let (mut met, mut held) = (0u64, 0u64);
    for k in kernels {
        undecided.clear();
        undecided.extend(k.read_only.iter().copied().filter(|(r, _)| !decided.contains(r)));
        undecided.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        undecided.dedup_by_key(|r| r.0);
        if !cumulative {
            met = k.read_only.iter().map(|r| r.1).sum();
            held = k.read_only.iter().filter(|(r, _)| kept.contains(r)).map(|r| r.1).sum();
        } else {
            met += undecided.iter().map(|r| r.1).sum::<u64>();
        }
        let limit = share * met as f64;
        for &(r, b) in &undecided {
            decided.insert(r);
            if (held + b) as f64 <= limit {
                held += b;
                kept.insert(r);
            }
        }
    }
    kept
}

/// Bytes each kernel of `kernels` brings in with `kept` resident: its read-only regions not
/// kept and not read by the kernel before it.
fn fetches<K: Copy + Eq + Hash>(kernels: &[LoopKernel<K>], kept: &FxHashSet<K>) -> Vec<u64> {
    let n = kernels.len();
    (0..n)
        .map(|i| {
            let before = &kernels[(i + n - 1) % n].read_only;
            kernels[i]
                .read_only
                .iter()
                .filter(|(r, _)| !kept.contains(r) && !before.iter().any(|p| p.0 == *r))
                .map(|r| r.1)
                .sum()
        })
        .collect()
}

fn streamed_bytes<K: Copy + Eq + Hash>(kernels: &[LoopKernel<K>], kept: &FxHashSet<K>) -> u64 {
    fetches(kernels, kept).iter().sum()
}

/// Steady-state time of one pass with `kept` resident, in nanoseconds, or `None` when a kernel's
/// data does not fit beside it. The model: kernel `k` starts once kernel `k - 1` has ended and
/// its own streamed data has arrived; the link brings each kernel's data in turn at `rate`,
/// starting as soon as the data of every kernel from the one running to it fits beside the kept
/// data; a kernel's streamed data leaves when it ends. Three passes run; the last is timed.
pub fn pass_time<K: Copy + Eq + Hash>(
    kernels: &[LoopKernel<K>],
    kept: &FxHashSet<K>,
    bytes: &FxHashMap<K, u64>,
    budget: u64,
    rate_gbps: f64,
) -> Option<f64> {
    let n = kernels.len();
    let held: u64 = kept.iter().map(|r| bytes.get(r).copied().unwrap_or(0)).sum();
    let fetch = fetches(kernels, kept);
    // Device bytes kernel k's data takes while it is in flight or running.
    let room: Vec<u64> = kernels
        .iter()
        .map(|k| k.other + k.read_only.iter().filter(|(r, _)| !kept.contains(r)).map(|r| r.1).sum::<u64>())
        .collect();
    if room.iter().any(|&r| held + r > budget) {
        return None;
    }
    let passes = 3 * n;
    let mut end = vec![0f64; passes];
    let (mut link_free, mut first_running, mut in_flight) = (0f64, 0usize, 0u64);
    // Fetches are issued in order; fetch j waits until kernels before it have ended and left
    // room. `first_running` is the oldest kernel whose data is still resident.
    for j in 0..passes {
        in_flight += room[j % n];
        while held + in_flight > budget {
            // Room comes when the oldest kernel with data resident ends. It precedes j (j's
            // data alone fits beside the kept data, checked above), so its end is known.
            in_flight -= room[first_running % n];
            link_free = link_free.max(end[first_running]);
            first_running += 1;
        }
        link_free += fetch[j % n] as f64 / rate_gbps;
        let ready = if j == 0 { 0.0 } else { end[j - 1] };
        end[j] = ready.max(link_free) + kernels[j % n].dur_ns as f64;
    }
    Some(end[passes - 1] - end[2 * n - 1])
}

/// Bytes Belady's rule brings in during the second of two passes of `kernels`, at region
/// granularity within `capacity` bytes for the read-only data: the link-limit bound's schedule
/// ([`crate::bound`]) over two passes, less its cold first pass alone.
fn belady_bytes<K: Copy + Eq + Hash + Ord>(
    kernels: &[LoopKernel<K>],
    bytes: &FxHashMap<K, u64>,
    capacity: u64,
) -> u64 {
    let mut keys: Vec<K> = bytes.keys().copied().collect();
    keys.sort_unstable();
    let ids: FxHashMap<K, RegionId> =
        keys.iter().enumerate().map(|(i, &k)| (k, RegionId(i as u64))).collect();
    let name: Arc<str> = Arc::from("loop");
    let brought_in = |passes: usize| {
        let mut program = Program::new();
        for &k in &keys {
            program.observe(&Op::Alloc { region: ids[&k], bytes: bytes[&k], name: None });
        }
        for k in kernels.iter().cycle().take(passes * kernels.len()) {
            let accesses = k
                .read_only
                .iter()
                .map(|&(r, len)| RangeAccess { region: ids[&r], offset: 0, len, mode: AccessMode::Read })
                .collect();
            program.observe(&Op::Kernel { name: name.clone(), dur_ns: k.dur_ns, accesses });
        }
        program.traffic(capacity).0
    };
    brought_in(2).saturating_sub(brought_in(1))
}

#[cfg(test)]
mod tests;
