//! A fixed-size bitset over a region's 4 KiB pages, with the range operations residency needs.
//! Word-at-a-time so a 200 MB range (50k pages) costs ~800 word operations.

/// Pages of a range by where they are ([`PageSet::tally`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageTally {
    /// On the device only.
    pub device: usize,
    /// On the host only.
    pub host: usize,
    /// On both.
    pub both: usize,
    /// On neither (staged pages among them).
    pub neither: usize,
    /// In the staged set.
    pub staged: usize,
}

/// One bit per page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageSet {
    words: Vec<u64>,
}

fn masks(start: usize, end: usize) -> impl Iterator<Item = (usize, u64)> {
    // Yields (word index, mask of bits in start..end) for each word the range touches.
    let first = start / 64;
    let last = if end == 0 { 0 } else { (end - 1) / 64 };
    (first..=last).filter(move |_| start < end).map(move |w| {
        let lo = if w == first { start % 64 } else { 0 };
        let hi = if w == last { (end - 1) % 64 + 1 } else { 64 };
        let mask = if hi - lo == 64 { u64::MAX } else { ((1u64 << (hi - lo)) - 1) << lo };
        (w, mask)
    })
}

impl PageSet {
    /// An empty set over `pages` pages.
    pub fn new(pages: usize) -> Self {
        Self { words: vec![0; pages.div_ceil(64)] }
    }

    /// Is page `p` in the set?
    pub fn contains(&self, p: usize) -> bool {
        self.words[p / 64] >> (p % 64) & 1 == 1
    }

    /// Pages of `start..end` in the set.
    pub fn count(&self, start: usize, end: usize) -> usize {
        // A plain loop: every residency query of the simulator comes here, and the iterator
        // chain's code varied from build to build by a factor of two.
        let mut n = 0;
        for (w, m) in masks(start, end) {
            n += (self.words[w] & m).count_ones() as usize;
        }
        n
    }

    /// Adds `start..end`; returns how many pages were newly added.
    pub fn insert(&mut self, start: usize, end: usize) -> usize {
        masks(start, end)
            .map(|(w, m)| {
                let added = (!self.words[w] & m).count_ones() as usize;
                self.words[w] |= m;
                added
            })
            .sum()
    }

    /// Removes `start..end`; returns how many pages were removed.
    pub fn remove(&mut self, start: usize, end: usize) -> usize {
        masks(start, end)
            .map(|(w, m)| {
                let removed = (self.words[w] & m).count_ones() as usize;
                self.words[w] &= !m;
                removed
            })
            .sum()
    }

    /// Pages of `start..end` in `self` and also in `other`.
    pub fn count_and(&self, other: &PageSet, start: usize, end: usize) -> usize {
        masks(start, end).map(|(w, m)| (self.words[w] & other.words[w] & m).count_ones() as usize).sum()
    }

    /// The pages of `start..end` by where they are, `self` the device's set: in one pass over
    /// the three sets (every residency query of the simulator comes here).
    pub fn tally(&self, host: &PageSet, staged: &PageSet, start: usize, end: usize) -> PageTally {
        let mut t = PageTally::default();
        for (w, m) in masks(start, end) {
            let (d, h) = (self.words[w] & m, host.words[w] & m);
            t.both += (d & h).count_ones() as usize;
            t.device += (d & !h).count_ones() as usize;
            t.host += (h & !d).count_ones() as usize;
            t.staged += (staged.words[w] & m).count_ones() as usize;
            t.neither += (!(d | h) & m).count_ones() as usize;
        }
        t
    }

    /// Pages of `start..end` in neither `self` nor `other`.
    pub fn count_neither(&self, other: &PageSet, start: usize, end: usize) -> usize {
        masks(start, end).map(|(w, m)| (!(self.words[w] | other.words[w]) & m).count_ones() as usize).sum()
    }

    /// Adds the pages of `start..end` that are in `other` (self |= other over the range).
    pub fn union_from(&mut self, other: &PageSet, start: usize, end: usize) {
        for (w, m) in masks(start, end) {
            self.words[w] |= other.words[w] & m;
        }
    }

    /// Removes the pages of `start..end` that are in `other` (self &= !other over the range);
    /// returns how many were removed.
    pub fn remove_in(&mut self, other: &PageSet, start: usize, end: usize) -> usize {
        masks(start, end)
            .map(|(w, m)| {
                let gone = self.words[w] & other.words[w] & m;
                self.words[w] &= !gone;
                gone.count_ones() as usize
            })
            .sum()
    }

    /// Adds the pages of `start..end` that are not in `other` (self |= !other over the range).
    pub fn insert_not_in(&mut self, other: &PageSet, start: usize, end: usize) {
        for (w, m) in masks(start, end) {
            self.words[w] |= !other.words[w] & m;
        }
    }

    /// Adds the pages of `start..end` that are in `a` but not in `b` (self |= a & !b over the
    /// range); returns how many were newly added.
    pub fn insert_only_in(&mut self, a: &PageSet, b: &PageSet, start: usize, end: usize) -> usize {
        masks(start, end)
            .map(|(w, m)| {
                let add = a.words[w] & !b.words[w] & m & !self.words[w];
                self.words[w] |= add;
                add.count_ones() as usize
            })
            .sum()
    }

    /// The runs of consecutive pages of `start..end` in the set, as `(first, end)` pairs.
    pub fn runs(&self, start: usize, end: usize) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        self.for_each(start, end, |p| match out.last_mut() {
            Some(run) if run.1 == p => run.1 = p + 1,
            _ => out.push((p, p + 1)),
        });
        out
    }

    /// Calls `f(p)` for each page of `start..end` that is in `self` but not in `other`.
    pub fn for_each_not_in(&self, other: &PageSet, start: usize, end: usize, mut f: impl FnMut(usize)) {
        for (w, m) in masks(start, end) {
            let mut bits = self.words[w] & !other.words[w] & m;
            while bits != 0 {
                f(w * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        }
    }

    /// Calls `f(p)` for each page of `start..end` in the set, in order.
    pub fn for_each(&self, start: usize, end: usize, mut f: impl FnMut(usize)) {
        for (w, m) in masks(start, end) {
            let mut bits = self.words[w] & m;
            while bits != 0 {
                f(w * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn range_ops_across_words() {
        let mut s = PageSet::new(200);
        assert_eq!(s.insert(60, 130), 70);
        assert_eq!(s.insert(100, 140), 10, "only 130..140 is new");
        assert_eq!(s.count(0, 200), 80);
        assert_eq!(s.remove(64, 128), 64);
        assert_eq!(s.count(0, 200), 16);
        assert!(s.contains(63) && !s.contains(64) && s.contains(128));
        let mut seen = vec![];
        s.for_each(0, 200, |p| seen.push(p));
        assert_eq!(seen, (60..64).chain(128..140).collect::<Vec<_>>());
        assert_eq!(s.count(5, 5), 0, "empty range");
        assert_eq!(s.runs(0, 200), vec![(60, 64), (128, 140)]);
        assert_eq!(s.runs(62, 130), vec![(62, 64), (128, 130)]);
        let (mut a, mut b, mut t) = (PageSet::new(200), PageSet::new(200), PageSet::new(200));
        a.insert(0, 100);
        b.insert(50, 150);
        t.insert(0, 10);
        assert_eq!(t.insert_only_in(&a, &b, 0, 200), 40, "0..50 less the 10 already in");
        assert_eq!(t.count(0, 200), 50);
    }

    proptest! {
        #[test]
        fn matches_a_vec_of_bools(ops in prop::collection::vec((0usize..300, 0usize..300, any::<bool>()), 1..40)) {
            let mut s = PageSet::new(300);
            let mut r = vec![false; 300];
            for (a, b, add) in ops {
                let (lo, hi) = (a.min(b), a.max(b));
                let before = r[lo..hi].iter().filter(|&&x| x != add).count();
                let changed = if add { s.insert(lo, hi) } else { s.remove(lo, hi) };
                r[lo..hi].iter_mut().for_each(|x| *x = add);
                prop_assert_eq!(changed, before);
                prop_assert_eq!(s.count(0, 300), r.iter().filter(|&&x| x).count());
                prop_assert_eq!(s.count(lo, hi), if add { hi - lo } else { 0 });
            }
        }

        #[test]
        fn a_tally_counts_each_page_where_it_is(
            sets in prop::collection::vec(prop::collection::vec((0usize..300, 0usize..300), 0..6), 3),
            range in (0usize..300, 0usize..300),
        ) {
            let [dev, host, staged] = [0, 1, 2].map(|i| {
                let mut s = PageSet::new(300);
                for &(a, b) in &sets[i] {
                    s.insert(a.min(b), a.max(b));
                }
                s
            });
            let (lo, hi) = (range.0.min(range.1), range.0.max(range.1));
            let mut want = PageTally::default();
            for p in lo..hi {
                match (dev.contains(p), host.contains(p)) {
                    (true, true) => want.both += 1,
                    (true, false) => want.device += 1,
                    (false, true) => want.host += 1,
                    (false, false) => want.neither += 1,
                }
                want.staged += staged.contains(p) as usize;
            }
            prop_assert_eq!(dev.tally(&host, &staged, lo, hi), want);
        }
    }
}
