//! Picks among predictors by measured accuracy: every kernel that runs scores each predictor's
//! forecast for it, and predictions come from the predictor with the best recent F1 score.
//! Confidence is calibrated per region: how often that predictor's forecasts of that region
//! came true. So within one program, regions that follow a pattern are predicted with high
//! confidence and those that do not (random accesses) with low, and a planner knows which
//! predictions to act on.

use rustc_hash::FxHashMap;

use super::{Observation, Prediction, Predictor, Score};
use crate::policy::advisor::identity::RegionKey;

/// Weight of the newest outcome in the running averages.
const LEARN: f32 = 0.25;

struct Contestant {
    predictor: Box<dyn Predictor>,
    /// Its forecast for the next kernel, made after the previous one: (region, confidence).
    forecast: Vec<(RegionKey, f32)>,
    /// Recent F1 of its confident (>= 0.5) forecasts.
    f1: f32,
    /// Recent precision of all its forecasts: the prior for regions it has no record of.
    precision: f32,
    /// Per region: how often its forecasts of that region came true.
    reliability: FxHashMap<RegionKey, f32>,
    total: Score,
}

/// The tournament of predictors.
pub struct Tournament {
    contestants: Vec<Contestant>,
    actual: Vec<RegionKey>,
    scratch: Vec<Prediction>,
    /// Scratch: a contestant's confident forecast, sorted.
    confident: Vec<RegionKey>,
}

impl std::fmt::Debug for Tournament {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scores: Vec<_> = self.contestants.iter().map(|c| (c.predictor.name(), c.f1)).collect();
        f.debug_struct("Tournament").field("f1", &scores).finish()
    }
}

impl Tournament {
    /// A tournament of `predictors`.
    pub fn new(predictors: Vec<Box<dyn Predictor>>) -> Self {
        let contestants = predictors
            .into_iter()
            .map(|predictor| Contestant {
                predictor,
                forecast: Vec::new(),
                f1: 0.0,
                precision: 0.0,
                reliability: FxHashMap::default(),
                total: Score::default(),
            })
            .collect();
        Self { contestants, actual: Vec::new(), scratch: Vec::new(), confident: Vec::new() }
    }

    /// The usual line-up: sequential, Markov and periodic.
    pub fn standard() -> Self {
        Self::new(vec![
            Box::new(super::Sequential::new()),
            Box::new(super::Markov::new()),
            Box::new(super::Periodic::new()),
        ])
    }

    /// Each contestant's name, recent F1 and totals of its confident forecasts.
    pub fn standings(&self) -> Vec<(&'static str, f32, Score)> {
        self.contestants.iter().map(|c| (c.predictor.name(), c.f1, c.total)).collect()
    }
}

impl Predictor for Tournament {
    fn name(&self) -> &'static str {
        "tournament"
    }

    fn observe(&mut self, o: &Observation) {
        self.actual.push(o.key);
        for c in &mut self.contestants {
            c.predictor.observe(o);
        }
    }

    fn end_kernel(&mut self, kernel: u64) {
        let mut actual = std::mem::take(&mut self.actual);
        actual.sort_unstable();
        actual.dedup();
        for c in &mut self.contestants {
            let mut hits = 0usize;
            for &(key, _) in &c.forecast {
                let hit = actual.binary_search(&key).is_ok();
                hits += usize::from(hit);
                let r = c.reliability.entry(key).or_insert(c.precision);
                *r += LEARN * (f32::from(u8::from(hit)) - *r);
            }
            if !c.forecast.is_empty() {
                c.precision += LEARN * (hits as f32 / c.forecast.len() as f32 - c.precision);
            }
            self.confident.clear();
            self.confident.extend(c.forecast.iter().filter(|f| f.1 >= 0.5).map(|f| f.0));
            self.confident.sort_unstable();
            self.confident.dedup();
            let mut s = Score::default();
            s.add_distinct(&self.confident, &actual);
            c.total.hits += s.hits;
            c.total.false_alarms += s.false_alarms;
            c.total.misses += s.misses;
            let (p, r) = (s.precision() as f32, s.recall() as f32);
            let f1 = if p + r > 0.0 { 2.0 * p * r / (p + r) } else { 0.0 };
            c.f1 += LEARN * (f1 - c.f1);
            c.predictor.end_kernel(kernel);
            // Its forecast for the next kernel, scored once that kernel has run.
            self.scratch.clear();
            c.predictor.predict(kernel, 1, &mut self.scratch);
            c.forecast.clear();
            c.forecast.extend(self.scratch.iter().map(|p| (p.key, p.confidence)));
        }
        actual.clear();
        self.actual = actual;
    }

    fn on_step(&mut self) {
        for c in &mut self.contestants {
            c.predictor.on_step();
        }
    }

    fn observe_past(&mut self, position: u64, o: &Observation) {
        for c in &mut self.contestants {
            c.predictor.observe_past(position, o);
        }
    }

    fn predict(&mut self, now: u64, horizon: u64, out: &mut Vec<Prediction>) {
        let Some(leader) = self.contestants.iter_mut().max_by(|a, b| a.f1.total_cmp(&b.f1)) else { return };
        let start = out.len();
        leader.predictor.predict(now, horizon, out);
        for p in &mut out[start..] {
            p.confidence = leader.reliability.get(&p.key).copied().unwrap_or(p.confidence * leader.precision);
        }
    }
}
