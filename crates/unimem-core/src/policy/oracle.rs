//! `oracle`: the clairvoyant reference every real policy is measured against. It reads the
//! trace's future (a bounded window) and, on 2 MiB units of each region:
//! - evicts the unit whose next use is farthest (Belady), and of units next used by the same
//!   kernel the one idle longest, discarding instead of copying back when the data is dead
//!   (freed, or wholly overwritten before it is read again);
//! - prefetches each kernel's data just in time and, for the next few kernels, as early as
//!   the Belady schedule allows: room is first reserved for everything the kernels in between
//!   bring in, and a victim is taken early only if Belady would evict that same unit by the
//!   time the prefetched one is used, so early prefetches never add transfers;
//! - leaves units smaller than the cost model's break-even size to faults, which are cheaper
//!   for them than a prefetch call;
//! - asks the backend where a unit is before moving it, so memory recycled from the pool
//!   (already on the device) is neither fetched nor made room for twice, and drops from its
//!   account what the backend's driver evicted on its own;
//! - keeps, in each step whose read-only data does not fit, the share of every kernel's read-only
//!   regions that [`super::keep`] chooses: they are evicted after every other unit and never to
//!   fetch ahead, so the rest streams through every kernel instead of whole layers in turn.
//!
//! Beyond the window it knows nothing: a unit not used within it counts as used "never".

use std::collections::{BTreeSet, VecDeque};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::keep::{Runs, StepKernels};
use super::units::Unit;
use super::units::{
    add_units, coalesce, fetch_needed, merge_units, pooled_blocks, region_units, stale_units, unit_bytes,
    Sizes,
};
use super::{Hints, Policy};
use crate::access::RangeAccess;
use crate::error::Result;
use crate::op::Op;
use crate::region::RegionId;

/// Eviction priority; the largest key is evicted first: by class, then farthest next use
/// (Belady), then, among units next used by the same kernel, the one idle longest. Any of
/// those ties costs the same transfers, but a unit the last kernels touched is still in their
/// hands: its copy out waits for them (and a kernel that needs the room waits with it), while
/// one idle since long ago moves at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    class: u8,
    /// The kernel index of the next use (`NEVER` if none in the window).
    next: u64,
    /// `u64::MAX` less the kernel index of the last use (`u64::MAX` if not used yet).
    idle: u64,
}
/// Needed again, in a region the step keeps ([`super::keep`]).
const CLASS_KEPT: u8 = 0;
const CLASS_NEEDED: u8 = 1;
const CLASS_BEYOND_WINDOW: u8 = 2;
const CLASS_DEAD: u8 = 3;
const NEVER: u64 = u64::MAX;
/// How many kernels ahead the scan may place data. A Belady-consistent early placement
/// rarely exists further ahead (its victim must be needed after everything used in between),
/// and where a longer scan found one the replay was slower, not faster: in the simulator's
/// device arena a scan of 64 kernels took up to 9% longer on the sample traces than one of 4
/// (ResNet at 75% 252.2 ms against 231.2), with twice the host time; in managed memory the
/// two were within 1.2% (docs/decisions.md).
const MAX_SCAN_KERNELS: usize = 4;

#[derive(Debug, Clone, Copy)]
struct Use {
    index: u64,
    /// The use writes the whole unit without reading it: the data before it is dead.
    overwrite: bool,
}

/// The clairvoyant reference policy. See the module documentation.
#[derive(Debug)]
pub struct Oracle {
    lookahead: usize,
    budget: u64,
    min_prefetch_bytes: u64,
    sizes: Sizes,
    /// Regions allocated on the backend (the window also sees regions not yet allocated).
    allocated: HashSet<RegionId>,
    uses: HashMap<Unit, VecDeque<Use>>,
    freed: HashSet<RegionId>,
    resident: HashMap<Unit, Key>,
    order: BTreeSet<(Key, Unit)>,
    /// The kernel that last used each unit (for [`Key::idle`]).
    last_use: HashMap<Unit, u64>,
    used: u64,
    kernels: VecDeque<(u64, Vec<(Unit, bool)>)>,
    /// Every window kernel before this index has all its prefetchable units resident.
    cursor: u64,
    /// Sets the scan fills for every kernel, kept so that their memory is reused (rebuilding
    /// them dominated the oracle's host time, which a GPU replay waits for).
    /// Only their capacity matters: the scan clears them before use.
    scratch: [HashSet<Unit>; 2],
    /// The link's rate (GB/s) for choosing the share of a step's read-only data to keep
    /// ([`super::keep`]); `None`: none is kept.
    keep_loops: Option<f64>,
    /// What the window holds of each step to come, the one about to start first.
    steps: VecDeque<StepUses>,
    /// Regions the running step keeps.
    kept: HashSet<RegionId>,
    /// Whether a step (or the operations before the first) has started.
    started: bool,
    /// Whether the window has shown an operation yet.
    recorded: bool,
    /// The backend's `driver_dropped_bytes` when the account was last checked against it.
    driver_dropped_seen: u64,
}

/// A step's kernels as the window shows them, for choosing what it keeps.
#[derive(Debug, Default)]
struct StepUses {
    /// The step's index; `None` for what comes before the first step mark (all of a trace
    /// that has none).
    step: Option<u64>,
    /// Its kernels, and the regions it writes or frees.
    kernels: StepKernels<RegionId>,
}

/// Units a batch of accesses touches, with whether every touch of the unit overwrites it.
/// The hints one kernel's planning decides, issued together (see [`Moves::issue`]).
#[derive(Default)]
struct Moves {
    /// Dead data to drop.
    discard: Vec<Unit>,
    /// Live data to copy back.
    to_host: Vec<Unit>,
    /// Host data about to be overwritten by a unit coming in: dropped so the prefetch only
    /// populates.
    overwrite: Vec<Unit>,
    /// Units to bring to the device.
    fetch: Vec<Unit>,
}

impl Moves {
    /// Dead data dropped, live data copied back, then the data coming in. The link serialises
    /// them in this order, so the room exists before the prefetch lands.
    fn issue(self, sizes: &Sizes, hints: &mut Hints<'_>) -> Result<()> {
        if !self.discard.is_empty() {
            hints.discard(&coalesce(sizes, self.discard))?;
        }
        if !self.to_host.is_empty() {
            // Staged where the backend can: the same moves the advisor has.
            hints.evict(&coalesce(sizes, self.to_host))?;
        }
        if !self.overwrite.is_empty() {
            hints.discard(&coalesce(sizes, self.overwrite))?;
        }
        if !self.fetch.is_empty() {
            hints.prefetch(&coalesce(sizes, self.fetch))?;
        }
        Ok(())
    }
}

fn units_of(acc: &[RangeAccess], sizes: &Sizes) -> Vec<(Unit, bool)> {
    let mut out = Vec::new();
    for a in acc {
        add_units(sizes, a.region, a.offset, a.len, !a.mode.reads(), &mut out);
    }
    merge_units(&mut out);
    out
}

impl Oracle {
    /// An oracle keeping within `budget` bytes, seeing `lookahead` events ahead, leaving units
    /// under `min_prefetch_bytes` to faults and, with `keep_loops` (the link's rate in GB/s),
    /// keeping the share of each step's read-only data that [`super::keep`] chooses (`None`:
    /// every choice is Belady's).
    pub fn new(budget: u64, lookahead: usize, min_prefetch_bytes: u64, keep_loops: Option<f64>) -> Self {
        Self {
            lookahead: lookahead.max(1),
            budget,
            min_prefetch_bytes,
            sizes: Sizes::default(),
            allocated: HashSet::default(),
            uses: HashMap::default(),
            freed: HashSet::default(),
            resident: HashMap::default(),
            order: BTreeSet::new(),
            last_use: HashMap::default(),
            used: 0,
            kernels: VecDeque::new(),
            cursor: 0,
            scratch: Default::default(),
            keep_loops,
            steps: VecDeque::new(),
            kept: HashSet::default(),
            started: false,
            recorded: false,
            driver_dropped_seen: 0,
        }
    }

    fn unit_bytes(&self, unit: Unit) -> u64 {
        unit_bytes(&self.sizes, unit)
    }

    fn key(&self, unit: Unit) -> Key {
        let (class, next) = match self.uses.get(&unit).and_then(|q| q.front()) {
            Some(u) if u.overwrite => (CLASS_DEAD, u.index),
            Some(u) if self.kept.contains(&unit.region) => (CLASS_KEPT, u.index),
            Some(u) => (CLASS_NEEDED, u.index),
            None if self.freed.contains(&unit.region) => (CLASS_DEAD, NEVER),
            None => (CLASS_BEYOND_WINDOW, NEVER),
        };
        let idle = u64::MAX - self.last_use.get(&unit).map_or(0, |&k| k + 1);
        Key { class, next, idle }
    }

    fn rekey(&mut self, unit: Unit) {
        if let Some(old) = self.resident.get(&unit).copied() {
            let new = self.key(unit);
            if new != old {
                self.order.remove(&(old, unit));
                self.order.insert((new, unit));
                self.resident.insert(unit, new);
            }
        }
    }

    fn add_resident(&mut self, unit: Unit) {
        if !self.resident.contains_key(&unit) {
            let key = self.key(unit);
            self.resident.insert(unit, key);
            self.order.insert((key, unit));
            self.used += self.unit_bytes(unit);
        }
    }

    fn remove_resident(&mut self, unit: Unit) -> Option<Key> {
        let key = self.resident.remove(&unit)?;
        self.order.remove(&(key, unit));
        self.used -= self.unit_bytes(unit);
        Some(key)
    }

    /// Drops from the account the units the backend no longer has on the device, when its
    /// driver has taken data off on its own since the last look (the emulated driver does where
    /// the arena's whole blocks outgrow the budget the account counts in pages): a unit wrongly
    /// believed resident is never fetched, and its kernel faults it in.
    fn reconcile(&mut self, hints: &Hints<'_>) -> Result<()> {
        let dropped = hints.driver_dropped_bytes();
        if dropped <= self.driver_dropped_seen {
            return Ok(());
        }
        let missing = dropped - self.driver_dropped_seen;
        self.driver_dropped_seen = dropped;
        // Looked for from the order's end: what is needed last, as the driver's least recently
        // used data mostly is.
        let stale = stale_units(&self.sizes, hints, self.order.iter().rev().map(|&(_, u)| u), missing)?;
        for u in stale {
            self.remove_resident(u);
        }
        Ok(())
    }

    /// Counts `unit` as on the device and decides how it gets there: nothing if the backend has
    /// it there already, a fault if it is too small for a prefetch call, otherwise a prefetch
    /// (after discarding host data that is about to be overwritten, so it is not copied in).
    fn place(&mut self, unit: Unit, overwrite: bool, hints: &Hints<'_>, moves: &mut Moves) -> Result<()> {
        self.add_resident(unit);
        if self.unit_bytes(unit) < self.min_prefetch_bytes {
            return Ok(());
        }
        if let Some(discard) = fetch_needed(&self.sizes, hints, unit, overwrite)? {
            if discard {
                moves.overwrite.push(unit);
            }
            moves.fetch.push(unit);
        }
        Ok(())
    }

    /// When `unit` is next read after kernel `j` (`NEVER` if not in the window, or if it is
    /// wholly overwritten first: then its data is dead and dropping it is free).
    fn next_use_after(&self, unit: Unit, j: u64) -> u64 {
        match self.uses.get(&unit).and_then(|q| q.iter().find(|u| u.index > j)) {
            Some(u) if !u.overwrite => u.index,
            _ => NEVER,
        }
    }

    /// Evicts until `need` more bytes fit, choosing the largest key outside `protect`. With
    /// `early = (j, rival)` (fetching for kernel `j` ahead of time), a victim still needed must
    /// be needed after `j` and after every unit used in between (`rival`), i.e. be the unit
    /// Belady would evict at `j`. Returns false if it had to stop.
    fn evict_for(
        &mut self,
        need: u64,
        protect: &HashSet<Unit>,
        early: Option<(u64, u64)>,
        moves: &mut Moves,
    ) -> bool {
        while self.used + need > self.budget {
            // A live unit too small to prefetch back is not worth a migration out either: the
            // driver evicts it if it ever must (dead ones are dropped for free).
            let worth = |(key, u): &&(Key, Unit)| {
                !protect.contains(u)
                    && (key.class == CLASS_DEAD || self.unit_bytes(*u) >= self.min_prefetch_bytes)
            };
            let Some(&(key, unit)) = self.order.iter().rev().find(worth) else {
                return false;
            };
            // Kept data never makes room ahead of time: that is what keeps it.
            if key.class == CLASS_KEPT && early.is_some() {
                return false;
            }
            // Early, even dead data that is rewritten before j keeps its place: it would need
            // room again before j, which displaces something else.
            if key.class != CLASS_BEYOND_WINDOW
                && early.is_some_and(|(j, rival)| key.next <= j || key.next <= rival)
            {
                return false;
            }
            self.remove_resident(unit);
            if key.class == CLASS_DEAD {
                moves.discard.push(unit);
            } else {
                moves.to_host.push(unit);
                if key.class <= CLASS_NEEDED {
                    self.cursor = self.cursor.min(key.next);
                }
            }
        }
        true
    }

    /// Step `index` starts (`None`: the operations before the first step mark): it keeps the
    /// share of its read-only regions [`super::keep`] chooses from what the window shows of
    /// it, and every resident unit is ranked again.
    fn start_step(&mut self, index: Option<u64>) {
        self.started = true;
        // Records of steps passed (a step mark the window showed, not yet run) are dropped.
        while index.is_some() && self.steps.front().is_some_and(|s| s.step != index) {
            self.steps.pop_front();
        }
        if self.steps.front().is_none_or(|s| s.step != index) {
            return;
        }
        let Some(step) = self.steps.pop_front() else { return };
        let Some(rate) = self.keep_loops else { return };
        self.kept = step.kernels.keep_set(self.budget, rate, self.min_prefetch_bytes, Runs::Belady);
        let units: Vec<Unit> = self.resident.keys().copied().collect();
        for unit in units {
            self.rekey(unit);
        }
    }

    /// Notes what a future operation does to the step it falls in.
    /// Before the first step mark, what comes is one record (all of a trace that has none);
    /// after it, only steps to come are: nothing is recorded for a step already started.
    fn note_step_use(&mut self, op: &Op) {
        if let Op::Step { index } = op {
            self.steps.push_back(StepUses { step: Some(*index), ..StepUses::default() });
        } else if self.steps.is_empty() && !self.recorded {
            self.steps.push_back(StepUses::default());
        }
        self.recorded = true;
        let Some(step) = self.steps.back_mut() else { return };
        match op {
            Op::Free { region } => step.kernels.freed(*region),
            Op::Kernel { accesses, dur_ns, .. } => {
                step.kernels.accesses(*dur_ns, accesses, &self.sizes, Some)
            }
            _ => {}
        }
    }

    /// Forgets a freed region.
    fn forget(&mut self, id: RegionId) {
        self.kept.remove(&id);
        for u in region_units(id, self.sizes.get(id)) {
            self.remove_resident(u);
            self.uses.remove(&u);
            self.last_use.remove(&u);
        }
        self.sizes.remove(id);
        self.freed.remove(&id);
        self.allocated.remove(&id);
    }

    /// Moves the window past kernel `index`: its uses are behind, and its units (with whether
    /// it overwrites them) are returned. None when the window does not hold it.
    fn advance_to(&mut self, index: u64) -> Option<Vec<(Unit, bool)>> {
        let (k, units) = self.kernels.pop_front()?;
        debug_assert_eq!(k, index);
        self.cursor = self.cursor.max(index + 1);
        for &(unit, _) in &units {
            self.last_use.insert(unit, index);
            if let Some(q) = self.uses.get_mut(&unit) {
                while q.front().is_some_and(|u| u.index <= index) {
                    q.pop_front();
                }
                if q.is_empty() {
                    self.uses.remove(&unit);
                }
            }
            self.rekey(unit);
        }
        Some(units)
    }

    /// Demand: the kernel's units must be on the device now, whatever that evicts. Returns
    /// them, to be kept there while planning ahead.
    fn demand(
        &mut self,
        units: &[(Unit, bool)],
        hints: &Hints<'_>,
        moves: &mut Moves,
    ) -> Result<HashSet<Unit>> {
        let protect: HashSet<Unit> = units.iter().map(|(u, _)| *u).collect();
        let missing: Vec<(Unit, bool)> =
            units.iter().copied().filter(|(u, _)| !self.resident.contains_key(u)).collect();
        let need: u64 = missing.iter().map(|(u, _)| self.unit_bytes(*u)).sum();
        self.evict_for(need, &protect, None, moves);
        for &(unit, ow) in &missing {
            self.place(unit, ow, hints, moves)?;
        }
        Ok(protect)
    }

    /// Brings in the window's future units in order of need, as early as the Belady schedule
    /// allows, so early fetches never add fetches:
    /// - every unit used between now and j will be in the cache at j, so room is reserved
    ///   for those not resident yet (`pending`) before anything is fetched for j;
    /// - a victim must be one Belady would evict by j anyway: needed after j and after every
    ///   unit used in between (`rival`).
    ///
    /// The cursor makes this amortised: kernels before it were already placed.
    fn ahead(&mut self, protect: &HashSet<Unit>, hints: &Hints<'_>, moves: &mut Moves) -> Result<()> {
        let stop_at = self.kernels.len().min(MAX_SCAN_KERNELS);
        let mut p = self.kernels.partition_point(|(j, _)| *j < self.cursor).min(stop_at);
        // `between` (the units of the window's kernels before the one scanned) and `pending`
        // are built when a first unit needs placing: at full budget most scans place nothing.
        let [mut between, mut guard] = std::mem::take(&mut self.scratch);
        let (mut built, mut pending) = (false, 0u64);
        'scan: while p < stop_at {
            let (j, future) = self.kernels[p].clone();
            let at = p;
            p += 1;
            // The units to protect while making room for this kernel, built on first need (at
            // full budget most scanned kernels have everything resident).
            let mut guarded = false;
            let mut rival = None;
            for &(unit, ow) in &future {
                let bytes = self.unit_bytes(unit);
                if self.resident.contains_key(&unit)
                    || bytes < self.min_prefetch_bytes
                    || !self.allocated.contains(&unit.region)
                {
                    continue;
                }
                if !built {
                    between.clear();
                    for (_, units) in self.kernels.range(..at) {
                        for &(u, _) in units {
                            if between.insert(u) && !self.resident.contains_key(&u) {
                                pending += self.unit_bytes(u);
                            }
                        }
                    }
                    built = true;
                }
                if !guarded {
                    guard.clear();
                    guard.extend(protect.iter().copied());
                    guard.extend(future.iter().map(|(u, _)| *u));
                    guarded = true;
                }
                let rival = *rival.get_or_insert_with(|| {
                    // Every unit used in between is in the cache at j, resident now or not.
                    between.iter().map(|&u| self.next_use_after(u, j)).max().unwrap_or(0)
                });
                if !self.evict_for(bytes + pending, &guard, Some((j, rival)), moves) {
                    self.cursor = j;
                    break 'scan;
                }
                self.place(unit, ow, hints, moves)?;
            }
            if built {
                for &(u, _) in &future {
                    if between.insert(u) && !self.resident.contains_key(&u) {
                        pending += self.unit_bytes(u);
                    }
                }
            }
            self.cursor = j + 1;
        }
        self.scratch = [between, guard];
        Ok(())
    }
}

impl Policy for Oracle {
    fn name(&self) -> &'static str {
        "oracle"
    }

    fn hold_whole_blocks(&mut self, _packed_chunks: u64) {
        self.sizes.hold_whole_blocks();
    }

    fn lookahead(&self) -> usize {
        self.lookahead
    }

    fn on_future(&mut self, index: u64, op: &Op) {
        if self.keep_loops.is_some() {
            self.note_step_use(op);
        }
        match op {
            Op::Alloc { region, bytes, .. } => {
                self.sizes.insert(*region, *bytes);
            }
            Op::Free { region } => {
                let id = *region;
                self.freed.insert(id);
                for u in region_units(id, self.sizes.get(id)) {
                    self.rekey(u);
                }
            }
            Op::Kernel { accesses, .. } => {
                let units = units_of(accesses, &self.sizes);
                for &(unit, overwrite) in &units {
                    self.uses.entry(unit).or_default().push_back(Use { index, overwrite });
                    self.rekey(unit);
                }
                self.kernels.push_back((index, units));
            }
            _ => {}
        }
    }

    fn before(&mut self, index: u64, op: &Op, hints: &mut Hints<'_>) -> Result<()> {
        match op {
            Op::Free { region } => self.forget(*region),
            Op::Step { index } if self.keep_loops.is_some() => self.start_step(Some(*index)),
            // The CPU pulls what it touches off the device.
            Op::Host { accesses, .. } => {
                for (unit, _) in units_of(accesses, &self.sizes) {
                    self.remove_resident(unit);
                }
            }
            Op::Kernel { .. } => {
                if self.keep_loops.is_some() && !self.started {
                    self.start_step(None);
                }
                self.reconcile(hints)?;
                if let Some(units) = self.advance_to(index) {
                    let mut moves = Moves::default();
                    let protect = self.demand(&units, hints, &mut moves)?;
                    self.ahead(&protect, hints, &mut moves)?;
                    moves.issue(&self.sizes, hints)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn after(&mut self, _: u64, op: &Op, hints: &mut Hints<'_>) -> Result<()> {
        let Op::Alloc { region: id, bytes, .. } = *op else {
            return Ok(());
        };
        self.allocated.insert(id);
        // Pages recycled from the pool are on the device already: count them as placed.
        for b in pooled_blocks(&self.sizes, hints, id)? {
            self.add_resident(Unit { region: id, block: b });
        }
        // The scan skipped this region while it did not exist: rewind to its first use.
        let first = region_units(id, bytes)
            .filter_map(|u| self.uses.get(&u).and_then(|q| q.front()))
            .map(|u| u.index)
            .min();
        if let Some(first) = first {
            self.cursor = self.cursor.min(first);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{AccessMode, RangeAccess};

    #[test]
    fn of_units_next_used_together_the_one_idle_longest_makes_room() {
        // Regions 1 and 2 are both next read by kernel 4: Belady is indifferent between them,
        // but 2 was written by the kernel just before, whose end its copy out would wait for.
        const MIB2: u64 = 2 << 20;
        let mut oracle = Oracle::new(2 * MIB2, 64, 0, None);
        let access = |r: u64, mode| RangeAccess { region: RegionId(r), offset: 0, len: MIB2, mode };
        let kernel = |accesses| Op::Kernel { name: "k".into(), dur_ns: 1000, accesses };
        for r in 1..=3 {
            oracle.on_future(0, &Op::Alloc { region: RegionId(r), bytes: MIB2, name: None });
        }
        oracle.on_future(1, &kernel(vec![access(1, AccessMode::Write)]));
        oracle.on_future(2, &kernel(vec![access(2, AccessMode::Write)]));
        oracle.on_future(3, &kernel(vec![access(3, AccessMode::Write)]));
        oracle.on_future(4, &kernel(vec![access(1, AccessMode::Read), access(2, AccessMode::Read)]));
        for k in 1..=2 {
            for (unit, _) in oracle.advance_to(k).unwrap() {
                oracle.add_resident(unit);
            }
        }
        let units = oracle.advance_to(3).unwrap();
        let protect: HashSet<Unit> = units.iter().map(|(u, _)| *u).collect();
        let mut moves = Moves::default();
        assert!(oracle.evict_for(MIB2, &protect, None, &mut moves));
        assert_eq!(moves.to_host, vec![Unit { region: RegionId(1), block: 0 }]);
        assert!(moves.discard.is_empty());
    }

    #[test]
    fn a_trace_without_steps_is_recorded_once_and_not_past_its_start() {
        // Every operation of a trace with no step marks enters the window before the first
        // kernel runs; what comes into the window after that is not recorded for any step.
        let mut oracle = Oracle::new(1 << 30, 1 << 20, 0, Some(52.6));
        let kernel = |r: u64| Op::Kernel {
            name: "k".into(),
            dur_ns: 1000,
            accesses: vec![RangeAccess {
                region: RegionId(r),
                offset: 0,
                len: 1 << 20,
                mode: AccessMode::Read,
            }],
        };
        oracle.on_future(0, &Op::Alloc { region: RegionId(1), bytes: 1 << 20, name: None });
        for i in 1..100 {
            oracle.on_future(i, &kernel(1));
        }
        assert_eq!(oracle.steps.len(), 1);
        assert_eq!(oracle.steps[0].kernels.len(), 99);
        oracle.start_step(None);
        for i in 100..10_000 {
            oracle.on_future(i, &kernel(1));
        }
        assert!(oracle.steps.is_empty(), "{} records", oracle.steps.len());
    }
}
