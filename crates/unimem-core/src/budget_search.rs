//! The smallest budget at which a program stays within a slowdown: a curve of replays at
//! even steps of the program's peak live bytes, then bisection between the smallest step that
//! meets the limit and the step below it. Pure: the caller replays (on the simulator), this
//! module chooses where.
//!
//! Time is not monotone in the budget for every policy (an eviction order may happen to suit
//! one size better than a larger one), so the answer is always a budget that was replayed and
//! met the limit, never an interpolation: no larger than the smallest step that meets it.

use crate::error::{Error, Result};
use crate::seam::page_round;

/// One replay of the curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CurvePoint {
    /// The budget replayed.
    pub budget_bytes: u64,
    /// The replay's time.
    pub time_ns: u64,
    /// The trace's compute floor.
    pub compute_floor_ns: u64,
    /// The link-limit bound at this budget.
    pub bound_ns: u64,
}

impl CurvePoint {
    /// Time over the compute floor.
    pub fn over_floor(&self) -> f64 {
        self.time_ns as f64 / self.compute_floor_ns.max(1) as f64
    }

    /// Time over the link-limit bound.
    pub fn over_bound(&self) -> f64 {
        self.time_ns as f64 / self.bound_ns.max(1) as f64
    }
}

/// What to search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchSpec {
    /// The program's peak live bytes (page-rounded): 100%.
    pub peak_bytes: u64,
    /// The smallest budget that runs it (what its largest kernel touches at once).
    pub min_bytes: u64,
    /// The limit: time at most this many times the compute floor.
    pub max_slowdown: f64,
    /// Steps of the curve (10: every 10% of the peak).
    pub steps: u32,
    /// Bisection stops when the interval is this narrow.
    pub resolution_bytes: u64,
}

impl SearchSpec {
    /// A search with steps of 10% of `peak_bytes` and bisection to 1% of it (at least 2 MiB).
    pub fn new(peak_bytes: u64, min_bytes: u64, max_slowdown: f64) -> Result<Self> {
        if !(max_slowdown.is_finite() && max_slowdown >= 1.0) {
            return Err(Error::InvalidArgument(format!(
                "--max-slowdown {max_slowdown}: a slowdown over the compute floor is a number of at least 1 (4.5: at most 4.5 times the time with all data resident)"
            )));
        }
        if peak_bytes == 0 {
            return Err(Error::InvalidArgument("the trace holds no data: there is no budget to plan".into()));
        }
        Ok(Self {
            peak_bytes,
            min_bytes: min_bytes.min(peak_bytes),
            max_slowdown,
            steps: 10,
            resolution_bytes: (peak_bytes / 100).max(2 << 20),
        })
    }

    /// Whether a replay meets the limit.
    pub fn meets(&self, p: &CurvePoint) -> bool {
        p.time_ns as f64 <= self.max_slowdown * p.compute_floor_ns as f64
    }

    /// The curve's budgets, smallest first: each step of the peak (page-rounded), none below
    /// `min_bytes` (a step below it is replayed at it), each once.
    pub fn steps(&self) -> Vec<u64> {
        let mut budgets: Vec<u64> = (1..=self.steps as u64)
            .map(|i| page_round(self.peak_bytes.saturating_mul(i) / self.steps as u64).max(self.min_bytes))
            .collect();
        budgets.dedup();
        budgets
    }
}

/// The curve and the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    /// Every replay, by budget.
    pub curve: Vec<CurvePoint>,
    /// The smallest budget replayed that met the limit, where one did.
    pub chosen: Option<CurvePoint>,
}

/// Searches: `steps` are the replays at [`SearchSpec::steps`] (run by the caller, in any
/// order, perhaps in parallel); `replay` runs the bisection's further budgets.
pub fn search(
    spec: &SearchSpec,
    mut steps: Vec<CurvePoint>,
    mut replay: impl FnMut(u64) -> Result<CurvePoint>,
) -> Result<Search> {
    steps.sort_by_key(|p| p.budget_bytes);
    let mut curve = steps.clone();
    let Some(first_meeting) = steps.iter().position(|p| spec.meets(p)) else {
        return Ok(Search { curve, chosen: None });
    };
    let mut best = steps[first_meeting];
    // Below the first step that meets lies the step below it, or the smallest budget at all.
    let mut below = match first_meeting {
        0 if best.budget_bytes > spec.min_bytes => {
            let p = replay(spec.min_bytes)?;
            curve.push(p);
            if spec.meets(&p) {
                best = p;
            }
            p.budget_bytes
        }
        0 => best.budget_bytes,
        i => steps[i - 1].budget_bytes,
    };
    while best.budget_bytes.saturating_sub(below) > spec.resolution_bytes {
        let mid = page_round(below + (best.budget_bytes - below) / 2);
        if mid <= below || mid >= best.budget_bytes {
            break;
        }
        let p = replay(mid)?;
        curve.push(p);
        if spec.meets(&p) {
            best = p;
        } else {
            below = mid;
        }
    }
    curve.sort_by_key(|p| p.budget_bytes);
    Ok(Search { curve, chosen: Some(best) })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A program whose time falls as the budget grows: `floor * (1 + k * (peak / budget - 1))`.
    fn model(peak: u64, k: f64) -> impl Fn(u64) -> CurvePoint {
        move |b| {
            let floor = 1_000_000;
            let time = floor as f64 * (1.0 + k * (peak as f64 / b as f64 - 1.0));
            CurvePoint { budget_bytes: b, time_ns: time as u64, compute_floor_ns: floor, bound_ns: floor }
        }
    }

    fn run(spec: &SearchSpec, f: &dyn Fn(u64) -> CurvePoint) -> (Search, usize) {
        let steps = spec.steps().into_iter().map(f).collect();
        let mut calls = 0;
        let s = search(spec, steps, |b| {
            calls += 1;
            Ok(f(b))
        })
        .unwrap();
        (s, calls)
    }

    #[test]
    fn the_answer_meets_the_limit_and_is_at_most_the_smallest_step_that_does() {
        let peak = 1000 * MIB;
        for max in [1.0, 1.2, 1.5, 2.0, 3.0, 4.5, 10.0] {
            let spec = SearchSpec::new(peak, 50 * MIB, max).unwrap();
            let f = model(peak, 0.5);
            let (s, _) = run(&spec, &f);
            let chosen = s.chosen.expect("the whole peak always meets a limit of at least 1");
            assert!(spec.meets(&chosen), "max {max}: {chosen:?}");
            let smallest_step = spec.steps().into_iter().map(&f).find(|p| spec.meets(p)).unwrap();
            assert!(chosen.budget_bytes <= smallest_step.budget_bytes);
            // Bisection narrowed it to the resolution (the model is monotone).
            let just_below = chosen.budget_bytes.saturating_sub(spec.resolution_bytes + 4096);
            assert!(
                chosen.budget_bytes == spec.min_bytes || !spec.meets(&f(just_below.max(1))),
                "max {max}: {} could be smaller",
                chosen.budget_bytes
            );
        }
    }

    #[test]
    fn bisection_stays_within_a_few_replays() {
        let spec = SearchSpec::new(1000 * MIB, 50 * MIB, 2.0).unwrap();
        let (_, calls) = run(&spec, &model(1000 * MIB, 0.5));
        // 10% of the peak to 1% of it: four halvings.
        assert!(calls <= 5, "{calls} replays");
    }

    #[test]
    fn a_limit_no_budget_meets_has_no_answer_and_a_curve() {
        let spec = SearchSpec::new(1000 * MIB, 50 * MIB, 1.0).unwrap();
        let slow =
            |b| CurvePoint { budget_bytes: b, time_ns: 2_000, compute_floor_ns: 1_000, bound_ns: 1_000 };
        let (s, calls) = run(&spec, &slow);
        assert_eq!((s.chosen, calls, s.curve.len()), (None, 0, 10));
    }

    #[test]
    fn a_program_that_meets_the_limit_at_its_smallest_budget_gets_that() {
        let spec = SearchSpec::new(1000 * MIB, 300 * MIB, 100.0).unwrap();
        assert_eq!(spec.steps()[0], 300 * MIB, "steps below the smallest budget are replayed at it");
        let (s, _) = run(&spec, &model(1000 * MIB, 0.5));
        assert_eq!(s.chosen.unwrap().budget_bytes, 300 * MIB);
    }

    #[test]
    fn a_non_monotone_curve_still_answers_with_a_budget_that_met_the_limit() {
        let peak = 1000 * MIB;
        // Meets at 40% and from 60% on, not at 50%.
        let bumpy = move |b: u64| {
            let pct = b * 100 / peak;
            let time = if (40..45).contains(&pct) || pct >= 60 { 1_000 } else { 3_000 };
            CurvePoint { budget_bytes: b, time_ns: time, compute_floor_ns: 1_000, bound_ns: 1_000 }
        };
        let spec = SearchSpec::new(peak, 10 * MIB, 2.0).unwrap();
        let (s, _) = run(&spec, &bumpy);
        let chosen = s.chosen.unwrap();
        assert!(spec.meets(&chosen) && chosen.budget_bytes <= page_round(peak * 4 / 10));
    }

    #[test]
    fn a_slowdown_below_one_is_refused_with_what_is_allowed() {
        for bad in [0.5, f64::NAN, f64::INFINITY, -1.0] {
            let e = SearchSpec::new(MIB, MIB, bad).unwrap_err().to_string();
            assert!(e.contains("at least 1"), "{e}");
        }
    }
}
