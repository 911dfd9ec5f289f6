//! The planner on plain values: each test builds a forecast, a residency and a budget and
//! checks the hints.

use super::*;
use crate::region::RegionId;

const MB2: u64 = 2 << 20;

fn unit(r: u64) -> Unit {
    Unit { region: RegionId(r), block: 0 }
}

fn use_(r: u64, at: u64) -> UnitUse {
    UnitUse { unit: unit(r), at, overwrite: false, writes: false, confidence: 0.9, certain: false }
}

fn run(now: u64, current: &[UnitUse], predicted: &[UnitUse], resident: &[u64], budget_units: u64) -> Plan {
    run_reaching(now, current, predicted, resident, budget_units, u64::MAX)
}

fn run_reaching(
    now: u64,
    current: &[UnitUse],
    predicted: &[UnitUse],
    resident: &[u64],
    budget_units: u64,
    early_reach: u64,
) -> Plan {
    let resident: Residency = resident.iter().map(|&r| (unit(r), (MB2, 0))).collect();
    plan(&PlanInput {
        now,
        current,
        predicted,
        resident: &resident,
        reserve: &[],
        unit_bytes: &|_| MB2,
        budget: budget_units * MB2,
        min_prefetch_bytes: 1,
        early_reach,
        read_mostly: &FxHashSet::default(),
        remote: &FxHashSet::default(),
        evicted_before_reuse: &|_| false,
        written_last_step: &|_| false,
        placements: Placements { duplicate: false, ..Placements::default() },
        kept: &FxHashSet::default(),
    })
}

/// Small units (below the prefetch break-even) are left where they are: migrating one out
/// costs a call and bringing it back a fault. Only large units make room.
#[test]
fn small_units_are_not_evicted() {
    let small = |u: Unit| if u.region.0 >= 10 { 4096 } else { MB2 };
    let resident: Residency =
        [(unit(10), (4096, 0)), (unit(11), (4096, 0)), (unit(1), (MB2, 0))].into_iter().collect();
    let p = plan(&PlanInput {
        now: 5,
        current: &[use_(2, 5)],
        predicted: &[use_(1, 9), use_(10, 20), use_(11, 30)],
        resident: &resident,
        reserve: &[],
        unit_bytes: &small,
        budget: MB2 + 8192,
        min_prefetch_bytes: 256 << 10,
        early_reach: u64::MAX,
        read_mostly: &FxHashSet::default(),
        remote: &FxHashSet::default(),
        evicted_before_reuse: &|_| false,
        written_last_step: &|_| false,
        placements: Placements::default(),
        kept: &FxHashSet::default(),
    });
    let evicted: Vec<Unit> = p.evict.iter().map(|e| e.0).collect();
    assert_eq!(evicted, vec![unit(1)], "the big unit goes though its next use is sooner: {p:?}");
}

#[test]
fn current_kernel_data_is_fetched_evicting_the_farthest_use() {
    // Room for 2 units; 1 and 2 resident; kernel 10 needs 3. 1 is predicted at 11, 2 at 20.
    let p = run(10, &[use_(3, 10)], &[use_(1, 11), use_(2, 20)], &[1, 2], 2);
    assert_eq!(p.evict, vec![(unit(2), Reason::FarthestNextUse(Some(20)))]);
    assert_eq!(p.prefetch[0], (unit(3), false, Reason::NeededNow));
}

/// Found on the H200: a new region recycled device-resident pages from the pool, which took
/// the residency over the budget with everything the kernel and the forecast use already
/// there. The plan was empty and the driver made the room (migrating behind the kernel);
/// the planner now evicts back within the budget itself.
#[test]
fn an_account_over_the_budget_is_brought_back_within_it() {
    // Room for 2; 1, 2 and 3 resident; the kernel uses 3, the forecast 1 at 11.
    let p = run(10, &[use_(3, 10)], &[use_(1, 11)], &[1, 2, 3], 2);
    assert_eq!(p.evict, vec![(unit(2), Reason::FarthestNextUse(None))], "{p:?}");
    assert!(p.prefetch.is_empty());
    // Within the budget with everything there: nothing to do.
    assert_eq!(run(10, &[use_(3, 10)], &[use_(1, 11)], &[1, 3], 2), Plan::default());
}

#[test]
fn dead_and_unpredicted_data_goes_first() {
    // Room for 3. 1 is certainly overwritten at 12 (dead until then), 2 is never predicted, 4
    // is needed at 11. Kernel 10 needs 3: the dead unit goes, for free. Then 1's rewrite at 12
    // needs room: the unpredicted 2 goes, and 4, needed sooner, stays.
    let dead = UnitUse { overwrite: true, writes: true, certain: true, ..use_(1, 12) };
    let p = run(10, &[use_(3, 10)], &[dead, use_(4, 11)], &[1, 2, 4], 3);
    assert_eq!(p.discard, vec![(unit(1), Reason::Dead)]);
    assert_eq!(p.evict, vec![(unit(2), Reason::FarthestNextUse(None))]);
    let fetched: Vec<_> = p.prefetch.iter().map(|(u, ow, _)| (u.region.0, *ow)).collect();
    assert_eq!(fetched, vec![(3, false), (1, true)], "1 is only populated: its old data is dead");
}

#[test]
fn a_kernel_that_reads_what_it_overwrites_needs_the_data() {
    // As above, but kernel 12 also reads 1: its data is live, in whichever order the two
    // accesses come, so it is moved out rather than dropped.
    let dead = UnitUse { overwrite: true, writes: true, certain: true, ..use_(1, 12) };
    for predicted in [[dead, use_(1, 12), use_(4, 11)], [use_(1, 12), dead, use_(4, 11)]] {
        let p = run(10, &[use_(3, 10)], &predicted, &[1, 2, 4], 3);
        assert!(p.discard.is_empty(), "{p:?}");
        assert!(p.evict.iter().all(|(u, _)| *u != unit(4)), "the soonest needed stays: {p:?}");
    }
}

#[test]
fn unpredicted_data_is_evicted_early_only_within_the_reach() {
    // As above with a reach of 1 kernel: 1's rewrite at 12 is 2 kernels ahead, so the
    // unpredicted 2 is not evicted for it yet (it is needed beyond the forecast, if at all,
    // and the reach is the margin it keeps); with a reach of 2 it is.
    let dead = UnitUse { overwrite: true, writes: true, certain: true, ..use_(1, 12) };
    let predicted = [dead, use_(4, 11), use_(4, 14)];
    let p = run_reaching(10, &[use_(3, 10)], &predicted, &[1, 2, 4], 3, 1);
    assert_eq!(p.discard, vec![(unit(1), Reason::Dead)]);
    assert!(p.evict.is_empty(), "{p:?}");
    let fetched: Vec<_> = p.prefetch.iter().map(|(u, _, _)| u.region.0).collect();
    assert_eq!(fetched, vec![3]);
    let p = run_reaching(10, &[use_(3, 10)], &predicted, &[1, 2, 4], 3, 2);
    assert_eq!(p.evict, vec![(unit(2), Reason::FarthestNextUse(None))]);
}

#[test]
fn prefetch_ahead_only_as_belady_allows() {
    // Cyclic: 1, 2, 3, 1, 2, 3 with room for 2. At kernel 0 (using 1), unit 2 fits in free
    // space. Unit 3 (kernel 2) would have to evict 1 (next use 3) or 2 (next use 1): 1's
    // next use is after 2's, but 2 is used in between, so Belady at kernel 2 evicts 2's
    // competitor only if 1's next use is after every in-between unit's: 1 at 3, 2 next at 4.
    // So 3 is not fetched early.
    let predicted = [use_(2, 1), use_(3, 2), use_(1, 3), use_(2, 4), use_(3, 5)];
    let p = run(0, &[use_(1, 0)], &predicted, &[], 2);
    let fetched: Vec<_> = p.prefetch.iter().map(|(u, _, _)| u.region.0).collect();
    assert_eq!(fetched, vec![1, 2], "{p:?}");
    assert!(p.evict.is_empty());
}

#[test]
fn a_predicted_overwrite_never_discards() {
    // Same as above, but the overwrite of 1 is only predicted: 1 is copied back, not
    // dropped, since the prediction may be wrong.
    let guess = UnitUse { overwrite: true, writes: true, ..use_(1, 12) };
    let p = run(10, &[use_(3, 10)], &[guess, use_(4, 11)], &[1, 2, 4], 3);
    assert!(p.discard.is_empty(), "{p:?}");
    assert!(p.evict.iter().all(|(u, _)| *u != unit(4)), "the soonest needed stays: {p:?}");
}

#[test]
fn a_predicted_overwrite_is_migrated_not_populated() {
    let guess = UnitUse { overwrite: true, writes: true, ..use_(7, 3) };
    let p = run(0, &[], &[guess], &[], 4);
    assert_eq!(p.prefetch, vec![(unit(7), false, Reason::Predicted { at: 3, confidence: 0.9 })]);
}

#[test]
fn without_predictions_the_least_recently_used_goes() {
    let resident: Residency =
        [(unit(1), (MB2, 5)), (unit(2), (MB2, 3)), (unit(3), (MB2, 9))].into_iter().collect();
    let p = plan(&PlanInput {
        now: 10,
        current: &[use_(4, 10)],
        predicted: &[],
        resident: &resident,
        reserve: &[],
        unit_bytes: &|_| MB2,
        budget: 3 * MB2,
        min_prefetch_bytes: 1,
        early_reach: u64::MAX,
        read_mostly: &FxHashSet::default(),
        remote: &FxHashSet::default(),
        evicted_before_reuse: &|_| false,
        written_last_step: &|_| false,
        placements: Placements::default(),
        kept: &FxHashSet::default(),
    });
    assert_eq!(p.evict, vec![(unit(2), Reason::FarthestNextUse(None))]);
}

#[test]
fn room_is_kept_for_regions_not_allocated_yet() {
    // Room for 3 units, none used. Unit 7 is predicted at kernel 5, but a region that does
    // not exist yet is predicted to need 3 units at kernel 2: prefetching 7 now would only
    // force an eviction at kernel 2, so it waits.
    let resident = Residency::new();
    let p = plan(&PlanInput {
        now: 0,
        current: &[],
        predicted: &[use_(7, 5)],
        resident: &resident,
        reserve: &[(2, 3 * MB2)],
        unit_bytes: &|_| MB2,
        budget: 3 * MB2,
        min_prefetch_bytes: 1,
        early_reach: u64::MAX,
        read_mostly: &FxHashSet::default(),
        remote: &FxHashSet::default(),
        evicted_before_reuse: &|_| false,
        written_last_step: &|_| false,
        placements: Placements::default(),
        kept: &FxHashSet::default(),
    });
    assert!(p.prefetch.is_empty(), "{p:?}");
}

#[test]
fn reasons_carry_the_prediction() {
    let p = run(0, &[], &[use_(7, 3)], &[], 4);
    assert_eq!(p.prefetch, vec![(unit(7), false, Reason::Predicted { at: 3, confidence: 0.9 })]);
}

fn placed(
    current: &[UnitUse],
    predicted: &[UnitUse],
    resident: &[u64],
    read_mostly: &[u64],
    evicted_before_reuse: &[u64],
) -> Plan {
    let resident: Residency = resident.iter().enumerate().map(|(i, &r)| (unit(r), (MB2, i as u64))).collect();
    let set = |v: &[u64]| v.iter().map(|&r| unit(r)).collect::<FxHashSet<_>>();
    let evicted = set(evicted_before_reuse);
    plan(&PlanInput {
        now: 10,
        current,
        predicted,
        resident: &resident,
        reserve: &[],
        unit_bytes: &|_| MB2,
        budget: 2 * MB2,
        min_prefetch_bytes: 1,
        early_reach: u64::MAX,
        read_mostly: &set(read_mostly),
        remote: &FxHashSet::default(),
        evicted_before_reuse: &|u| evicted.contains(&u),
        written_last_step: &|_| false,
        placements: Placements::default(),
        kept: &FxHashSet::default(),
    })
}

fn write(r: u64, at: u64, overwrite: bool, certain: bool) -> UnitUse {
    UnitUse { overwrite, writes: true, certain, confidence: 1.0, ..use_(r, at) }
}

#[test]
fn read_only_data_comes_in_as_duplicates_and_others_do_not() {
    // 1 is only read (now and at 11); 2 is read now but predicted to be written at 12; 3 is
    // only read but was never evicted: migrating it costs less.
    let current = [use_(1, 10), use_(2, 10), use_(3, 10)];
    let p = placed(&current, &[use_(1, 11), write(2, 12, false, false)], &[], &[], &[1, 2]);
    assert_eq!(p.duplicate, vec![(unit(1), Reason::ReadOnly)], "{p:?}");
}

#[test]
fn duplicates_collapse_before_a_write() {
    let p = placed(&[write(1, 10, false, true)], &[], &[1], &[1], &[]);
    assert_eq!(p.collapse, vec![(unit(1), Reason::WrittenNow)]);
    assert!(p.duplicate.is_empty());
}

#[test]
fn overwrites_evicted_before_reuse_last_time_are_written_remotely() {
    let p = placed(&[write(5, 10, true, true)], &[], &[1, 2], &[], &[5]);
    assert_eq!(p.remote, vec![(unit(5), Reason::EvictedBeforeReuse)]);
    assert!(p.evict.is_empty() && p.prefetch.is_empty(), "it needs no room: {p:?}");
    // Pool memory already on the device is written there (a discard would cost more).
    let p = placed(&[write(5, 10, true, true)], &[], &[5], &[], &[5]);
    assert!(p.remote.is_empty(), "{p:?}");
    // Only a declared overwrite qualifies: remote data that is read first would be read
    // over the link, and a partial write keeps old data that must stay valid.
    let p = placed(&[write(5, 10, false, true)], &[], &[1, 2], &[], &[5]);
    assert!(p.remote.is_empty());
    // Data that was not evicted before reuse is written on the device.
    let p = placed(&[write(5, 10, true, true)], &[], &[1, 2], &[], &[]);
    assert!(p.remote.is_empty());
}
