//! `advisor`: the prefetch advisor as a replay policy. Unlike the oracle it never looks ahead
//! in the trace: it learns from the kernels that ran (step-stable identity, the tournament of
//! predictors), forecasts the next kernels, and lets the planner turn the forecast, the next
//! kernel's declared accesses and the residency into hints within the budget.
//!
//! It also remembers, by step-stable identity, which units it had to evict before their reuse:
//! the next time such a unit is overwritten, the planner may write it remotely instead.

pub mod identity;
pub mod plan;
pub mod predict;
pub mod residency;

pub use identity::{Identity, RegionKey};
pub use plan::{plan, Placements, Plan, PlanInput, Planner, Reason, Unit, UnitUse};
pub use predict::{Markov, Observation, Periodic, Prediction, Predictor, Score, Sequential, Tournament};
pub use residency::Residency;

use rustc_hash::{FxHashMap, FxHashSet};

use super::units::{
    add_units, coalesce, fetch_needed, merge_units, pooled_blocks, unit_bytes, unit_range, Sizes,
};
use super::{Hints, Policy};
use crate::access::RangeAccess;
use crate::config::{AdvisorConfig, PlacementName};
use crate::error::Result;
use crate::op::Op;
use crate::region::RegionId;
use crate::seam::{page_round, Advice, Location, BLOCK_SIZE};

/// Hints the advisor issued, by kind, in bytes (for reports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HintBytes {
    /// Prefetched to the device.
    pub prefetched: u64,
    /// Moved back to the host by the advisor.
    pub evicted: u64,
    /// Dropped as dead.
    pub discarded: u64,
    /// Marked read-mostly.
    pub duplicated: u64,
    /// Mapped remotely.
    pub remote: u64,
}

/// Faults reported late to the advisor ([`Policy::observe_late`]): on a GPU the host runs
/// ahead of the device, so what the advisor learns from them comes that many kernels later.
/// Reported in [`crate::replay::Learning`].
#[derive(Debug, Clone, Copy, Default)]
struct LateStats {
    /// Kernels whose late faults were reported.
    kernels: u64,
    /// Of those, kernels too old to place (their declared accesses forgotten).
    too_old: u64,
    /// Sum over those kernels of how many kernels the advisor had planned since (the lag).
    lag_sum: u64,
    /// The largest lag.
    lag_max: u64,
}

/// The advisor's settings, resolved.
#[derive(Debug, Clone, Copy)]
pub struct AdvisorSettings {
    /// Device bytes the working set may use.
    pub budget: u64,
    /// Units smaller than this are left to faults.
    pub min_prefetch_bytes: u64,
    /// Kernels ahead to plan for.
    pub horizon: u64,
    /// Predictions below this confidence are not acted on.
    pub min_confidence: f32,
    /// Placements allowed.
    pub placements: Placements,
    /// Kernels after a remote write during which its uses stay remote.
    pub remote_window: u64,
    /// Faults on undeclared data enter the access history.
    pub learn_from_faults: bool,
}

impl AdvisorSettings {
    /// Settings from the `[advisor]` config section.
    pub fn from_config(budget: u64, break_even_bytes: u64, c: &AdvisorConfig) -> Self {
        Self {
            budget,
            min_prefetch_bytes: c.min_prefetch.resolve(break_even_bytes),
            horizon: c.lookahead_kernels,
            min_confidence: c.min_confidence as f32,
            placements: Placements {
                discard: c.allows(PlacementName::Discard),
                duplicate: c.allows(PlacementName::Duplicate),
                remote: c.allows(PlacementName::Remote),
            },
            remote_window: c.remote_window,
            learn_from_faults: c.learn_from_faults,
        }
    }
}

/// The advisor policy. See the module documentation.
pub struct Advisor {
    settings: AdvisorSettings,
    identity: Identity,
    predictor: Tournament,
    /// The planner, with its working memory.
    planner: Planner,
    sizes: Sizes,
    by_key: FxHashMap<RegionKey, RegionId>,
    /// Units on the device: (bytes, kernel of last use), and their total.
    resident: Residency,
    /// Units marked read-mostly.
    read_mostly: FxHashSet<Unit>,
    /// Units mapped remotely, with the kernel that wrote them.
    remote: FxHashMap<Unit, u64>,
    /// Step in which each live region was allocated.
    born: FxHashMap<RegionId, u64>,
    /// Steps seen.
    step: u64,
    /// Units (by step-stable key and block) evicted before their reuse.
    evicted_before_reuse: FxHashSet<(RegionKey, u32)>,
    /// Units (by step-stable key and block) written in this step and in the last one.
    written_this_step: FxHashSet<(RegionKey, u32)>,
    written_last_step: FxHashSet<(RegionKey, u32)>,
    /// The backend's `driver_dropped_bytes` when the account was last checked against it.
    driver_dropped_seen: u64,
    /// The next kernel at which the account may adopt residency it does not know of.
    next_adopt: u64,
    kernel: u64,
    predictions: Vec<Prediction>,
    /// Scratch for `before_kernel`: the uses of the kernel about to run and of the forecast.
    uses: (Vec<UnitUse>, Vec<UnitUse>),
    hints: HintBytes,
    /// Regions the running kernel declared (faults elsewhere are undeclared accesses).
    declared: FxHashSet<RegionId>,
    /// Undeclared accesses of the running kernel, learned from its faults.
    undeclared: Vec<(RegionId, u64, u64)>,
    /// Undeclared accesses learned from faults, by the kernel's position in its step: they are
    /// observed again every step while they are resident at that kernel (a resident unit does
    /// not fault, so no fault is no evidence the access stopped), and forgotten when the data was
    /// off the device there and did not fault.
    learned: FxHashMap<u64, Vec<Learned>>,
    /// Regions (by step-stable key) with undeclared accesses learned from faults.
    learned_keys: FxHashSet<RegionKey>,
    /// Kernel index at which each step began: the current step's, and for faults reported
    /// late (CUPTI's, on a GPU) their kernel's position in its step.
    step_starts: Vec<u64>,
    /// Regions each recent kernel declared, by kernel index: a late fault on one of them is a
    /// prefetch that came too late, not an undeclared access.
    declared_log: std::collections::VecDeque<(u64, Vec<RegionId>)>,
    /// Step-stable keys of regions freed recently: late faults name regions that may be gone.
    freed_keys: FxHashMap<RegionId, (RegionKey, u64)>,
    /// Bytes of undeclared accesses learned from faults so far.
    learned_bytes: u64,
    /// Faults reported late: how many kernels' worth, and how far behind they came.
    late: LateStats,
    /// Times a learned access was observed at its place in a step.
    learned_observed: u64,
    /// Recording hints and forecast scores as events (for telemetry).
    recording: bool,
    events: Vec<crate::seam::MemEvent>,
}

impl std::fmt::Debug for Advisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Advisor").field("kernel", &self.kernel).field("predictor", &self.predictor).finish()
    }
}

/// Kernels whose declared regions are kept for late faults (CUPTI's lag behind the host by
/// the device's queue plus one flush interval, far less than this).
const DECLARED_KEPT: usize = 8192;

/// Kernels between two walks adopting residency the account does not know of.
const ADOPT_EVERY: u64 = 64;

/// An undeclared access learned from faults, at a kernel position of the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Learned {
    key: RegionKey,
    offset: u64,
    len: u64,
    /// The step in which it last faulted, as far as is known: faults a GPU reports come
    /// steps late, so until they could have come the access counts as seen whatever the
    /// residency (see [`Advisor::grace_steps`]).
    confirmed: u64,
}

/// Byte ranges `(owner, offset, len)` sorted and merged where they overlap or touch (faults,
/// migrations and population of one access overlap; CUPTI reports one read in many pieces).
fn merge_ranges<K: Ord + Copy>(mut ranges: Vec<(K, u64, u64)>) -> Vec<(K, u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(K, u64, u64)> = Vec::with_capacity(ranges.len());
    for (owner, offset, len) in ranges {
        match merged.last_mut() {
            Some(m) if m.0 == owner && offset <= m.1 + m.2 => m.2 = m.2.max(offset + len - m.1),
            _ => merged.push((owner, offset, len)),
        }
    }
    merged
}

/// Units a kernel touches: (unit, overwritten whole, written at all).
fn kernel_units(sizes: &Sizes, acc: &[RangeAccess]) -> Vec<(Unit, bool, bool)> {
    let mut units: Vec<(Unit, bool)> = Vec::new();
    let mut written: FxHashSet<Unit> = FxHashSet::default();
    let mut scratch = Vec::new();
    for a in acc {
        add_units(sizes, a.region, a.offset, a.len, !a.mode.reads(), &mut units);
        if a.mode.writes() {
            scratch.clear();
            add_units(sizes, a.region, a.offset, a.len, false, &mut scratch);
            written.extend(scratch.iter().map(|u| u.0));
        }
    }
    merge_units(&mut units);
    units.into_iter().map(|(u, ow)| (u, ow, written.contains(&u))).collect()
}

impl Advisor {
    /// An advisor with the given settings.
    pub fn new(settings: AdvisorSettings) -> Self {
        Self {
            settings,
            identity: Identity::new(),
            predictor: Tournament::standard(),
            planner: Planner::new(),
            sizes: FxHashMap::default(),
            by_key: FxHashMap::default(),
            resident: Residency::new(),
            read_mostly: FxHashSet::default(),
            remote: FxHashMap::default(),
            born: FxHashMap::default(),
            step: 0,
            evicted_before_reuse: FxHashSet::default(),
            written_this_step: FxHashSet::default(),
            written_last_step: FxHashSet::default(),
            driver_dropped_seen: 0,
            next_adopt: 0,
            kernel: 0,
            predictions: Vec::new(),
            uses: (Vec::new(), Vec::new()),
            hints: HintBytes::default(),
            declared: FxHashSet::default(),
            undeclared: Vec::new(),
            learned: FxHashMap::default(),
            learned_keys: FxHashSet::default(),
            step_starts: Vec::new(),
            declared_log: std::collections::VecDeque::new(),
            freed_keys: FxHashMap::default(),
            learned_bytes: 0,
            late: LateStats::default(),
            learned_observed: 0,
            recording: false,
            events: Vec::new(),
        }
    }

    /// Bytes of hints issued so far, by kind.
    pub fn hints(&self) -> HintBytes {
        self.hints
    }

    /// Bytes of undeclared accesses learned from faults so far.
    pub fn learned_bytes(&self) -> u64 {
        self.learned_bytes
    }

    fn units_bytes<'a>(&self, units: impl Iterator<Item = &'a Unit>) -> u64 {
        units.map(|&u| unit_bytes(&self.sizes, u)).sum()
    }

    fn advise_all(&self, hints: &mut Hints<'_>, units: Vec<Unit>, advice: &[Advice]) -> Result<()> {
        for range in coalesce(&self.sizes, units) {
            for &a in advice {
                hints.advise(range, a)?;
            }
        }
        Ok(())
    }

    /// Issues the plan: duplicates about to be written collapsed, dead data dropped, live data
    /// copied back, placements advised, data coming in (after dropping host copies that are
    /// about to be overwritten).
    /// Records the plan's hints as events, each with its reason.
    fn record_plan(&mut self, p: &Plan) {
        use crate::seam::HintKind;
        let lists: [(HintKind, Vec<(Unit, Reason)>); 6] = [
            (HintKind::Collapse, p.collapse.clone()),
            (HintKind::Discard, p.discard.clone()),
            (HintKind::Evict, p.evict.clone()),
            (HintKind::Remote, p.remote.clone()),
            (HintKind::Duplicate, p.duplicate.clone()),
            (HintKind::Prefetch, p.prefetch.iter().map(|&(u, _, r)| (u, r)).collect()),
        ];
        for (hint, units) in lists {
            for (u, reason) in units {
                let r = super::units::unit_range(&self.sizes, u);
                self.events.push(crate::seam::MemEvent::Hint {
                    hint,
                    region: u.region,
                    offset: r.offset,
                    bytes: r.len,
                    reason: format!("{reason:?}"),
                    kernel: self.kernel,
                });
            }
        }
    }

    fn execute(&mut self, p: Plan, hints: &mut Hints<'_>) -> Result<()> {
        if self.recording {
            self.record_plan(&p);
        }
        let collapse: Vec<Unit> = p.collapse.iter().map(|c| c.0).collect();
        for u in &collapse {
            self.read_mostly.remove(u);
        }
        self.advise_all(hints, collapse.clone(), &[Advice::UnsetReadMostly])?;
        for (u, reason) in p.discard.iter().chain(&p.evict) {
            self.resident.remove(u);
            if matches!(reason, Reason::FarthestNextUse(_)) && !self.read_mostly.contains(u) {
                if let Some(key) = self.identity.key(u.region) {
                    self.evicted_before_reuse.insert((key, u.block));
                }
            }
        }
        self.hints.discarded += self.units_bytes(p.discard.iter().map(|d| &d.0));
        self.hints.evicted += self.units_bytes(p.evict.iter().map(|d| &d.0));
        let discard = coalesce(&self.sizes, p.discard.iter().map(|(u, _)| *u).collect());
        if !discard.is_empty() {
            hints.discard(&discard)?;
        }
        let evict = coalesce(&self.sizes, p.evict.iter().map(|(u, _)| *u).collect());
        if !evict.is_empty() {
            // Through the staging buffers where the backend has them (a copy at 52.3 GB/s on
            // the H200, instead of a 10-17 GB/s migration).
            hints.evict(&evict)?;
        }
        let remote: Vec<Unit> = p.remote.iter().map(|r| r.0).collect();
        self.hints.remote += self.units_bytes(remote.iter());
        for &u in &remote {
            self.remote.insert(u, self.kernel);
        }
        self.advise_all(
            hints,
            remote,
            &[Advice::SetPreferredLocation(Location::Host), Advice::SetAccessedByDevice],
        )?;
        let duplicate: Vec<Unit> = p.duplicate.iter().map(|d| d.0).collect();
        self.hints.duplicated += self.units_bytes(duplicate.iter());
        self.read_mostly.extend(duplicate.iter().copied());
        self.advise_all(hints, duplicate, &[Advice::SetReadMostly])?;
        let (mut fetch, mut rewrite) = (Vec::new(), Vec::new());
        // Collapsed duplicates went back to the host (the H200 keeps the host copy): the kernel
        // about to write them needs them back.
        let recollect = collapse.iter().map(|&u| (u, false, Reason::WrittenNow));
        for (u, overwrite, _) in p.prefetch.iter().copied().chain(recollect) {
            let bytes = unit_bytes(&self.sizes, u);
            self.resident.insert_if_absent(u, (bytes, self.kernel));
            if let Some(discard_first) = fetch_needed(&self.sizes, hints, u, overwrite)? {
                if discard_first {
                    rewrite.push(u);
                }
                fetch.push(u);
            }
        }
        if !rewrite.is_empty() {
            hints.discard(&coalesce(&self.sizes, rewrite))?;
        }
        if !fetch.is_empty() {
            self.hints.prefetched += self.units_bytes(fetch.iter());
            hints.prefetch(&coalesce(&self.sizes, fetch))?;
        }
        Ok(())
    }

    /// Remote units whose remote window has passed by kernel `at` become ordinary again:
    /// unmapped, so that the next use migrates them.
    fn end_remote_windows(&mut self, at: u64, hints: &mut Hints<'_>) -> Result<()> {
        let window = self.settings.remote_window;
        let done: Vec<Unit> =
            self.remote.iter().filter(|(_, &written)| at > written + window).map(|(&u, _)| u).collect();
        if done.is_empty() {
            return Ok(());
        }
        for u in &done {
            self.remote.remove(u);
        }
        self.advise_all(hints, done, &[Advice::UnsetPreferredLocation, Advice::UnsetAccessedByDevice])
    }

    fn before_kernel(&mut self, acc: &[RangeAccess], hints: &mut Hints<'_>) -> Result<()> {
        let now = self.kernel;
        self.declared.clear();
        self.declared.extend(acc.iter().map(|a| a.region));
        if self.settings.learn_from_faults {
            if self.declared_log.len() == DECLARED_KEPT {
                self.declared_log.pop_front();
            }
            self.declared_log.push_back((now, self.declared.iter().copied().collect()));
        }
        self.undeclared.clear();
        self.end_remote_windows(now, hints)?;
        let units = kernel_units(&self.sizes, acc);
        // The use lists are kept between kernels: a forecast can name thousands of units.
        let (mut current, mut predicted) = std::mem::take(&mut self.uses);
        current.clear();
        predicted.clear();
        current.extend(units.iter().map(|&(unit, overwrite, writes)| UnitUse {
            unit,
            at: now,
            overwrite,
            writes,
            confidence: 1.0,
            certain: true,
        }));
        if self.recording && now > 0 {
            self.record_forecast_score(now, acc);
        }
        // Forecast, mapped from step-stable keys to the regions live now.
        self.predictions.clear();
        if now > 0 {
            self.predictor.predict(now - 1, self.settings.horizon + 1, &mut self.predictions);
        }
        // Undeclared accesses learned from faults, predicted for this very kernel: nothing
        // else will bring them before it runs.
        let mut scratch = Vec::new();
        for p in self.predictions.iter().filter(|p| {
            p.at == now && p.confidence >= self.settings.min_confidence && self.learned_keys.contains(&p.key)
        }) {
            let Some(&id) = self.by_key.get(&p.key) else { continue };
            if self.declared.contains(&id) {
                continue;
            }
            scratch.clear();
            add_units(&self.sizes, id, p.offset, p.len, false, &mut scratch);
            for &(unit, _) in &scratch {
                let (overwrite, writes, certain) = (false, true, false);
                predicted.push(UnitUse {
                    unit,
                    at: now,
                    overwrite,
                    writes,
                    confidence: p.confidence,
                    certain,
                });
            }
        }
        let mut reserve = Vec::new();
        let mut unborn: FxHashSet<RegionKey> = FxHashSet::default();
        let window = self.settings.remote_window;
        for p in
            self.predictions.iter().filter(|p| p.confidence >= self.settings.min_confidence && p.at > now)
        {
            let Some(&id) = self.by_key.get(&p.key) else {
                // A region not allocated yet: it will need room by its first predicted use.
                if unborn.insert(p.key) {
                    reserve.push((p.at, page_round(p.offset + p.len)));
                }
                continue;
            };
            scratch.clear();
            add_units(&self.sizes, id, p.offset, p.len, !p.mode.reads(), &mut scratch);
            for &(unit, overwrite) in &scratch {
                // Uses inside a remote window are served where the data is.
                if self.remote.get(&unit).is_some_and(|&w| p.at <= w + window) {
                    continue;
                }
                predicted.push(UnitUse {
                    unit,
                    at: p.at,
                    overwrite,
                    writes: p.mode.writes(),
                    confidence: p.confidence,
                    certain: false,
                });
            }
        }
        // Units (of this kernel and the forecast) that were evicted before their reuse last
        // time, of regions that outlive a step: the candidates for a placement. Setting up a
        // placement holds the host (read-mostly ~70 ms per GiB on the H200), so it pays only
        // where it serves many evictions: data kept across steps (weights), not per-step
        // temporaries (activations), which are evicted once at most.
        let long_lived = |id: RegionId| self.born.get(&id).is_some_and(|&b| b < self.step);
        let evicted_before: FxHashSet<Unit> = units
            .iter()
            .map(|u| u.0)
            .chain(predicted.iter().map(|u| u.unit))
            .filter(|u| long_lived(u.region))
            .filter(|u| {
                self.identity.key(u.region).is_some_and(|k| self.evicted_before_reuse.contains(&(k, u.block)))
            })
            .collect();
        // Of those, the ones written last step (by step-stable identity): not worth duplicating.
        let written_last_step: FxHashSet<Unit> = evicted_before
            .iter()
            .copied()
            .filter(|u| {
                self.identity.key(u.region).is_some_and(|k| self.written_last_step.contains(&(k, u.block)))
            })
            .collect();
        // Only programs with steps: without markers the set would grow without end.
        for &(u, _, writes) in units.iter().filter(|_| self.step > 0) {
            if let (true, Some(key)) = (writes, self.identity.key(u.region)) {
                self.written_this_step.insert((key, u.block));
            }
        }
        self.reconcile(hints)?;
        let remote_now: FxHashSet<Unit> = self.remote.keys().copied().collect();
        let sizes = &self.sizes;
        let plan = self.planner.plan(&PlanInput {
            now,
            current: &current,
            predicted: &predicted,
            resident: &self.resident,
            reserve: &reserve,
            unit_bytes: &|u| unit_bytes(sizes, u),
            budget: self.settings.budget,
            min_prefetch_bytes: self.settings.min_prefetch_bytes,
            early_reach: self.settings.horizon / 2,
            read_mostly: &self.read_mostly,
            remote: &remote_now,
            evicted_before_reuse: &evicted_before,
            written_last_step: &written_last_step,
            placements: self.settings.placements,
        });
        // Units the kernel touches end up on the device whether prefetched or faulted, except
        // what is mapped remotely.
        let remote_planned: FxHashSet<Unit> = plan.remote.iter().map(|r| r.0).collect();
        for &(u, _, _) in &units {
            if remote_now.contains(&u) || remote_planned.contains(&u) {
                continue;
            }
            let bytes = unit_bytes(&self.sizes, u);
            self.resident.insert(u, (bytes, now));
        }
        self.uses = (current, predicted);
        self.execute(plan, hints)
    }

    /// Drops from the residency account the units the backend no longer has on the device,
    /// whenever the backend's driver has taken data off on its own since the last look. The
    /// CUDA backend's emulated driver evicts without reporting it as events (the simulator
    /// reports them, and [`Policy::observe`] follows those), and a unit wrongly believed
    /// resident is never prefetched: the kernel faults it in, the driver evicts more to make
    /// room, and the error spreads (on the H200, 5.9 GB of driver evictions in a ResNet replay
    /// at 50%). The check is skipped while the driver has not moved anything: it walks the
    /// whole account.
    fn reconcile(&mut self, hints: &Hints<'_>) -> Result<()> {
        self.adopt_unknown(hints)?;
        let dropped = hints.driver_dropped_bytes();
        if dropped == self.driver_dropped_seen {
            return Ok(());
        }
        self.driver_dropped_seen = dropped;
        let mut stale = Vec::new();
        for u in self.resident.units() {
            if hints.residency(unit_range(&self.sizes, u))?.on_device() == 0 {
                stale.push(u);
            }
        }
        for u in stale {
            self.resident.remove(&u);
        }
        Ok(())
    }

    /// Kernel index at which the current step began (0 before any step marker).
    fn step_start(&self) -> u64 {
        self.step_starts.last().copied().unwrap_or(0)
    }

    /// Steps an access learned from faults stays believed without being seen again: none where
    /// faults are reported as they happen; where they come late (a GPU's, through CUPTI), the
    /// steps the reports lag behind plus one, since whether the access faulted this step is
    /// not known before then. Without it, an access the advisor failed to bring in time is
    /// forgotten before its fault is reported, and relearned only steps later.
    fn grace_steps(&self) -> u64 {
        if self.late.kernels == 0 {
            return 0;
        }
        let n = self.step_starts.len();
        let step_len =
            if n >= 2 { self.step_starts[n - 1] - self.step_starts[n - 2] } else { self.kernel.max(1) };
        self.late.lag_max.div_ceil(step_len.max(1)) + 1
    }

    /// Adds to the residency account what the backend has on the device that the account does
    /// not know of, when the difference is large: data that undeclared accesses faulted in,
    /// whose faults a GPU reports late (or never, without telemetry). A planner ignorant of it
    /// believes there is room, makes none, and leaves the evicting to the driver, which on
    /// the H200 migrates at 10-17 GB/s behind every queued kernel instead of staging at 52.
    /// The walk over the live regions runs at most once per [`ADOPT_EVERY`] kernels.
    fn adopt_unknown(&mut self, hints: &Hints<'_>) -> Result<()> {
        if self.kernel < self.next_adopt {
            return Ok(());
        }
        let account = self.resident.bytes();
        let slack = (self.settings.budget / 32).max(8 << 20);
        if hints.resident_bytes() <= account + slack {
            return Ok(());
        }
        self.next_adopt = self.kernel + ADOPT_EVERY;
        for (&id, &bytes) in &self.sizes {
            for b in 0..bytes.div_ceil(BLOCK_SIZE) as u32 {
                let u = Unit { region: id, block: b };
                if !self.resident.contains_key(&u)
                    && hints.residency(unit_range(&self.sizes, u))?.on_device() > 0
                {
                    self.resident.insert(u, (unit_bytes(&self.sizes, u), self.kernel));
                }
            }
        }
        Ok(())
    }

    /// Scores the forecast made for kernel `now` (at the previous kernel) against its accesses.
    fn record_forecast_score(&mut self, now: u64, acc: &[RangeAccess]) {
        let min = self.settings.min_confidence;
        let predicted: Vec<RegionKey> =
            self.predictions.iter().filter(|p| p.at == now && p.confidence >= min).map(|p| p.key).collect();
        let actual: Vec<RegionKey> = acc.iter().filter_map(|a| self.identity.key(a.region)).collect();
        let mut score = crate::policy::advisor::Score::default();
        score.add(&predicted, &actual);
        self.events.push(crate::seam::MemEvent::Forecast {
            kernel: now,
            hits: score.hits,
            misses: score.misses,
            false_alarms: score.false_alarms,
        });
    }

    /// Feeds the running kernel's undeclared accesses to the predictors: those that faulted
    /// now, and those learned at this position of an earlier step whose data is resident (or
    /// that were reported late, whose faults here, if any, are not known yet).
    fn observe_undeclared(&mut self) {
        let position = self.kernel - self.step_start();
        let mut faulted: FxHashSet<(RegionKey, u64)> = FxHashSet::default();
        let mut seen = Vec::new();
        for (key, offset, len) in self.merged_undeclared() {
            self.learned_bytes += len;
            self.learned_keys.insert(key);
            faulted.insert((key, offset));
            seen.push(Learned { key, offset, len, confirmed: self.step });
        }
        let mut kept = Vec::new();
        let grace = self.grace_steps();
        for l in self.learned.remove(&position).unwrap_or_default() {
            if faulted.contains(&(l.key, l.offset)) {
                continue;
            }
            let Some(&id) = self.by_key.get(&l.key) else {
                kept.push(l); // not allocated in this step (yet): no evidence
                continue;
            };
            let mut units = Vec::new();
            add_units(&self.sizes, id, l.offset, l.len.max(1), false, &mut units);
            let unconfirmed = self.step.saturating_sub(l.confirmed);
            if unconfirmed <= grace || units.iter().all(|(u, _)| self.resident.contains_key(u)) {
                seen.push(l);
            }
        }
        self.learned_observed += seen.len() as u64;
        for l in &seen {
            let mode = crate::AccessMode::ReadWrite;
            let (key, offset, len) = (l.key, l.offset, l.len);
            self.predictor.observe(&Observation { key, offset, len, mode, kernel: self.kernel });
        }
        kept.extend(seen);
        if !kept.is_empty() {
            self.learned.insert(position, kept);
        }
        if self.step == 0 && self.learned.len() > 2 * DECLARED_KEPT {
            // Without step markers a position is a kernel index and never comes round again:
            // keep the recent ones only (late reports may still add to them).
            let horizon = position.saturating_sub(DECLARED_KEPT as u64);
            self.learned.retain(|&p, _| p >= horizon);
        }
    }

    /// The running kernel's undeclared accesses, one range per run of touched bytes (faults,
    /// migrations and population overlap), by step-stable key.
    fn merged_undeclared(&mut self) -> Vec<(RegionKey, u64, u64)> {
        let merged = merge_ranges(std::mem::take(&mut self.undeclared));
        merged
            .into_iter()
            .filter_map(|(region, offset, len)| Some((self.key_of(region)?, offset, len)))
            .collect()
    }

    /// The step-stable key of a live region, or of one freed recently (late faults name
    /// regions that may be gone).
    fn key_of(&self, region: RegionId) -> Option<RegionKey> {
        self.identity.key(region).or_else(|| self.freed_keys.get(&region).map(|k| k.0))
    }

    fn forget_region(&mut self, id: RegionId) {
        if let Some(key) = self.identity.key(id) {
            self.freed_keys.insert(id, (key, self.kernel));
            if self.freed_keys.len() > 2 * DECLARED_KEPT {
                // A program without steps frees without end: keep what late faults can name.
                let horizon = self.kernel.saturating_sub(DECLARED_KEPT as u64);
                self.freed_keys.retain(|_, k| k.1 >= horizon);
            }
        }
        let blocks = self.sizes.remove(&id).unwrap_or(0).div_ceil(BLOCK_SIZE);
        for b in 0..blocks as u32 {
            self.resident.remove(&Unit { region: id, block: b });
            self.read_mostly.remove(&Unit { region: id, block: b });
            self.remote.remove(&Unit { region: id, block: b });
        }
        self.by_key.retain(|_, r| *r != id);
        self.born.remove(&id);
    }
}

impl Policy for Advisor {
    fn name(&self) -> &'static str {
        "advisor"
    }

    fn record_events(&mut self, on: bool) {
        self.recording = on;
    }

    fn drain_events(&mut self, out: &mut Vec<crate::seam::MemEvent>) {
        out.append(&mut self.events);
    }

    fn wants_feedback(&self) -> bool {
        self.settings.learn_from_faults
    }

    fn learning(&self) -> crate::replay::Learning {
        crate::replay::Learning {
            learned_bytes: self.learned_bytes,
            observed: self.learned_observed,
            late_kernels: self.late.kernels,
            late_too_old: self.late.too_old,
            late_lag_mean: if self.late.kernels == 0 {
                0.0
            } else {
                self.late.lag_sum as f64 / self.late.kernels as f64
            },
            late_lag_max: self.late.lag_max,
        }
    }

    /// GPU faults (and the migrations and first-touch population they caused) on regions the
    /// running kernel did not declare are accesses it made all the same: they join its
    /// observations (as read-write, since a fault does not say whether the kernel wrote, and
    /// treating a write as a read could duplicate written data), and the pages are on the
    /// device now. CPU faults and the driver's own evictions take pages off the device.
    fn observe(&mut self, events: &[crate::seam::MemEvent]) {
        use crate::seam::{Direction, Location, MemEvent, MigrationCause};
        let mut units = Vec::new();
        for e in events {
            let (region, offset, bytes, on_device) = match (e.device_access(), e) {
                (Some((region, offset, bytes, _)), _) => (region, offset, bytes, true),
                (_, &MemEvent::Populate { region, offset, bytes, on: Location::DEVICE }) => {
                    (region, offset, bytes, true)
                }
                // A CPU fault pulls the pages to the host; the driver's evictions (making room
                // for faults) take them off the device.
                (_, &MemEvent::Fault { region, offset, bytes, by: crate::Accessor::Host, .. })
                | (
                    _,
                    &MemEvent::Migration {
                        region,
                        offset,
                        bytes,
                        dir: Direction::D2H,
                        cause: MigrationCause::Eviction,
                        ..
                    },
                ) => (region, offset, bytes, false),
                _ => continue,
            };
            if !self.sizes.contains_key(&region) || (on_device && self.declared.contains(&region)) {
                continue;
            }
            units.clear();
            add_units(&self.sizes, region, offset, bytes.max(1), false, &mut units);
            if on_device {
                self.undeclared.push((region, offset, bytes.max(1)));
                for &(u, _) in &units {
                    self.resident.insert(u, (unit_bytes(&self.sizes, u), self.kernel));
                }
            } else {
                for (u, _) in &units {
                    self.resident.remove(u);
                }
            }
        }
    }

    /// Device accesses reported late (on a GPU, CUPTI's records of faults and the migrations
    /// they caused), on regions kernel `kernel` did not declare: learned at that kernel's
    /// position in its step, and observed there from the next step on, so the forecast brings
    /// them from the step after. Residency is left alone: by now the data may have moved again,
    /// and the backend's account says where it is.
    fn observe_late(&mut self, kernel: u64, events: &[crate::seam::MemEvent]) {
        let lag = self.kernel.saturating_sub(kernel);
        self.late.kernels += 1;
        self.late.lag_sum += lag;
        self.late.lag_max = self.late.lag_max.max(lag);
        let at = self.declared_log.partition_point(|d| d.0 < kernel);
        let Some((_, declared)) = self.declared_log.get(at).filter(|d| d.0 == kernel) else {
            self.late.too_old += 1;
            return;
        };
        let started = self.step_starts.partition_point(|&s| s <= kernel);
        let position = kernel - started.checked_sub(1).map_or(0, |i| self.step_starts[i]);
        // The step that kernel ran in (`self.step` counts the step markers seen).
        let step = self.step - (self.step_starts.len() - started) as u64;
        let mut touched: Vec<(RegionKey, u64, u64)> = Vec::new();
        for (region, offset, bytes, _) in events.iter().filter_map(|e| e.device_access()) {
            if declared.contains(&region) {
                continue;
            }
            if let Some(key) = self.key_of(region) {
                touched.push((key, offset, bytes.max(1)));
            }
        }
        let merged = merge_ranges(touched);
        if kernel >= self.step_start() {
            // Still this step: the step-remembering predictors take it now, so the next step's
            // forecast brings it (as a fault seen on time would have).
            for &(key, offset, len) in &merged {
                let (mode, kernel) = (crate::AccessMode::ReadWrite, self.kernel);
                self.predictor.observe_past(position, &Observation { key, offset, len, mode, kernel });
            }
        }
        let list = self.learned.entry(position).or_default();
        for (key, offset, len) in merged {
            self.learned_bytes += len;
            self.learned_keys.insert(key);
            match list.iter_mut().find(|l| l.key == key && l.offset == offset) {
                Some(l) => {
                    l.len = l.len.max(len);
                    l.confirmed = l.confirmed.max(step);
                }
                None => list.push(Learned { key, offset, len, confirmed: step }),
            }
        }
    }

    fn before(&mut self, _index: u64, op: &Op, hints: &mut Hints<'_>) -> Result<()> {
        match op {
            Op::Free { region } => {
                let id = *region;
                self.forget_region(id);
                self.identity.on_free(id);
                Ok(())
            }
            Op::Step { .. } => {
                self.step += 1;
                self.step_starts.push(self.kernel);
                self.written_last_step = std::mem::take(&mut self.written_this_step);
                // Late faults come within a few thousand kernels: older freed keys are done.
                let horizon = self.kernel.saturating_sub(DECLARED_KEPT as u64);
                self.freed_keys.retain(|_, k| k.1 >= horizon);
                self.identity.on_step();
                self.predictor.on_step();
                Ok(())
            }
            Op::Host { accesses, .. } => {
                // The CPU pulls what it touches off the device (duplicates stay on a read).
                let units = kernel_units(&self.sizes, accesses);
                for (u, _, writes) in units {
                    if writes || !self.read_mostly.contains(&u) {
                        self.resident.remove(&u);
                    }
                }
                Ok(())
            }
            Op::Kernel { accesses, .. } => self.before_kernel(accesses, hints),
            _ => Ok(()),
        }
    }

    fn after(&mut self, _index: u64, op: &Op, hints: &mut Hints<'_>) -> Result<()> {
        match op {
            Op::Alloc { region, bytes, .. } => {
                let id = *region;
                self.sizes.insert(id, *bytes);
                self.born.insert(id, self.step);
                let key = self.identity.on_alloc(id, *bytes);
                self.by_key.insert(key, id);
                // Pages recycled from the pool are on the device already.
                for b in pooled_blocks(&self.sizes, hints, id)? {
                    self.resident.insert(
                        Unit { region: id, block: b },
                        (unit_bytes(&self.sizes, Unit { region: id, block: b }), self.kernel),
                    );
                }
                Ok(())
            }
            Op::Kernel { accesses, .. } => {
                for a in accesses {
                    if let Some(key) = self.identity.key(a.region) {
                        let obs = Observation {
                            key,
                            offset: a.offset,
                            len: a.len,
                            mode: a.mode,
                            kernel: self.kernel,
                        };
                        self.predictor.observe(&obs);
                    }
                }
                self.observe_undeclared();
                self.predictor.end_kernel(self.kernel);
                self.kernel += 1;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
