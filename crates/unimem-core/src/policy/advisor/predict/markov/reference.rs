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

/// A key's latest run (first and last kernel), its last ended run's length, its latest mode
/// and length.
type PlainRun = (Option<(u64, u64)>, u64, AccessMode, u64);

/// The Markov predictor as it was written first (keys hashed, every candidate sorted).
#[derive(Debug, Default)]
pub struct PlainMarkov {
    table: FxHashMap<RegionKey, Successors>,
    previous: Vec<RegionKey>,
    current: Vec<(RegionKey, AccessMode, u64)>,
    last: Vec<RegionKey>,
    /// Per key: its latest run's first and last kernel, its last ended run's length, and its
    /// latest mode and length.
    runs: FxHashMap<RegionKey, PlainRun>,
    /// Scratch for `step`: where each candidate key sits in its output.
    seen: FxHashMap<RegionKey, usize>,
}

impl PlainMarkov {
    fn new() -> Self {
        Self::default()
    }

    /// Expected successors of `from`, with confidence: count over occurrences; with `now`
    /// (the first forecast kernel), the mean over the rows that have any, and a region of
    /// kernel `now` whose run goes on a candidate itself (p = 1) instead of its row; further
    /// on, the largest over the rows.
    fn step(&mut self, from: &[RegionKey], now: Option<u64>, v: &mut Vec<(RegionKey, f32, AccessMode, u64)>) {
        // Per candidate: (key, sum or largest p, largest p of one row, sure, mode, len).
        let mut c: Vec<(RegionKey, f32, f32, bool, AccessMode, u64)> = Vec::new();
        self.seen.clear();
        let mut rows = 0u32;
        for k in from {
            if let (Some(now), Some(&(Some((start, last)), len, m, l))) = (now, self.runs.get(k)) {
                if last == now && len > now - start + 1 {
                    match self.seen.get(k) {
                        Some(&i) => (c[i].3, c[i].4, c[i].5) = (true, m, l),
                        None => {
                            self.seen.insert(*k, c.len());
                            c.push((*k, 0.0, 1.0, true, m, l));
                        }
                    }
                    continue;
                }
            }
            let Some(s) = self.table.get(k) else { continue };
            if s.total == 0 {
                continue;
            }
            rows += 1;
            for &(n, count, m, l) in &s.next {
                let p = count as f32 / s.total as f32;
                match self.seen.get(&n) {
                    Some(&i) => {
                        let e = &mut c[i];
                        e.1 = if now.is_some() { e.1 + p } else { e.1.max(p) };
                        if p > e.2 && !e.3 {
                            (e.2, e.4, e.5) = (p, m, l);
                        }
                    }
                    None => {
                        self.seen.insert(n, c.len());
                        c.push((n, p, p, false, m, l));
                    }
                }
            }
        }
        v.clear();
        for (key, p, _, sure, m, l) in c {
            let p = if sure {
                1.0
            } else if now.is_some() {
                p / rows.max(1) as f32
            } else {
                p
            };
            v.push((key, p, m, l));
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

    fn end_kernel(&mut self, kernel: u64) {
        for &(k, m, l) in &self.current {
            let run = self.runs.entry(k).or_insert((None, 0, m, l));
            run.0 = match run.0 {
                Some((start, last)) if last + 1 == kernel => Some((start, kernel)),
                _ => Some((kernel, kernel)),
            };
            (run.2, run.3) = (m, l);
        }
        for p in std::mem::take(&mut self.previous) {
            if self.current.iter().any(|c| c.0 == p) {
                continue;
            }
            let run = self.runs.get_mut(&p).expect("used");
            if let Some((start, last)) = run.0 {
                run.1 = last - start + 1;
            }
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
            self.step(&from, (at == now + 1).then_some(now), &mut next);
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
