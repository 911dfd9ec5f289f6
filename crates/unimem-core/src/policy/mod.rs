//! Policies: what to tell the backend before each operation. A policy sees the operation
//! about to run and, if it asks for one, a window of the events after it.

pub mod advisor;
mod hints;
pub mod keep;
mod none;
mod oracle;
pub(crate) mod units;

pub use advisor::{Advisor, AdvisorSettings, HintBytes};
pub use hints::Hints;
pub use none::NoHints;
pub use oracle::Oracle;

use crate::config::{Config, PolicyName};
use crate::cost::CostModel;
use crate::error::Result;
use crate::op::Op;

/// What a policy learned from faults (the advisor's `learn_from_faults`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Learning {
    /// Bytes of undeclared accesses learned from faults (counted each time they are learned).
    pub learned_bytes: u64,
    /// Times a learned access was observed at its place in a step (fed to the predictors).
    pub observed: u64,
    /// Kernels whose faults were reported late (a GPU's, through CUPTI).
    pub late_kernels: u64,
    /// Of those, kernels reported too late to place (their declared accesses forgotten).
    pub late_too_old: u64,
    /// How many kernels behind the host those reports came, on average.
    pub late_lag_mean: f64,
    /// And at most.
    pub late_lag_max: u64,
}

/// Decides hints during a replay (or for a running program, through the runtime's engine).
pub trait Policy: Send {
    /// Name in reports.
    fn name(&self) -> &'static str;

    /// How many events after the current one the policy wants to see (0: none). The replay
    /// engine buffers exactly this many, so memory stays bounded while streaming.
    fn lookahead(&self) -> usize {
        0
    }

    /// An event entered the lookahead window. Called once per event, in trace order, before
    /// [`Policy::before`] is called for it.
    fn on_future(&mut self, _index: u64, _op: &Op) {}

    /// Called just before the operation at `index` runs on the backend.
    fn before(&mut self, index: u64, op: &Op, hints: &mut Hints<'_>) -> Result<()>;

    /// Whether [`Policy::before`] may give hints at all. A policy that never does (the driver
    /// alone) spares every kernel the question whether its data is in place, whose answer would
    /// change nothing.
    fn gives_hints(&self) -> bool {
        true
    }

    /// The device holds each region of 2 MiB or more in whole 2 MiB blocks, its last one too,
    /// and packs smaller ones in `packed_chunks` bytes of chunks that stay on the device (the
    /// device arena), where a placing policy would count pages: it plans with the blocks' bytes
    /// and leaves the small regions out of its account (its capacity excludes their chunks),
    /// so that it, not the emulated driver, makes the room the rounding takes.
    fn hold_whole_blocks(&mut self, _packed_chunks: u64) {}

    /// Turns on recording of the policy's own events (hints with reasons, forecast scores).
    fn record_events(&mut self, _on: bool) {}

    /// Moves the recorded events into `out`.
    fn drain_events(&mut self, _out: &mut Vec<crate::seam::MemEvent>) {}

    /// Whether the policy learns from the backend's events ([`Policy::observe`]); the replay
    /// and the runtime turn the backend's recording on for it.
    fn wants_feedback(&self) -> bool {
        false
    }

    /// The backend's events of the operation that just ran (called between it and
    /// [`Policy::after`], only if [`Policy::wants_feedback`]): faults on data the operation did
    /// not declare tell the policy what the program really touched.
    fn observe(&mut self, _events: &[crate::seam::MemEvent]) {}

    /// Events of kernel `kernel` (counted from 0 in program order) that a source delivered
    /// after the fact: on a GPU, CUPTI's records arrive once the device has run the kernel and
    /// the buffers are flushed, many kernels after [`Policy::observe`] would have seen them.
    /// Called only if [`Policy::wants_feedback`] and the backend does not report faults itself.
    fn observe_late(&mut self, _kernel: u64, _events: &[crate::seam::MemEvent]) {}

    /// What the policy learned from faults so far (for reports).
    fn learning(&self) -> Learning {
        Learning::default()
    }

    /// Called just after the operation at `index` ran (e.g. to see where a new region landed).
    fn after(&mut self, _index: u64, _op: &Op, _hints: &mut Hints<'_>) -> Result<()> {
        Ok(())
    }
}

/// [`make_policy`] for a replay, which can show a policy the trace's future: with
/// `replay.clairvoyant_advisor` the advisor plans from the trace's next kernels.
pub fn make_replay_policy(
    name: PolicyName,
    budget: u64,
    config: &Config,
    cost: &CostModel,
) -> Box<dyn Policy> {
    match name {
        PolicyName::Advisor if config.replay.clairvoyant_advisor => {
            Box::new(advisor(budget, config, cost).with_trace_future(config.replay.oracle_lookahead as usize))
        }
        _ => make_policy(name, budget, config, cost),
    }
}

/// Builds the policy `name` for a device of `budget` bytes, with the settings of `config`.
pub fn make_policy(name: PolicyName, budget: u64, config: &Config, cost: &CostModel) -> Box<dyn Policy> {
    let break_even = cost.prefetch_break_even_bytes();
    match name {
        PolicyName::None => Box::new(NoHints),
        PolicyName::Oracle => Box::new(Oracle::new(
            budget,
            config.replay.oracle_lookahead as usize,
            break_even,
            config.replay.oracle_keep_loops.then_some(cost.link_rate_gbps),
        )),
        PolicyName::Advisor => Box::new(advisor(budget, config, cost)),
    }
}

/// The advisor with the settings of `config`'s `[advisor]` section.
fn advisor(budget: u64, config: &Config, cost: &CostModel) -> Advisor {
    Advisor::new(AdvisorSettings::from_config(budget, cost, &config.advisor))
}
