//! The seam between decisions and hardware. A backend takes orders (allocate, free, advise,
//! prefetch, discard, launch, host access, synchronize) and reports what happened; it makes no
//! decisions. Everything above it (planner, replay, tensors) is written once for every backend.

mod event;

use std::fmt;

pub use event::{
    BackendStats, Direction, HintKind, HostOp, HostTime, MemEvent, MigrationCause, RemoteMapCause,
};

use crate::access::RangeAccess;
use crate::error::Result;
use crate::region::RegionId;

/// Accounting unit of residency: a 4 KiB page, as the driver's smallest migration granule.
pub const PAGE_SIZE: u64 = 4096;

/// The driver's large-page block (2 MiB): eviction and advice granularity.
pub const BLOCK_SIZE: u64 = 2 << 20;

/// Bytes of block `b` (2 MiB) of a buffer of `len` bytes: the last one may be short.
pub(crate) fn block_bytes(len: u64, b: u64) -> u64 {
    (len - b * BLOCK_SIZE).min(BLOCK_SIZE)
}

/// Bytes of `len` rounded up to whole pages: what a range costs in device memory.
pub fn page_round(len: u64) -> u64 {
    len.div_ceil(PAGE_SIZE) * PAGE_SIZE
}

/// What every backend checks of a region it is asked to allocate: at least one byte, and an id
/// not in use (`in_use`).
pub(crate) fn check_new_region(id: RegionId, bytes: u64, in_use: bool) -> Result<()> {
    if bytes == 0 {
        return Err(crate::Error::Allocation { bytes, reason: "regions must be at least 1 byte".into() });
    }
    if in_use {
        return Err(crate::Error::InvalidArgument(format!("region {id} is already allocated")));
    }
    Ok(())
}

/// Where data can live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Location {
    /// Host RAM.
    Host,
    /// GPU memory.
    Device,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Location::Host => "host",
            Location::Device => "device",
        })
    }
}

/// A usage hint for a range, as `cudaMemAdvise` takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Advice {
    /// Data is mostly read: reads create duplicates on the reader's side.
    SetReadMostly,
    /// Undo [`Advice::SetReadMostly`] (required before any GPU write phase).
    UnsetReadMostly,
    /// Keep the data at this location; other processors map it remotely where they can.
    SetPreferredLocation(Location),
    /// Undo [`Advice::SetPreferredLocation`].
    UnsetPreferredLocation,
    /// The device accesses this data: keep a mapping so that it need not fault.
    SetAccessedByDevice,
    /// Undo [`Advice::SetAccessedByDevice`].
    UnsetAccessedByDevice,
}

/// A byte range of a region, without an access mode (for prefetch and discard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ByteRange {
    /// The region.
    pub region: RegionId,
    /// First byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl ByteRange {
    /// The whole of a region of `bytes` bytes.
    pub fn whole(region: RegionId, bytes: u64) -> Self {
        Self { region, offset: 0, len: bytes }
    }
}

/// Appends `range`, merged into the last one where it continues it: each range of a prefetch
/// costs a call (57-70 us on the H200), so contiguous blocks (a policy's units, or the blocks a
/// stage-out migrates after all) go as one range.
pub(crate) fn push_merged(ranges: &mut Vec<ByteRange>, range: ByteRange) {
    match ranges.last_mut() {
        Some(last) if last.region == range.region && last.offset + last.len == range.offset => {
            last.len += range.len
        }
        _ => ranges.push(range),
    }
}

/// One kernel launch as the backend sees it: how long it computes, and what it touches.
#[derive(Debug, Clone, Copy)]
pub struct KernelLaunch<'a> {
    /// Kernel name (for telemetry).
    pub name: &'a str,
    /// GPU time with all its data resident, in nanoseconds.
    pub dur_ns: u64,
    /// Ranges it reads and writes; it touches every page of each.
    pub accesses: &'a [RangeAccess],
}

/// Where the bytes of a range are, at page granularity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Residency {
    /// Bytes valid only on the device.
    pub device: u64,
    /// Bytes valid only on the host.
    pub host: u64,
    /// Bytes valid on both (read-mostly duplicates).
    pub duplicated: u64,
    /// Bytes never touched or discarded: no physical copy anywhere.
    pub unpopulated: u64,
    /// Bytes whose only copy is in the runtime's pinned staging buffers (evicted by a copy
    /// instead of a migration; see [`MemoryBackend::stage_out`]).
    pub staged: u64,
}

impl Residency {
    /// Bytes occupying device memory (device-only plus duplicates).
    pub fn on_device(&self) -> u64 {
        self.device + self.duplicated
    }
}

/// Which backend a report came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The calibrated simulator.
    Sim,
    /// A real GPU through CUDA.
    Cuda,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Sim => "sim",
            BackendKind::Cuda => "cuda",
        })
    }
}

/// Orders a backend executes. Times are nanoseconds on the backend's clock (virtual for the
/// simulator, host monotonic for CUDA). Prefetch, advise and discard are hints in spirit, but a
/// backend reports misuse (unknown region, range past the end) as an error.
pub trait MemoryBackend: Send {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// One line describing the device or model (e.g. the calibration profile's name).
    fn describe(&self) -> String;

    /// Device memory the backend may use for managed data, in bytes (the emulated GPU size on
    /// the simulator).
    fn device_capacity(&self) -> u64;

    /// Creates a managed region of `bytes` bytes under `id`; returns its base address.
    fn allocate(&mut self, id: RegionId, bytes: u64) -> Result<u64>;

    /// Releases a region; its contents are dead.
    fn free(&mut self, id: RegionId) -> Result<()>;

    /// Applies a usage hint to a range.
    fn advise(&mut self, range: ByteRange, advice: Advice) -> Result<()>;

    /// Moves ranges to `to` asynchronously, in one (batched) call. Later kernels wait for data
    /// in flight instead of faulting on it.
    fn prefetch(&mut self, ranges: &[ByteRange], to: Location) -> Result<()>;

    /// Declares ranges dead: their pages are dropped on both sides without any transfer.
    fn discard(&mut self, ranges: &[ByteRange]) -> Result<()>;

    /// Evicts ranges through the runtime's pinned staging buffers: data only the device holds
    /// is copied into pinned host memory by the copy engine (52.3 GB/s on the H200) and dropped
    /// from the device, instead of being migrated back at 10-17 GB/s. Staged data comes back on the next prefetch to the device,
    /// kernel or host access that touches it. What the staging buffers cannot hold, and data
    /// with a valid host copy, is moved as [`MemoryBackend::prefetch`] to the host would.
    /// The default (a backend without staging) is that prefetch.
    fn stage_out(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.prefetch(ranges, Location::Host)
    }

    /// Bytes of pinned host memory the backend may stage evicted data in (0: no staging).
    fn staging_capacity(&self) -> u64 {
        0
    }

    /// Lets the backend bring staged data back at another address: a GPU backend may restore
    /// a region whose data is all staged into pooled device memory ([`MemEvent::Relocated`]).
    /// Only for a caller that finds data by region, never by an address it kept (the replay);
    /// off by default. The simulator models what it saves.
    fn allow_relocation(&mut self, _on: bool) {}

    /// The caller's own work between backend calls (a policy's planning) took `wall_ns` of
    /// host time, wall clock, the calls it made to this backend included. A GPU backend needs
    /// nothing: that time passed on its clock. The simulator charges the work, less its own
    /// time in those calls, to its host clock where [`MemoryBackend::charge_host_work`] asks.
    fn host_work(&mut self, _wall_ns: u64) {}

    /// Whether [`MemoryBackend::host_work`] costs simulated time (`sim.policy_time`).
    /// Off by default: simulated times then depend on nothing but the trace and the profile.
    fn charge_host_work(&mut self, _on: bool) {}

    /// Launches a kernel on the compute stream.
    fn launch(&mut self, kernel: &KernelLaunch<'_>) -> Result<()>;

    /// The CPU touches ranges (waits for the device first, as a host read of results does).
    fn host_access(&mut self, accesses: &[RangeAccess]) -> Result<()>;

    /// Waits for all issued work; returns the backend clock afterwards.
    fn synchronize(&mut self) -> Result<u64>;

    /// The time at which every kernel and host access issued so far completes, without
    /// waiting for it (transfers still in flight on copy streams are not included).
    fn completion_ns(&self) -> u64;

    /// Where the bytes of a range are.
    fn residency(&self, range: ByteRange) -> Result<Residency>;

    /// The 2 MiB blocks of region `id` (of `bytes` bytes) that hold pages on the device, as
    /// [`residency`](Self::residency) tells block by block: a policy learns which pages of a
    /// new region came from the pool. Backends override it where they know it cheaper.
    fn device_blocks(&self, id: RegionId, bytes: u64) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        for b in 0..bytes.div_ceil(BLOCK_SIZE) {
            let range = ByteRange { region: id, offset: b * BLOCK_SIZE, len: block_bytes(bytes, b) };
            if self.residency(range)?.on_device() > 0 {
                out.push(b as u32);
            }
        }
        Ok(out)
    }

    /// Bytes of managed data resident on the device now.
    fn device_resident_bytes(&self) -> u64;

    /// Counters since creation.
    fn stats(&self) -> BackendStats;

    /// Where the clock of the backend's events starts, for a backend on real time (CUDA):
    /// event times are nanoseconds since this instant, so events from another source on the
    /// same machine (CUPTI) can be put on the same clock. `None` for a simulated clock.
    fn event_clock_origin(&self) -> Option<std::time::Instant> {
        None
    }

    /// Whether recording yields fault events (the simulator's do; on a GPU faults come from
    /// CUPTI, outside the backend). A policy learning from faults needs them.
    fn records_faults(&self) -> bool {
        false
    }

    /// Turns per-event recording on or off (off by default: counters are always kept).
    fn record_events(&mut self, on: bool);

    /// Moves the recorded events into `out`.
    fn drain_events(&mut self, out: &mut Vec<MemEvent>);

    /// Declares that a range holds data produced before the work being run (weights, inputs
    /// loaded by the program), so it starts valid on the host. Costs nothing on the backend
    /// clock: it is set-up, like loading a dataset before a timed loop.
    fn preload_host(&mut self, range: ByteRange) -> Result<()>;

    /// Host read of region bytes (the pages become host-valid first, as a CPU access would).
    fn read(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Host write of region bytes (the pages become host-valid first, as a CPU access would).
    fn write(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()>;

    /// Reads region bytes as the kernel just launched sees them, moving nothing (for kernels
    /// the host executes on the kernel's behalf, as tensors' CPU launches do; the launch has
    /// already placed the data).
    fn kernel_view(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Stores region bytes as the kernel just launched writes them, moving nothing.
    fn kernel_store(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()>;

    /// Launches a real GPU kernel over `kernel`'s accesses: the backend waits for their data
    /// and makes room as for [`MemoryBackend::launch`], then `native` enqueues the kernel on
    /// the compute stream it is given, with the device address of each access. Only the CUDA
    /// backend runs native kernels.
    fn launch_native(
        &mut self,
        kernel: &KernelLaunch<'_>,
        native: &mut dyn FnMut(&NativeLaunch<'_>) -> Result<()>,
    ) -> Result<()> {
        let _ = (kernel, native);
        Err(crate::Error::BackendUnavailable {
            backend: self.kind().to_string(),
            reason: "native GPU kernels need the CUDA backend; on the simulator launch on the CPU path"
                .into(),
        })
    }
}

/// What a native kernel launch is given: the compute stream and the device address of each
/// declared access, in declaration order.
pub struct NativeLaunch<'a> {
    /// The stream the kernel must be enqueued on (ordered after its data).
    pub stream: &'a std::sync::Arc<cudarc::driver::CudaStream>,
    /// Device address of each access's first byte.
    pub ptrs: &'a [u64],
}
