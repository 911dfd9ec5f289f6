//! The planner against a straightforward reference: the same algorithm written the plain way
//! (a copy of the residency, a victim heap over all of it, built at the first eviction), as
//! the planner was before it learned to avoid both. On random inputs the two must make the
//! same plan, hint for hint and in the same order, including when one `Planner` plans many
//! kernels in a row (its working memory must not leak from one plan into the next). The rules
//! both apply to a single unit (`too_soon`, `too_small_to_move`, `place_current`, ...) are
//! shared: what is checked is how the planner finds and keeps its units.

use std::collections::BinaryHeap;

use proptest::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use super::*;
use crate::region::RegionId;

const MB2: u64 = 2 << 20;

/// The plain planner (see the module documentation).
fn reference_plan(input: &PlanInput<'_>) -> Plan {
    if nothing_to_do(input) {
        return Plan::default();
    }
    let mut out = Plan::default();
    // Future uses per unit, soonest first.
    let mut future: FxHashMap<Unit, Vec<(u64, bool)>> = FxHashMap::default();
    let mut by_kernel: Vec<UnitUse> = input.predicted.iter().copied().filter(|u| u.at >= input.now).collect();
    by_kernel.sort_by(|a, b| a.at.cmp(&b.at).then(a.unit.cmp(&b.unit)));
    for u in &by_kernel {
        // A predicted overwrite does not prove the data dead: count it as a plain use. A
        // kernel's accesses to one unit are one use, dead only if each of them overwrites it.
        let dead = u.overwrite && u.certain;
        let uses = future.entry(u.unit).or_default();
        match uses.last_mut() {
            Some(last) if last.0 == u.at => last.1 &= dead,
            _ => uses.push((u.at, dead)),
        }
    }
    let next_after = |unit: Unit, j: u64| -> u64 {
        match future.get(&unit).and_then(|v| v.iter().find(|(at, _)| *at > j)) {
            Some(&(at, false)) => at,
            _ => NEVER, // not predicted again, or overwritten first: dead until then
        }
    };

    let mut resident: FxHashMap<Unit, (u64, u64)> =
        input.resident.units().map(|u| (u, input.resident.get(&u).expect("listed"))).collect();
    let mut used: u64 = input.resident.bytes();
    let protect: FxHashSet<Unit> = input.current.iter().map(|u| u.unit).collect();

    // Victims by priority. Priorities do not change during one plan, so the heap is built
    // once, at the first eviction (many kernels need none); guarded units popped on the way
    // are pushed back.
    let mut victims: Option<BinaryHeap<(Priority, Unit)>> = None;
    let heap_of = |resident: &FxHashMap<Unit, (u64, u64)>| -> BinaryHeap<(Priority, Unit)> {
        resident
            .iter()
            .map(|(&u, &(_, last))| {
                (priority(future.get(&u).and_then(|v| v.first()), last, input.kept.contains(&u.region)), u)
            })
            .collect()
    };

    // Evicts the highest-priority unit outside `guard`; with `early = (j, rival)`, only one
    // Belady would evict by kernel j anyway. Returns false when none qualifies.
    let evict_one = |resident: &mut FxHashMap<Unit, (u64, u64)>,
                     victims: &mut Option<BinaryHeap<(Priority, Unit)>>,
                     used: &mut u64,
                     out: &mut Plan,
                     guard: &FxHashSet<Unit>,
                     early: Option<(u64, u64)>|
     -> bool {
        let victims = victims.get_or_insert_with(|| heap_of(resident));
        let mut skipped = Vec::new();
        let victim = loop {
            match victims.pop() {
                None => break None,
                Some(v) if !resident.contains_key(&v.1) => continue, // evicted already
                Some(v) if guard.contains(&v.1) => skipped.push(v),
                Some(v) if too_small_to_move(input, &v) => continue,
                Some(v) => break Some(v),
            }
        };
        victims.extend(skipped);
        let Some((p, unit)) = victim else { return false };
        if early.is_some_and(|early| too_soon(input, p, early)) {
            victims.push((p, unit));
            return false;
        }
        *used -= resident.remove(&unit).map_or(0, |v| v.0);
        record_eviction(input, out, p, unit);
        true
    };

    let mut planned: FxHashSet<Unit> = FxHashSet::default();
    place_current(input, |u| resident.contains_key(u), &mut planned, &mut out);

    // Over the budget already (a new region recycled device-resident memory from the pool):
    // back within it, or the driver makes the room, migrating behind the kernel instead of
    // staging.
    while used > input.budget {
        if !evict_one(&mut resident, &mut victims, &mut used, &mut out, &protect, None) {
            break;
        }
    }

    // The kernel about to run: its units must fit, whatever it evicts.
    for u in input.current {
        if resident.contains_key(&u.unit) || input.remote.contains(&u.unit) || !planned.insert(u.unit) {
            continue;
        }
        let bytes = (input.unit_bytes)(u.unit);
        while used + bytes > input.budget {
            if !evict_one(&mut resident, &mut victims, &mut used, &mut out, &protect, None) {
                break;
            }
        }
        resident.insert(u.unit, (bytes, input.now));
        used += bytes;
        if bytes >= input.min_prefetch_bytes {
            out.prefetch.push((u.unit, u.overwrite, Reason::NeededNow));
        }
    }

    out.for_now = ForNow { discard: out.discard.len(), evict: out.evict.len() };

    // Predicted units, soonest first, as early as Belady allows.
    let mut between: FxHashSet<Unit> = FxHashSet::default();
    let mut pending = 0u64;
    for (j, kernel, due) in forecast_kernels(input, &by_kernel) {
        pending += due;
        let mut guard = protect.clone();
        guard.extend(kernel.iter().map(|u| u.unit));
        // The latest next use among the units in between (NEVER, the largest, if one has none).
        let rival = between.iter().map(|&u| next_after(u, j)).max().unwrap_or(0);
        for u in kernel {
            let bytes = (input.unit_bytes)(u.unit);
            if resident.contains_key(&u.unit)
                || planned.contains(&u.unit)
                || input.remote.contains(&u.unit)
                || bytes < input.min_prefetch_bytes
            {
                continue;
            }
            let mut fits = true;
            while used + pending + bytes > input.budget {
                if !evict_one(&mut resident, &mut victims, &mut used, &mut out, &guard, Some((j, rival))) {
                    fits = false;
                    break;
                }
            }
            if !fits {
                return with_duplicates(out, input);
            }
            planned.insert(u.unit);
            resident.insert(u.unit, (bytes, input.now));
            used += bytes;
            // Only a declared overwrite may skip copying the old data in: a predicted one may be
            // wrong, and populating instead of migrating would then lose the data.
            let populate_only = u.overwrite && u.certain;
            out.prefetch.push((u.unit, populate_only, Reason::Predicted { at: j, confidence: u.confidence }));
        }
        for u in kernel {
            if between.insert(u.unit) && !resident.contains_key(&u.unit) {
                pending += (input.unit_bytes)(u.unit);
            }
        }
    }
    with_duplicates(out, input)
}

/// One random planning problem: units are (region 1..=6, block 0..4); region 6's units are
/// small (under the prefetch break-even).
#[derive(Debug, Clone)]
struct Case {
    now: u64,
    current: Vec<(u64, u32, bool, bool)>,
    predicted: Vec<(u64, u32, u64, bool, bool, f32)>,
    resident: Vec<(u64, u32, u64)>,
    reserve: Vec<(u64, u64)>,
    budget_units: u64,
    early_reach: u64,
    read_mostly: Vec<(u64, u32)>,
    remote: Vec<(u64, u32)>,
    evicted_before: Vec<(u64, u32)>,
    written_last: Vec<(u64, u32)>,
    placements: (bool, bool, bool),
    kept: Vec<u64>,
}

fn unit_of(r: u64, b: u32) -> Unit {
    Unit { region: RegionId(r), block: b }
}

fn case() -> impl Strategy<Value = Case> {
    let unit = (1u64..=6, 0u32..4);
    (
        (20u64..40),
        prop::collection::vec((1u64..=6, 0u32..4, any::<bool>(), any::<bool>()), 0..6),
        prop::collection::vec(
            (1u64..=6, 0u32..4, 0u64..20, any::<bool>(), any::<bool>(), 0.0f32..1.0),
            0..24,
        ),
        prop::collection::vec((1u64..=6, 0u32..4, 0u64..20), 0..20),
        prop::collection::vec((0u64..60, 1u64..4), 0..3),
        (1u64..16, 0u64..12),
        prop::collection::vec(unit.clone(), 0..4),
        prop::collection::vec(unit.clone(), 0..3),
        prop::collection::vec(unit.clone(), 0..6),
        prop::collection::vec(unit, 0..4),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        prop::collection::vec(1u64..=6, 0..3),
    )
        .prop_map(
            |(
                now,
                current,
                predicted,
                resident,
                reserve,
                (budget_units, early_reach),
                rm,
                remote,
                ebr,
                wls,
                pl,
                kept,
            )| Case {
                now,
                current,
                predicted,
                resident,
                reserve,
                budget_units,
                early_reach,
                read_mostly: rm,
                remote,
                evicted_before: ebr,
                written_last: wls,
                placements: pl,
                kept,
            },
        )
}

/// Both planners' plans for `c`, the `Planner` being `planner` (reused across cases).
fn both(c: &Case, planner: &mut Planner) -> (Plan, Plan) {
    let now = c.now;
    let current: Vec<UnitUse> = c
        .current
        .iter()
        .map(|&(r, b, overwrite, writes)| UnitUse {
            unit: unit_of(r, b),
            at: now,
            overwrite,
            writes: writes || overwrite,
            confidence: 1.0,
            certain: true,
        })
        .collect();
    let mut predicted: Vec<UnitUse> = c
        .predicted
        .iter()
        .map(|&(r, b, ahead, overwrite, certain, confidence)| UnitUse {
            unit: unit_of(r, b),
            at: now + ahead,
            overwrite,
            writes: overwrite,
            confidence,
            certain,
        })
        .collect();
    // In half the cases soonest first, as the advisor's forecasts come (the planner then sorts
    // each kernel's uses alone).
    if now % 2 == 0 {
        predicted.sort_by_key(|u| u.at);
    }
    // Recorded as the advisor records them: by last use, some used again later.
    let mut by_use = c.resident.clone();
    by_use.sort_by_key(|r| r.2);
    let mut resident = Residency::new();
    for &(r, b, last) in &by_use {
        let u = unit_of(r, b);
        let bytes = if r == 6 { 4096 } else { MB2 };
        resident.insert(u, (bytes, last.min(now)));
    }
    let set = |v: &[(u64, u32)]| -> FxHashSet<Unit> { v.iter().map(|&(r, b)| unit_of(r, b)).collect() };
    let (read_mostly, remote) = (set(&c.read_mostly), set(&c.remote));
    let (evicted_before, written_last) = (set(&c.evicted_before), set(&c.written_last));
    let reserve: Vec<(u64, u64)> =
        c.reserve.iter().map(|&(ahead, units)| (now + ahead, units * MB2)).collect();
    let kept: FxHashSet<RegionId> = c.kept.iter().map(|&r| RegionId(r)).collect();
    let input = PlanInput {
        now,
        current: &current,
        predicted: &predicted,
        resident: &resident,
        reserve: &reserve,
        unit_bytes: &|u: Unit| if u.region.0 == 6 { 4096 } else { MB2 },
        budget: c.budget_units * MB2,
        min_prefetch_bytes: 64 << 10,
        early_reach: c.early_reach,
        read_mostly: &read_mostly,
        remote: &remote,
        evicted_before_reuse: &|u| evicted_before.contains(&u),
        written_last_step: &|u| written_last.contains(&u),
        placements: Placements { discard: c.placements.0, duplicate: c.placements.1, remote: c.placements.2 },
        kept: &kept,
    };
    (planner.plan(&input), reference_plan(&input))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The planner makes the reference's plans, one `Planner` planning many in a row.
    #[test]
    fn the_planner_makes_the_plain_plans(cases in prop::collection::vec(case(), 1..6)) {
        let mut planner = Planner::new();
        for c in &cases {
            let (got, want) = both(c, &mut planner);
            prop_assert_eq!(got, want, "{:?}", c);
        }
    }
}
