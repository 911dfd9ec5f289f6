//! `CudaBackend`: the [`MemoryBackend`] seam on a real GPU.
//!
//! - Regions are `cuMemAllocManaged` buffers from a pool (freed regions keep their buffer for
//!   reuse by size, because `cuMemFree` synchronises the device).
//! - Streams: kernels on `compute`, prefetches to the device on `h2d`, moves back and
//!   discards on `d2h` (and two for staged data, below). A prefetch records an event that the
//!   next kernel using the region waits on, so a kernel waits for data in flight instead of
//!   faulting on it; moves back and discards wait for the kernels issued before them.
//! - A kernel is the NVRTC touch kernel: it touches every 4 KiB page of its ranges as their
//!   mode says, then spins for the trace's `dur_ns`; time lost to faults adds on top.
//! - **The budget is emulated in software.** The H200 has 141 GB; to behave like a GPU of
//!   `capacity` bytes, the backend keeps its own per-2 MiB-block account of what is on the
//!   device and, when a kernel or prefetch would take it over capacity, first gives back the
//!   pages of pooled buffers (which count against the capacity too: `shed_pool`), then moves
//!   the least recently used blocks back to the host (`cuMemPrefetchAsync` to the host, on
//!   `d2h`, which the next kernel waits for), as the driver would evict under memory
//!   pressure. The report's peak footprint is the most it held, pooled pages included. A balloon
//!   allocation to shrink the GPU is not used: it would take managed memory beyond what the
//!   program needs.
//! - **Staged evictions** (`stage_out`, when the backend has staging memory): a fourth stream,
//!   `stage`, copies device-only blocks into pinned 2 MiB slots ([`StagingPool`]) after the
//!   last kernel that touched them (an event after each kernel); their managed pages are
//!   discarded on a fifth stream, `remap`, once the copy is done ([`PendingDiscard`]). Whatever
//!   needs a staged block next brings it back first: a prefetch or kernel repopulates the pages
//!   on `remap` (after the block's discard) and copies the slot in on `h2d`; a host access
//!   copies it on the CPU. The driver's page-table work for staged data (discards,
//!   repopulations) thus never runs beside itself, and is not queued behind copies.
//! - **Relocation** (where the caller allows it: a replay): a region whose every block is
//!   staged comes back into a pooled buffer of its size whose pages are on the device, as a
//!   framework's caching allocator reloads an offloaded tensor into a fresh block. The copies
//!   in need no repopulation (25-30 us per block on the H200); the region's address changes
//!   (`MemEvent::Relocated`), its old buffer goes to the pool.
//! - Its clock is the host's monotonic clock since the backend opened, minus the time spent
//!   preparing data that exists before the work (`preload_host`).
//! - Fault and migration events need CUPTI (telemetry); the counters here come from the
//!   backend's own account: bytes it prefetched, evicted and discarded, and the bytes kernels
//!   found off the device (migrated by faults). Recording events, the backend times each
//!   kernel with CUDA events (its slice, and the time beyond its `dur_ns` as the stall) and
//!   reports when the device finished the work issued before each free (`Released`), so that
//!   CUPTI's records at a pooled address can be told apart by time. Event times are the host
//!   clock since the backend opened ([`MemoryBackend::event_clock_origin`]), set-up included.

mod host;
mod kernel;
mod program;
mod ranges;
mod recording;
mod regions;
mod room;
mod staged;
mod swap;
mod to_device;

use super::timing::{HostClock, Pending, Recording, WorkMarks};
pub(in crate::backends::cuda) use ranges::host_memory_bytes;
use ranges::{coalesce, merge_pieces, resident_ranges};
use staged::PendingDiscard;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaEvent, CudaStream};
use rustc_hash::{FxHashMap, FxHashSet};

use super::staging::{Run, Slot, StagingPool};
use super::{
    cuda_err, discard_batch, prefetch_batch, CudaDevice, FreeMemory, Kernels, ManagedBuffer, TouchMode,
};
use crate::access::RangeAccess;
use crate::error::{Error, Result};
use crate::mechanism::budget::{BlockId, DeviceBudget, Victims};
use crate::mechanism::pool::Pooled;
use crate::region::RegionId;
use crate::seam::{
    block_bytes, Advice, BackendInfo, BackendKind, BackendStats, ByteRange, Destination, DeviceId,
    HostAccess, HostOp, KernelLaunch, Location, MemEvent, MemoryBackend, NativeLaunch, NativeLaunches,
    PageWork, Recorder, Residency, Transfer, WorkMark, BLOCK_SIZE, PAGE_SIZE,
};

/// A device address range as the driver's calls take it: (address, bytes).
type DevRange = (u64, u64);

/// What the backend knows of one 2 MiB block.
#[derive(Debug, Clone, Copy, Default)]
struct Block {
    /// Device memory holds (a copy of) it.
    on_device: bool,
    /// Host memory holds a valid copy.
    on_host: bool,
    read_mostly: bool,
    /// Preferred location host and accessed by the device: kernels use it in place.
    remote: bool,
    /// Order of last use (0: not on the device).
    stamp: u64,
    /// Brought to the device by a prefetch and not used by a kernel since (for the report's
    /// prefetch accuracy and timeliness).
    prefetched: bool,
    /// The staging slot holding its only copy (its managed pages are discarded).
    staged: Option<Slot>,
    /// The last kernel (the backend's count, from 1) that touched it; 0: none.
    last_kernel: u64,
    /// Staged, and its pages in the region's buffer are on the device all the same: the
    /// region moved into a pooled buffer before this block came back (`relocate_staged`). Its
    /// restore is a copy alone. Outside the account of data until then, but counted against
    /// the capacity (`spare_bytes`), as pooled pages are.
    spare: bool,
}

struct CudaRegion {
    buf: ManagedBuffer,
    bytes: u64,
    blocks: Vec<Block>,
    /// The last prefetch to the device that moved some of it; the next kernel using it waits.
    ready: Option<Arc<CudaEvent>>,
}

impl CudaRegion {
    fn block_bytes(&self, b: usize) -> u64 {
        block_bytes(self.bytes, b as u64)
    }

    fn blocks_of(&self, offset: u64, len: u64) -> std::ops::Range<usize> {
        if len == 0 {
            return 0..0;
        }
        (offset / BLOCK_SIZE) as usize..(offset + len).div_ceil(BLOCK_SIZE) as usize
    }
}

/// The CUDA backend. See the module documentation.
pub struct CudaBackend {
    dev: CudaDevice,
    kernels: Kernels,
    streams: Streams,
    staging: StagingPool,
    /// The end of each staged block's stage-out (its copy and the discard of its pages):
    /// anything that writes the block's pages again waits for it.
    staged_done: FxHashMap<BlockId, Arc<CudaEvent>>,
    /// Stage-outs whose discard is not issued yet, in order, and their blocks (see
    /// [`PendingDiscard`]).
    pending_discards: std::collections::VecDeque<PendingDiscard>,
    pending_blocks: FxHashSet<BlockId>,
    /// Clean copies: the slot of each block restored from staging and not written since
    /// (its data is still the slot's), with the event of the copy that read it, and the order
    /// they were kept in (entries may be stale). A stage-out of such a block needs no copy;
    /// a stage-out short of slots takes the oldest.
    kept: FxHashMap<BlockId, (Slot, Arc<CudaEvent>)>,
    kept_order: std::collections::VecDeque<BlockId>,
    /// An event after each recent kernel, by the backend's kernel count: a stage-out waits for
    /// the last kernel that touched its blocks, not for every kernel issued.
    kernel_marks: std::collections::VecDeque<(u64, Arc<CudaEvent>)>,
    /// Managed allocations may go past the device's free memory (never by default).
    allow_oversubscription: bool,
    /// Free device memory for the guard, read when it matters (see `FreeMemory`).
    free_memory: FreeMemory,
    regions: FxHashMap<RegionId, CudaRegion>,
    /// The emulated GPU's memory: the data, the freed buffers pooled by size for reuse (their
    /// device pages outside the data but counted against the capacity: `shed_pool`), the
    /// pages of blocks marked `spare`, and the blocks on the device, least recently used
    /// first.
    budget: DeviceBudget<ManagedBuffer, Arc<CudaEvent>>,
    /// Pooled buffers whose pages were given back (`shed_pool`): they hold no memory, and are
    /// freed when the device is next synchronised anyway (`cuMemFree` synchronises it).
    retired: Vec<ManagedBuffer>,
    /// A region whose every block is staged may come back into another buffer (see
    /// `relocate_staged`); off unless the caller allows it.
    relocate: bool,
    /// Room for a program's outputs is made by staged evictions (see `program.rs`); off, by
    /// the emulated driver's migrations.
    staged_room: bool,
    stats: BackendStats,
    /// Where the host's time and the emulated driver's work went (logged when it closes).
    log: BackendLog,
    /// The clock since it opened, set-up (staging, preloading data) taken off.
    clock: HostClock,
    /// Marks of the work before each step, timed at the end.
    work_marks: WorkMarks,
    /// The events asked for (telemetry), and the device-timed ones waiting for the device to
    /// reach them, while the recorder is on.
    recorder: Recorder,
    recording: Option<Recording>,
    /// Events no longer held, recorded again for later marks.
    marks: super::marks::Marks,
    /// The kernels the program enqueues on its own streams (see `program.rs`).
    program: program::ProgramState,
    info: BackendInfo,
    /// The pace a replayed program issued its kernels at.
    pace: crate::mechanism::pace::IssuePace,
}

/// The backend's streams. Kernels run on `compute`, prefetches to the device on `h2d`, moves
/// back and discards on `d2h`.
struct Streams {
    compute: Arc<CudaStream>,
    h2d: Arc<CudaStream>,
    d2h: Arc<CudaStream>,
    /// Staged evictions: the copies into pinned memory.
    stage: Arc<CudaStream>,
    /// The driver's page-table work for staged blocks: their discards after their stage-out,
    /// and their repopulation before their copy back (see [`PendingDiscard`]).
    remap: Arc<CudaStream>,
}

/// What the backend logs at `info` when it closes: where the host's time and the emulated
/// driver's work went.
#[derive(Debug, Default)]
struct BackendLog {
    /// Full synchronisations: how many, the host's wait in them, and the retired buffers freed
    /// after them.
    sync: SyncLog,
    /// Pooled buffers shed, and the device bytes they gave back.
    shed_buffers: u64,
    shed_bytes: u64,
    /// Restores that moved a region into a pooled buffer, and the bytes they found on the device.
    relocations: u64,
    relocated_resident: u64,
    /// Regions swapped out (their buffer pooled with its pages), and swapped back when shed.
    swaps: u64,
    swaps_back: u64,
    /// Runs of read-mostly blocks whose advice was unset as their region moved to another
    /// buffer.
    advice_dropped: u64,
    /// Allocations served by the pool (`BackendStats::new_buffers` counts the others).
    pool_hits: u64,
    /// Kernels that waited for a prefetch in flight.
    kernel_waits: u64,
    /// Short kernels launched to hold an idle stream ahead of a prefetch call, and prefetch
    /// calls that found their stream busy and needed none.
    holds: u64,
    holds_skipped: u64,
    /// Bytes the emulated driver evicted, by what needed the room.
    room_evicted: RoomEvicted,
    /// Bytes a staged eviction was asked for that were not on the device.
    stage_absent: u64,
    /// Bytes a stage-out migrated instead: of blocks with a valid host copy or a remote mapping
    /// (nothing to copy), and for want of a free staging slot.
    stage_migrated_host_copy: u64,
    stage_migrated_no_slot: u64,
    /// Where a stage-out's host time goes.
    stage: StageLog,
}

/// Stage-outs that staged or dropped blocks, and the blocks they copied (their host time by
/// part is in `BackendStats::move_parts`).
#[derive(Debug, Default)]
pub(super) struct StageLog {
    pub(super) calls: u64,
    pub(super) blocks: u64,
}

impl StageLog {
    fn describe(&self, t: &crate::seam::MoveHostTime) -> String {
        let ms = |ns: u64| ns as f64 / 1e6;
        format!(
            "stage-outs: {} calls, slots {:.1} ms, pinning {:.1} ms, ordering {:.1} ms, swaps {:.1} ms, copies of {} blocks enqueued in {:.1} ms; discards issued {:.1} ms; restores: holding kernels launched {:.1} ms, pages populated {:.1} ms, repopulated {:.1} ms, copies enqueued {:.1} ms",
            self.calls,
            ms(t.slots),
            ms(t.pinning),
            ms(t.order),
            ms(t.swaps),
            self.blocks,
            ms(t.copies_out),
            ms(t.discards),
            ms(t.holds),
            ms(t.populate),
            ms(t.repopulate),
            ms(t.copies_in),
        )
    }
}

/// Bytes the emulated driver evicted, by what needed the room.
#[derive(Debug, Default)]
struct RoomEvicted {
    /// A prefetch the policy asked for.
    prefetch: u64,
    /// A kernel's own data.
    kernel: u64,
    /// Staged data a kernel needs that no prefetch brought back.
    restore: u64,
}

impl RoomEvicted {
    fn add(&mut self, site: RoomSite, bytes: u64) {
        *match site {
            RoomSite::Prefetch => &mut self.prefetch,
            RoomSite::Kernel => &mut self.kernel,
            RoomSite::Restore => &mut self.restore,
        } += bytes;
    }
}

/// Kernel marks kept for stage-outs to wait on (`CudaBackend::kernel_marks`).
const KERNEL_MARKS: usize = 4096;

/// How long the kernel queued ahead of a prefetch call on an idle stream runs, so that the
/// driver finds the stream busy and defers the work instead of holding the host for it (see
/// `bring_to_device` and `hold`).
pub(super) const HOLD_NS: u64 = 20_000;

/// A block whose only copy is in a staging slot.
#[derive(Debug, Clone, Copy)]
struct StagedBlock {
    block: BlockId,
    slot: Slot,
}

/// See `CudaBackend::sync_log`.
#[derive(Debug, Default)]
struct SyncLog {
    count: u64,
    wait_ns: u64,
    freed: u64,
    free_ns: u64,
}

/// What made the emulated driver make room (for the log of where its evictions came from).
#[derive(Debug, Clone, Copy)]
enum RoomSite {
    /// A prefetch the policy asked for.
    Prefetch,
    /// A kernel's own data.
    Kernel,
    /// Staged data a kernel needs that no prefetch brought back.
    Restore,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend").field("device", &self.dev.capabilities().name).finish()
    }
}

impl CudaBackend {
    /// Opens device `ordinal`, emulating a GPU of `capacity` bytes. Errors (never panics)
    /// without a driver or device: "no CUDA device".
    pub fn open(ordinal: usize, capacity: u64, allow_oversubscription: bool) -> Result<Self> {
        let dev = CudaDevice::open(ordinal)?;
        let c = dev.capabilities();
        let info = BackendInfo {
            kind: BackendKind::Cuda,
            description: format!(
                "{} (CUDA driver {}, compute {}.{}), budget emulated in software",
                c.name, c.driver_version, c.compute_capability.0, c.compute_capability.1
            ),
            capacity,
            staging_bytes: 0,
            records_faults: false,
            clock_origin: None,
        };
        let kernels = Kernels::load(&dev)?;
        let (compute, h2d, d2h) = (dev.new_stream()?, dev.new_stream()?, dev.new_stream()?);
        let (stage, remap) = (dev.new_stream()?, dev.new_stream()?);
        let staging = StagingPool::new(&dev, 0);
        // Warm up: the first launch loads the module lazily.
        kernels.touch(&compute, &[], 1, 0)?;
        compute.synchronize().map_err(cuda_err("cuStreamSynchronize", "warm-up"))?;
        let start = Instant::now();
        let info = BackendInfo { clock_origin: Some(start), ..info };
        Ok(Self {
            dev,
            kernels,
            streams: Streams { compute, h2d, d2h, stage, remap },
            staging,
            staged_done: FxHashMap::default(),
            pending_discards: std::collections::VecDeque::new(),
            pending_blocks: FxHashSet::default(),
            kept: FxHashMap::default(),
            kept_order: std::collections::VecDeque::new(),
            kernel_marks: Default::default(),
            allow_oversubscription,
            free_memory: FreeMemory::default(),
            regions: FxHashMap::default(),
            budget: DeviceBudget::new(capacity),
            retired: Vec::new(),
            relocate: false,
            staged_room: false,
            stats: BackendStats::default(),
            log: BackendLog::default(),
            clock: HostClock::new(start),
            work_marks: WorkMarks::default(),
            recorder: Recorder::default(),
            recording: None,
            marks: Default::default(),
            program: Default::default(),
            info,
            pace: Default::default(),
        })
    }

    /// The same backend with up to `bytes` of pinned staging memory for staged evictions, of
    /// which `reserve` bytes are pinned now (set-up, off the clock). Without the driver's
    /// discard (CUDA 13) there is no staging: the managed pages would stay on the device.
    pub fn with_staging(mut self, bytes: u64, reserve: u64) -> Result<Self> {
        if !self.dev.capabilities().discard_batch {
            tracing::info!("no cuMemDiscardBatchAsync on this driver: evictions migrate, none is staged");
            return Ok(self);
        }
        // Pinned memory is taken from the host's RAM and cannot be swapped: at most half of it.
        let bytes = match host_memory_bytes() {
            Some(total) if bytes > total / 2 => {
                tracing::info!(
                    "staging capped at half the host's memory: {} of {} bytes asked",
                    total / 2,
                    bytes
                );
                total / 2
            }
            _ => bytes,
        };
        let t0 = Instant::now();
        self.staging = StagingPool::new(&self.dev, bytes);
        self.staging.reserve(reserve)?;
        self.info.staging_bytes = self.staging.capacity();
        self.clock.exclude_since(t0);
        Ok(self)
    }

    /// The same backend, letting restores bring a region whose every block is staged back into
    /// a pooled buffer of its size whose pages are on the device (at another address): only for
    /// a caller that finds data by region, never by an address it kept (a replay). Off by
    /// default.
    pub fn with_relocation(mut self, on: bool) -> Self {
        self.relocate = on;
        self
    }

    /// The same backend, making the room for a program's outputs
    /// ([`ProgramStreams::wrote`](crate::seam::ProgramStreams::wrote)) by staged evictions of
    /// the least recently used blocks, as a policy's own evictions are made, where staging
    /// memory is configured: for a runtime whose policy stages its evictions. Off (the
    /// default, and the driver alone) the emulated driver migrates them, which on the H200
    /// holds the calling thread at the migration's rate.
    pub fn with_staged_room(mut self, on: bool) -> Self {
        self.staged_room = on;
        self
    }

    /// The device this backend runs on.
    fn ordinal(&self) -> DeviceId {
        DeviceId(self.dev.ordinal() as u32)
    }

    /// The opened device.
    pub fn device(&self) -> &CudaDevice {
        &self.dev
    }

    /// The managed buffer behind a region (for tests that check data and range attributes).
    pub fn buffer(&self, id: RegionId) -> Result<&ManagedBuffer> {
        Ok(&self.region(id)?.buf)
    }

    /// Runs `f`, adding its host time to the counter of `op`.
    fn timed<T>(&mut self, op: HostOp, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let t0 = Instant::now();
        let out = f(self);
        self.stats.host.add(op, t0.elapsed().as_nanos() as u64);
        out
    }

    /// Runs `f`, its host time added to the part of the data moves that `part` picks
    /// (`BackendStats::move_parts`).
    fn timed_part<T>(
        &mut self,
        part: fn(&mut crate::seam::MoveHostTime) -> &mut u64,
        f: impl FnOnce(&mut Self) -> T,
    ) -> T {
        let t0 = Instant::now();
        let out = f(self);
        *part(&mut self.stats.move_parts) += t0.elapsed().as_nanos() as u64;
        out
    }

    fn region(&self, id: RegionId) -> Result<&CudaRegion> {
        self.regions.get(&id).ok_or(Error::UnknownRegion(id))
    }

    fn checked(&self, id: RegionId, offset: u64, len: u64) -> Result<()> {
        crate::seam::check_range(id, offset, len, self.region(id)?.bytes)
    }

    /// Issues every pending discard, then waits for the device.
    fn sync_all(&mut self) -> Result<()> {
        self.issue_discards(true)?;
        let t0 = Instant::now();
        self.dev.synchronize()?;
        let t1 = Instant::now();
        // The device is idle: freeing the retired buffers costs no synchronisation now, and a
        // long-running program does not keep one per shed buffer.
        let freed = self.retired.len() as u64;
        self.retired.clear();
        let s = &mut self.log.sync;
        s.count += 1;
        s.wait_ns += (t1 - t0).as_nanos() as u64;
        s.freed += freed;
        s.free_ns += t1.elapsed().as_nanos() as u64;
        Ok(())
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Where the host's time went (`log.level = "info"` shows it): hints are synchronous
        // work for the host, and this says which.
        let parts: Vec<String> = (self.stats.host.parts().into_iter())
            .chain([("of which making room", self.stats.move_parts.room)])
            .map(|(op, ns)| format!("{op} {:.1} ms", ns as f64 / 1e6))
            .collect();
        tracing::info!(
            "cuda backend host time: {}; set-up (off the clock) {:.1} ms; allocations: {} from the pool, {} new; {} restores relocated, {:.1} MB into pages on the device; {} regions swapped out, {} back; read-mostly advice dropped by moves {} times; {} pooled buffers shed ({:.1} MB); {} kernel waits for prefetches; {} prefetch ranges, {} streams held ahead of a call and {} busy already; emulated driver evictions {:.1} MB for prefetches, {:.1} MB for kernels, {:.1} MB for staged data kernels needed; {:.1} MB asked to stage were not on the device; stage-outs migrated {:.1} MB with a host copy or remote and {:.1} MB for want of a slot (staging {:.1} MB, {:.1} MB pinned); {} full synchronisations waited {:.1} ms, then freed {} retired buffers in {:.1} ms; {}",
            parts.join(", "),
            self.clock.excluded_ns() as f64 / 1e6,
            self.log.pool_hits,
            self.stats.new_buffers,
            self.log.relocations,
            self.log.relocated_resident as f64 / 1e6,
            self.log.swaps,
            self.log.swaps_back,
            self.log.advice_dropped,
            self.log.shed_buffers,
            self.log.shed_bytes as f64 / 1e6,
            self.log.kernel_waits,
            self.stats.prefetch_ranges,
            self.log.holds,
            self.log.holds_skipped,
            self.log.room_evicted.prefetch as f64 / 1e6,
            self.log.room_evicted.kernel as f64 / 1e6,
            self.log.room_evicted.restore as f64 / 1e6,
            self.log.stage_absent as f64 / 1e6,
            self.log.stage_migrated_host_copy as f64 / 1e6,
            self.log.stage_migrated_no_slot as f64 / 1e6,
            self.staging.capacity() as f64 / 1e6,
            self.staging.pinned() as f64 / 1e6,
            self.log.sync.count,
            self.log.sync.wait_ns as f64 / 1e6,
            self.log.sync.freed,
            self.log.sync.free_ns as f64 / 1e6,
            self.log.stage.describe(&self.stats.move_parts),
        );
    }
}

impl MemoryBackend for CudaBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn allocate(&mut self, id: RegionId, bytes: u64) -> Result<u64> {
        self.alloc_region(id, bytes)
    }

    fn free(&mut self, id: RegionId) -> Result<()> {
        self.free_region(id)
    }

    fn advise(&mut self, range: ByteRange, advice: Advice) -> Result<()> {
        self.advise_range(range, advice)
    }

    fn migrate(&mut self, ranges: &[ByteRange], to: Destination) -> Result<()> {
        match to {
            Destination::Device(d) if d == self.ordinal() => {
                self.prefetch_ranges(ranges, Location::Device(d))
            }
            Destination::Device(other) => Err(Error::InvalidArgument(format!(
                "this backend runs on device {}; asked for device {}",
                self.ordinal().0,
                other.0
            ))),
            Destination::Host => self.prefetch_ranges(ranges, Location::Host),
            Destination::HostStaged => self.stage_ranges(ranges),
            // Staging buffers hold evicted data only: there is no host copy to write.
            Destination::HostCopy => ranges.iter().try_for_each(|r| self.checked(r.region, r.offset, r.len)),
        }
    }

    fn discard(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.discard_ranges(ranges)
    }

    fn launch(&mut self, kernel: &KernelLaunch<'_>) -> Result<()> {
        self.launch_kernel(kernel)
    }

    fn host_access(&mut self, access: HostAccess<'_>) -> Result<()> {
        match access {
            HostAccess::Touch(accesses) => self.touch_host(accesses),
            HostAccess::Preload(range) => self.preload(range),
        }
    }

    fn copy(&mut self, id: RegionId, offset: u64, transfer: Transfer<'_>) -> Result<()> {
        match transfer {
            Transfer::HostRead(buf) => self.host_read(id, offset, buf),
            Transfer::HostWrite(data) => self.host_write(id, offset, data),
            Transfer::KernelRead(buf) => self.view(id, offset, buf),
            Transfer::KernelWrite(data) => self.store(id, offset, data),
        }
    }

    fn program_host_time(&mut self, host_ns: u64) {
        self.pace.wait(host_ns);
    }

    fn synchronize(&mut self) -> Result<u64> {
        self.sync()
    }

    fn mark_work(&mut self) -> Result<WorkMark> {
        self.work_marks.mark(&self.streams.compute, &self.clock)
    }

    fn work_mark_ns(&mut self, mark: WorkMark) -> Result<u64> {
        self.work_marks.time(mark)
    }

    fn residency(&self, range: ByteRange) -> Result<Residency> {
        self.residency_of(range)
    }

    fn stats(&self) -> BackendStats {
        BackendStats { staging_pinned_bytes: self.staging.pinned(), ..self.budget.report(self.stats) }
    }

    fn events(&mut self) -> &mut Recorder {
        self.resolve_recorded();
        &mut self.recorder
    }

    fn native(&mut self) -> Option<&mut dyn NativeLaunches> {
        Some(self)
    }

    fn program_streams(&mut self) -> Option<&mut dyn crate::seam::ProgramStreams> {
        Some(self)
    }
}

impl NativeLaunches for CudaBackend {
    fn launch_native(
        &mut self,
        kernel: &KernelLaunch<'_>,
        native: &mut dyn FnMut(&NativeLaunch<'_>) -> Result<()>,
    ) -> Result<()> {
        self.run_native(kernel, native)
    }
}

impl CudaBackend {}
