//! One plan's working state: the residency as the plan leaves it, an overlay (`added`,
//! `removed`) on the input's, with the bytes it holds, the hints chosen so far and the
//! eviction candidates.

use std::collections::BinaryHeap;

use rustc_hash::{FxHashMap, FxHashSet};

use super::{
    priority, record_eviction, too_small_to_move, too_soon, uses_of, Plan, PlanInput, Priority, Unit, Victims,
};

/// One kernel's use of a unit in a plan's forecast, as victims are ranked by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FutureUse {
    pub(super) unit: Unit,
    /// The kernel.
    pub(super) at: u64,
    /// Every access of the kernel to the unit is a certain overwrite: its data is dead before.
    pub(super) dead: bool,
}

/// The future uses a plan ranks victims by: grouped by unit, soonest first, one per kernel,
/// and where each unit's uses sit in that list (start, count).
#[derive(Clone, Copy)]
pub(super) struct Future<'p> {
    pub(super) uses: &'p [FutureUse],
    pub(super) index: &'p FxHashMap<Unit, (u32, u32)>,
}

impl<'p> Future<'p> {
    pub(super) fn of(&self, unit: Unit) -> &'p [FutureUse] {
        uses_of(self.index, self.uses, unit)
    }

    pub(super) fn contains(&self, unit: &Unit) -> bool {
        self.index.contains_key(unit)
    }
}

pub(super) struct Pass<'p, 'a, I: Iterator<Item = (Unit, u64)>> {
    pub(super) input: &'p PlanInput<'a>,
    future: Future<'p>,
    /// Units this plan brings to the device (bytes, kernel), and resident units it evicts.
    added: &'p mut FxHashMap<Unit, (u64, u64)>,
    removed: &'p mut FxHashSet<Unit>,
    /// Device bytes the residency holds as the plan leaves it.
    pub(super) used: u64,
    pub(super) out: Plan,
    victims: Victims<I>,
    /// Whether the predicted victims are in the heap yet: priorities do not change during one
    /// plan, so the heap is built once, at the first eviction (many kernels need none).
    built: bool,
    /// Guarded victims popped on the way, pushed back after.
    skipped: Vec<(Priority, Unit)>,
    /// Units of the kernel about to run: never evicted.
    protect: &'p FxHashSet<Unit>,
}

impl<'p, 'a, I: Iterator<Item = (Unit, u64)>> Pass<'p, 'a, I> {
    pub(super) fn new(
        input: &'p PlanInput<'a>,
        future: Future<'p>,
        added: &'p mut FxHashMap<Unit, (u64, u64)>,
        removed: &'p mut FxHashSet<Unit>,
        heap: BinaryHeap<(Priority, Unit)>,
        unpredicted: I,
        protect: &'p FxHashSet<Unit>,
    ) -> Self {
        added.clear();
        removed.clear();
        Pass {
            used: input.resident.bytes(),
            input,
            future,
            added,
            removed,
            out: Plan::default(),
            victims: Victims { heap, unpredicted: unpredicted.peekable() },
            built: false,
            skipped: Vec::new(),
            protect,
        }
    }

    pub(super) fn is_resident(&self, u: &Unit) -> bool {
        self.added.contains_key(u) || (self.input.resident.contains_key(u) && !self.removed.contains(u))
    }

    /// Brings `unit` in (the caller made the room).
    pub(super) fn bring(&mut self, unit: Unit, bytes: u64) {
        self.added.insert(unit, (bytes, self.input.now));
        self.used += bytes;
    }

    /// Evicts until `need` more bytes fit in the budget, the kernel about to run and `guard`
    /// kept; `early` (kernel, rival) when the room is for a predicted kernel ahead of time.
    /// False when no victim is left that may go.
    pub(super) fn make_room(
        &mut self,
        need: u64,
        guard: Option<&FxHashSet<Unit>>,
        early: Option<(u64, u64)>,
    ) -> bool {
        while self.used + need > self.input.budget {
            if !self.evict_one(guard.unwrap_or(self.protect), early) {
                return false;
            }
        }
        true
    }

    fn build_heap(&mut self) {
        let base = self.input.resident;
        for (&u, &(start, _)) in self.future.index {
            if let Some((_, last)) = base.get(&u) {
                let FutureUse { at, dead, .. } = self.future.uses[start as usize];
                self.victims
                    .push((priority(Some(&(at, dead)), last, self.input.kept.contains(&u.region)), u));
            }
        }
        // What the plan brought in before its first eviction ranks with the rest (a unit it
        // fetched for a certain overwrite is dead until then, and first).
        for (&u, &(_, last)) in self.added.iter() {
            let first = self.future.of(u).first().map(|f| (f.at, f.dead));
            self.victims.push((priority(first.as_ref(), last, self.input.kept.contains(&u.region)), u));
        }
        self.built = true;
    }

    fn evict_one(&mut self, guard: &FxHashSet<Unit>, early: Option<(u64, u64)>) -> bool {
        if !self.built {
            self.build_heap();
        }
        self.skipped.clear();
        let victim = loop {
            match self.victims.pop(self.input.kept) {
                None => break None,
                Some(v) if self.removed.contains(&v.1) => continue, // evicted already
                // The kernel about to run is guarded throughout: not pushed back, or every
                // later call would pop it again.
                Some(v) if self.protect.contains(&v.1) => continue,
                Some(v) if guard.contains(&v.1) => self.skipped.push(v),
                Some(v) if too_small_to_move(self.input, &v) => continue,
                Some(v) => break Some(v),
            }
        };
        for v in self.skipped.drain(..) {
            self.victims.push(v);
        }
        let Some((p, unit)) = victim else { return false };
        if early.is_some_and(|early| too_soon(self.input, p, early)) {
            self.victims.push((p, unit));
            return false;
        }
        if let Some((bytes, _)) = self.added.remove(&unit) {
            self.used -= bytes;
        } else if self.removed.insert(unit) {
            self.used -= self.input.resident.get(&unit).map_or(0, |v| v.0);
        }
        record_eviction(self.input, &mut self.out, p, unit);
        true
    }

    /// The plan, and the heap's storage for the next one.
    pub(super) fn finish(self) -> (Plan, Vec<(Priority, Unit)>) {
        let mut heap = self.victims.heap.into_vec();
        heap.clear();
        (self.out, heap)
    }
}
