//! The planner: a pure function from what is known (the next kernel's accesses, predicted
//! future accesses, what is resident, the budget) to hints, each with the reason it was
//! chosen. It works on 2 MiB units of regions and applies Belady's rule to predicted next
//! uses: evict what is needed farthest in the future (dead data first, which costs nothing),
//! and prefetch a predicted unit early only where Belady would have made the same room by
//! then (room is reserved for what the kernels in between bring in, and a victim must be
//! needed after everything used in between).
//!
//! Beyond moving data it places it (h200-facts.md says why each pays):
//! - **duplicate** (read-mostly) data coming to the device that no known or predicted use
//!   writes: the host copy stays valid, so evicting it later is almost free (3.2 ms per 4 GiB
//!   instead of 10-17 GB/s). Before a kernel writes a duplicated unit the planner collapses
//!   it (unset read-mostly): a GPU write to duplicates is a fault storm.
//! - **remote** (preferred host + accessed by the device) for a unit the kernel about to run
//!   overwrites when the caller knows it would be evicted before its reuse (it was last
//!   time): the kernel writes it over the link at 51 GB/s instead of it being migrated back
//!   at 10-17 GB/s later.

use std::collections::BinaryHeap;

use rustc_hash::{FxHashMap, FxHashSet};

use super::residency::Residency;
use crate::region::RegionId;
use pass::{Future, FutureUse, Pass};

mod pass;

pub use crate::policy::units::Unit;

/// One (current or predicted) use of a unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnitUse {
    /// The unit.
    pub unit: Unit,
    /// The kernel it is used in.
    pub at: u64,
    /// The use writes the whole unit without reading it (its data before is dead).
    pub overwrite: bool,
    /// The use writes (some of) the unit.
    pub writes: bool,
    /// How sure the prediction is (1.0 for the kernel about to run).
    pub confidence: f32,
    /// Declared rather than predicted (the kernel about to run, or a trace's known future).
    /// Only a certain overwrite makes data dead enough to discard: discarding on a wrong
    /// prediction would destroy live data.
    pub certain: bool,
}

/// Why a hint was chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Reason {
    /// The kernel about to run uses it.
    NeededNow,
    /// Predicted for kernel `at` with this confidence.
    Predicted {
        /// Kernel index.
        at: u64,
        /// Confidence of the prediction.
        confidence: f32,
    },
    /// Its data is dead before its next use: dropping it costs nothing.
    Dead,
    /// Needed farthest in the future (`None`: not predicted at all).
    FarthestNextUse(Option<u64>),
    /// No declared or predicted use writes it: a read-only duplicate is free to evict.
    ReadOnly,
    /// The kernel about to run writes it, and duplicates must not be written.
    WrittenNow,
    /// It was evicted before its reuse last time: written remotely, it never needs migrating
    /// back; written back ahead, its eviction copies nothing.
    EvictedBeforeReuse,
}

/// What the planner decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Units to drop without copying (dead data).
    pub discard: Vec<(Unit, Reason)>,
    /// Units to move back to the host.
    pub evict: Vec<(Unit, Reason)>,
    /// Units to bring to the device; `true` when their old contents are dead (populate only).
    pub prefetch: Vec<(Unit, bool, Reason)>,
    /// Read-mostly units to collapse before anything else (the kernel about to run writes
    /// them).
    pub collapse: Vec<(Unit, Reason)>,
    /// Units to mark read-mostly before they come to the device.
    pub duplicate: Vec<(Unit, Reason)>,
    /// Units to map from the host instead of migrating (the kernel about to run writes them).
    pub remote: Vec<(Unit, Reason)>,
    /// How many of the leading `discard` and `evict` entries make room for the kernel about to
    /// run (or bring the residency back within the budget); the others make room for data
    /// brought in early, and may wait until the kernel is issued.
    pub for_now: ForNow,
}

/// The leading entries of a plan's `discard` and `evict` that the kernel about to run needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForNow {
    /// Of `discard`.
    pub discard: usize,
    /// Of `evict`.
    pub evict: usize,
}

/// Which placements besides migration the planner may use (all by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placements {
    /// Drop dead data without copying it.
    pub discard: bool,
    /// Read-mostly duplicates of read-only data.
    pub duplicate: bool,
    /// Remote mapping of data evicted before its reuse.
    pub remote: bool,
}

impl Default for Placements {
    fn default() -> Self {
        Self { discard: true, duplicate: true, remote: true }
    }
}

/// What the planner needs to know.
pub struct PlanInput<'a> {
    /// Index of the kernel about to run.
    pub now: u64,
    /// Its units (must be on the device when it runs).
    pub current: &'a [UnitUse],
    /// Predicted uses of later kernels, in any order; also of the kernel about to run, for
    /// accesses it does not declare (learned from faults).
    pub predicted: &'a [UnitUse],
    /// Units on the device now: (bytes, kernel of last use). Among units with the same
    /// prediction (often none), the least recently used is evicted first.
    pub resident: &'a Residency,
    /// Device bytes that regions not allocated yet are predicted to need, by the kernel
    /// (`at`, bytes): an early prefetch must leave room for them as for any use in between.
    pub reserve: &'a [(u64, u64)],
    /// Bytes of a unit (page-rounded).
    pub unit_bytes: &'a dyn Fn(Unit) -> u64,
    /// Device bytes the working set may use.
    pub budget: u64,
    /// Units smaller than this are left to faults (a prefetch call costs more).
    pub min_prefetch_bytes: u64,
    /// Kernels ahead within which a unit that no forecast uses may be evicted to bring in a
    /// predicted one early (half the forecast's horizon is usual: the victim is needed, if at
    /// all, beyond the horizon, so this leaves it at least the other half).
    pub early_reach: u64,
    /// Units marked read-mostly now (their device copies are duplicates).
    pub read_mostly: &'a FxHashSet<Unit>,
    /// Units mapped remotely now: served where they are, neither fetched nor evicted.
    pub remote: &'a FxHashSet<Unit>,
    /// Units that were evicted before their reuse the last time (by step-stable identity):
    /// the only ones worth a placement, since on the H200 both cost more up front than a plain
    /// migration (setting read-mostly holds the host ~90 ms per GiB) and pay back only at
    /// eviction. Asked only of units the kernel about to run or the forecast uses.
    pub evicted_before_reuse: &'a dyn Fn(Unit) -> bool,
    /// Units the program wrote in its last step: a duplicate of one would be collapsed again
    /// before that write comes round, and unsetting read-mostly on duplicated data holds the
    /// host too (`advise_unset_read_mostly_ns_per_gib`), so they are not duplicated. Asked
    /// only of units that `evicted_before_reuse` holds.
    pub written_last_step: &'a dyn Fn(Unit) -> bool,
    /// Placements allowed.
    pub placements: Placements,
    /// Regions the step keeps ([`crate::policy::keep`]): their units are evicted after every
    /// other unit, and never to bring a predicted one in early.
    pub kept: &'a FxHashSet<RegionId>,
}

const NEVER: u64 = u64::MAX;

/// Eviction priority: larger goes first. Dead data first, then units never predicted, then
/// the farthest predicted use, then the units of kept regions (`kept`); ties go to the least
/// recently used. (Clean duplicates are not preferred among the unpredicted: that evicts data
/// needed just past the horizon.)
fn priority(next: Option<&(u64, bool)>, last_use: u64, kept: bool) -> Priority {
    let age = u64::MAX - last_use;
    match next {
        Some(&(at, true)) => (CLASS_DEAD, at, age),
        _ if kept => (CLASS_KEPT, next.map_or(NEVER, |n| n.0), age),
        None => (CLASS_UNPREDICTED, NEVER, age),
        Some(&(at, false)) => (CLASS_NEEDED, at, age),
    }
}

type Priority = (u8, u64, u64);
const CLASS_KEPT: u8 = 0;
const CLASS_NEEDED: u8 = 1;
const CLASS_UNPREDICTED: u8 = 2;
const CLASS_DEAD: u8 = 3;

/// A live unit too small to prefetch back is not worth a migration call out either (dropping
/// dead data is): the driver evicts it if it ever must.
fn too_small_to_move(input: &PlanInput<'_>, &((class, _, _), unit): &(Priority, Unit)) -> bool {
    class != CLASS_DEAD && (input.unit_bytes)(unit) < input.min_prefetch_bytes
}

/// Whether evicting a unit of priority `(class, next, _)` now, to make room for kernel `j`
/// ahead of time, is too soon. Early, a victim must be needed after everything used in
/// between (`rival`). One never predicted is needed beyond the forecast, if at all: it is
/// evicted early only for a use within `early_reach`, which leaves it that margin (evicted for
/// any use in the forecast, it comes back soon after: docs/decisions.md). Kept data is never
/// evicted early: that is what keeps it.
fn too_soon(input: &PlanInput<'_>, (class, next, _): Priority, (j, rival): (u64, u64)) -> bool {
    match class {
        CLASS_KEPT => true,
        CLASS_UNPREDICTED => j > input.now.saturating_add(input.early_reach),
        _ => next <= j || next <= rival,
    }
}

/// Writes down the eviction of `unit` (priority class and next use): dropped if dead, else
/// moved out.
fn record_eviction(input: &PlanInput<'_>, out: &mut Plan, (class, next, _): Priority, unit: Unit) {
    if class == CLASS_DEAD && input.placements.discard {
        out.discard.push((unit, Reason::Dead));
    } else {
        out.evict.push((unit, Reason::FarthestNextUse((next != NEVER).then_some(next))));
    }
}

/// The forecast's kernels in order (`by_kernel` is sorted by kernel), each with its uses and
/// the bytes that regions created by then add to the room kept free (`input.reserve`).
fn forecast_kernels<'a>(
    input: &PlanInput<'_>,
    by_kernel: &'a [UnitUse],
) -> impl Iterator<Item = (u64, &'a [UnitUse], u64)> + 'a {
    let mut reserve: Vec<(u64, u64)> = input.reserve.iter().copied().filter(|r| r.0 > input.now).collect();
    reserve.sort_unstable();
    let mut reserved = 0;
    by_kernel.chunk_by(|a, b| a.at == b.at).map(move |kernel| {
        let j = kernel[0].at;
        // Regions created up to kernel j need their room by then too.
        let mut due = 0;
        while reserved < reserve.len() && reserve[reserved].0 <= j {
            due += reserve[reserved].1;
            reserved += 1;
        }
        (j, kernel, due)
    })
}

/// Placements of the kernel about to run: duplicates it writes collapse first, and what it
/// overwrites that would only be evicted before its reuse is written remotely (`planned`).
fn place_current(
    input: &PlanInput<'_>,
    is_resident: impl Fn(&Unit) -> bool,
    planned: &mut FxHashSet<Unit>,
    out: &mut Plan,
) {
    for u in input.current {
        if u.writes && input.read_mostly.contains(&u.unit) && !out.collapse.iter().any(|c| c.0 == u.unit) {
            out.collapse.push((u.unit, Reason::WrittenNow));
        }
        // Only data with no device pages: memory recycled from the pool would have to be
        // discarded first, and a discard holds the host far longer than it saves.
        if input.placements.remote
            && u.overwrite
            && u.certain
            && !is_resident(&u.unit)
            && !input.remote.contains(&u.unit)
            && (input.evicted_before_reuse)(u.unit)
            && planned.insert(u.unit)
        {
            out.remote.push((u.unit, Reason::EvictedBeforeReuse));
        }
    }
}

/// The kernel about to run: its units must fit, whatever it evicts.
fn bring_current<I: Iterator<Item = (Unit, u64)>>(pass: &mut Pass<'_, '_, I>, planned: &mut FxHashSet<Unit>) {
    let input = pass.input;
    for u in input.current {
        if pass.is_resident(&u.unit) || input.remote.contains(&u.unit) || !planned.insert(u.unit) {
            continue;
        }
        let bytes = (input.unit_bytes)(u.unit);
        pass.make_room(bytes, None, None);
        pass.bring(u.unit, bytes);
        if bytes >= input.min_prefetch_bytes {
            pass.out.prefetch.push((u.unit, u.overwrite, Reason::NeededNow));
        }
    }
}

/// Working sets of [`bring_forecast`], kept between plans.
struct ForecastSets<'s> {
    /// Units of the kernel about to run.
    protect: &'s FxHashSet<Unit>,
    /// Units that may not be evicted for the predicted kernel being placed.
    guard: &'s mut FxHashSet<Unit>,
    /// Units placed by this plan.
    planned: &'s mut FxHashSet<Unit>,
    /// Units predicted for the kernels before the one being placed.
    between: &'s mut FxHashSet<Unit>,
}

/// Predicted units, soonest first, as early as Belady allows.
fn bring_forecast<I: Iterator<Item = (Unit, u64)>>(
    pass: &mut Pass<'_, '_, I>,
    by_kernel: &[UnitUse],
    future: Future<'_>,
    sets: ForecastSets<'_>,
) {
    let ForecastSets { protect, guard, planned, between } = sets;
    let input = pass.input;
    let next_after = |unit: Unit, j: u64| -> u64 {
        match future.of(unit).iter().find(|u| u.at > j) {
            Some(&FutureUse { at, dead: false, .. }) => at,
            _ => NEVER, // not predicted again, or overwritten first: dead until then
        }
    };
    between.clear();
    let mut pending = 0u64;
    'kernels: for (j, kernel, due) in forecast_kernels(input, by_kernel) {
        pending += due;
        // The guard (the kernel about to run and kernel j) is built only if kernel j must
        // make room: most forecast kernels need none, and copying the current kernel's units
        // for each of them was a tenth of a plan's work where a kernel touches hundreds.
        let mut guarded = false;
        // The latest next use among the units in between (NEVER, the largest, if one has none),
        // worked out only if something must make room for kernel j, and then once: a scan of
        // every unit in between for every forecast kernel was most of a plan's work on long
        // forecasts. The scan stops at NEVER.
        let mut rival: Option<u64> = None;
        let between_now = &*between;
        let mut rival_of = || {
            *rival.get_or_insert_with(|| {
                let mut latest = 0;
                for &u in between_now.iter() {
                    latest = latest.max(next_after(u, j));
                    if latest == NEVER {
                        break;
                    }
                }
                latest
            })
        };
        for u in kernel {
            let bytes = (input.unit_bytes)(u.unit);
            if pass.is_resident(&u.unit)
                || planned.contains(&u.unit)
                || input.remote.contains(&u.unit)
                || bytes < input.min_prefetch_bytes
            {
                continue;
            }
            let need = pending + bytes;
            if pass.used + need > input.budget {
                if !guarded {
                    guard.clone_from(protect);
                    guard.extend(kernel.iter().map(|u| u.unit));
                    guarded = true;
                }
                if !pass.make_room(need, Some(guard), Some((j, rival_of()))) {
                    break 'kernels;
                }
            }
            planned.insert(u.unit);
            pass.bring(u.unit, bytes);
            // Only a declared overwrite may skip copying the old data in: a predicted one may be
            // wrong, and populating instead of migrating would then lose the data.
            let populate_only = u.overwrite && u.certain;
            pass.out.prefetch.push((
                u.unit,
                populate_only,
                Reason::Predicted { at: j, confidence: u.confidence },
            ));
        }
        for u in kernel {
            if between.insert(u.unit) && !pass.is_resident(&u.unit) {
                pending += (input.unit_bytes)(u.unit);
            }
        }
    }
}

/// Plans hints for the kernel about to run. See the module documentation. A caller that
/// plans every kernel keeps a [`Planner`] instead, which reuses its working memory.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    Planner::default().plan(input)
}

/// The planner with its working memory kept between kernels. It never copies the residency
/// nor ranks all of it: what it changes sits in an overlay (`added`, `removed`), and victims
/// come from a heap of the predicted units merged with the unpredicted ones in the account's
/// age order. Copying and ranking the whole residency for every kernel (over a
/// thousand units at a 50% budget) was most of the planner's host time.
#[derive(Debug, Default)]
pub struct Planner {
    /// Uses at or after the kernel about to run, by kernel (then unit).
    by_kernel: Vec<UnitUse>,
    /// The same uses grouped by unit, soonest first, one per kernel.
    uses: Vec<FutureUse>,
    /// Where each unit's uses sit in `uses`: (start, count).
    future: FxHashMap<Unit, (u32, u32)>,
    /// Units this plan brings to the device, and resident units it evicts.
    added: FxHashMap<Unit, (u64, u64)>,
    removed: FxHashSet<Unit>,
    /// Predicted victims by priority (a heap's storage, kept between plans).
    victims: Vec<(Priority, Unit)>,
    /// Units of the kernel about to run.
    protect: FxHashSet<Unit>,
    /// Units that may not be evicted for the predicted kernel being placed.
    guard: FxHashSet<Unit>,
    /// Units placed by this plan.
    planned: FxHashSet<Unit>,
    /// Units predicted for the kernels before the one being placed.
    between: FxHashSet<Unit>,
}

/// A unit's uses (from [`Planner::future`]) in the grouped list.
fn uses_of<'u>(future: &FxHashMap<Unit, (u32, u32)>, uses: &'u [FutureUse], unit: Unit) -> &'u [FutureUse] {
    future.get(&unit).map_or(&[], |&(start, n)| &uses[start as usize..(start + n) as usize])
}

/// Eviction candidates in priority order, as a heap over the whole residency would give them:
/// the predicted units (and any pushed back) in a heap, merged with the unpredicted units,
/// whose priority is their age, streamed from the account's age order (an unpredicted unit of
/// a kept region, ranked below them all, moves to the heap as the stream passes it). Like that
/// heap it holds what the plan brought in before its first eviction, and nothing brought in
/// after.
struct Victims<I: Iterator<Item = (Unit, u64)>> {
    heap: BinaryHeap<(Priority, Unit)>,
    unpredicted: std::iter::Peekable<I>,
}

impl<I: Iterator<Item = (Unit, u64)>> Victims<I> {
    fn pop(&mut self, kept: &FxHashSet<RegionId>) -> Option<(Priority, Unit)> {
        while let Some(&(u, last)) = self.unpredicted.peek().filter(|(u, _)| kept.contains(&u.region)) {
            self.unpredicted.next();
            self.heap.push((priority(None, last, true), u));
        }
        let streamed = self.unpredicted.peek().map(|&(u, last)| (priority(None, last, false), u));
        match (self.heap.peek(), streamed) {
            (Some(h), Some(s)) if *h > s => self.heap.pop(),
            (_, Some(s)) => {
                self.unpredicted.next();
                Some(s)
            }
            (_, None) => self.heap.pop(),
        }
    }

    fn push(&mut self, v: (Priority, Unit)) {
        self.heap.push(v);
    }
}

impl Planner {
    /// A planner with empty working memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Plans hints for the kernel about to run (see the module documentation); the same
    /// result as [`plan`].
    pub fn plan(&mut self, input: &PlanInput<'_>) -> Plan {
        if nothing_to_do(input) {
            return Plan::default();
        }
        let Planner { by_kernel, uses, future, added, removed, victims, protect, guard, planned, between } =
            self;
        // Future uses per unit, soonest first.
        by_kernel.clear();
        by_kernel.extend(input.predicted.iter().copied().filter(|u| u.at >= input.now));
        // Forecasts come soonest first, so each kernel's uses need sorting alone: the same
        // order as a stable sort by (kernel, unit), at a fraction of its comparisons.
        if by_kernel.is_sorted_by_key(|u| u.at) {
            for uses in by_kernel.chunk_by_mut(|a, b| a.at == b.at) {
                uses.sort_by_key(|u| u.unit);
            }
        } else {
            by_kernel.sort_by(|a, b| a.at.cmp(&b.at).then(a.unit.cmp(&b.unit)));
        }
        group_by_unit(by_kernel, uses, future);
        let future = Future { uses, index: future };
        protect.clear();
        protect.extend(input.current.iter().map(|u| u.unit));

        // Victims by priority: the predicted units in a heap, merged with the unpredicted ones
        // streamed in the account's age order.
        // Units too small to move are never victims unless dead, and dead ones are predicted:
        // the stream skips the account's small units without reading them.
        debug_assert!(input.resident.movable_from() <= input.min_prefetch_bytes);
        let unpredicted = input.resident.movable_by_age().filter(move |(u, _)| !future.contains(u));
        let heap = BinaryHeap::from(std::mem::take(victims));
        let mut pass = Pass::new(input, future, added, removed, heap, unpredicted, protect);

        planned.clear();
        let mut out = std::mem::take(&mut pass.out);
        place_current(input, |u| pass.is_resident(u), planned, &mut out);
        pass.out = out;
        // Over the budget already (a new region recycled device-resident memory from the pool):
        // back within it, or the driver makes the room, migrating behind the kernel instead of
        // staging.
        pass.make_room(0, None, None);
        bring_current(&mut pass, planned);
        pass.out.for_now = ForNow { discard: pass.out.discard.len(), evict: pass.out.evict.len() };
        bring_forecast(&mut pass, by_kernel, future, ForecastSets { protect, guard, planned, between });
        let (out, heap) = pass.finish();
        *victims = heap;
        with_duplicates(out, input)
    }
}

/// Groups the forecast's uses (`by_kernel`, in kernel order) by unit into `uses`, each unit's
/// in kernel order and one per kernel, and indexes them in `future` as (start, count): counted
/// first, then placed, so nothing is sorted (a stable sort of the grouped list was a third of a
/// plan's instructions on a forecast of a thousand uses). A kernel's accesses to one unit are
/// one use, dead only if every one of them overwrites it, whatever their order; a predicted
/// overwrite does not prove the data dead: it counts as a plain use.
fn group_by_unit(by_kernel: &[UnitUse], uses: &mut Vec<FutureUse>, future: &mut FxHashMap<Unit, (u32, u32)>) {
    future.clear();
    for u in by_kernel {
        future.entry(u.unit).or_insert((0, 0)).1 += 1;
    }
    let mut start = 0;
    for (first, n) in future.values_mut() {
        (*first, start) = (start, start + *n);
        *n = 0;
    }
    uses.clear();
    uses.resize(
        by_kernel.len(),
        FutureUse { unit: Unit { region: RegionId(0), block: 0 }, at: 0, dead: false },
    );
    for u in by_kernel {
        let (first, n) = future.get_mut(&u.unit).expect("every unit was counted");
        let dead = u.overwrite && u.certain;
        let end = (*first + *n) as usize;
        match uses[*first as usize..end].last_mut() {
            Some(last) if last.at == u.at => last.dead &= dead,
            _ => {
                uses[end] = FutureUse { unit: u.unit, at: u.at, dead };
                *n += 1;
            }
        }
    }
}

/// Whether the plan is empty without working it out: the residency is within the budget,
/// every unit the kernel about to run and the forecast use is resident already and none of the
/// kernel's writes lands on a duplicate.
/// Nothing then comes in, so nothing needs room, a placement or a collapse. This is the usual
/// case once a working set fits, and it spares the per-kernel copy of the residency (the
/// planner's host time delays kernel launches on a GPU).
fn nothing_to_do(input: &PlanInput<'_>) -> bool {
    input.resident.bytes() <= input.budget
        && input.current.iter().all(|u| {
            input.resident.contains_key(&u.unit) && !(u.writes && input.read_mostly.contains(&u.unit))
        })
        && input.predicted.iter().filter(|u| u.at >= input.now).all(|u| input.resident.contains_key(&u.unit))
}

/// Marks read-mostly what comes to the device with its host copy valid, that no declared or
/// predicted use writes, and that was evicted before its reuse last time (the current kernel's
/// own small units included: their faults then duplicate too).
fn with_duplicates(mut out: Plan, input: &PlanInput<'_>) -> Plan {
    if !input.placements.duplicate {
        return out;
    }
    let written: FxHashSet<Unit> =
        input.current.iter().chain(input.predicted).filter(|u| u.writes).map(|u| u.unit).collect();
    let incoming = out.prefetch.iter().filter(|p| !p.1).map(|p| p.0).chain(
        input
            .current
            .iter()
            .filter(|u| !input.resident.contains_key(&u.unit) && !input.remote.contains(&u.unit))
            .map(|u| u.unit),
    );
    let mut seen = FxHashSet::default();
    for unit in incoming {
        if !written.contains(&unit)
            && !input.read_mostly.contains(&unit)
            && (input.evicted_before_reuse)(unit)
            && !(input.written_last_step)(unit)
            && seen.insert(unit)
        {
            out.duplicate.push((unit, Reason::ReadOnly));
        }
    }
    out
}

#[cfg(test)]
mod reference;

#[cfg(test)]
mod tests;
