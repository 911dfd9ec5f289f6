//! Iteration replay: programs that loop (training steps, decode passes) touch the same regions
//! in the same order every step. The predictor records the last complete step kernel by
//! kernel and predicts that the current step repeats it from the same position.

use super::{Observation, Prediction, Predictor};
use crate::access::AccessMode;
use crate::policy::advisor::identity::RegionKey;

/// The step-aligned predictor.
#[derive(Debug, Default)]
pub struct Periodic {
    /// The last complete step: per kernel, its accesses.
    last_step: Vec<Vec<(RegionKey, u64, u64, AccessMode)>>,
    /// The step being recorded.
    this_step: Vec<Vec<(RegionKey, u64, u64, AccessMode)>>,
    current: Vec<(RegionKey, u64, u64, AccessMode)>,
    /// How often the recorded step matched the kernel that ran at the same position (EWMA).
    agreement: f32,
}

impl Periodic {
    /// A new, empty predictor.
    pub fn new() -> Self {
        Self { agreement: 0.5, ..Default::default() }
    }
}

impl Predictor for Periodic {
    fn name(&self) -> &'static str {
        "periodic"
    }

    fn observe(&mut self, o: &Observation) {
        self.current.push((o.key, o.offset, o.len, o.mode));
    }

    fn end_kernel(&mut self, _kernel: u64) {
        let pos = self.this_step.len();
        if let Some(expected) = self.last_step.get(pos) {
            let hit = self.current.iter().filter(|c| expected.iter().any(|e| e.0 == c.0)).count();
            let frac = if self.current.is_empty() { 1.0 } else { hit as f32 / self.current.len() as f32 };
            self.agreement = 0.9 * self.agreement + 0.1 * frac;
        }
        self.this_step.push(std::mem::take(&mut self.current));
    }

    fn observe_past(&mut self, position: u64, o: &Observation) {
        if let Some(kernel) = self.this_step.get_mut(position as usize) {
            if !kernel.iter().any(|k| k.0 == o.key && k.1 == o.offset) {
                kernel.push((o.key, o.offset, o.len, o.mode));
            }
        }
    }

    fn on_step(&mut self) {
        if !self.this_step.is_empty() {
            self.last_step = std::mem::take(&mut self.this_step);
        }
    }

    fn predict(&mut self, now: u64, horizon: u64, out: &mut Vec<Prediction>) {
        let pos = self.this_step.len() as u64;
        for i in 0..horizon {
            let Some(kernel) = self.last_step.get((pos + i) as usize) else { break };
            for &(key, offset, len, mode) in kernel {
                out.push(Prediction { key, offset, len, mode, at: now + 1 + i, confidence: self.agreement });
            }
        }
    }
}
