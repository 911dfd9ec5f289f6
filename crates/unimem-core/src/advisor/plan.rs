//! The planner: a pure function from what is known (the next kernel's accesses, predicted
//! future accesses, what is resident, the budget) to hints, each with the reason it was
//! chosen. It works on 2 MiB units of regions and applies Belady's rule to predicted next
//! uses: evict what is needed farthest in the future (dead data first, which costs nothing),
//! and prefetch a predicted unit early only where Belady would have made the same room by
//! then (room is reserved for what the kernels in between bring in, and a victim must be
//! needed after everything used in between).
//!
//! This first planner moves data (prefetch, evict, discard); read-mostly duplicates and remote
//! mapping are the next placements to add.

use std::collections::BinaryHeap;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::region::RegionId;

/// A 2 MiB block of a region.
pub type Unit = (RegionId, u32);

/// One (current or predicted) use of a unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnitUse {
    /// The unit.
    pub unit: Unit,
    /// The kernel it is used in.
    pub at: u64,
    /// The use writes the whole unit without reading it (its data before is dead).
    pub overwrite: bool,
    /// How sure the prediction is (1.0 for the kernel about to run).
    pub confidence: f32,
    /// Declared rather than predicted (the kernel about to run, or a trace's known future).
    /// Only a certain overwrite makes data dead enough to discard: discarding on a wrong
    /// prediction would destroy live data.
    pub certain: bool,
}

/// Why a hint was chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
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
}

/// What the planner needs to know.
pub struct PlanInput<'a> {
    /// Index of the kernel about to run.
    pub now: u64,
    /// Its units (must be on the device when it runs).
    pub current: &'a [UnitUse],
    /// Predicted uses of later kernels, in any order.
    pub predicted: &'a [UnitUse],
    /// Units on the device now: (bytes, kernel of last use). Among units with the same
    /// prediction (often none), the least recently used is evicted first.
    pub resident: &'a FxHashMap<Unit, (u64, u64)>,
    /// Device bytes that regions not allocated yet are predicted to need, by the kernel
    /// (`at`, bytes): an early prefetch must leave room for them as for any use in between.
    pub reserve: &'a [(u64, u64)],
    /// Bytes of a unit (page-rounded).
    pub unit_bytes: &'a dyn Fn(Unit) -> u64,
    /// Device bytes the working set may use.
    pub budget: u64,
    /// Units smaller than this are left to faults (a prefetch call costs more).
    pub min_prefetch_bytes: u64,
}

const NEVER: u64 = u64::MAX;

/// Eviction priority: larger goes first. Dead data first, then units never predicted, then
/// the farthest predicted use; ties go to the least recently used.
fn priority(next: Option<&(u64, bool)>, last_use: u64) -> (u8, u64, u64) {
    let age = u64::MAX - last_use;
    match next {
        Some(&(at, true)) => (2, at, age),
        None => (1, NEVER, age),
        Some(&(at, false)) => (0, at, age),
    }
}

/// Plans hints for the kernel about to run. See the module documentation.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let mut out = Plan::default();
    // Future uses per unit, soonest first.
    let mut future: FxHashMap<Unit, Vec<(u64, bool)>> = FxHashMap::default();
    let mut by_kernel: Vec<UnitUse> = input.predicted.iter().copied().filter(|u| u.at > input.now).collect();
    by_kernel.sort_by(|a, b| a.at.cmp(&b.at).then(a.unit.cmp(&b.unit)));
    for u in &by_kernel {
        // A predicted overwrite does not prove the data dead: count it as a plain use.
        future.entry(u.unit).or_default().push((u.at, u.overwrite && u.certain));
    }
    let next_after = |unit: Unit, j: u64| -> u64 {
        match future.get(&unit).and_then(|v| v.iter().find(|(at, _)| *at > j)) {
            Some(&(at, false)) => at,
            _ => NEVER, // not predicted again, or overwritten first: dead until then
        }
    };

    let mut resident: FxHashMap<Unit, (u64, u64)> = input.resident.clone();
    let mut used: u64 = resident.values().map(|v| v.0).sum();
    let protect: FxHashSet<Unit> = input.current.iter().map(|u| u.unit).collect();

    // Victims by priority. Priorities do not change during one plan, so the heap is built
    // once; guarded units popped on the way are pushed back.
    let mut victims: BinaryHeap<((u8, u64, u64), Unit)> = resident
        .iter()
        .map(|(&u, &(_, last))| (priority(future.get(&u).and_then(|v| v.first()), last), u))
        .collect();

    // Evicts the highest-priority unit outside `guard`; with `early = (j, rival)`, only one
    // Belady would evict by kernel j anyway. Returns false when none qualifies.
    let evict_one = |resident: &mut FxHashMap<Unit, (u64, u64)>,
                     victims: &mut BinaryHeap<((u8, u64, u64), Unit)>,
                     used: &mut u64,
                     out: &mut Plan,
                     guard: &FxHashSet<Unit>,
                     early: Option<(u64, u64)>|
     -> bool {
        let mut skipped = Vec::new();
        let victim = loop {
            match victims.pop() {
                None => break None,
                Some(v) if !resident.contains_key(&v.1) => continue, // evicted already
                Some(v) if guard.contains(&v.1) => skipped.push(v),
                Some(v) => break Some(v),
            }
        };
        victims.extend(skipped);
        let Some((p @ (class, next, _), unit)) = victim else { return false };
        if class != 1 && early.is_some_and(|(j, rival)| next <= j || next <= rival) {
            victims.push((p, unit));
            return false;
        }
        *used -= resident.remove(&unit).map_or(0, |v| v.0);
        if class == 2 {
            out.discard.push((unit, Reason::Dead));
        } else {
            out.evict.push((unit, Reason::FarthestNextUse((next != NEVER).then_some(next))));
        }
        true
    };

    // The kernel about to run: its units must fit, whatever it evicts.
    let mut planned: FxHashSet<Unit> = FxHashSet::default();
    for u in input.current {
        if resident.contains_key(&u.unit) || !planned.insert(u.unit) {
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

    // Predicted units, soonest first, as early as Belady allows.
    let mut between: FxHashSet<Unit> = FxHashSet::default();
    let mut pending = 0u64;
    let mut reserve: Vec<(u64, u64)> = input.reserve.iter().copied().filter(|r| r.0 > input.now).collect();
    reserve.sort_unstable();
    let mut reserved = 0;
    let mut i = 0;
    while i < by_kernel.len() {
        let j = by_kernel[i].at;
        // Regions created up to kernel j need their room by then too.
        while reserved < reserve.len() && reserve[reserved].0 <= j {
            pending += reserve[reserved].1;
            reserved += 1;
        }
        let end = by_kernel[i..].iter().position(|u| u.at != j).map_or(by_kernel.len(), |n| i + n);
        let kernel = &by_kernel[i..end];
        let mut guard = protect.clone();
        guard.extend(kernel.iter().map(|u| u.unit));
        let rival = between.iter().map(|&u| next_after(u, j)).filter(|&n| n != NEVER).max().unwrap_or(0);
        let rival = if between.iter().any(|&u| next_after(u, j) == NEVER) { NEVER } else { rival };
        for u in kernel {
            let bytes = (input.unit_bytes)(u.unit);
            if resident.contains_key(&u.unit) || planned.contains(&u.unit) || bytes < input.min_prefetch_bytes
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
                return out;
            }
            planned.insert(u.unit);
            resident.insert(u.unit, (bytes, input.now));
            used += bytes;
            out.prefetch.push((u.unit, u.overwrite, Reason::Predicted { at: j, confidence: u.confidence }));
        }
        for u in kernel {
            if between.insert(u.unit) && !resident.contains_key(&u.unit) {
                pending += (input.unit_bytes)(u.unit);
            }
        }
        i = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB2: u64 = 2 << 20;

    fn unit(r: u64) -> Unit {
        (RegionId(r), 0)
    }

    fn use_(r: u64, at: u64) -> UnitUse {
        UnitUse { unit: unit(r), at, overwrite: false, confidence: 0.9, certain: false }
    }

    fn run(
        now: u64,
        current: &[UnitUse],
        predicted: &[UnitUse],
        resident: &[u64],
        budget_units: u64,
    ) -> Plan {
        let resident: FxHashMap<Unit, (u64, u64)> = resident.iter().map(|&r| (unit(r), (MB2, 0))).collect();
        plan(&PlanInput {
            now,
            current,
            predicted,
            resident: &resident,
            reserve: &[],
            unit_bytes: &|_| MB2,
            budget: budget_units * MB2,
            min_prefetch_bytes: 1,
        })
    }

    #[test]
    fn current_kernel_data_is_fetched_evicting_the_farthest_use() {
        // Room for 2 units; 1 and 2 resident; kernel 10 needs 3. 1 is predicted at 11, 2 at 20.
        let p = run(10, &[use_(3, 10)], &[use_(1, 11), use_(2, 20)], &[1, 2], 2);
        assert_eq!(p.evict, vec![(unit(2), Reason::FarthestNextUse(Some(20)))]);
        assert_eq!(p.prefetch[0], (unit(3), false, Reason::NeededNow));
    }

    #[test]
    fn dead_and_unpredicted_data_goes_first() {
        // Room for 3. 1 is certainly overwritten at 12 (dead until then), 2 is never predicted, 4
        // is needed at 11. Kernel 10 needs 3: the dead unit goes, for free. Then 1's rewrite at 12
        // needs room: the unpredicted 2 goes, and 4, needed sooner, stays.
        let dead = UnitUse { overwrite: true, certain: true, ..use_(1, 12) };
        let p = run(10, &[use_(3, 10)], &[dead, use_(4, 11)], &[1, 2, 4], 3);
        assert_eq!(p.discard, vec![(unit(1), Reason::Dead)]);
        assert_eq!(p.evict, vec![(unit(2), Reason::FarthestNextUse(None))]);
        let fetched: Vec<_> = p.prefetch.iter().map(|(u, ow, _)| (u.0 .0, *ow)).collect();
        assert_eq!(fetched, vec![(3, false), (1, true)], "1 is only populated: its old data is dead");
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
        let fetched: Vec<_> = p.prefetch.iter().map(|(u, _, _)| u.0 .0).collect();
        assert_eq!(fetched, vec![1, 2], "{p:?}");
        assert!(p.evict.is_empty());
    }

    #[test]
    fn a_predicted_overwrite_never_discards() {
        // Same as above, but the overwrite of 1 is only predicted: 1 is copied back, not
        // dropped, since the prediction may be wrong.
        let guess = UnitUse { overwrite: true, ..use_(1, 12) };
        let p = run(10, &[use_(3, 10)], &[guess, use_(4, 11)], &[1, 2, 4], 3);
        assert!(p.discard.is_empty(), "{p:?}");
        assert!(p.evict.iter().all(|(u, _)| *u != unit(4)), "the soonest needed stays: {p:?}");
    }

    #[test]
    fn without_predictions_the_least_recently_used_goes() {
        let resident: FxHashMap<Unit, (u64, u64)> =
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
        });
        assert_eq!(p.evict, vec![(unit(2), Reason::FarthestNextUse(None))]);
    }

    #[test]
    fn room_is_kept_for_regions_not_allocated_yet() {
        // Room for 3 units, none used. Unit 7 is predicted at kernel 5, but a region that does
        // not exist yet is predicted to need 3 units at kernel 2: prefetching 7 now would only
        // force an eviction at kernel 2, so it waits.
        let resident = FxHashMap::default();
        let p = plan(&PlanInput {
            now: 0,
            current: &[],
            predicted: &[use_(7, 5)],
            resident: &resident,
            reserve: &[(2, 3 * MB2)],
            unit_bytes: &|_| MB2,
            budget: 3 * MB2,
            min_prefetch_bytes: 1,
        });
        assert!(p.prefetch.is_empty(), "{p:?}");
    }

    #[test]
    fn reasons_carry_the_prediction() {
        let p = run(0, &[], &[use_(7, 3)], &[], 4);
        assert_eq!(p.prefetch, vec![(unit(7), false, Reason::Predicted { at: 3, confidence: 0.9 })]);
    }
}
