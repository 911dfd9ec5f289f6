//! The device backends behind the seam: the calibrated simulator (the default everywhere) and
//! CUDA, and the one place that opens the backend a configuration names.

pub mod cuda;
pub mod sim;

use crate::cost::CostModel;
use crate::error::Result;
use crate::seam::MemoryBackend;

/// Opens the backend a configuration asks for, emulating a device of `capacity` bytes (the
/// simulator's size, or the budget the CUDA backend keeps to in software), with `staging`
/// bytes of pinned memory for staged evictions, `pin_now` of them pinned before the work
/// starts (the CUDA backend pins the rest when it needs it). `auto` picks CUDA when a device
/// is present and the simulator otherwise; every report says which ran.
pub fn open(
    choice: crate::config::BackendChoice,
    cost: CostModel,
    capacity: u64,
    oversubscribe: crate::config::Oversubscribe,
    staging: u64,
    pin_now: u64,
) -> Result<Box<dyn MemoryBackend>> {
    use crate::config::BackendChoice;
    let gpu = || cuda::CudaBackend::open(0, capacity, oversubscribe)?.with_staging(staging, pin_now);
    let simulator = |cost| Box::new(sim::SimBackend::new(cost, capacity).with_staging(staging));
    match choice {
        BackendChoice::Sim => Ok(simulator(cost)),
        BackendChoice::Cuda => Ok(Box::new(gpu()?)),
        BackendChoice::Auto => match gpu() {
            Ok(gpu) => Ok(Box::new(gpu)),
            Err(crate::Error::BackendUnavailable { reason, .. }) => {
                tracing::info!(%reason, "backend auto: using the simulator");
                Ok(simulator(cost))
            }
            Err(e) => Err(e),
        },
    }
}

/// The cost model a configuration names: its `sim.profile` file, or the embedded H200 profile.
/// A profile that cannot be loaded is an error naming the key.
pub fn cost_model(config: &crate::config::Config) -> Result<CostModel> {
    if config.sim.profile.is_empty() {
        return Ok(CostModel::h200());
    }
    CostModel::load(std::path::Path::new(&config.sim.profile)).map_err(|e| {
        crate::Error::config(
            "sim.profile",
            format!("cannot use `{}`: {e}", config.sim.profile),
            "the configuration",
        )
    })
}
