//! `advisor`: the prefetch advisor as a replay policy. Unlike the oracle it never looks ahead
//! in the trace: it learns from the kernels that ran (step-stable identity, the tournament of
//! predictors), forecasts the next kernels, and lets the planner turn the forecast, the next
//! kernel's declared accesses and the residency into hints within the budget.
//!
//! It also remembers, by step-stable identity, which units it had to evict before their reuse:
//! the next time such a unit is overwritten, the planner may write it remotely instead, and
//! once its kernels are past it is written back ahead of its eviction (`write_back.rs`).
//!
//! In a replay it can be made clairvoyant ([`Advisor::with_trace_future`],
//! `replay.clairvoyant_advisor`): the trace's next kernels take the place of the forecast and
//! everything else stays, so the replay shows what the advisor's predictions cost on a trace,
//! apart from what its planning and the mechanisms cost.

mod account;
mod execute;
pub mod identity;
mod kernel;
mod learning;
mod loops;
pub mod plan;
pub mod predict;
pub mod residency;
mod write_back;

pub use identity::{Identity, RegionKey};
pub use plan::{plan, Placements, Plan, PlanInput, Planner, Reason, Unit, UnitUse};
pub use predict::{Markov, Observation, Periodic, Prediction, Predictor, Score, Sequential, Tournament};
pub use residency::Residency;

use rustc_hash::{FxHashMap, FxHashSet};

use super::units::{
    add_units, coalesce, fetch_needed, merge_units, pooled_blocks, region_units, stale_units, unit_bytes,
    unit_range, Sizes,
};
use super::{Hints, Policy};
use crate::access::RangeAccess;
use crate::config::{AdvisorConfig, PlacementName};
use crate::cost::CostModel;
use crate::error::Result;
use crate::op::Op;
use crate::region::RegionId;
use crate::seam::{page_round, Advice, Location};

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
    /// Written back to the staging memory ahead of their eviction.
    pub written_back: u64,
}

/// Faults reported late to the advisor ([`Policy::observe_late`]): on a GPU the host runs
/// ahead of the device, so what the advisor learns from them comes that many kernels later.
/// Reported in [`crate::policy::Learning`].
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
    /// The link's rate (GB/s) for choosing the share of a step's read-only data the next step
    /// keeps ([`crate::policy::keep`]); `None`: none is kept.
    pub keep_loops: Option<f64>,
    /// Data evicted before its reuse last step is written back ahead of its eviction
    /// (`policy/advisor/write_back.rs`).
    pub write_back: bool,
}

impl AdvisorSettings {
    /// Settings from the `[advisor]` config section, for a device the cost model describes.
    pub fn from_config(budget: u64, cost: &CostModel, c: &AdvisorConfig) -> Self {
        Self {
            budget,
            min_prefetch_bytes: c.min_prefetch.resolve(cost.prefetch_break_even_bytes()),
            horizon: c.lookahead_kernels,
            min_confidence: c.min_confidence as f32,
            placements: Placements {
                discard: c.allows(PlacementName::Discard),
                duplicate: c.allows(PlacementName::Duplicate),
                remote: c.allows(PlacementName::Remote),
            },
            remote_window: c.remote_window,
            learn_from_faults: c.learn_from_faults,
            keep_loops: c.keep_loops.then_some(cost.link_rate_gbps),
            write_back: c.write_back,
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
    /// Bytes of the driver's evictions the account followed from events since `reconcile`
    /// last looked.
    driver_dropped_observed: u64,
    /// The next kernel at which the account may adopt residency it does not know of.
    next_adopt: u64,
    /// Device bytes the backend holds outside the account (the arena's chunks of small
    /// regions, [`Policy::hold_whole_blocks`]).
    outside_account: u64,
    kernel: u64,
    predictions: Vec<Prediction>,
    /// The forecast's order of the live regions' predictions (kept between kernels).
    forecast_order: Vec<kernel::Ranked>,
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
    /// The running step's kernels, and the regions (by key, and live now) this step keeps.
    step_record: crate::policy::keep::StepKernels<RegionKey>,
    kept_keys: FxHashSet<RegionKey>,
    /// The record `kept_keys` was chosen from: a step recording the same keeps the same.
    kept_from: crate::policy::keep::StepKernels<RegionKey>,
    kept: FxHashSet<RegionId>,
    /// Whether a kept set was chosen from a record of kernels (at a step's end or within one).
    kept_chosen: bool,
    /// Clairvoyant ([`Advisor::with_trace_future`]): the trace's next kernels in place of the
    /// predictors' forecast.
    future: Option<TraceFuture>,
    /// Data to write back ahead of its eviction (`write_back.rs`).
    write_backs: write_back::WriteBacks,
}

/// The kernels a clairvoyant advisor sees ahead of the one running.
#[derive(Debug, Default)]
pub(super) struct TraceFuture {
    /// Operations the replay shows ahead.
    pub(super) window: usize,
    /// Kernels the window has shown so far (the next one's index among kernels).
    pub(super) kernels: u64,
    /// Kernels in the window: their index among kernels, their accesses.
    pub(super) ahead: std::collections::VecDeque<FutureKernel>,
}

/// A kernel in the window of a clairvoyant advisor.
#[derive(Debug)]
pub(super) struct FutureKernel {
    pub(super) at: u64,
    pub(super) accesses: Vec<RangeAccess>,
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
        let movable_from = settings.min_prefetch_bytes;
        Self {
            settings,
            identity: Identity::new(),
            predictor: Tournament::standard(),
            planner: Planner::new(),
            sizes: Sizes::default(),
            by_key: FxHashMap::default(),
            resident: Residency::with_movable_from(movable_from),
            read_mostly: FxHashSet::default(),
            remote: FxHashMap::default(),
            born: FxHashMap::default(),
            step: 0,
            evicted_before_reuse: FxHashSet::default(),
            written_this_step: FxHashSet::default(),
            written_last_step: FxHashSet::default(),
            driver_dropped_seen: 0,
            driver_dropped_observed: 0,
            next_adopt: 0,
            outside_account: 0,
            kernel: 0,
            predictions: Vec::new(),
            forecast_order: Vec::new(),
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
            step_record: Default::default(),
            kept_keys: FxHashSet::default(),
            kept_from: Default::default(),
            kept_chosen: false,
            future: None,
            kept: FxHashSet::default(),
            write_backs: Default::default(),
        }
    }

    /// The same advisor, planning from the trace's next kernels (the replay shows it `window`
    /// operations ahead, [`Policy::on_future`]) instead of its predictors' forecast. Only a
    /// replay has the future: a running program's runtime never calls `on_future`.
    pub fn with_trace_future(mut self, window: usize) -> Self {
        self.future = Some(TraceFuture { window, ..TraceFuture::default() });
        self
    }

    /// Bytes of hints issued so far, by kind.
    pub fn hints(&self) -> HintBytes {
        self.hints
    }

    /// Bytes of undeclared accesses learned from faults so far.
    pub fn learned_bytes(&self) -> u64 {
        self.learned_bytes
    }
}

impl Policy for Advisor {
    fn name(&self) -> &'static str {
        if self.future.is_some() {
            "advisor (clairvoyant)"
        } else {
            "advisor"
        }
    }

    fn hold_whole_blocks(&mut self, packed_chunks: u64) {
        self.sizes.hold_whole_blocks();
        self.outside_account = packed_chunks;
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

    fn learning(&self) -> crate::policy::Learning {
        crate::policy::Learning {
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

    fn observe(&mut self, events: &[crate::seam::MemEvent]) {
        self.learn_from(events);
    }

    fn observe_late(&mut self, kernel: u64, events: &[crate::seam::MemEvent]) {
        self.learn_late(kernel, events);
    }

    fn lookahead(&self) -> usize {
        self.future.as_ref().map_or(0, |f| f.window)
    }

    fn on_future(&mut self, _index: u64, op: &Op) {
        if let (Some(f), Op::Kernel { accesses, .. }) = (self.future.as_mut(), op) {
            f.ahead.push_back(FutureKernel { at: f.kernels, accesses: accesses.clone() });
            f.kernels += 1;
        }
    }

    fn before(&mut self, _index: u64, op: &Op, hints: &mut Hints<'_>) -> Result<()> {
        match op {
            Op::Free { region } => {
                let id = *region;
                self.record_free_for_loop(id);
                self.forget_region(id);
                self.identity.on_free(id);
                Ok(())
            }
            Op::Step { .. } => {
                self.step += 1;
                self.step_starts.push(self.kernel);
                self.written_last_step = std::mem::take(&mut self.written_this_step);
                self.write_backs.on_step();
                self.choose_kept();
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
                self.keep_if_kept(id, key);
                // Pages recycled from the pool are on the device already.
                for b in pooled_blocks(&self.sizes, hints, id)? {
                    self.resident.insert(
                        Unit { region: id, block: b },
                        (unit_bytes(&self.sizes, Unit { region: id, block: b }), self.kernel),
                    );
                }
                Ok(())
            }
            Op::Kernel { accesses, dur_ns, .. } => {
                self.record_for_loop(*dur_ns, accesses);
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
                self.write_back_due(hints)
            }
            _ => Ok(()),
        }
    }
}
