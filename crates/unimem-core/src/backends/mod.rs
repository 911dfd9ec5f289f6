//! The device backends behind the seam: the calibrated simulator (the default everywhere) and
//! CUDA, and the one place that opens the backend a configuration names.

pub mod cuda;
pub mod sim;

use crate::config::{BackendChoice, Config, Memory, MemoryKind, Oversubscribe, PolicyName, PolicyTime};
use crate::cost::CostModel;
use crate::error::Result;
use crate::seam::{DeviceId, MemoryBackend};

/// The share of the budget that regions under 2 MiB may take for `memory = "auto"` to choose
/// the device arena, which keeps them on the device: past it, the rest of the data would
/// stream through too little room (and past the budget itself, the footprint would exceed it).
pub const MAX_PACKED_SHARE: f64 = 0.25;

/// Everything a backend is opened with. [`BackendSpec::from_config`] builds one from a
/// configuration; nothing below the seam sees the configuration itself.
#[derive(Debug, Clone)]
pub struct BackendSpec {
    /// Which backend.
    pub which: BackendChoice,
    /// The GPU (CUDA).
    pub device: DeviceId,
    /// The simulator's costs.
    pub cost: CostModel,
    /// The emulated device's size: the simulator's, or the budget the CUDA backend keeps to in
    /// software.
    pub capacity: u64,
    /// Pinned memory for staged evictions ...
    pub staging: u64,
    /// ... of which this much is pinned before the work starts (the CUDA backend pins the rest
    /// when it needs it).
    pub pin_now: u64,
    /// Where the CUDA backend keeps regions.
    pub memory: MemoryKind,
    /// Managed allocations may go past the device's free memory (CUDA; never by default).
    pub allow_oversubscription: bool,
    /// Restores may bring a wholly staged region back at another address: only for a caller
    /// that finds data by region (a replay).
    pub relocate: bool,
    /// Room for a program's outputs is made by staged evictions, not the emulated driver's
    /// migrations: for a runtime whose policy stages its own evictions.
    pub staged_room: bool,
    /// The simulator charges the caller's own host work (`sim.policy_time = "measured"`).
    pub charge_host_work: bool,
}

impl BackendSpec {
    /// The backend `config` names for a program (its regions stay at their addresses),
    /// emulating a device of `capacity` bytes with `staging` bytes of pinned memory, `pin_now`
    /// of them pinned up front.
    pub fn from_config(config: &Config, capacity: u64, staging: u64, pin_now: u64) -> Result<Self> {
        Self::build(config, config.memory.resolve(false), false, capacity, staging, pin_now)
    }

    /// The same for a replay by `policy`, which finds data by region: restores may relocate
    /// as `replay.relocate` says, and there `memory = "auto"` is the device arena for a placing
    /// policy ([`Memory::Auto`]) unless its regions under 2 MiB (`packed`: their peak live
    /// bytes as the arena packs them, which it keeps on the device) would take more than
    /// [`MAX_PACKED_SHARE`] of the budget, or the replay hides accesses from the policy
    /// (`undeclared`: it learns them from faults, which only managed memory reports).
    pub fn for_replay(
        config: &Config,
        policy: PolicyName,
        packed: u64,
        undeclared: bool,
        capacity: u64,
        staging: u64,
        pin_now: u64,
    ) -> Result<Self> {
        let relocate = config.replay.relocate;
        let fits = packed as f64 <= MAX_PACKED_SHARE * capacity as f64;
        let placing = relocate && policy != PolicyName::None;
        let arena = placing && fits && !undeclared;
        if config.memory == Memory::Auto && placing && !arena {
            tracing::info!(packed, capacity, undeclared, "memory auto: managed memory for this replay");
        }
        let memory = config.memory.resolve(arena);
        Self::build(config, memory, relocate, capacity, staging, pin_now)
    }

    fn build(
        config: &Config,
        memory: MemoryKind,
        relocate: bool,
        capacity: u64,
        staging: u64,
        pin_now: u64,
    ) -> Result<Self> {
        Ok(Self {
            which: config.backend,
            device: DeviceId(0),
            cost: match memory {
                // The simulator models the arena as its costs (`CostModel::device_arena`).
                MemoryKind::Device => cost_model(config)?.device_arena(),
                MemoryKind::Managed | MemoryKind::Vmm => cost_model(config)?,
            },
            capacity,
            staging,
            pin_now,
            memory,
            allow_oversubscription: config.oversubscribe == Oversubscribe::Allow,
            relocate,
            staged_room: false,
            charge_host_work: config.sim.policy_time == PolicyTime::Measured,
        })
    }
}

/// Opens the backend `spec` names. `Auto` picks CUDA when a device is present and the
/// simulator otherwise; every report says which ran.
pub fn open(spec: &BackendSpec) -> Result<Box<dyn MemoryBackend>> {
    let gpu = || -> Result<Box<dyn MemoryBackend>> {
        let ordinal = spec.device.0 as usize;
        Ok(match spec.memory {
            MemoryKind::Managed => Box::new(
                cuda::CudaBackend::open(ordinal, spec.capacity, spec.allow_oversubscription)?
                    .with_staging(spec.staging, spec.pin_now)?
                    .with_relocation(spec.relocate)
                    .with_staged_room(spec.staged_room),
            ),
            MemoryKind::Vmm => Box::new(
                cuda::BlockBackend::open(ordinal, spec.capacity)?.with_staging(spec.staging, spec.pin_now)?,
            ),
            MemoryKind::Device => Box::new(
                cuda::BlockBackend::open_arena(ordinal, spec.capacity)?
                    .with_staging(spec.staging, spec.pin_now)?,
            ),
        })
    };
    if spec.memory == MemoryKind::Device && !spec.relocate {
        return Err(crate::Error::config(
            "memory",
            "\"device\" moves a region's data between addresses, which only a replay allows \
             (with `replay.relocate = true`, the default)",
            "the configuration",
        ));
    }
    let simulator = || {
        if spec.memory == MemoryKind::Vmm {
            tracing::warn!("memory = \"vmm\" is not modelled by the simulator: it runs as managed memory");
        }
        Box::new(
            sim::SimBackend::new(spec.cost.clone(), spec.capacity)
                .with_staging(spec.staging)
                .with_relocation(spec.relocate)
                .with_staged_room(spec.staged_room)
                .with_device_arena(spec.memory == MemoryKind::Device)
                .with_host_work_charged(spec.charge_host_work),
        )
    };
    match spec.which {
        BackendChoice::Sim => Ok(simulator()),
        BackendChoice::Cuda => gpu(),
        BackendChoice::Auto => match gpu() {
            Ok(gpu) => Ok(gpu),
            Err(crate::Error::BackendUnavailable { reason, .. }) => {
                tracing::info!(%reason, "backend auto: using the simulator");
                Ok(simulator())
            }
            Err(e) => Err(e),
        },
    }
}

/// The cost model a configuration names: its `sim.profile` file, or the embedded H200 profile.
/// A profile that cannot be loaded is an error naming the key.
pub fn cost_model(config: &Config) -> Result<CostModel> {
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
