//! The prefetch advisor. This first part is its prediction layer: a step-stable identity for
//! regions ([`identity`]) and predictors that learn the access history and say what the next
//! kernels will touch ([`predict`]). The planner (hints within a budget) and the engine
//! (executing them on side streams) build on these.

pub mod identity;
pub mod plan;
pub mod predict;
pub mod residency;

pub use identity::{Identity, RegionKey};
pub use plan::{plan, Placements, Plan, PlanInput, Planner, Reason, Unit, UnitUse};
pub use predict::{Markov, Observation, Periodic, Prediction, Predictor, Score, Sequential, Tournament};
pub use residency::Residency;
