//! What follows what: for each region, the regions used by the kernel right after a kernel
//! that used it, with counts. Predicting the next kernel combines the successors of the
//! current kernel's regions; further kernels follow the chain of the most likely successors.

use rustc_hash::FxHashMap;

use super::{Observation, Prediction, Predictor};
use crate::access::AccessMode;
use crate::advisor::identity::RegionKey;

/// Successors kept per region (the most frequent).
const MAX_SUCCESSORS: usize = 16;
/// Regions followed from one predicted kernel to the next (the most likely). 16 kept the
/// sample traces' results and cut the advisor's host time (each kernel forecasts).
const MAX_FRONTIER: usize = 16;
/// Predictions less likely than this are not emitted: no consumer acts on them, and on
/// branchy histories they would be most of the work.
const MIN_EMITTED: f32 = 0.3;

#[derive(Debug, Default, Clone)]
struct Successors {
    total: u32,
    next: Vec<(RegionKey, u32, AccessMode, u64)>, // key, count, last mode, last len
}

/// The correlation (Markov) predictor.
#[derive(Debug, Default)]
pub struct Markov {
    table: FxHashMap<RegionKey, Successors>,
    previous: Vec<RegionKey>,
    current: Vec<(RegionKey, AccessMode, u64)>,
    last: Vec<RegionKey>,
    /// Scratch for `step`: where each candidate key sits in its output.
    seen: FxHashMap<RegionKey, usize>,
}

impl Markov {
    /// A new, empty predictor.
    pub fn new() -> Self {
        Self::default()
    }

    /// Expected successors of `from`, with confidence: count over occurrences, summed over the
    /// regions of `from` and capped at 1.
    fn step(&mut self, from: &[RegionKey], v: &mut Vec<(RegionKey, f32, AccessMode, u64)>) {
        // At most MAX_FRONTIER x MAX_SUCCESSORS candidates, merged by key as they come (this
        // runs for every forecast kernel of every kernel: sorting them by key to merge cost
        // more than the rest of the forecast).
        v.clear();
        self.seen.clear();
        for k in from {
            let Some(s) = self.table.get(k) else { continue };
            for &(n, c, m, l) in &s.next {
                let p = c as f32 / s.total.max(1) as f32;
                match self.seen.entry(n) {
                    // Each key keeps its largest p (and that one's mode and length).
                    std::collections::hash_map::Entry::Occupied(e) => {
                        let e = &mut v[*e.get()];
                        if p > e.1 {
                            *e = (n, p, m, l);
                        }
                    }
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(v.len());
                        v.push((n, p, m, l));
                    }
                }
            }
        }
        // Most likely first (ties by key, for determinism).
        v.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    }
}

impl Predictor for Markov {
    fn name(&self) -> &'static str {
        "markov"
    }

    fn observe(&mut self, o: &Observation) {
        if !self.current.iter().any(|c| c.0 == o.key) {
            self.current.push((o.key, o.mode, o.len));
        }
    }

    fn end_kernel(&mut self, _kernel: u64) {
        for p in std::mem::take(&mut self.previous) {
            let s = self.table.entry(p).or_default();
            s.total += 1;
            for &(k, m, l) in &self.current {
                if let Some(e) = s.next.iter_mut().find(|e| e.0 == k) {
                    e.1 += 1;
                    (e.2, e.3) = (m, l);
                } else if s.next.len() < MAX_SUCCESSORS {
                    s.next.push((k, 1, m, l));
                } else if let Some(min) = s.next.iter_mut().min_by_key(|e| e.1) {
                    // Replace the rarest successor: recent behaviour wins over old noise.
                    *min = (k, 1, m, l);
                }
            }
        }
        self.previous = self.current.drain(..).map(|c| c.0).collect();
        self.last = self.previous.clone();
    }

    fn predict(&mut self, now: u64, horizon: u64, out: &mut Vec<Prediction>) {
        let mut from = self.last.clone();
        let mut next = Vec::new();
        let mut carried = 1.0f32;
        for at in now + 1..=now + horizon {
            self.step(&from, &mut next);
            if next.is_empty() {
                break;
            }
            let emitted = out.len();
            for &(key, p, mode, len) in next.iter().take_while(|e| e.1 * carried >= MIN_EMITTED) {
                out.push(Prediction { key, offset: 0, len, mode, at, confidence: p * carried });
            }
            if out.len() == emitted {
                break;
            }
            // Follow the likely part of the chain only (bounded); confidence decays along it.
            from.clear();
            from.extend(next.iter().filter(|e| e.1 >= 0.5).take(MAX_FRONTIER).map(|e| e.0));
            carried *= 0.9;
            if from.is_empty() {
                break;
            }
        }
    }
}
