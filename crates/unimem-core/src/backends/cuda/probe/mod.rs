//! `unimem probe`: measures what unified memory costs on this device and derives a calibration
//! profile for the simulator. Managed memory stays at three buffers of the probe size (8 GiB at
//! most in all). The rows, in the order they run (first-touch population first, before the
//! other rows leave their buffers and the driver's state behind, as a replay starts in a process
//! of its own): `population.rs`, `managed.rs` (faults, prefetches, duplex, advice, remote
//! access, discards), `staging.rs` (staged evictions and their ways back), `host.rs` (launches,
//! allocations and pinned memory), `vmm.rs` (virtual memory management and copies both ways at
//! once, the candidates for moving data at the link's rate); `measure.rs` has how each is
//! timed.

mod beside;
mod host;
mod managed;
mod measure;
mod population;
mod staging;
mod vmm;

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{sys, CudaEvent, CudaStream};

use super::staging::{Run, Slot, StagingPool, SLOT_BYTES};
use super::{cuda_err, discard_batch, prefetch_batch, CudaDevice, Kernels, ManagedBuffer, TouchMode};
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::seam::{Advice, Location};
use host::HostCosts;
use managed::{Discard, FaultRates, PrefetchCosts, ReadMostly, Remote};
use measure::{buffer_bytes, event_ns, gbps, host_timed, line_through, place, timed, DeviceMemory};
pub use population::population;
use population::population_rows;
pub use population::POPULATION_PROFILE_ROW;
use staging::{stage_rates, StageRates};

/// Largest probe buffer: three of them must stay within 8 GiB of managed memory.
pub const MAX_PROBE_BYTES: u64 = (8u64 << 30) / 3;

/// One measured quantity, with the value the default (H200) profile assumes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Measurement {
    /// What was measured.
    pub name: &'static str,
    /// The value.
    pub value: f64,
    /// Its unit.
    pub unit: &'static str,
    /// The embedded profile's value, where it has one.
    pub profile_value: Option<f64>,
}

/// Everything the probe found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeReport {
    /// Device capabilities.
    pub capabilities: super::Capabilities,
    /// Bytes per probe buffer.
    pub buffer_bytes: u64,
    /// The measurements.
    pub measurements: Vec<Measurement>,
    /// The calibration profile derived from them.
    #[serde(skip)]
    pub profile: CostModel,
}

/// What every row measures with: the device, its kernels, two streams, the buffers' size, and the
/// embedded profile the rows are set beside.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    dev: &'a CudaDevice,
    kernels: &'a Kernels,
    s: &'a Arc<CudaStream>,
    s2: &'a Arc<CudaStream>,
    bytes: u64,
    default: &'a CostModel,
}

/// The measurements so far.
#[derive(Default)]
struct Notes(Vec<Measurement>);

impl Notes {
    /// Records a measurement (beside the embedded profile's `profile_value`); returns its value.
    fn note(
        &mut self,
        name: &'static str,
        value: f64,
        unit: &'static str,
        profile_value: Option<f64>,
    ) -> f64 {
        self.0.push(Measurement { name, value, unit, profile_value });
        value
    }
}

/// The rows on moving data at the link's rate alone (`unimem probe --transfers`): CUDA virtual
/// memory management (copies each way and both at once, map and unmap, a chunk moved to host
/// memory at its address and read there by a kernel) and copies between managed and pinned
/// memory both ways at once. Buffers of `bytes`, in 64 MiB chunks (16 at most).
pub fn transfers(dev: &CudaDevice, bytes: u64) -> Result<Vec<Measurement>> {
    let bytes = buffer_bytes(bytes)?;
    let kernels = Kernels::load(dev)?;
    let (s, s2) = (dev.new_stream()?, dev.new_stream()?);
    let default = CostModel::h200();
    let c = Ctx { dev, kernels: &kernels, s: &s, s2: &s2, bytes, default: &default };
    let mut n = Notes::default();
    vmm::rows(&c, &mut n)?;
    beside::rows(&c, &mut n)?;
    Ok(n.0)
}

/// Runs every measurement on `dev` with buffers of `bytes` (rounded down to 2 MiB, at most
/// [`MAX_PROBE_BYTES`]).
pub fn run(dev: &CudaDevice, bytes: u64) -> Result<ProbeReport> {
    let bytes = buffer_bytes(bytes)?;
    if !dev.capabilities().concurrent_managed_access {
        return Err(Error::BackendUnavailable {
            backend: "cuda".into(),
            reason: "the device lacks concurrent managed access: prefetch and advice cannot be measured"
                .into(),
        });
    }
    let kernels = Kernels::load(dev)?;
    let (s, s2) = (dev.new_stream()?, dev.new_stream()?);
    let default = CostModel::h200();
    let c = Ctx { dev, kernels: &kernels, s: &s, s2: &s2, bytes, default: &default };
    let mut n = Notes::default();
    let n = &mut n;

    let mut populate_ns = None;
    for m in population_rows(dev, &kernels, &s, bytes, &default)? {
        let value = n.note(m.name, m.value, m.unit, m.profile_value);
        if m.name == POPULATION_PROFILE_ROW {
            populate_ns = Some(value);
        }
    }
    let populate_ns = populate_ns.expect("population_rows measures the profile row");

    let mut a = ManagedBuffer::alloc(dev, bytes)?;
    // CPU first touch: the pages start on the host.
    // SAFETY: nothing runs on the device yet.
    unsafe { a.host_bytes() }.iter_mut().step_by(4096).enumerate().for_each(|(i, b)| *b = i as u8);
    let faults: FaultRates = managed::fault_rates(&c, n, &a)?;
    managed::streaming(&c, n, &a, faults.dense)?;
    let cpu_ns = managed::cpu_faults(&c, n, &mut a)?;
    let p: PrefetchCosts = managed::prefetch_costs(&c, n, &a)?;
    let full_duplex = managed::full_duplex(&c, n, &a, p.h2d, p.d2h)?;
    let isolated = managed::isolated_fault(&c, n, &a)?;
    let rm: ReadMostly = managed::read_mostly(&c, n, &a)?;
    let remote: Remote = managed::remote(&c, n, &a)?;
    let discard: Discard = managed::discards(&c, n, &a)?;
    let stage = if dev.capabilities().discard_batch {
        stage_rates(&c, n, &mut a)?
    } else {
        StageRates {
            d2h: default.stage_d2h_rate_gbps,
            h2d: default.stage_h2d_rate_gbps,
            host: default.stage_host_rate_gbps,
            h2d_block_ns: default.stage_h2d_block_ns,
            h2d_resident: default.stage_h2d_resident_rate_gbps,
        }
    };
    let populate_rate = managed::prefetch_population(&c, n)?;
    // Not in the profile yet: measured beside the managed paths, for choosing between them.
    if let Err(e) = vmm::rows(&c, n) {
        tracing::warn!(error = %e, "the VMM and copy-duplex rows could not be measured");
    }
    let populate_beside_stage_out = if dev.capabilities().discard_batch {
        beside::rows(&c, n)?
    } else {
        default.populate_beside_stage_out_rate_gbps
    };
    let host: HostCosts = host::host_costs(&c, n, &a)?;

    let (major, minor) = dev.capabilities().compute_capability;
    let unit_transfer = default.fault_unit_bytes as f64 / faults.replay;
    let mut profile = CostModel {
        name: format!("{} (sm_{major}{minor}, unimem probe)", dev.capabilities().name),
        device_memory_bytes: dev.capabilities().total_bytes,
        host_memory_bytes: super::backend::host_memory_bytes().unwrap_or(default.host_memory_bytes),
        gpu_fault_rate_gbps: faults.replay,
        gpu_fault_latency_ns: (isolated - unit_transfer).max(0.0).round() as u64,
        fault_unit_bytes: default.fault_unit_bytes,
        gpu_populate_latency_ns: populate_ns.round() as u64,
        cpu_fault_rate_gbps: gbps(bytes, cpu_ns),
        prefetch_call_ns: p.call_ns.round() as u64,
        prefetch_deferred_call_ns: p.deferred_ns.round() as u64,
        prefetch_h2d_rate_gbps: p.h2d,
        prefetch_d2h_rate_gbps: p.d2h,
        batch_range_ns: p.batch_ns.round() as u64,
        prefetch_populate_rate_gbps: populate_rate,
        populate_beside_stage_out_rate_gbps: populate_beside_stage_out,
        evict_d2h_rate_gbps: p.d2h,
        um_full_duplex: full_duplex,
        duplicate_drop_rate_gbps: rm.drop_rate,
        duplicate_prefetch_rate_gbps: rm.prefetch_rate,
        prefetch_h2d_host_fraction: p.h2d_host,
        prefetch_d2h_host_fraction: p.d2h_host,
        advise_remote_ns_per_gib: remote.advise_ns_per_gib.round() as u64,
        discard_host_ns_per_gib: discard.host_ns_per_gib.round() as u64,
        advise_read_mostly_ns_per_gib: rm.advise_ns_per_gib.round() as u64,
        advise_unset_read_mostly_ns_per_gib: rm.unset_ns_per_gib.round() as u64,
        duplicate_write_fault_ns_per_page: default.duplicate_write_fault_ns_per_page,
        remote_rate_gbps: remote.rate,
        discard_rate_gbps: discard.rate,
        discard_call_ns: default.discard_call_ns,
        launch_host_ns: host.launch_ns.round() as u64,
        launch_queue_depth: host.queue_depth as u64,
        alloc_host_ns: host.alloc_ns.round() as u64,
        alloc_host_ns_per_gib: host.alloc_per_gib.round() as u64,
        free_retired_host_ns: default.free_retired_host_ns,
        free_retired_host_ns_per_gib: default.free_retired_host_ns_per_gib,
        stage_d2h_rate_gbps: stage.d2h,
        stage_h2d_rate_gbps: stage.h2d,
        stage_host_rate_gbps: stage.host,
        stage_h2d_block_ns: stage.h2d_block_ns,
        stage_h2d_resident_rate_gbps: stage.h2d_resident,
        // Copies between device-resident memory and pinned memory, the faster way: the bound's
        // rate (a bound takes the best the link has done).
        link_rate_gbps: stage.d2h.max(stage.h2d_resident),
    };
    for (key, measured) in profile.clamp_measured_rates() {
        tracing::warn!(key, measured, "a measured rate past what a profile holds: kept at the nearest bound");
    }
    profile.validate("probe")?;
    Ok(ProbeReport {
        capabilities: dev.capabilities().clone(),
        buffer_bytes: bytes,
        measurements: std::mem::take(&mut n.0),
        profile,
    })
}
