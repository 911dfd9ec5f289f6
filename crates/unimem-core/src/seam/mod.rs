//! The seam between decisions and hardware. A backend takes orders (allocate and free, move
//! and copy, advise, discard, launch, host access, synchronize) and reports what happened; it
//! makes no decisions. Everything above it (policies, replay, runtime, tensors) is written once
//! for every backend; nothing below it knows about policies or configuration.

mod event;
mod program;
mod recorder;

use std::fmt;

pub use event::{
    BackendStats, Direction, HintKind, HostOp, HostTime, MemEvent, MigrationCause, MoveHostTime, PageWork,
    RemoteMapCause,
};
pub use program::{ProgramStream, ProgramStreams};
pub use recorder::Recorder;

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
/// `len` bytes at `offset` lie inside region `id` of `size` bytes: every backend's check of
/// a range it is given.
pub(crate) fn check_range(id: RegionId, offset: u64, len: u64, size: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(crate::Error::OutOfRange { region: id, offset, len, size }),
    }
}

pub(crate) fn check_new_region(id: RegionId, bytes: u64, in_use: bool) -> Result<()> {
    if bytes == 0 {
        return Err(crate::Error::Allocation { bytes, reason: "regions must be at least 1 byte".into() });
    }
    if in_use {
        return Err(crate::Error::InvalidArgument(format!("region {id} is already allocated")));
    }
    Ok(())
}

/// A GPU of the machine, by its CUDA ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DeviceId(pub u32);

/// Where data can live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Location {
    /// Host RAM.
    Host,
    /// The memory of a GPU.
    Device(DeviceId),
}

impl Location {
    /// The first GPU: the one every backend has.
    pub const DEVICE: Location = Location::Device(DeviceId(0));
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Host => f.write_str("host"),
            Location::Device(DeviceId(0)) => f.write_str("device"),
            Location::Device(DeviceId(n)) => write!(f, "device:{n}"),
        }
    }
}

impl serde::Serialize for Location {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Location {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.as_str() {
            "host" => Ok(Location::Host),
            "device" => Ok(Location::DEVICE),
            other => other
                .strip_prefix("device:")
                .and_then(|n| n.parse().ok())
                .map(|n| Location::Device(DeviceId(n)))
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "unknown location `{other}`; allowed: host, device, device:N"
                    ))
                }),
        }
    }
}

/// Where [`MemoryBackend::migrate`] moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Destination {
    /// To a GPU, ahead of its use.
    Device(DeviceId),
    /// Back to host RAM (a migration).
    Host,
    /// Off the device through the backend's pinned staging buffers: data only the device holds
    /// is copied into pinned host memory by the copy engine (52.3 GB/s on the H200) and its
    /// device pages dropped, instead of being migrated back at 10-17 GB/s. It comes back before
    /// the next prefetch, kernel or host access that touches it. What the buffers cannot hold,
    /// and data with a valid host copy, moves as [`Destination::Host`] does; so does all of it
    /// on a backend without staging.
    HostStaged,
    /// A copy of the device's data written back into the backend's pinned staging memory
    /// through the copy engine, the data staying on the device: a later staged eviction of
    /// data no kernel wrote since copies nothing, so it frees its room once the block's
    /// kernels and this copy are done instead of waiting for the link. Data with a valid host
    /// copy copies nothing. A backend without host copies of device data (managed memory,
    /// whose staging buffers hold only evicted data) does nothing.
    HostCopy,
}

impl From<Location> for Destination {
    fn from(to: Location) -> Self {
        match to {
            Location::Host => Destination::Host,
            Location::Device(d) => Destination::Device(d),
        }
    }
}

/// What the host does to a region's data ([`MemoryBackend::host_access`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum HostAccess<'a> {
    /// The CPU touches ranges as their modes say (after the device is done with them).
    Touch(&'a [RangeAccess]),
    /// A range holds data produced before the work being run (weights, inputs the program
    /// loaded), so it starts valid on the host. Set-up: it costs nothing on the backend's clock.
    Preload(ByteRange),
}

/// Bytes copied between a region and a buffer of the caller's ([`MemoryBackend::copy`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum Transfer<'a> {
    /// The host reads them (the pages become host-valid first, as a CPU access would).
    HostRead(&'a mut [u8]),
    /// The host writes them (likewise).
    HostWrite(&'a [u8]),
    /// As the kernel just launched sees them, moving nothing: for a kernel the host executes
    /// on the kernel's behalf (the launch has placed the data).
    KernelRead(&'a mut [u8]),
    /// As that kernel writes them, moving nothing.
    KernelWrite(&'a [u8]),
}

/// What a backend is, fixed when it is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendInfo {
    /// Which backend this is.
    pub kind: BackendKind,
    /// The device or model in words (e.g. the calibration profile's name).
    pub description: String,
    /// Device memory the backend may use for managed data (the emulated GPU's size).
    pub capacity: u64,
    /// Pinned host memory it may stage evicted data in (0: no staging).
    pub staging_bytes: u64,
    /// Whether recorded events include faults as they happen (the simulator's do; on a GPU
    /// they come from CUPTI, outside the backend). A policy learning from faults needs them.
    pub records_faults: bool,
    /// For a backend on real time (CUDA), the instant its event times count from, so that
    /// events of another source on the machine (CUPTI) can be put on the same clock; `None`
    /// for a simulated clock.
    pub clock_origin: Option<std::time::Instant>,
}

/// A usage hint for a range, as `cudaMemAdvise` takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
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

/// A 2 MiB block of a region: the unit of the driver's eviction and advice, and of the
/// placing policies' plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId {
    /// The region.
    pub region: RegionId,
    /// The block's index in it.
    pub block: u32,
}

impl BlockId {
    /// Block `block` of `region`.
    pub fn new(region: RegionId, block: usize) -> Self {
        Self { region, block: block as u32 }
    }
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

/// The byte ranges of `blocks` of regions whose sizes `bytes` gives, in address order, a run
/// of a region's contiguous blocks as one range (as [`push_merged`] merges them).
pub(crate) fn block_ranges(mut blocks: Vec<BlockId>, bytes: impl Fn(RegionId) -> u64) -> Vec<ByteRange> {
    blocks.sort_unstable();
    let mut out: Vec<ByteRange> = Vec::new();
    for BlockId { region, block } in blocks {
        let b = u64::from(block);
        push_merged(
            &mut out,
            ByteRange { region, offset: b * BLOCK_SIZE, len: block_bytes(bytes(region), b) },
        );
    }
    out
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
    /// instead of a migration; see [`MemoryBackendExt::stage_out`]).
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
#[non_exhaustive]
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

/// A point in the work a backend issued ([`MemoryBackend::mark_work`]): the simulator's is
/// the time that work completes; a GPU backend's names an event it times later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkMark(pub u64);

/// Orders a backend executes: the seam between decisions and hardware. Times are nanoseconds
/// on the backend's clock (virtual for the simulator, host monotonic for CUDA). Migrations,
/// advice and discards are hints in spirit, but a backend reports misuse (unknown region,
/// range past the end) as an error. [`MemoryBackendExt`] adds the conveniences every caller
/// shares.
pub trait MemoryBackend: Send {
    /// What the backend is.
    fn info(&self) -> &BackendInfo;

    /// Creates a managed region of `bytes` bytes under `id`; returns its base address.
    fn allocate(&mut self, id: RegionId, bytes: u64) -> Result<u64>;

    /// Releases a region; its contents are dead.
    fn free(&mut self, id: RegionId) -> Result<()>;

    /// Applies a usage hint to a range.
    fn advise(&mut self, range: ByteRange, advice: Advice) -> Result<()>;

    /// Moves ranges to `to` asynchronously, in one batched call. Later kernels wait for data
    /// in flight instead of faulting on it.
    fn migrate(&mut self, ranges: &[ByteRange], to: Destination) -> Result<()>;

    /// Declares ranges dead: their pages are dropped on both sides without any transfer.
    fn discard(&mut self, ranges: &[ByteRange]) -> Result<()>;

    /// Launches a kernel on the compute stream.
    fn launch(&mut self, kernel: &KernelLaunch<'_>) -> Result<()>;

    /// The host touches data, or declares what starts on the host.
    fn host_access(&mut self, access: HostAccess<'_>) -> Result<()>;

    /// Copies bytes between region `id` (from `offset`) and the caller's buffer.
    fn copy(&mut self, id: RegionId, offset: u64, transfer: Transfer<'_>) -> Result<()>;

    /// Waits for all issued work; returns the backend clock afterwards.
    fn synchronize(&mut self) -> Result<u64>;

    /// Marks the end of the kernels and host accesses issued so far (not the transfers still
    /// in flight on copy streams), without waiting for them: a replay marks where each step
    /// begins. [`Self::work_mark_ns`] says when that work completed.
    fn mark_work(&mut self) -> Result<WorkMark>;

    /// When the work before `mark` completed, on the backend clock. Call it once the work is
    /// done (after [`Self::synchronize`]): a GPU backend times the mark when the device has
    /// passed it, and waits for that here if it has not.
    fn work_mark_ns(&mut self, mark: WorkMark) -> Result<u64>;

    /// The caller's own work between calls (a policy's planning) took `wall_ns` of host time,
    /// wall clock, its calls to this backend included. A backend on real time needs nothing:
    /// the time passed on its clock. The simulator charges it, less its own time in those
    /// calls, where it was opened to.
    fn host_work(&mut self, _wall_ns: u64) {}

    /// The program spent `host_ns` of its own host time between issuing its previous kernel
    /// and its next (a recorded trace's `host_ns`; 0 where the trace has none): that kernel is
    /// issued no sooner than `host_ns` after the previous call, and the caller's work between
    /// the calls (a policy's hints) counts toward it. The simulator moves its host clock; a
    /// backend on real time waits on the host.
    fn program_host_time(&mut self, host_ns: u64);

    /// Where the bytes of a range are.
    fn residency(&self, range: ByteRange) -> Result<Residency>;

    /// Counters since creation.
    fn stats(&self) -> BackendStats;

    /// Every fault and migration as a [`MemEvent`], when recording is on (off by default:
    /// counters are always kept).
    fn events(&mut self) -> &mut Recorder;

    /// The backend's native kernels, where it runs them (CUDA).
    fn native(&mut self) -> Option<&mut dyn NativeLaunches> {
        None
    }

    /// Ordering with kernels the program launches on its own streams, where the backend
    /// supports it.
    fn program_streams(&mut self) -> Option<&mut dyn ProgramStreams> {
        None
    }
}

/// What every caller of a backend shares, written once over the seam's methods.
pub trait MemoryBackendExt: MemoryBackend {
    /// Which backend this is.
    fn kind(&self) -> BackendKind {
        self.info().kind
    }

    /// The device or model in words.
    fn describe(&self) -> &str {
        &self.info().description
    }

    /// Device memory the backend may use for managed data.
    fn device_capacity(&self) -> u64 {
        self.info().capacity
    }

    /// Pinned host memory the backend may stage evicted data in (0: no staging).
    fn staging_capacity(&self) -> u64 {
        self.info().staging_bytes
    }

    /// Whether recorded events include faults as they happen.
    fn records_faults(&self) -> bool {
        self.info().records_faults
    }

    /// Where the clock of a real-time backend's events starts (see [`BackendInfo`]).
    fn event_clock_origin(&self) -> Option<std::time::Instant> {
        self.info().clock_origin
    }

    /// Moves ranges to `to` (see [`MemoryBackend::migrate`]).
    fn prefetch(&mut self, ranges: &[ByteRange], to: Location) -> Result<()> {
        self.migrate(ranges, to.into())
    }

    /// Evicts ranges through the staging buffers (see [`Destination::HostStaged`]).
    fn stage_out(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.migrate(ranges, Destination::HostStaged)
    }

    /// Writes ranges back to the staging memory, keeping them on the device (see
    /// [`Destination::HostCopy`]).
    fn write_back(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.migrate(ranges, Destination::HostCopy)
    }

    /// The CPU touches ranges.
    fn touch_on_host(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        self.host_access(HostAccess::Touch(accesses))
    }

    /// A range starts valid on the host (see [`HostAccess::Preload`]).
    fn preload_host(&mut self, range: ByteRange) -> Result<()> {
        self.host_access(HostAccess::Preload(range))
    }

    /// Host read of region bytes.
    fn read(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.copy(id, offset, Transfer::HostRead(buf))
    }

    /// Host write of region bytes.
    fn write(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        self.copy(id, offset, Transfer::HostWrite(data))
    }

    /// Region bytes as the kernel just launched sees them.
    fn kernel_view(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.copy(id, offset, Transfer::KernelRead(buf))
    }

    /// Region bytes as the kernel just launched writes them.
    fn kernel_store(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        self.copy(id, offset, Transfer::KernelWrite(data))
    }

    /// Bytes of managed data resident on the device now.
    fn device_resident_bytes(&self) -> u64 {
        self.stats().device_bytes
    }

    /// Turns per-event recording on or off.
    fn record_events(&mut self, on: bool) {
        self.events().set_recording(on)
    }

    /// Moves the recorded events into `out`.
    fn drain_events(&mut self, out: &mut Vec<MemEvent>) {
        self.events().drain(out)
    }

    /// The 2 MiB blocks of region `id` (of `bytes` bytes) that hold pages on the device: which
    /// pages of a new region came from the pool.
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
}

impl<B: MemoryBackend + ?Sized> MemoryBackendExt for B {}

/// A backend that runs real GPU kernels.
pub trait NativeLaunches {
    /// Launches a real GPU kernel over `kernel`'s accesses: the backend waits for their data
    /// and makes room as for [`MemoryBackend::launch`], then `native` enqueues the kernel on
    /// the compute stream it is given, with the device address of each access.
    fn launch_native(
        &mut self,
        kernel: &KernelLaunch<'_>,
        native: &mut dyn FnMut(&NativeLaunch<'_>) -> Result<()>,
    ) -> Result<()>;
}

/// What a native kernel launch is given: the compute stream and the device address of each
/// declared access, in declaration order.
pub struct NativeLaunch<'a> {
    /// The stream the kernel must be enqueued on (ordered after its data).
    pub stream: &'a std::sync::Arc<cudarc::driver::CudaStream>,
    /// Device address of each access's first byte.
    pub ptrs: &'a [u64],
}
