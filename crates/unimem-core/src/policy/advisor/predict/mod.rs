//! Predictors: each learns from the accesses of every kernel, in program order, and predicts
//! which regions the next kernels will touch. Kernels are counted from 0 in program order; a
//! prediction names the kernel (`at`) it expects the access in, and how sure it is.
//!
//! - [`Sequential`]: per region, a constant stride in offset and a constant gap in kernels.
//! - [`Markov`]: what follows what, across regions (as DeepUM correlates kernels).
//! - [`Periodic`]: the next step repeats the last one, position by position.
//! - [`Tournament`]: scores each of the others on the kernels that actually ran and answers
//!   with the one that has been right most recently.

mod markov;
mod periodic;
mod sequential;
mod tournament;

pub use markov::Markov;
pub use periodic::Periodic;
pub use sequential::Sequential;
pub use tournament::Tournament;

use super::identity::RegionKey;
use crate::access::AccessMode;

/// One access of a kernel, as predictors see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// Step-stable identity of the region.
    pub key: RegionKey,
    /// First byte.
    pub offset: u64,
    /// Length.
    pub len: u64,
    /// Read, write or both.
    pub mode: AccessMode,
    /// The kernel's index in program order.
    pub kernel: u64,
}

/// A predicted access.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// The region expected.
    pub key: RegionKey,
    /// First byte expected.
    pub offset: u64,
    /// Length expected.
    pub len: u64,
    /// Expected mode.
    pub mode: AccessMode,
    /// The kernel index it is expected in.
    pub at: u64,
    /// Confidence in [0, 1].
    pub confidence: f32,
}

/// A predictor of future accesses.
pub trait Predictor: Send {
    /// Name, for reports.
    fn name(&self) -> &'static str;

    /// Learns one access of kernel `obs.kernel`. All accesses of a kernel come before
    /// [`Predictor::end_kernel`] for it.
    fn observe(&mut self, obs: &Observation);

    /// Kernel `kernel` finished: every access of it has been observed.
    fn end_kernel(&mut self, kernel: u64);

    /// A step boundary of the program (before the first kernel of the step).
    fn on_step(&mut self) {}

    /// An access of an earlier kernel of the current step, at `position` (kernels counted
    /// from the step's first), learned only after that kernel ended (a fault a GPU reported
    /// late). Predictors that remember the step add it there; the others have moved on.
    fn observe_past(&mut self, _position: u64, _obs: &Observation) {}

    /// Appends to `out` the accesses expected in kernels `now + 1 ..= now + horizon`, where
    /// `now` is the last kernel observed, soonest first.
    fn predict(&mut self, now: u64, horizon: u64, out: &mut Vec<Prediction>);
}

/// Precision and recall of next-kernel predictions, by region.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Score {
    /// Predicted regions that the kernel did touch.
    pub hits: u64,
    /// Predicted regions it did not touch.
    pub false_alarms: u64,
    /// Touched regions that were not predicted.
    pub misses: u64,
}

impl Score {
    /// Scores one kernel: `predicted` and `actual` keys (duplicates ignored).
    pub fn add(&mut self, predicted: &[RegionKey], actual: &[RegionKey]) {
        self.add_distinct(&distinct(predicted), &distinct(actual));
    }

    /// Scores one kernel whose `predicted` and `actual` keys are sorted and distinct already
    /// (no copies: the tournament scores every kernel).
    pub fn add_distinct(&mut self, predicted: &[RegionKey], actual: &[RegionKey]) {
        let hits = actual.iter().filter(|k| predicted.binary_search(k).is_ok()).count() as u64;
        self.hits += hits;
        self.false_alarms += predicted.len() as u64 - hits;
        self.misses += actual.len() as u64 - hits;
    }

    /// Of what was predicted, how much was used.
    pub fn precision(&self) -> f64 {
        ratio(self.hits, self.hits + self.false_alarms)
    }

    /// Of what was used, how much was predicted.
    pub fn recall(&self) -> f64 {
        ratio(self.hits, self.hits + self.misses)
    }
}

fn distinct(keys: &[RegionKey]) -> Vec<RegionKey> {
    let mut v = keys.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[cfg(test)]
mod tests;
