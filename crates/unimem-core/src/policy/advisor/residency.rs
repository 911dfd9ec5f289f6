//! What the advisor believes is on the device: each 2 MiB unit with its bytes and the kernel
//! that last used it, their total, and the same units ordered by last use. The order is what
//! lets the planner pick its least recently used victims without walking (or copying) every
//! resident unit for every kernel: at a 50% budget that is over a thousand units, and the
//! planner runs on the host path that issues the kernels.
//!
//! The order is a log of (last use, unit) in the order uses are recorded. The advisor records
//! them kernel by kernel, so the log is sorted by last use as it grows; an entry whose unit
//! has been used again (or evicted) since is stale, skipped when read and dropped when the
//! log is compacted. A tree kept in order instead cost more than it saved: every kernel
//! records the use of all its units.
//!
//! Units too small to move (under the planner's `min_prefetch_bytes`, left to faults) are
//! never its victims, so they are logged apart: the planner reads the movable units' log
//! alone, and a program of many small regions does not make it walk all of them for every
//! kernel that needs room.

use rustc_hash::FxHashMap;

use super::plan::Unit;

/// The residency account. See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct Residency {
    units: FxHashMap<Unit, (u64, u64)>,
    /// (last use, unit) of the units of at least `movable_from` bytes, sorted by last use;
    /// stale entries included.
    log: Vec<(u64, Unit)>,
    /// The same for the smaller units.
    small: Vec<(u64, Unit)>,
    movable_from: u64,
    bytes: u64,
}

impl Residency {
    /// An empty account.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty account that logs units under `bytes` apart from the rest
    /// ([`Self::movable_by_age`]).
    pub fn with_movable_from(bytes: u64) -> Self {
        Self { movable_from: bytes, ..Self::default() }
    }

    /// Units under this many bytes are not in [`Self::movable_by_age`].
    pub fn movable_from(&self) -> u64 {
        self.movable_from
    }

    /// Whether a unit of `bytes` is logged with the movable units.
    fn movable(&self, bytes: u64) -> bool {
        bytes >= self.movable_from
    }

    /// Bytes of every unit.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Units held.
    pub fn len(&self) -> usize {
        self.units.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// Whether `u` is on the device.
    pub fn contains_key(&self, u: &Unit) -> bool {
        self.units.contains_key(u)
    }

    /// `u`'s (bytes, kernel of last use).
    pub fn get(&self, u: &Unit) -> Option<(u64, u64)> {
        self.units.get(u).copied()
    }

    /// Records `u` with (bytes, kernel of last use) in the units and their total; returns the
    /// log its new entry belongs in, or `None` where its entry stands (same last use).
    fn account(&mut self, u: Unit, v: (u64, u64)) -> Option<&mut Vec<(u64, Unit)>> {
        let old = self.units.insert(u, v);
        if let Some(old) = old {
            self.bytes -= old.0;
        }
        self.bytes += v.0;
        // A unit's bytes are its region's share of one block: they never change, so its entries
        // stay in one log.
        debug_assert!(old.is_none_or(|o| self.movable(o.0) == self.movable(v.0)), "{u:?} changed size class");
        if old.is_some_and(|o| o.1 == v.1) {
            return None;
        }
        Some(if self.movable(v.0) { &mut self.log } else { &mut self.small })
    }

    /// Adds `u` with (bytes, kernel of last use), or updates it.
    pub fn insert(&mut self, u: Unit, v: (u64, u64)) {
        let Some(log) = self.account(u, v) else { return };
        let sorted = log.last().is_none_or(|&(last, _)| last <= v.1);
        if sorted {
            // Sorted by unit within the newest age too, so that `by_age` reads each age in
            // order without sorting a copy; an older age's entries are all smaller, so the
            // walk back stops at the newest age's start.
            let entry = (v.1, u);
            let mut at = log.len();
            while at > 0 && log[at - 1] > entry {
                at -= 1;
            }
            log.insert(at, entry);
        } else {
            log.push((v.1, u));
            // Only callers that record an older use than the last land here (tests): order
            // the log again.
            log.sort_unstable();
        }
        self.compact_if_due();
    }

    /// [`Self::insert`] of each of `items` in turn, with the same result, but each new entry
    /// is appended and the log's tail from the oldest of them sorted once: a kernel records
    /// the use of all its units, hundreds on ResNet-50, and inserting each in its place walked
    /// and shifted the newest age's entries for every one.
    pub fn insert_all(&mut self, items: impl IntoIterator<Item = (Unit, (u64, u64))>) {
        let from = [self.log.len(), self.small.len()];
        for (u, v) in items {
            if let Some(log) = self.account(u, v) {
                log.push((v.1, u));
            }
        }
        for (log, from) in [&mut self.log, &mut self.small].into_iter().zip(from) {
            // The log before `from` is sorted: the new entries join it from the first entry
            // as old as the oldest of them.
            let Some(oldest) = log[from..].iter().map(|e| e.0).min() else { continue };
            let start = log[..from].partition_point(|e| e.0 < oldest);
            log[start..].sort_unstable();
        }
        self.compact_if_due();
    }

    /// Adds `u` unless it is there.
    pub fn insert_if_absent(&mut self, u: Unit, v: (u64, u64)) {
        if !self.units.contains_key(&u) {
            self.insert(u, v);
        }
    }

    /// Removes `u`; returns its (bytes, kernel of last use).
    pub fn remove(&mut self, u: &Unit) -> Option<(u64, u64)> {
        let v = self.units.remove(u)?;
        self.bytes -= v.0;
        Some(v)
    }

    /// The units, in no particular order.
    pub fn units(&self) -> impl Iterator<Item = Unit> + '_ {
        self.units.keys().copied()
    }

    /// Whether a log entry is the unit's current one.
    fn live(&self, &(last, u): &(u64, Unit)) -> bool {
        self.units.get(&u).is_some_and(|v| v.1 == last)
    }

    /// [`Self::compact`] once stale entries outnumber the units.
    fn compact_if_due(&mut self) {
        if self.log.len() + self.small.len() > 2 * self.units.len() + 64 {
            self.compact();
        }
    }

    /// Drops stale and repeated entries (a unit removed and recorded again in the same kernel
    /// has two: sorting brings them together, and keeps the order by last use).
    fn compact(&mut self) {
        let (mut log, mut small) = (std::mem::take(&mut self.log), std::mem::take(&mut self.small));
        for log in [&mut log, &mut small] {
            log.retain(|e| self.live(e));
            log.sort_unstable();
            log.dedup();
        }
        (self.log, self.small) = (log, small);
    }

    /// The units with their kernel of last use, least recently used first, and among equals
    /// the larger unit first (the planner's tie-break).
    pub fn by_age(&self) -> impl Iterator<Item = (Unit, u64)> + '_ {
        let mut movable = self.ages(&self.log).peekable();
        let mut small = self.ages(&self.small).peekable();
        // Merged in the same order: older first, and among equals the larger unit.
        std::iter::from_fn(move || match (movable.peek(), small.peek()) {
            (Some(&(m, ml)), Some(&(s, sl))) if ml < sl || (ml == sl && m > s) => movable.next(),
            (Some(_), Some(_)) | (None, _) => small.next(),
            (Some(_), None) => movable.next(),
        })
    }

    /// [`Self::by_age`] of the units of at least [`Self::movable_from`] bytes.
    pub fn movable_by_age(&self) -> impl Iterator<Item = (Unit, u64)> + '_ {
        self.ages(&self.log)
    }

    /// A log's live units by age. The log is sorted by (last use, unit), so each age is read
    /// backwards, skipping stale and repeated entries, without copying.
    fn ages<'a>(&'a self, log: &'a [(u64, Unit)]) -> impl Iterator<Item = (Unit, u64)> + 'a {
        log.chunk_by(|a, b| a.0 == b.0).flat_map(move |same_age| {
            let before = std::iter::once(None).chain(same_age.iter().rev().map(Some));
            same_age
                .iter()
                .rev()
                .zip(before)
                .filter(move |&(e, prev)| prev != Some(e) && self.live(e))
                .map(|(&(last, u), _)| (u, last))
        })
    }
}

impl FromIterator<(Unit, (u64, u64))> for Residency {
    fn from_iter<I: IntoIterator<Item = (Unit, (u64, u64))>>(iter: I) -> Self {
        let mut r = Self::new();
        for (u, v) in iter {
            r.insert(u, v);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::RegionId;

    #[test]
    fn totals_and_age_order_follow_every_change() {
        let u = |r: u64, b: u32| Unit { region: RegionId(r), block: b };
        let mut r: Residency =
            [(u(1, 0), (10, 5)), (u(2, 0), (20, 3)), (u(3, 0), (30, 5))].into_iter().collect();
        assert_eq!(r.bytes(), 60);
        // Oldest first; equal ages: the larger unit first.
        let order: Vec<Unit> = r.by_age().map(|(u, _)| u).collect();
        assert_eq!(order, vec![u(2, 0), u(3, 0), u(1, 0)]);
        // A use moves a unit to the back; an update replaces its bytes.
        r.insert(u(2, 0), (25, 9));
        assert_eq!(r.bytes(), 65);
        assert_eq!(r.by_age().map(|(u, _)| u).collect::<Vec<_>>(), vec![u(3, 0), u(1, 0), u(2, 0)]);
        r.insert_if_absent(u(2, 0), (1, 0));
        assert_eq!(r.get(&u(2, 0)), Some((25, 9)));
        assert_eq!(r.remove(&u(3, 0)), Some((30, 5)));
        assert_eq!(r.remove(&u(3, 0)), None);
        assert_eq!((r.bytes(), r.len()), (35, 2));
        assert_eq!(r.by_age().count(), 2);
        // Removed and recorded again in the same kernel: listed once.
        r.remove(&u(2, 0));
        r.insert(u(2, 0), (25, 9));
        assert_eq!(r.by_age().map(|(u, _)| u).collect::<Vec<_>>(), vec![u(1, 0), u(2, 0)]);
        // Many uses later the log is compacted and the order holds.
        for k in 10..200 {
            r.insert(u(1, 0), (10, k));
        }
        assert!(r.log.len() <= 2 * r.len() + 64);
        assert_eq!(r.by_age().collect::<Vec<_>>(), vec![(u(2, 0), 9), (u(1, 0), 199)]);
        // Compacted, one entry per unit is left, even for one recorded twice in a kernel.
        r.remove(&u(1, 0));
        r.insert(u(3, 0), (30, 199));
        r.insert(u(1, 0), (10, 199));
        r.compact();
        assert_eq!(r.log, vec![(9, u(2, 0)), (199, u(1, 0)), (199, u(3, 0))]);
    }

    proptest::proptest! {
        /// Recording a kernel's units at once leaves the account as recording them one by one.
        #[test]
        fn insert_all_is_insert_of_each(
            kernels in proptest::collection::vec(
                proptest::collection::vec((0u64..6, 0u32..4, proptest::bool::ANY, 0u64..3), 0..12),
                1..30,
            ),
        ) {
            let u = |r: u64, b: u32| Unit { region: RegionId(r), block: b };
            let (mut one, mut all) = (Residency::with_movable_from(16), Residency::with_movable_from(16));
            for (k, uses) in kernels.iter().enumerate() {
                // A unit's size class is fixed by its region; some uses are an older age
                // (`back`), some units leave first.
                let items: Vec<(Unit, (u64, u64))> = uses
                    .iter()
                    .map(|&(r, b, _, back)| (u(r, b), (if r % 2 == 0 { 8 } else { 32 }, (k as u64 + 3).saturating_sub(back))))
                    .collect();
                for &(r, b, leave, _) in uses {
                    if leave {
                        one.remove(&u(r, b));
                        all.remove(&u(r, b));
                    }
                }
                for &(unit, v) in &items {
                    one.insert(unit, v);
                }
                all.insert_all(items);
                proptest::prop_assert_eq!(one.bytes(), all.bytes());
                proptest::prop_assert_eq!(one.by_age().collect::<Vec<_>>(), all.by_age().collect::<Vec<_>>());
                proptest::prop_assert_eq!(
                    one.movable_by_age().collect::<Vec<_>>(),
                    all.movable_by_age().collect::<Vec<_>>()
                );
            }
        }
    }

    #[test]
    fn small_units_are_logged_apart_and_merged_back_in_age_order() {
        let u = |r: u64, b: u32| Unit { region: RegionId(r), block: b };
        let mut r = Residency::with_movable_from(16);
        for (unit, bytes, last) in
            [(u(1, 0), 8, 1), (u(2, 0), 32, 1), (u(3, 0), 8, 2), (u(4, 0), 32, 3), (u(5, 0), 4, 3)]
        {
            r.insert(unit, (bytes, last));
        }
        let all: Vec<(Unit, u64)> = r.by_age().collect();
        assert_eq!(all, vec![(u(2, 0), 1), (u(1, 0), 1), (u(3, 0), 2), (u(5, 0), 3), (u(4, 0), 3)]);
        let movable: Vec<Unit> = r.movable_by_age().map(|(u, _)| u).collect();
        assert_eq!(movable, vec![u(2, 0), u(4, 0)]);
        // The merged order is the one an account without the split gives.
        let plain: Residency =
            all.iter().map(|&(unit, last)| (unit, (r.get(&unit).unwrap().0, last))).collect();
        assert_eq!(plain.by_age().collect::<Vec<_>>(), all);
        // Stale entries of both logs are skipped and compacted away.
        for k in 4..200 {
            r.insert(u(1, 0), (8, k));
            r.insert(u(2, 0), (32, k));
        }
        assert!(r.log.len() + r.small.len() <= 2 * r.len() + 64);
        assert_eq!(r.by_age().count(), 5);
        assert_eq!(r.movable_by_age().map(|(u, _)| u).collect::<Vec<_>>(), vec![u(4, 0), u(2, 0)]);
    }
}
