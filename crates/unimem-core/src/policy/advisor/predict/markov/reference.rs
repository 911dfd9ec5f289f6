//! The Markov predictor against its first, plain version (every successor hashed by key,
//! every candidate sorted, the row scanned for the rarest on every replacement): on random
//! access histories both must learn the same and predict the same, prediction for prediction.

use proptest::prelude::*;
use rustc_hash::FxHashMap;

use super::super::{Observation, Prediction, Predictor};
use super::Markov;
use crate::access::AccessMode;
use crate::policy::advisor::identity::RegionKey;

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

/// The Markov predictor as it was written first (keys hashed, every candidate sorted).
#[derive(Debug, Default)]
pub struct PlainMarkov {
    table: FxHashMap<RegionKey, Successors>,
    previous: Vec<RegionKey>,
    current: Vec<(RegionKey, AccessMode, u64)>,
    last: Vec<RegionKey>,
    /// Scratch for `step`: where each candidate key sits in its output.
    seen: FxHashMap<RegionKey, usize>,
}

impl PlainMarkov {
    fn new() -> Self {
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

impl Predictor for PlainMarkov {
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
            for &(key, p, mode, len) in next.iter().take_while(|e| e.1 >= MIN_EMITTED) {
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

fn mode(m: u8) -> AccessMode {
    match m % 3 {
        0 => AccessMode::Read,
        1 => AccessMode::Write,
        _ => AccessMode::ReadWrite,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Kernels of up to 24 accesses over 40 regions (rows overflow their 16 successors), drawn
    /// mostly from a few recurring kernels (so that chains are likely and forecasts long) with
    /// random ones in between, each followed by forecasts of 1 and of up to 20 kernels.
    #[test]
    fn the_markov_predictor_predicts_as_the_plain_one(
        templates in prop::collection::vec(prop::collection::vec((0u64..40, 0u8..3, 1u64..5), 0..24), 1..6),
        order in prop::collection::vec((0usize..8, prop::collection::vec((0u64..40, 0u8..3, 1u64..5), 0..24)), 1..80),
        horizon in 1u64..20,
    ) {
        let kernels: Vec<&Vec<(u64, u8, u64)>> =
            order.iter().map(|(t, random)| templates.get(*t).unwrap_or(random)).collect();
        let (mut fast, mut plain) = (Markov::new(), PlainMarkov::new());
        for (k, accesses) in kernels.iter().enumerate() {
            let kernel = k as u64;
            for &(r, m, len) in accesses.iter() {
                let o = Observation { key: RegionKey(r * 0x1_0000_0000 + 7), offset: 0, len, mode: mode(m), kernel };
                fast.observe(&o);
                plain.observe(&o);
            }
            fast.end_kernel(kernel);
            plain.end_kernel(kernel);
            for h in [1, horizon] {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                fast.predict(kernel, h, &mut a);
                plain.predict(kernel, h, &mut b);
                prop_assert_eq!(a, b, "kernel {} horizon {}", kernel, h);
            }
        }
    }
}
