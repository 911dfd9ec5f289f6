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
use crate::mechanism::budget::{BlockId, DeviceBudget};
use crate::mechanism::pool::Pooled;
use crate::region::RegionId;
use crate::seam::{
    block_bytes, Advice, BackendInfo, BackendKind, BackendStats, ByteRange, Destination, DeviceId,
    HostAccess, HostOp, KernelLaunch, Location, MemEvent, MemoryBackend, NativeLaunch, NativeLaunches,
    Recorder, Residency, Transfer, BLOCK_SIZE, PAGE_SIZE,
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
    compute: Arc<CudaStream>,
    h2d: Arc<CudaStream>,
    d2h: Arc<CudaStream>,
    /// Staged evictions: the copies into pinned memory.
    stage: Arc<CudaStream>,
    /// The driver's page-table work for staged blocks: their discards after their stage-out,
    /// and their repopulation before their copy back (see [`PendingDiscard`]).
    remap: Arc<CudaStream>,
    staging: StagingPool,
    /// The end of each staged block's stage-out (its copy and the discard of its pages):
    /// anything that writes the block's pages again waits for it.
    staged_done: FxHashMap<BlockId, Arc<CudaEvent>>,
    /// Stage-outs whose discard is not issued yet, in order, and their blocks (see
    /// [`PendingDiscard`]).
    pending_discards: std::collections::VecDeque<PendingDiscard>,
    pending_blocks: FxHashSet<BlockId>,
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
    /// Full synchronisations: how many, the host's wait in them, and the retired buffers freed
    /// after them (logged at `info` when the backend closes).
    sync_log: SyncLog,
    /// Pooled buffers shed, and the device bytes they gave back.
    shed: (u64, u64),
    /// A region whose every block is staged may come back into another buffer (see
    /// `relocate_staged`); off unless the caller allows it.
    relocate: bool,
    /// Restores that moved a region into a pooled buffer, and the bytes they found on the device.
    relocations: u64,
    relocated_resident: u64,
    stats: BackendStats,
    start: Instant,
    /// Host time spent on set-up (preloading data), not counted on the clock.
    excluded_ns: u64,
    /// Host time spent making room (inside the calls that needed it; logged at `info` when
    /// the backend closes, with `stats.host`).
    make_room_ns: u64,
    /// Allocations served by the pool / by a new `cuMemAllocManaged`.
    pool_hits: u64,
    new_buffers: u64,
    /// Kernels that waited for a prefetch in flight.
    kernel_waits: u64,
    /// Bytes the emulated driver evicted, by what needed the room (`RoomSite`).
    room_evicted: [u64; 3],
    /// Bytes a staged eviction was asked for that were not on the device.
    stage_absent: u64,
    /// Bytes a stage-out moved by migration instead: [a valid host copy or a remote mapping
    /// (nothing to copy), no free staging slot].
    stage_migrated: [u64; 2],
    /// The events asked for (telemetry), and the device-timed ones waiting for the device to
    /// reach them, while the recorder is on.
    recorder: Recorder,
    recording: Option<Recording>,
    /// A relocation allowed (`with_relocation`).
    info: BackendInfo,
}

/// GPU-timed events waiting for the device to reach them.
struct Recording {
    /// A completed event and its time on the event clock: other events are timed from it.
    reference: CudaEvent,
    reference_ns: u64,
    pending: std::collections::VecDeque<Pending>,
    /// Events whose times were read, recorded again rather than created anew (creating and
    /// destroying two to three events per kernel was host time on the critical path).
    spare: Vec<CudaEvent>,
    /// Pending events are looked at again once there are this many (or at a synchronize):
    /// querying events after every operation would be driver calls on the critical path,
    /// contending with fault handling, for times nobody needs before the replay ends.
    next_resolve_at: usize,
}

/// Kernel marks kept for stage-outs to wait on (`CudaBackend::kernel_marks`).
const KERNEL_MARKS: usize = 4096;

/// How long the kernel queued ahead of a repopulation runs, so that the driver finds the
/// stream busy and defers the work instead of holding the host for it (see `bring_to_device`).
pub(super) const HOLD_NS: u64 = 20_000;

/// Pending timed events looked at in one go (see `Recording::next_resolve_at`).
const RESOLVE_BATCH: usize = 512;

enum Pending {
    Kernel {
        name: String,
        dur_ns: u64,
        start: CudaEvent,
        end: CudaEvent,
    },
    /// One mark per stream, recorded at the free.
    Released {
        region: RegionId,
        marks: [CudaEvent; 4],
    },
    /// Copies through the staging buffers (CUPTI's unified-memory counters do not see them):
    /// (region, offset, bytes) of each block, timed together; they share the interval.
    Staging {
        dir: crate::seam::Direction,
        blocks: Vec<(RegionId, u64, u64)>,
        start: CudaEvent,
        end: CudaEvent,
    },
}

impl Recording {
    /// Time of a completed event on the event clock.
    fn time_of(&self, ev: &CudaEvent) -> u64 {
        // elapsed_ms is an f32 of milliseconds: about 1 us resolution over a 10 s replay.
        let ms = self.reference.elapsed_ms(ev).unwrap_or(0.0) as f64;
        self.reference_ns + (ms.max(0.0) * 1e6) as u64
    }

    /// Records a timing event on `stream`, reusing a spare one where there is one.
    fn mark(&mut self, stream: &CudaStream) -> Result<CudaEvent> {
        match self.spare.pop() {
            Some(ev) => {
                ev.record(stream).map_err(cuda_err("cuEventRecord", "telemetry mark"))?;
                Ok(ev)
            }
            None => mark(stream),
        }
    }

    /// Moves the pending events the device has reached, in order, into `out`.
    fn resolve(&mut self, out: &mut Vec<MemEvent>) {
        while let Some(front) = self.pending.front() {
            let done = match front {
                Pending::Kernel { end, .. } | Pending::Staging { end, .. } => end.is_complete(),
                Pending::Released { marks, .. } => marks.iter().all(|m| m.is_complete()),
            };
            if !done {
                return;
            }
            match self.pending.pop_front().expect("front exists") {
                Pending::Kernel { name, dur_ns, start, end } => {
                    let (start_ns, end_ns) = (self.time_of(&start), self.time_of(&end));
                    let end_ns = end_ns.max(start_ns);
                    let stall_ns = (end_ns - start_ns).saturating_sub(dur_ns);
                    out.push(MemEvent::Kernel { name, start_ns, end_ns, stall_ns });
                    self.spare.extend([start, end]);
                }
                Pending::Staging { dir, blocks, start, end } => {
                    let (start_ns, end_ns) = (self.time_of(&start), self.time_of(&end));
                    let end_ns = end_ns.max(start_ns);
                    let total: u64 = blocks.iter().map(|b| b.2).sum::<u64>().max(1);
                    let mut at = start_ns;
                    for (region, offset, bytes) in blocks {
                        let until = (at + (end_ns - start_ns) * bytes / total).min(end_ns);
                        out.push(MemEvent::Migration {
                            region,
                            offset,
                            bytes,
                            dir,
                            cause: crate::seam::MigrationCause::Staging,
                            start_ns: at,
                            end_ns: until,
                        });
                        at = until;
                    }
                    self.spare.extend([start, end]);
                }
                Pending::Released { region, marks } => {
                    let at_ns = marks.iter().map(|m| self.time_of(m)).max().unwrap_or(0);
                    out.push(MemEvent::Released { region, at_ns });
                    self.spare.extend(marks);
                }
            }
        }
    }
}

/// A stage-out's discard, issued on `remap` once its copy (on `stage`) is done rather than on
/// `stage` right behind it: on the H200 a discard beside a restore's repopulation made the two
/// 1.5-15x slower than one after the other, while a stage-out without its discard ran beside a
/// restore in 0.56-0.97x the time of the two in turn (`unimem probe`, "beside a restore"). On
/// `remap`, with the repopulations, a discard never runs beside one, and waits for nothing but
/// its own copy.
struct PendingDiscard {
    /// The end of the copies out.
    copied: Arc<CudaEvent>,
    /// Address ranges to discard.
    ranges: Vec<(u64, u64)>,
    blocks: Vec<BlockId>,
}

/// A block whose only copy is in a staging slot.
#[derive(Debug, Clone, Copy)]
struct StagedBlock {
    block: BlockId,
    slot: Slot,
}

/// Records a timing event on `stream`.
fn mark(stream: &CudaStream) -> Result<CudaEvent> {
    stream
        .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda_err("cuEventRecord", "telemetry mark"))
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
    Prefetch = 0,
    /// A kernel's own data.
    Kernel = 1,
    /// Staged data a kernel needs that no prefetch brought back.
    Restore = 2,
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
            compute,
            h2d,
            d2h,
            stage,
            remap,
            staging,
            staged_done: FxHashMap::default(),
            pending_discards: std::collections::VecDeque::new(),
            pending_blocks: FxHashSet::default(),
            kernel_marks: Default::default(),
            allow_oversubscription,
            free_memory: FreeMemory::default(),
            regions: FxHashMap::default(),
            budget: DeviceBudget::new(capacity),
            retired: Vec::new(),
            sync_log: SyncLog::default(),
            shed: (0, 0),
            relocate: false,
            relocations: 0,
            relocated_resident: 0,
            stats: BackendStats::default(),
            start,
            excluded_ns: 0,
            make_room_ns: 0,
            pool_hits: 0,
            new_buffers: 0,
            kernel_waits: 0,
            room_evicted: [0; 3],
            stage_absent: 0,
            stage_migrated: [0; 2],
            recorder: Recorder::default(),
            recording: None,
            info,
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
        self.excluded_ns += t0.elapsed().as_nanos() as u64;
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

    fn now(&self) -> u64 {
        (self.start.elapsed().as_nanos() as u64).saturating_sub(self.excluded_ns)
    }

    fn region(&self, id: RegionId) -> Result<&CudaRegion> {
        self.regions.get(&id).ok_or(Error::UnknownRegion(id))
    }

    fn checked(&self, id: RegionId, offset: u64, len: u64) -> Result<()> {
        let r = self.region(id)?;
        match offset.checked_add(len) {
            Some(end) if end <= r.bytes => Ok(()),
            _ => Err(Error::OutOfRange { region: id, offset, len, size: r.bytes }),
        }
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
        let s = &mut self.sync_log;
        s.count += 1;
        s.wait_ns += (t1 - t0).as_nanos() as u64;
        s.freed += freed;
        s.free_ns += t1.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// Issues the pending discard of block `key` now (`remap` waiting for its copy if need be),
    /// and only that one: the others may wait for copies behind later kernels.
    fn issue_discard_of(&mut self, key: BlockId) -> Result<()> {
        let Some(at) = self.pending_discards.iter().position(|p| p.blocks.contains(&key)) else {
            return Ok(());
        };
        let p = self.pending_discards.remove(at).expect("just found");
        self.issue_discard(p)
    }

    /// Issues one pending discard on `remap`, after its copy.
    fn issue_discard(&mut self, p: PendingDiscard) -> Result<()> {
        if !p.copied.is_complete() {
            self.remap.wait(&p.copied).map_err(cuda_err("cuStreamWaitEvent", "discard after its copy"))?;
        }
        discard_batch(&self.dev, &p.ranges, &self.remap)?;
        let done =
            Arc::new(self.remap.record_event(None).map_err(cuda_err("cuEventRecord", "staged eviction"))?);
        for key in p.blocks {
            self.pending_blocks.remove(&key);
            self.staged_done.insert(key, done.clone());
        }
        Ok(())
    }

    /// Issues the pending discards whose copies are done (`all`: every one, `remap` waiting for
    /// the copies still running), in order, on `remap`; each block's stage-out ends with its
    /// discard there.
    fn issue_discards(&mut self, all: bool) -> Result<()> {
        while let Some(p) = self.pending_discards.front() {
            let copied = p.copied.is_complete();
            if !all && !copied {
                break;
            }
            let p = self.pending_discards.pop_front().expect("just seen");
            self.issue_discard(p)?;
        }
        Ok(())
    }

    /// Marks block `b` of `id` on the device, most recently used.
    fn touch_block(&mut self, id: RegionId, b: usize) {
        let r = self.regions.get_mut(&id).expect("checked");
        let bytes = r.block_bytes(b);
        let blk = &mut r.blocks[b];
        if !blk.on_device {
            self.budget.add_data(bytes);
        }
        blk.stamp = self.budget.restamp(BlockId::new(id, b), if blk.on_device { blk.stamp } else { 0 });
        blk.on_device = true;
        // Pages whose stage-out is still queued count as gone from its issue on.
        self.budget.note_held();
    }

    /// Clears block `b`'s `spare` mark; returns whether it had one.
    fn take_spare(&mut self, id: RegionId, b: usize) -> bool {
        let r = self.regions.get_mut(&id).expect("checked");
        let spare = std::mem::take(&mut r.blocks[b].spare);
        if spare {
            self.budget.remove_spare(r.block_bytes(b));
        }
        spare
    }

    /// Drops block `b` of `id` from the device account.
    fn leave_device(&mut self, id: RegionId, b: usize) {
        let r = self.regions.get_mut(&id).expect("checked");
        let bytes = r.block_bytes(b);
        let blk = &mut r.blocks[b];
        if blk.on_device {
            self.budget.unstamp(BlockId::new(id, b), blk.stamp);
            self.budget.remove_data(bytes);
            blk.on_device = false;
            blk.stamp = 0;
        }
        blk.prefetched = false; // left before any kernel used it
    }

    /// Makes room for `need` more bytes in the emulated capacity, which holds the account, the
    /// pooled pages on the device and the spare pages: first by giving back pooled pages
    /// (`shed_pool`), then by moving least recently used blocks outside `protect` back to the
    /// host. Returns whether anything moved back (the caller's stream then waits for `d2h`).
    fn make_room(&mut self, need: u64, protect: &FxHashSet<BlockId>, site: RoomSite) -> Result<bool> {
        let t0 = Instant::now();
        let out = self.evict_for(need, protect, site);
        self.make_room_ns += t0.elapsed().as_nanos() as u64;
        out
    }

    /// [`Self::make_room`]'s work, untimed.
    fn evict_for(&mut self, need: u64, protect: &FxHashSet<BlockId>, site: RoomSite) -> Result<bool> {
        self.shed_pool(need)?;
        let block_size = |v: &BlockId| self.regions[&v.region].block_bytes(v.block as usize);
        let victims = self.budget.victims(need, |v| protect.contains(v), block_size);
        if victims.is_empty() {
            return Ok(false);
        }
        let freed: u64 = victims.iter().map(block_size).sum();
        self.room_evicted[site as usize] += freed;
        self.stats.driver_dropped_bytes += freed;
        let mut ranges = Vec::with_capacity(victims.len());
        for &BlockId { region: id, block: b } in &victims {
            let r = &self.regions[&id];
            let dirty = !r.blocks[b as usize].on_host;
            let bytes = r.block_bytes(b as usize);
            if dirty {
                self.stats.evicted_bytes += bytes;
                self.stats.d2h_bytes += bytes;
            }
            ranges.push((id, r.buf.ptr() + b as u64 * BLOCK_SIZE, bytes));
            self.leave_device(id, b as usize);
            self.regions.get_mut(&id).expect("victim").blocks[b as usize].on_host = true;
        }
        self.d2h.join(&self.compute).map_err(cuda_err("cuStreamWaitEvent", "evict after kernels"))?;
        prefetch_batch(&self.dev, &coalesce(ranges), Location::Host, &self.d2h)?;
        Ok(true)
    }

    /// Gives back the device pages of pooled buffers, the longest pooled first, until `need`
    /// more bytes fit beside the account, the pool and the spare pages: a GPU of the budget's
    /// size has no room for a pool beside data that fills it (the simulator pools the same
    /// way, with the same `BufferPool`). The pages are discarded on `remap` after the buffer's
    /// last users (the kernels issued before its free), and the buffers retire: a new
    /// region gets a new buffer rather than one repopulated soon after its discard, which the
    /// H200's driver does on a slow path (0.6-1 GB/s against 250 for fresh pages).
    fn shed_pool(&mut self, need: u64) -> Result<()> {
        let shed = self.budget.shed(need);
        if shed.is_empty() {
            return Ok(());
        }
        let mut ranges: Vec<DevRange> = Vec::new();
        for e in &shed {
            ranges.extend(resident_ranges(e.buf.ptr(), e.buf.len(), &e.resident));
            self.shed.1 += e.resident_bytes();
        }
        self.shed.0 += shed.len() as u64;
        for ev in shed.iter().flat_map(|e| e.after.iter().chain(&e.last_use)).filter(|ev| !ev.is_complete()) {
            self.remap.wait(ev).map_err(cuda_err("cuStreamWaitEvent", "shed after last use"))?;
        }
        if discard_batch(&self.dev, &ranges, &self.remap)? {
            self.retired.extend(shed.into_iter().map(|e| e.buf));
        }
        // Else (no discard on this driver) the buffers drop here: cuMemFree gives their pages
        // back, waiting for the device.
        Ok(())
    }

    /// The device addresses of (checked) non-empty ranges, as the driver calls take them.
    fn addresses(&self, ranges: &[ByteRange]) -> Vec<(u64, u64)> {
        ranges
            .iter()
            .filter(|r| r.len > 0)
            .map(|r| (self.regions[&r.region].buf.ptr() + r.offset, r.len))
            .collect()
    }

    /// Blocks of `ranges` (outside remote mappings) not on the device, and their bytes.
    fn missing(&self, ranges: impl Iterator<Item = (RegionId, u64, u64)>) -> (FxHashSet<BlockId>, u64) {
        let mut blocks = FxHashSet::default();
        let mut need = 0;
        for (id, offset, len) in ranges {
            let r = &self.regions[&id];
            for b in r.blocks_of(offset, len) {
                if blocks.insert(BlockId::new(id, b)) && !r.blocks[b].on_device && !r.blocks[b].remote {
                    need += r.block_bytes(b);
                }
            }
        }
        (blocks, need)
    }

    /// Moves (checked) ranges to the device, `list` being their addresses: makes room,
    /// repopulates staged blocks' discarded pages on the device without a transfer (a prefetch
    /// on `remap`), prefetches the rest on `h2d`, then copies staged blocks back from their
    /// slots on `h2d` once their pages are there. Copying into the discarded pages first and
    /// prefetching after ran at 40 GB/s in `unimem probe` but 3-8x slower than `none` in
    /// replays, where the pages were never populated on the host: the copy lands them there.
    /// The repopulation is not on `h2d`, where it queued behind the copy before it, but on
    /// `remap`, ordered only after what it needs. (On the H200 the driver still runs it after
    /// the copy before it, about 30 us per block, whichever stream it is on: the simulator
    /// charges it to the link.) `explicit`: a prefetch the policy asked for (it counts in the
    /// prefetch metrics), not a kernel's own need for staged data. Room is made outside the
    /// ranges and `keep` (the blocks of the kernel about to run).
    ///
    /// A prefetch leaves out the staged blocks whose stage-out the device has not finished
    /// yet; the kernel that needs them restores them. On the H200, repopulating and copying
    /// into pages soon after their discard falls to a slow path (the copy in at 0.6-1 GB/s
    /// instead of 40-46 in `unimem probe`; a ResNet replay's third step at 50% took 683-944 ms
    /// instead of 250), and restoring them as soon as their stage-out was done was no better
    /// (the transformer's second step at 50%: 2.4-2.7 s instead of 0.4).
    fn bring_to_device(
        &mut self,
        ranges: &[ByteRange],
        list: &[(u64, u64)],
        explicit: bool,
        keep: &FxHashSet<BlockId>,
    ) -> Result<()> {
        // Discards whose copies ended go first: on `h2d`, never beside what follows.
        self.issue_discards(false)?;
        let in_place = self.relocate_staged(ranges, explicit)?;
        let (mut blocks, mut need) = self.missing(ranges.iter().map(|r| (r.region, r.offset, r.len)));
        let left_out = explicit && self.leave_unsettled(&mut blocks, &mut need);
        let mut protect = keep.clone();
        protect.extend(blocks.iter().copied());
        let site = if explicit { RoomSite::Prefetch } else { RoomSite::Restore };
        if self.make_room(need, &protect, site)? {
            self.after_moves_back("prefetch after evict")?;
        }
        let mut staged: Vec<StagedBlock> = Vec::new();
        let mut waited: FxHashSet<*const CudaEvent> = FxHashSet::default();
        for &BlockId { region: id, block: b } in &blocks {
            if let Some(slot) = self.regions[&id].blocks[b as usize].staged {
                staged.push(StagedBlock { block: BlockId { region: id, block: b }, slot });
                // Its discard is issued now if still pending; the repopulation follows it on
                // `remap`, so no stream has to wait for the stage-out's end.
                self.after_stage_out(id, b, &[], &mut waited, "restore after staging")?;
            }
        }
        let owned: (Vec<DevRange>, Vec<DevRange>);
        let (repopulate, list) = if left_out || !staged.is_empty() {
            owned = self.prefetch_lists(ranges, &blocks, &staged, &in_place);
            (&owned.0[..], &owned.1[..])
        } else {
            (&[][..], list)
        };
        if !list.is_empty() {
            // As for the repopulation below: on an idle stream the call would migrate or
            // populate on the spot, holding the host (50-360 us per 64 MiB of fresh pages on
            // the H200, `unimem probe`); queued behind a short kernel it returns at once.
            self.kernels.touch_with_blocks(&self.h2d, &[], 1, HOLD_NS, 1)?;
            prefetch_batch(&self.dev, list, Location::DEVICE, &self.h2d)?;
        }
        if !repopulate.is_empty() {
            // On an idle stream the call does the repopulation on the spot, holding the host
            // (27 us per block on the H200); queued behind work still running it returns at
            // once and the driver does it when the stream gets there. A short kernel ahead of
            // it on `remap` frees the host: ResNet's replay at 50% spent 244-276 ms in its
            // policy with it, 370-408 without (one lending, two runs each).
            self.kernels.touch_with_blocks(&self.remap, &[], 1, HOLD_NS, 1)?;
            prefetch_batch(&self.dev, repopulate, Location::DEVICE, &self.remap)?;
            let there =
                self.remap.record_event(None).map_err(cuda_err("cuEventRecord", "pages repopulated"))?;
            self.h2d.wait(&there).map_err(cuda_err("cuStreamWaitEvent", "copy in after repopulation"))?;
        }
        if !staged.is_empty() {
            let runs = self.staged_runs(&staged);
            let h2d = self.h2d.clone();
            self.timed_copies(&h2d, crate::seam::Direction::H2D, &staged, |this| {
                this.staging.copy(runs, false, &h2d)
            })?;
        }
        let event =
            Arc::new(self.h2d.record_event(None).map_err(cuda_err("cuEventRecord", "prefetch done"))?);
        for StagedBlock { block: BlockId { region: id, block: b }, slot } in staged {
            // The slot is free once the copy out of it is done.
            self.staging.release(slot, Some(event.clone()));
            let r = self.regions.get_mut(&id).expect("checked");
            r.blocks[b as usize].staged = None;
            let bytes = r.block_bytes(b as usize);
            self.stats.h2d_bytes += bytes;
            self.stats.staged_in_bytes += bytes;
        }
        for &BlockId { region: id, block: b } in &blocks {
            let r = self.regions.get_mut(&id).expect("checked");
            let blk = r.blocks[b as usize];
            let bytes = r.block_bytes(b as usize);
            r.ready = Some(event.clone());
            if !blk.on_device && explicit {
                self.stats.prefetch_arrived_bytes += bytes;
                self.regions.get_mut(&id).expect("checked").blocks[b as usize].prefetched = true;
                if blk.on_host {
                    self.stats.h2d_bytes += bytes;
                    self.stats.prefetch_h2d_bytes += bytes;
                    if blk.read_mostly {
                        self.stats.duplicated_bytes += bytes;
                    }
                }
            }
            let r = self.regions.get_mut(&id).expect("checked");
            r.blocks[b as usize].on_host = blk.on_host && blk.read_mostly;
            self.touch_block(id, b as usize);
        }
        Ok(())
    }

    /// Moves each region of `ranges` whose every block is staged into a pooled buffer of its
    /// size with pages on the device, where one waits: its staged data is then copied into
    /// those pages as they are, without the driver first repopulating the discarded pages of
    /// its own buffer (25-30 us per 2 MiB block on the H200, run between the copies whatever
    /// stream it is queued on). As a framework's caching allocator reloads an offloaded tensor
    /// into a fresh block; the region's own buffer goes to the pool once its discards are
    /// done. Blocks `ranges` do not bring back yet keep their new pages (`Block::spare`) for
    /// their own restore. Only where the caller allows it (`allow_relocation`: the replay,
    /// whose kernels find their data by region, never by a kept address). Returns the blocks
    /// of `ranges` whose pages are on the device already.
    fn relocate_staged(&mut self, ranges: &[ByteRange], explicit: bool) -> Result<FxHashSet<BlockId>> {
        let mut in_place = FxHashSet::default();
        // Spare pages belong to staged blocks only: nothing staged, nothing to do.
        if !self.relocate || self.staging.in_use() == 0 {
            return Ok(in_place);
        }
        let mut asked: BTreeMap<RegionId, FxHashSet<usize>> = BTreeMap::new();
        for r in ranges {
            asked.entry(r.region).or_default().extend(self.regions[&r.region].blocks_of(r.offset, r.len));
        }
        for (id, wanted) in asked {
            if self.budget.pool().resident_bytes() > 0 {
                self.relocate_region(id, explicit)?;
            }
            for b in wanted {
                if self.take_spare(id, b) {
                    in_place.insert(BlockId::new(id, b));
                }
            }
        }
        Ok(in_place)
    }

    /// Moves region `id` into a pooled buffer of its size with pages on the device, if every
    /// block of it is staged (and, for a prefetch, settled) and one waits: the new pages on
    /// the device mark their blocks `spare` (see `relocate_staged`).
    fn relocate_region(&mut self, id: RegionId, explicit: bool) -> Result<()> {
        let r = &self.regions[&id];
        if !r.blocks.iter().all(|b| b.staged.is_some() && !b.spare && !b.read_mostly && !b.remote) {
            return Ok(());
        }
        // A prefetch leaves out blocks still being staged out (`leave_unsettled`); their new
        // pages would wait outside the account for a kernel's restore.
        let mut running = FxHashMap::default();
        if explicit && (0..r.blocks.len() as u32).any(|b| self.unsettled(id, b, &mut running)) {
            return Ok(());
        }
        let Some(entry) = self.budget.pool_mut().take_resident(r.bytes) else { return Ok(()) };
        // The old buffer's stage-out ends with its discards (issued now where pending): the
        // copies in wait for them (they follow the copies out), the buffer's next user too.
        let (h2d, mut waited) = ([self.h2d.clone()], FxHashSet::default());
        let mut after: Vec<Arc<CudaEvent>> = Vec::new();
        for b in 0..r.blocks.len() as u32 {
            if let Some(ev) = self.after_stage_out(id, b, &h2d, &mut waited, "copy in after the stage-out")? {
                if !after.iter().any(|e| Arc::ptr_eq(e, &ev)) {
                    after.push(ev);
                }
            }
        }
        let (buf, pages) = self.reuse(entry, true)?;
        let r = self.regions.get_mut(&id).expect("checked");
        let old = std::mem::replace(&mut r.buf, buf);
        let (from, to) = (old.ptr(), r.buf.ptr());
        for (b, page) in pages.iter().enumerate() {
            if page.on_device {
                r.blocks[b].spare = true;
                self.relocated_resident += r.block_bytes(b);
                self.budget.add_spare(r.block_bytes(b));
            }
        }
        let old_blocks = old.len().div_ceil(BLOCK_SIZE) as usize;
        self.budget.pool_mut().put(old, vec![false; old_blocks], after, None);
        self.relocations += 1;
        let at_ns = self.now();
        self.recorder.emit(|| MemEvent::Relocated { region: id, from, to, at_ns });
        Ok(())
    }

    /// Whether the stage-out of block `b` of `id` (its copy, then its discard) is not done: a
    /// discard still queued is a stage-out not done either. `running` keeps the answer per
    /// stage-out event (its blocks share it): one query each.
    fn unsettled(&self, id: RegionId, b: u32, running: &mut FxHashMap<*const CudaEvent, bool>) -> bool {
        self.pending_blocks.contains(&BlockId { region: id, block: b })
            || self
                .staged_done
                .get(&BlockId { region: id, block: b })
                .is_some_and(|ev| *running.entry(Arc::as_ptr(ev)).or_insert_with(|| !ev.is_complete()))
    }

    /// The prefetch of `ranges` restricted to `blocks`, as (the repopulation of the blocks of
    /// `staged`, the rest). Each staged block is a range of its own, whole: on the H200,
    /// prefetching discarded pages as one larger range and then copying the staged data in lost
    /// the data (a 128 MiB region read back wrong in 6 of 8 rounds, none of 8 with one range per
    /// 2 MiB block, GPU test `staged_data_survives_every_way_back`; again 13 of 40 with the
    /// repopulation on `remap` and the copy waiting for it); the copy also covers the whole
    /// block.
    /// Blocks in `in_place` (relocated into pages already on the device) need neither.
    fn prefetch_lists(
        &self,
        ranges: &[ByteRange],
        blocks: &FxHashSet<BlockId>,
        staged: &[StagedBlock],
        in_place: &FxHashSet<BlockId>,
    ) -> (Vec<DevRange>, Vec<DevRange>) {
        let staged: FxHashSet<BlockId> = staged.iter().map(|s| s.block).collect();
        let mut pieces: Vec<(RegionId, u64, u64, bool)> = Vec::new();
        let mut done: FxHashSet<BlockId> = FxHashSet::default();
        for r in ranges {
            let reg = &self.regions[&r.region];
            for b in reg.blocks_of(r.offset, r.len) {
                let key = BlockId::new(r.region, b);
                if !blocks.contains(&key) || in_place.contains(&key) {
                    continue;
                }
                let alone = staged.contains(&key);
                let (lo, hi) = if alone {
                    if !done.insert(key) {
                        continue;
                    }
                    (b as u64 * BLOCK_SIZE, b as u64 * BLOCK_SIZE + reg.block_bytes(b))
                } else {
                    (
                        (b as u64 * BLOCK_SIZE).max(r.offset),
                        ((b as u64 + 1) * BLOCK_SIZE).min(r.offset + r.len),
                    )
                };
                pieces.push((r.region, reg.buf.ptr() + lo, hi - lo, alone));
            }
        }
        let (alone, rest): (Vec<_>, Vec<_>) = pieces.into_iter().partition(|p| p.3);
        (merge_pieces(alone), merge_pieces(rest))
    }

    /// Makes the streams that bring data to the device (`h2d`, `remap`) wait for the moves back
    /// and discards issued on `d2h`: a block's pages must have left before they come back.
    fn after_moves_back(&self, what: &'static str) -> Result<()> {
        for s in [&self.h2d, &self.remap] {
            s.join(&self.d2h).map_err(cuda_err("cuStreamWaitEvent", what))?;
        }
        Ok(())
    }

    /// Takes out of `blocks` (and their bytes off `need`) the staged blocks whose stage-out is
    /// still running on the device. Returns whether it took any.
    fn leave_unsettled(&self, blocks: &mut FxHashSet<BlockId>, need: &mut u64) -> bool {
        if self.staged_done.is_empty() && self.pending_blocks.is_empty() {
            return false;
        }
        let mut running = FxHashMap::default();
        let before = blocks.len();
        blocks.retain(|&BlockId { region: id, block: b }| {
            let r = &self.regions[&id];
            if r.blocks[b as usize].staged.is_none() {
                return true;
            }
            let unsettled = self.unsettled(id, b, &mut running);
            if unsettled {
                *need -= r.block_bytes(b as usize);
            }
            !unsettled
        });
        blocks.len() < before
    }

    /// The staging copies of staged blocks (region, block, slot): one run per block, which
    /// `StagingPool::copy` merges where they continue each other.
    fn staged_runs(&self, staged: &[StagedBlock]) -> Vec<Run> {
        staged
            .iter()
            .map(|&StagedBlock { block: BlockId { region: id, block: b }, slot }| {
                let r = &self.regions[&id];
                (id.0, r.buf.ptr() + b as u64 * BLOCK_SIZE, slot, r.block_bytes(b as usize))
            })
            .collect()
    }

    /// Makes the stage stream wait for kernel `seq` (the backend's count, from 1; 0: none) to
    /// finish: by its mark where one is kept, else for every kernel issued (the mark is gone
    /// when the kernel is older than the marks kept, which are then done unless the device
    /// lags far behind).
    fn stage_after_kernel(&mut self, seq: u64) -> Result<()> {
        if seq == 0 {
            return Ok(());
        }
        let at = self.kernel_marks.partition_point(|m| m.0 < seq);
        let wait = match self.kernel_marks.get(at) {
            Some((s, ev)) if *s == seq => Some(ev.clone()),
            _ if at == 0 && self.kernel_marks.front().is_some_and(|m| m.1.is_complete()) => None,
            _ => {
                self.stage
                    .join(&self.compute)
                    .map_err(cuda_err("cuStreamWaitEvent", "stage after kernels"))?;
                None
            }
        };
        if let Some(ev) = wait.filter(|ev| !ev.is_complete()) {
            self.stage.wait(&ev).map_err(cuda_err("cuStreamWaitEvent", "stage after its kernel"))?;
        }
        Ok(())
    }

    /// Runs `copy` (staging copies of `blocks` enqueued on `stream`), and when recording times
    /// it with a pair of events: the copies become `Migration` events with cause `Staging`.
    fn timed_copies(
        &mut self,
        stream: &Arc<CudaStream>,
        dir: crate::seam::Direction,
        blocks: &[StagedBlock],
        copy: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        let start = match self.timing() {
            Some(rec) => Some(rec.mark(stream)?),
            None => None,
        };
        copy(self)?;
        if let (Some(start), Some(rec)) = (start, self.recording.as_mut()) {
            let end = rec.mark(stream)?;
            let blocks = blocks
                .iter()
                .map(|&StagedBlock { block: BlockId { region: id, block: b }, .. }| {
                    let r = &self.regions[&id];
                    (id, b as u64 * BLOCK_SIZE, r.block_bytes(b as usize))
                })
                .collect();
            rec.pending.push_back(Pending::Staging { dir, blocks, start, end });
        }
        Ok(())
    }

    /// Copies the staged blocks of a range back into the managed pages on the host (callers
    /// synchronise first). The copy engine's copy into the discarded pages lands them on the
    /// host at 51 GB/s on the H200; the CPU copying them ran at 0.6 GB/s (populating page by
    /// page), 2.8 GB/s after the driver populated them.
    fn restore_to_host(&mut self, id: RegionId, offset: u64, len: u64) -> Result<()> {
        let r = &self.regions[&id];
        let staged: Vec<StagedBlock> = r
            .blocks_of(offset, len)
            .filter_map(|b| r.blocks[b].staged.map(|slot| StagedBlock { block: BlockId::new(id, b), slot }))
            .collect();
        if staged.is_empty() {
            return Ok(());
        }
        self.staging.copy(self.staged_runs(&staged), false, &self.d2h)?;
        self.d2h.synchronize().map_err(cuda_err("cuStreamSynchronize", "restore to the host"))?;
        for StagedBlock { block: BlockId { region: id, block: b }, slot } in staged {
            self.take_spare(id, b as usize); // the copy lands in the pages wherever they are
            let r = self.regions.get_mut(&id).expect("checked");
            let bytes = r.block_bytes(b as usize);
            let blk = &mut r.blocks[b as usize];
            blk.staged = None;
            blk.on_host = true; // where the host reads them
            self.staging.release(slot, None);
            self.stats.staged_in_bytes += bytes;
        }
        Ok(())
    }

    /// Drops the staged copies of a range's blocks (dead data, or data about to be replaced).
    /// Whatever writes those pages next must not race the stage-out's discard still queued:
    /// the compute and `h2d` streams wait for it.
    fn drop_staged(&mut self, id: RegionId, offset: u64, len: u64) -> Result<()> {
        let blocks = self.regions[&id].blocks_of(offset, len);
        let mut waited: FxHashSet<*const CudaEvent> = FxHashSet::default();
        let writers = [self.compute.clone(), self.h2d.clone()];
        for b in blocks {
            self.take_spare(id, b); // its pages hold nothing now
            let blk = &mut self.regions.get_mut(&id).expect("checked").blocks[b];
            if let Some(slot) = blk.staged.take() {
                // A copy into the slot may be in flight; the next one is on the same stream.
                self.staging.release(slot, None);
            }
            self.after_stage_out(id, b as u32, &writers, &mut waited, "write after staging")?;
        }
        Ok(())
    }

    /// Makes `streams` wait for the stage-out of block `b` of `id` where one is still queued
    /// (its copy and the discard of its pages), once per event (`waited`), and forgets it.
    /// Returns the end of that stage-out, if the block had one.
    fn after_stage_out(
        &mut self,
        id: RegionId,
        b: u32,
        streams: &[Arc<CudaStream>],
        waited: &mut FxHashSet<*const CudaEvent>,
        what: &'static str,
    ) -> Result<Option<Arc<CudaEvent>>> {
        if self.pending_blocks.contains(&BlockId { region: id, block: b }) {
            self.issue_discard_of(BlockId { region: id, block: b })?;
        }
        let Some(ev) = self.staged_done.remove(&BlockId { region: id, block: b }) else { return Ok(None) };
        if waited.insert(Arc::as_ptr(&ev)) && !ev.is_complete() {
            for s in streams {
                s.wait(&ev).map_err(cuda_err("cuStreamWaitEvent", what))?;
            }
        }
        Ok(Some(ev))
    }

    /// Runs one kernel on the compute stream: waits for its data in flight, makes room as the
    /// driver would, lets `exec` enqueue the kernel itself, then accounts where its data is.
    fn run_kernel(
        &mut self,
        kernel: &KernelLaunch<'_>,
        exec: &mut dyn FnMut(&mut Self) -> Result<()>,
    ) -> Result<()> {
        self.timed(HostOp::Launch, |this| {
            for a in kernel.accesses {
                this.checked(a.region, a.offset, a.len)?;
            }
            this.issue_discards(false)?;
            // Staged data it uses comes back first, as a prefetch the kernel then waits for.
            if this.staging.in_use() > 0 {
                let mut back: Vec<ByteRange> = Vec::new();
                for a in kernel.accesses {
                    let r = &this.regions[&a.region];
                    for b in r.blocks_of(a.offset, a.len) {
                        if r.blocks[b].staged.is_some() {
                            let (offset, len) = (b as u64 * BLOCK_SIZE, r.block_bytes(b));
                            back.push(ByteRange { region: a.region, offset, len });
                        }
                    }
                }
                if !back.is_empty() {
                    back.sort_unstable_by_key(|r| (r.region, r.offset));
                    back.dedup();
                    let list = this.addresses(&back);
                    let (keep, _) = this.missing(kernel.accesses.iter().map(|a| (a.region, a.offset, a.len)));
                    this.bring_to_device(&back, &list, false, &keep)?;
                }
            }
            // The kernel's slice starts before its waits: the wait for data is part of its stall.
            let compute = this.compute.clone();
            let start = match this.timing() {
                Some(rec) => Some(rec.mark(&compute)?),
                None => None,
            };
            // Wait for data in flight to the device. A region whose prefetch had already landed
            // when the kernel was issued counts as on time.
            let mut waited: FxHashSet<RegionId> = FxHashSet::default();
            let mut late: FxHashSet<RegionId> = FxHashSet::default();
            for a in kernel.accesses {
                if waited.insert(a.region) {
                    if let Some(ev) = this.regions.get_mut(&a.region).expect("checked").ready.take() {
                        if !ev.is_complete() {
                            late.insert(a.region);
                        }
                        this.compute
                            .wait(&ev)
                            .map_err(cuda_err("cuStreamWaitEvent", "kernel after prefetch"))?;
                        this.kernel_waits += 1;
                    }
                }
            }
            // The emulated driver makes room before the kernel faults its data in.
            let (blocks, need) = this.missing(kernel.accesses.iter().map(|a| (a.region, a.offset, a.len)));
            if this.make_room(need, &blocks, RoomSite::Kernel)? {
                this.compute.join(&this.d2h).map_err(cuda_err("cuStreamWaitEvent", "kernel after evict"))?;
            }
            exec(this)?;
            let seq = this.stats.kernels + 1;
            let mark = this.compute.record_event(None).map_err(cuda_err("cuEventRecord", "kernel mark"))?;
            this.kernel_marks.push_back((seq, Arc::new(mark)));
            if this.kernel_marks.len() > KERNEL_MARKS {
                this.kernel_marks.pop_front();
            }
            if let (Some(start), Some(rec)) = (start, this.recording.as_mut()) {
                let end = rec.mark(&compute)?;
                let (name, dur_ns) = (kernel.name.to_string(), kernel.dur_ns);
                rec.pending.push_back(Pending::Kernel { name, dur_ns, start, end });
            }
            // Account: what was off the device came in by faults, except remote data.
            let writes: FxHashSet<BlockId> = {
                let mut w = FxHashSet::default();
                for a in kernel.accesses.iter().filter(|a| a.mode.writes()) {
                    let r = &this.regions[&a.region];
                    w.extend(r.blocks_of(a.offset, a.len).map(|b| BlockId::new(a.region, b)));
                }
                w
            };
            for BlockId { region: id, block: b } in blocks {
                this.regions.get_mut(&id).expect("checked").blocks[b as usize].last_kernel = seq;
                let r = &this.regions[&id];
                let blk = r.blocks[b as usize];
                let bytes = r.block_bytes(b as usize);
                let written = writes.contains(&BlockId { region: id, block: b });
                if blk.remote && !blk.on_device {
                    this.stats.remote_bytes += bytes;
                    this.regions.get_mut(&id).expect("checked").blocks[b as usize].on_host = true;
                    continue;
                }
                if !blk.on_device {
                    this.stats.gpu_faults += 1;
                    if blk.on_host {
                        this.stats.gpu_fault_bytes += bytes;
                        this.stats.h2d_bytes += bytes;
                        if blk.read_mostly && !written {
                            this.stats.duplicated_bytes += bytes;
                        }
                    }
                }
                let keep_host = blk.on_host && blk.read_mostly && !written;
                this.regions.get_mut(&id).expect("checked").blocks[b as usize].on_host = keep_host;
                this.touch_block(id, b as usize);
            }
            // Prefetched blocks used now for the first time.
            for a in kernel.accesses {
                let r = this.regions.get_mut(&a.region).expect("checked");
                for b in r.blocks_of(a.offset, a.len) {
                    if std::mem::take(&mut r.blocks[b].prefetched) {
                        let bytes = r.block_bytes(b);
                        this.stats.prefetch_used_bytes += bytes;
                        if !late.contains(&a.region) {
                            this.stats.prefetch_timely_bytes += bytes;
                        }
                    }
                }
            }
            this.stats.kernels += 1;
            Ok(())
        })
    }

    /// A buffer of `bytes` for a new region, from the pool where one of that size waits (its
    /// blocks on the device marked), else new.
    fn take_buffer(&mut self, bytes: u64) -> Result<(ManagedBuffer, Vec<Block>)> {
        if let Some(entry) = self.budget.pool_mut().take(bytes) {
            self.pool_hits += 1;
            return self.reuse(entry, false);
        }
        self.new_buffers += 1;
        let blocks = vec![Block::default(); bytes.div_ceil(BLOCK_SIZE) as usize];
        match self.free_memory.alloc(&self.dev, bytes, self.allow_oversubscription) {
            Ok(buf) => Ok((buf, blocks)),
            Err(Error::Allocation { .. }) if !self.budget.pool().is_empty() => {
                // Give pooled memory back (cuMemFree synchronises) and try once more.
                self.sync_all()?;
                // The refusal rested on a fresh reading, which this retry's estimate cannot pass:
                // it reads again.
                self.budget.pool_mut().clear();
                self.retired.clear();
                Ok((self.free_memory.alloc(&self.dev, bytes, self.allow_oversubscription)?, blocks))
            }
            Err(e) => Err(e),
        }
    }

    /// A pooled buffer back in use: every stream that may touch its pages waits for the work
    /// still queued on it (a discard), `h2d` for its last kernels too where staged data is
    /// copied in (`copies_in`: a relocation), and its blocks say which pages are on the
    /// device. (A new region's own writes come from kernels, after the old ones on `compute`,
    /// or from the host, which synchronises first.)
    fn reuse(
        &mut self,
        entry: Pooled<ManagedBuffer, Arc<CudaEvent>>,
        copies_in: bool,
    ) -> Result<(ManagedBuffer, Vec<Block>)> {
        for ev in entry.after.iter().filter(|ev| !ev.is_complete()) {
            for s in [&self.compute, &self.h2d, &self.d2h, &self.remap] {
                s.wait(ev).map_err(cuda_err("cuStreamWaitEvent", "reuse after a discard"))?;
            }
        }
        if let Some(ev) = entry.last_use.as_ref().filter(|ev| copies_in && !ev.is_complete()) {
            self.h2d.wait(ev).map_err(cuda_err("cuStreamWaitEvent", "copies in after its last kernels"))?;
        }
        let blocks =
            entry.resident.iter().map(|&on_device| Block { on_device, ..Block::default() }).collect();
        Ok((entry.buf, blocks))
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Where the host's time went (`log.level = "info"` shows it): hints are synchronous
        // work for the host, and this says which.
        let parts: Vec<String> = (self.stats.host.parts().into_iter())
            .chain([("of which making room", self.make_room_ns)])
            .map(|(op, ns)| format!("{op} {:.1} ms", ns as f64 / 1e6))
            .collect();
        tracing::info!(
            "cuda backend host time: {}; set-up (off the clock) {:.1} ms; allocations: {} from the pool, {} new; {} restores relocated, {:.1} MB into pages on the device; {} pooled buffers shed ({:.1} MB); {} kernel waits for prefetches; {} prefetch ranges; emulated driver evictions {:.1} MB for prefetches, {:.1} MB for kernels, {:.1} MB for staged data kernels needed; {:.1} MB asked to stage were not on the device; stage-outs migrated {:.1} MB with a host copy or remote and {:.1} MB for want of a slot (staging {:.1} MB, {:.1} MB pinned); {} full synchronisations waited {:.1} ms, then freed {} retired buffers in {:.1} ms",
            parts.join(", "),
            self.excluded_ns as f64 / 1e6,
            self.pool_hits,
            self.new_buffers,
            self.relocations,
            self.relocated_resident as f64 / 1e6,
            self.shed.0,
            self.shed.1 as f64 / 1e6,
            self.kernel_waits,
            self.stats.prefetch_ranges,
            self.room_evicted[0] as f64 / 1e6,
            self.room_evicted[1] as f64 / 1e6,
            self.room_evicted[2] as f64 / 1e6,
            self.stage_absent as f64 / 1e6,
            self.stage_migrated[0] as f64 / 1e6,
            self.stage_migrated[1] as f64 / 1e6,
            self.staging.capacity() as f64 / 1e6,
            self.staging.pinned() as f64 / 1e6,
            self.sync_log.count,
            self.sync_log.wait_ns as f64 / 1e6,
            self.sync_log.freed,
            self.sync_log.free_ns as f64 / 1e6,
        );
    }
}

/// Ranges for the driver's calls from (region, address, bytes, alone) pieces in order:
/// contiguous pieces of one region merge, except those that must stay a range of their own
/// (`alone`); a range never spans two allocations, even where their addresses meet (the driver
/// answers CUDA_ERROR_INVALID_VALUE).
fn merge_pieces(pieces: Vec<(RegionId, u64, u64, bool)>) -> Vec<(u64, u64)> {
    let mut out: Vec<(RegionId, u64, u64, bool)> = Vec::with_capacity(pieces.len());
    for p in pieces {
        match out.last_mut() {
            Some(last) if !p.3 && !last.3 && last.0 == p.0 && last.1 + last.2 == p.1 => last.2 += p.2,
            _ => out.push(p),
        }
    }
    out.into_iter().map(|(_, a, l, _)| (a, l)).collect()
}

/// The host's physical memory (`MemTotal` of /proc/meminfo), where the system says.
pub(super) fn host_memory_bytes() -> Option<u64> {
    parse_mem_total(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// `MemTotal` in bytes from the text of /proc/meminfo.
fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The address ranges of a buffer at `base` of `len` bytes whose 2 MiB blocks are marked in
/// `resident`, neighbouring blocks merged (one buffer's: a range never spans two allocations).
fn resident_ranges(base: u64, len: u64, resident: &[bool]) -> Vec<DevRange> {
    let mut out: Vec<DevRange> = Vec::new();
    for (b, _) in resident.iter().enumerate().filter(|(_, &on)| on) {
        let at = b as u64 * BLOCK_SIZE;
        let bytes = block_bytes(len, b as u64);
        match out.last_mut() {
            Some((start, n)) if *start + *n == base + at => *n += bytes,
            _ => out.push((base + at, bytes)),
        }
    }
    out
}

/// Sorts (region, address, bytes) ranges and merges the adjacent ones of the same allocation
/// ([`merge_pieces`]): -> (address, bytes).
fn coalesce(mut ranges: Vec<(RegionId, u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    merge_pieces(ranges.into_iter().map(|(id, p, l)| (id, p, l, false)).collect())
}

impl CudaBackend {
    fn alloc_region(&mut self, id: RegionId, bytes: u64) -> Result<u64> {
        crate::seam::check_new_region(id, bytes, self.regions.contains_key(&id))?;
        let (buf, blocks) = self.timed(HostOp::Allocate, |this| this.take_buffer(bytes))?;
        let addr = buf.ptr();
        // Recycled pages that are on the device count again (they need no faults): they enter
        // the account through touch_block, like any page arriving.
        let pooled: Vec<usize> = (0..blocks.len()).filter(|&b| blocks[b].on_device).collect();
        let blocks = blocks.into_iter().map(|b| Block { on_device: false, prefetched: false, ..b }).collect();
        self.regions.insert(id, CudaRegion { buf, bytes, blocks, ready: None });
        for b in pooled {
            self.touch_block(id, b);
        }
        Ok(addr)
    }

    fn free_region(&mut self, id: RegionId) -> Result<()> {
        if !self.regions.contains_key(&id) {
            return Err(Error::UnknownRegion(id));
        }
        // Pages a relocation took over for staged blocks are on the device, for the pool.
        let spare: Vec<bool> = self.regions[&id].blocks.iter().map(|b| b.spare).collect();
        // The buffer's next user must not race a stage-out's discard of it still queued...
        self.drop_staged(id, 0, self.regions[&id].bytes)?;
        let r = self.regions.remove(&id).expect("checked");
        // ... nor a copy into it.
        if let Some(ev) = r.ready.as_ref().filter(|ev| !ev.is_complete()) {
            for s in [&self.compute, &self.h2d] {
                s.wait(ev).map_err(cuda_err("cuStreamWaitEvent", "reuse after copies"))?;
            }
        }
        self.sync_timing();
        if let Some(rec) = self.recording.as_mut() {
            let marks = [
                rec.mark(&self.compute)?,
                rec.mark(&self.h2d)?,
                rec.mark(&self.d2h)?,
                rec.mark(&self.remap)?,
            ];
            rec.pending.push_back(Pending::Released { region: id, marks });
        }
        let mut blocks = r.blocks;
        for (b, blk) in blocks.iter_mut().enumerate() {
            if blk.on_device {
                // The pages stay where they are, out of the account of data (pooled pages
                // count against the capacity: `shed_pool`); `on_device` tells the buffer's
                // next user.
                self.budget.unstamp(BlockId::new(id, b), blk.stamp);
                self.budget.remove_data(block_bytes(r.bytes, b as u64));
            }
            blk.stamp = 0;
            blk.on_host = false; // dead data
        }
        // Advice stays on the buffer: clear what would surprise its next user.
        if blocks.iter().any(|b| b.read_mostly || b.remote) {
            for advice in
                [Advice::UnsetReadMostly, Advice::UnsetPreferredLocation, Advice::UnsetAccessedByDevice]
            {
                r.buf.advise(0, r.bytes, advice)?;
            }
            for blk in &mut blocks {
                (blk.read_mostly, blk.remote) = (false, false);
            }
        }
        let resident = blocks.iter().zip(spare).map(|(b, spare)| b.on_device || spare).collect();
        // What writes other bytes into its pages next (a relocation's copies, a shed's discard)
        // must not run under the kernels issued before the free: as after `cuMemFree`.
        let last_use = Arc::new(self.compute.record_event(None).map_err(cuda_err("cuEventRecord", "free"))?);
        self.budget.pool_mut().put(r.buf, resident, Vec::new(), Some(last_use));
        Ok(())
    }

    fn advise_range(&mut self, range: ByteRange, advice: Advice) -> Result<()> {
        self.timed(HostOp::Advise, |this| {
            this.checked(range.region, range.offset, range.len)?;
            if range.len == 0 {
                return Ok(());
            }
            let r = this.regions.get_mut(&range.region).expect("checked");
            r.buf.advise(range.offset, range.len, advice)?;
            let mut collapsed = Vec::new();
            for b in r.blocks_of(range.offset, range.len) {
                let blk = &mut r.blocks[b];
                match advice {
                    Advice::SetReadMostly => blk.read_mostly = true,
                    Advice::UnsetReadMostly => {
                        blk.read_mostly = false;
                        // Duplicates collapse to the host: on the H200 a kernel read data just
                        // collapsed at 7.3 GB/s, the fault-driven rate (`unimem probe`).
                        if blk.on_device && blk.on_host {
                            collapsed.push(b);
                        }
                    }
                    Advice::SetPreferredLocation(Location::Host) | Advice::SetAccessedByDevice => {
                        // Remote once both are set; the account treats either as the intent.
                        blk.remote = true;
                    }
                    Advice::UnsetPreferredLocation | Advice::UnsetAccessedByDevice => blk.remote = false,
                    Advice::SetPreferredLocation(Location::Device(_)) => blk.remote = false,
                }
            }
            for b in collapsed {
                this.leave_device(range.region, b);
            }
            Ok(())
        })
    }

    fn prefetch_ranges(&mut self, ranges: &[ByteRange], to: Location) -> Result<()> {
        self.timed(HostOp::prefetch(to), |this| {
            for r in ranges {
                this.checked(r.region, r.offset, r.len)?;
            }
            let list = this.addresses(ranges);
            if list.is_empty() {
                return Ok(());
            }
            this.stats.prefetch_ranges += list.len() as u64;
            match to {
                Location::Device(_) => this.bring_to_device(ranges, &list, true, &FxHashSet::default())?,
                Location::Host => {
                    this.d2h
                        .join(&this.compute)
                        .map_err(cuda_err("cuStreamWaitEvent", "evict after kernels"))?;
                    prefetch_batch(&this.dev, &list, Location::Host, &this.d2h)?;
                    this.after_moves_back("order after evict")?;
                    let (blocks, _) = this.missing(ranges.iter().map(|r| (r.region, r.offset, r.len)));
                    for BlockId { region: id, block: b } in blocks {
                        let r = &this.regions[&id];
                        let blk = r.blocks[b as usize];
                        if blk.on_device && !blk.on_host {
                            let bytes = r.block_bytes(b as usize);
                            this.stats.d2h_bytes += bytes;
                            this.stats.prefetch_d2h_bytes += bytes;
                        }
                        let populated = blk.on_device || blk.on_host;
                        this.leave_device(id, b as usize);
                        this.regions.get_mut(&id).expect("checked").blocks[b as usize].on_host = populated;
                    }
                }
            }
            Ok(())
        })
    }

    fn discard_ranges(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.timed(HostOp::Discard, |this| {
            for r in ranges {
                this.checked(r.region, r.offset, r.len)?;
            }
            for r in ranges {
                let staged = this.regions[&r.region]
                    .blocks_of(r.offset, r.len)
                    .any(|b| this.regions[&r.region].blocks[b].staged.is_some());
                if staged {
                    this.stats.discarded_bytes += r.len; // dead: the staged copy goes too
                    this.drop_staged(r.region, r.offset, r.len)?;
                }
            }
            let list = this.addresses(ranges);
            this.d2h.join(&this.compute).map_err(cuda_err("cuStreamWaitEvent", "discard after kernels"))?;
            if !discard_batch(&this.dev, &list, &this.d2h)? {
                return Ok(()); // no discard on this driver: the data simply stays (a hint)
            }
            this.after_moves_back("order after discard")?;
            let (blocks, _) = this.missing(ranges.iter().map(|r| (r.region, r.offset, r.len)));
            for BlockId { region: id, block: b } in blocks {
                let r = &this.regions[&id];
                if r.blocks[b as usize].on_device || r.blocks[b as usize].on_host {
                    this.stats.discarded_bytes += r.block_bytes(b as usize);
                }
                this.leave_device(id, b as usize);
                this.regions.get_mut(&id).expect("checked").blocks[b as usize].on_host = false;
            }
            Ok(())
        })
    }

    fn stage_ranges(&mut self, ranges: &[ByteRange]) -> Result<()> {
        for r in ranges {
            self.checked(r.region, r.offset, r.len)?;
        }
        let migrate = self.timed(HostOp::StageOut, |this| {
            this.issue_discards(false)?;
            let (blocks, _) = this.missing(ranges.iter().map(|r| (r.region, r.offset, r.len)));
            let mut blocks: Vec<BlockId> = blocks.into_iter().collect();
            blocks.sort_unstable(); // slots in address order: copies coalesce
            let mut migrate: Vec<ByteRange> = Vec::new();
            let mut staged: Vec<StagedBlock> = Vec::new();
            // The last kernel that touched a block staged here: the copies wait for it.
            let mut after = 0u64;
            for BlockId { region: id, block: b } in blocks {
                let r = &this.regions[&id];
                let blk = r.blocks[b as usize];
                let (offset, len) = (b as u64 * BLOCK_SIZE, r.block_bytes(b as usize));
                if !blk.on_device {
                    this.stage_absent += if blk.staged.is_none() { len } else { 0 };
                    continue;
                }
                // Duplicates drop for free, and remote data is not the device's to copy.
                if blk.on_host || blk.remote {
                    this.stage_migrated[0] += len;
                    crate::seam::push_merged(&mut migrate, ByteRange { region: id, offset, len });
                    continue;
                }
                after = after.max(blk.last_kernel);
                let stage = this.stage.clone();
                let Some(slot) = this.staging.take(&stage)? else {
                    this.stage_migrated[1] += len;
                    crate::seam::push_merged(&mut migrate, ByteRange { region: id, offset, len });
                    continue;
                };
                staged.push(StagedBlock { block: BlockId { region: id, block: b }, slot });
                this.leave_device(id, b as usize);
                let blk = &mut this.regions.get_mut(&id).expect("checked").blocks[b as usize];
                blk.staged = Some(slot);
                blk.on_host = false;
                this.stats.d2h_bytes += len;
                this.stats.staged_out_bytes += len;
            }
            if !staged.is_empty() {
                this.stage_after_kernel(after)?;
                let stage = this.stage.clone();
                let runs = this.staged_runs(&staged);
                let discards = coalesce(runs.iter().map(|r| (RegionId(r.0), r.1, r.3)).collect());
                this.timed_copies(&stage, crate::seam::Direction::D2H, &staged, |this| {
                    this.staging.copy(runs, true, &stage)
                })?;
                let copied = Arc::new(
                    this.stage.record_event(None).map_err(cuda_err("cuEventRecord", "staged eviction"))?,
                );
                let blocks: Vec<BlockId> = staged.iter().map(|s| s.block).collect();
                this.pending_blocks.extend(blocks.iter().copied());
                this.pending_discards.push_back(PendingDiscard { copied, ranges: discards, blocks });
            }
            Ok(migrate)
        })?;
        if migrate.is_empty() {
            return Ok(());
        }
        self.prefetch_ranges(&migrate, Location::Host)
    }

    fn launch_kernel(&mut self, kernel: &KernelLaunch<'_>) -> Result<()> {
        self.run_kernel(kernel, &mut |this| {
            let ranges: Vec<(u64, u64, TouchMode)> = kernel
                .accesses
                .iter()
                .filter(|a| a.len > 0)
                .map(|a| (this.regions[&a.region].buf.ptr() + a.offset, a.len, TouchMode::from(a.mode)))
                .collect();
            this.kernels.touch(&this.compute, &ranges, PAGE_SIZE as u32, kernel.dur_ns)
        })
    }

    fn run_native(
        &mut self,
        kernel: &KernelLaunch<'_>,
        native: &mut dyn FnMut(&NativeLaunch<'_>) -> Result<()>,
    ) -> Result<()> {
        self.run_kernel(kernel, &mut |this| {
            let ptrs: Vec<u64> =
                kernel.accesses.iter().map(|a| this.regions[&a.region].buf.ptr() + a.offset).collect();
            this.dev.context().bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "native launch"))?;
            native(&NativeLaunch { stream: &this.compute, ptrs: &ptrs })
        })
    }

    fn touch_host(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        for a in accesses {
            self.checked(a.region, a.offset, a.len)?;
        }
        self.sync_all()?;
        let t0 = Instant::now();
        for a in accesses {
            if a.len == 0 {
                continue;
            }
            self.restore_to_host(a.region, a.offset, a.len)?;
            let r = self.regions.get_mut(&a.region).expect("checked");
            // SAFETY: the device is synchronised; the range lies inside the buffer.
            let bytes = unsafe { r.buf.host_bytes() };
            let span = &mut bytes[a.offset as usize..(a.offset + a.len) as usize];
            let mut sum = 0u8;
            for page in span.chunks_mut(PAGE_SIZE as usize) {
                if a.mode.reads() {
                    // SAFETY: a valid reference; volatile so the touch is not optimised out.
                    sum = sum.wrapping_add(unsafe { std::ptr::read_volatile(&page[0]) });
                }
                if a.mode.writes() {
                    // SAFETY: as above.
                    unsafe { std::ptr::write_volatile(&mut page[0], sum) };
                }
            }
            std::hint::black_box(sum);
            self.after_host_touch(a.region, a.offset, a.len, a.mode.writes());
        }
        self.stats.host.add(HostOp::HostAccess, t0.elapsed().as_nanos() as u64);
        Ok(())
    }

    fn sync(&mut self) -> Result<u64> {
        self.sync_all()?;
        if let Some(rec) = self.timing() {
            let mut done = Vec::new();
            rec.resolve(&mut done); // all complete now
            rec.next_resolve_at = RESOLVE_BATCH;
            self.recorder.extend(done);
        }
        Ok(self.now())
    }

    /// On a GPU the completion time of issued kernels is only known by waiting for them: this
    /// synchronises the compute stream (transfers in flight on the copy streams go on).
    fn completion(&self) -> u64 {
        if let Err(e) = self.compute.synchronize() {
            tracing::warn!("synchronising the compute stream failed: {e:?}");
        }
        self.now()
    }

    fn residency_of(&self, range: ByteRange) -> Result<Residency> {
        self.checked(range.region, range.offset, range.len)?;
        let r = &self.regions[&range.region];
        let mut out = Residency::default();
        for b in r.blocks_of(range.offset, range.len) {
            let lo = (b as u64 * BLOCK_SIZE).max(range.offset);
            let hi = ((b as u64 + 1) * BLOCK_SIZE).min(range.offset + range.len);
            let bytes = hi - lo;
            let blk = r.blocks[b];
            if blk.staged.is_some() {
                out.staged += bytes;
                continue;
            }
            match (blk.on_device, blk.on_host) {
                (true, true) => out.duplicated += bytes,
                (true, false) => out.device += bytes,
                (false, true) => out.host += bytes,
                (false, false) => out.unpopulated += bytes,
            }
        }
        Ok(out)
    }

    /// The device timing of recorded events, started or stopped as the recorder was switched:
    /// faults and migrations need CUPTI (the telemetry crate); the backend times its kernels,
    /// staging copies and the releases of freed regions on the device.
    fn timing(&mut self) -> Option<&mut Recording> {
        self.sync_timing();
        self.recording.as_mut()
    }

    /// Starts or stops the device timing as the recorder is switched.
    fn sync_timing(&mut self) {
        if !self.recorder.is_recording() {
            self.recording = None;
        } else if self.recording.is_none() {
            self.start_timing();
        }
    }

    /// Starts timing events on the device: a first event, synchronised, that the others are
    /// timed from. Where that fails, recording goes off with a warning.
    fn start_timing(&mut self) {
        let reference = mark(&self.compute).and_then(|ev| {
            ev.synchronize().map_err(cuda_err("cuEventSynchronize", "telemetry reference"))?;
            Ok(ev)
        });
        match reference {
            Ok(reference) => {
                let reference_ns = self.start.elapsed().as_nanos() as u64;
                self.recording = Some(Recording {
                    reference,
                    reference_ns,
                    pending: Default::default(),
                    spare: Vec::new(),
                    next_resolve_at: RESOLVE_BATCH,
                });
            }
            Err(e) => {
                tracing::warn!("cannot time events on the device, recording none: {e}");
                self.recorder.set_recording(false);
            }
        }
    }

    /// Moves the timed events the device has reached into the recorder, once enough wait.
    fn resolve_recorded(&mut self) {
        if let Some(rec) = self.timing() {
            if rec.pending.len() >= rec.next_resolve_at {
                let mut done = Vec::new();
                rec.resolve(&mut done);
                rec.next_resolve_at = rec.pending.len() + RESOLVE_BATCH;
                self.recorder.extend(done);
            }
        }
    }

    fn preload(&mut self, range: ByteRange) -> Result<()> {
        // Waiting for the device is not set-up: the kernels queued before still run on the
        // clock. Only the host's own touching of the pages is left off it.
        self.sync_all()?;
        let t0 = Instant::now();
        self.checked(range.region, range.offset, range.len)?;
        self.drop_staged(range.region, range.offset, range.len)?;
        for page in self.host_range(range.region, range.offset, range.len)?.chunks_mut(PAGE_SIZE as usize) {
            // SAFETY: a valid reference; volatile so the page really gets populated.
            unsafe { std::ptr::write_volatile(&mut page[0], 0) };
        }
        self.after_host_touch(range.region, range.offset, range.len, true);
        self.excluded_ns += t0.elapsed().as_nanos() as u64;
        Ok(())
    }

    fn host_read(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        buf.copy_from_slice(self.host_range(id, offset, buf.len() as u64)?);
        self.after_host_touch(id, offset, buf.len() as u64, false);
        Ok(())
    }

    fn view(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.checked(id, offset, buf.len() as u64)?;
        self.compute.synchronize().map_err(cuda_err("cuStreamSynchronize", "kernel view"))?;
        let ptr = self.regions[&id].buf.ptr() + offset;
        // SAFETY: the range lies inside a live managed buffer; a driver copy moves no pages.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(buf, ptr) }
            .map_err(cuda_err("cuMemcpyDtoH", format!("{} bytes of {id}", buf.len())))
    }

    fn store(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        self.checked(id, offset, data.len() as u64)?;
        self.compute.synchronize().map_err(cuda_err("cuStreamSynchronize", "kernel store"))?;
        let ptr = self.regions[&id].buf.ptr() + offset;
        // SAFETY: as above.
        unsafe { cudarc::driver::result::memcpy_htod_sync(ptr, data) }
            .map_err(cuda_err("cuMemcpyHtoD", format!("{} bytes of {id}", data.len())))
    }

    fn host_write(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        self.host_range(id, offset, data.len() as u64)?.copy_from_slice(data);
        self.after_host_touch(id, offset, data.len() as u64, true);
        Ok(())
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

    fn synchronize(&mut self) -> Result<u64> {
        self.sync()
    }

    /// On a GPU the completion time of issued kernels is only known by waiting for them: this
    /// synchronises the compute stream (transfers in flight on the copy streams go on).
    fn completion_ns(&self) -> u64 {
        self.completion()
    }

    fn residency(&self, range: ByteRange) -> Result<Residency> {
        self.residency_of(range)
    }

    fn stats(&self) -> BackendStats {
        let (peak_device_bytes, peak_footprint_bytes) = self.budget.peaks();
        BackendStats {
            device_bytes: self.budget.data_bytes(),
            peak_device_bytes,
            peak_footprint_bytes,
            ..self.stats
        }
    }

    fn events(&mut self) -> &mut Recorder {
        self.resolve_recorded();
        &mut self.recorder
    }

    fn native(&mut self) -> Option<&mut dyn NativeLaunches> {
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

impl CudaBackend {
    /// A range of a region as host memory, once every stream is done with it (the caller
    /// records the touch with `after_host_touch`).
    fn host_range(&mut self, id: RegionId, offset: u64, len: u64) -> Result<&mut [u8]> {
        self.checked(id, offset, len)?;
        self.sync_all()?;
        self.restore_to_host(id, offset, len)?;
        let r = self.regions.get_mut(&id).expect("checked");
        // SAFETY: the device is synchronised; the range lies inside the buffer.
        let bytes = unsafe { r.buf.host_bytes() };
        Ok(&mut bytes[offset as usize..(offset + len) as usize])
    }

    /// The CPU touched a range: its pages are on the host now (a read keeps read-mostly
    /// duplicates on the device).
    fn after_host_touch(&mut self, id: RegionId, offset: u64, len: u64, wrote: bool) {
        let blocks = self.regions[&id].blocks_of(offset, len);
        for b in blocks {
            let blk = self.regions[&id].blocks[b];
            if blk.on_device && !blk.on_host {
                self.stats.cpu_faults += 1;
                self.stats.d2h_bytes += self.regions[&id].block_bytes(b);
            }
            if wrote || !blk.read_mostly {
                self.leave_device(id, b);
            }
            self.regions.get_mut(&id).expect("checked").blocks[b].on_host = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_is_read_from_meminfo() {
        let text = "MemTotal:       131072000 kB\nMemFree:        1000 kB\n";
        assert_eq!(parse_mem_total(text), Some(131_072_000 * 1024));
        assert_eq!(parse_mem_total("MemFree: 5 kB\n"), None);
        assert_eq!(parse_mem_total("MemTotal: lots kB\n"), None);
    }

    #[test]
    fn prefetch_pieces_merge_within_a_region_and_staged_blocks_stay_alone() {
        const M: u64 = BLOCK_SIZE;
        let (a, b) = (RegionId(1), RegionId(2));
        let pieces = vec![
            (a, 0x1000_0000, M, false),
            (a, 0x1000_0000 + M, M, false),    // merges
            (a, 0x1000_0000 + 2 * M, M, true), // staged: alone
            (a, 0x1000_0000 + 3 * M, M, true), // alone again
            (a, 0x1000_0000 + 4 * M, M / 2, false),
            (b, 0x1000_0000 + 4 * M + M / 2, M, false), // adjacent, another allocation
        ];
        assert_eq!(
            merge_pieces(pieces),
            vec![
                (0x1000_0000, 2 * M),
                (0x1000_0000 + 2 * M, M),
                (0x1000_0000 + 3 * M, M),
                (0x1000_0000 + 4 * M, M / 2),
                (0x1000_0000 + 4 * M + M / 2, M),
            ]
        );
    }

    #[test]
    fn resident_blocks_of_a_buffer_become_merged_ranges() {
        const MIB: u64 = 1 << 20;
        let base = 1 << 40;
        // Blocks 0, 1 and 3 of a 7 MiB buffer (the last one 1 MiB).
        let ranges = resident_ranges(base, 7 * MIB, &[true, true, false, true]);
        assert_eq!(ranges, vec![(base, 4 * MIB), (base + 6 * MIB, MIB)]);
        assert!(resident_ranges(base, 4 * MIB, &[false, false]).is_empty());
    }

    #[test]
    fn merged_ranges_stay_inside_their_allocation() {
        let r = |id, p, l| (RegionId(id), p, l);
        // Adjacent in the address space but in two allocations: two ranges.
        assert_eq!(coalesce(vec![r(1, 0, 4), r(2, 4, 4), r(1, 8, 4), r(1, 4, 4)]), vec![(0, 12), (4, 4)]);
    }
}
