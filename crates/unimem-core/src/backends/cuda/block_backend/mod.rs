//! `BlockBackend`: the [`MemoryBackend`] seam on a real GPU with regions in 2 MiB blocks of
//! device or pinned host memory, where managed memory's copies are half duplex and its
//! restores wait for the driver's page work. Two placements (`store.rs`) share the block logic:
//!
//! - **CUDA virtual memory** (`memory = "vmm"`, [`BlockBackend::open`]): a region is a reserved
//!   virtual range; each block's address maps a 2 MiB **device chunk** (`cuMemCreate`) or a
//!   2 MiB **host chunk** (pinned `HOST_NUMA` memory, also mapped at a mirror address for the
//!   copies), so data evicted stays at its address and a kernel that touches it without
//!   declaring it reads and writes it over the link. Host chunks cost 0.55 ms each to create
//!   on the H200: made at set-up (`with_staging`) and pooled. A mapping change is not ordered
//!   with a stream: an eviction is remapped once its copy and the block's last kernel are done
//!   (`settle`). Mapping calls cover runs of adjacent blocks, but on a busy device each costs
//!   0.3-0.4 ms: this placement is 2.5-3.5x slower than managed memory (`docs/decisions.md`,
//!   "Regions in CUDA virtual memory").
//! - **The device arena** (`memory = "device"`, [`BlockBackend::open_arena`]): device memory of
//!   the budget allocated once and pinned host memory, both carved into 2 MiB slots. A block's
//!   data is in its device slot or its host slot, so a region's address is not fixed: only a
//!   replay, which finds data by region, uses it. Nothing is mapped: data moves by copies
//!   alone, several streams each way, batched (`copies.rs`). A block without data gets a slot
//!   and no copy: it is zeroed only before a read or a partial write, and a kernel writing it
//!   whole sets its bytes (`docs/decisions.md`, "Replays in a device arena").
//!
//! Common to both:
//! - Streams: kernels on `compute`, copies in on `h2d`, copies out on `d2h` (one stream each
//!   way in virtual memory, four in the arena). A restore takes a device chunk and copies in;
//!   the next kernel using the block waits for the copy's event (a region's blocks may come
//!   in on several lanes, so it waits for each block's). An eviction copies out after the
//!   block's last kernel (an event after each kernel); it counts as done once issued
//!   (`residency`), though until it is, a use cancels it, and a restore needing room takes its
//!   chunk with the copy's event to wait for (the host never waits for room). A block keeps
//!   its host chunk while that holds a valid copy, so an eviction of data not written since
//!   its restore copies nothing. A write-back (`Destination::HostCopy`, `copy_out.rs`) makes
//!   that copy ahead of the eviction, the block staying on the device: queued until the
//!   block's last kernel is done, so that it never holds a copy lane waiting for queued
//!   kernels ahead of an eviction, and issued in batches as `settle` finds it due.
//! - A freed region's chunks are lent to restores once its last kernel and its blocks' copies
//!   are done (`release.rs`): those freed first to copies in, those freed last to blocks with
//!   nothing to copy, whose kernels wait for them on `compute`.
//! - The budget is emulated as in the managed backend ([`DeviceBudget`]), in whole chunks:
//!   device chunks in use are the data, free chunks the spare pages, evicted in least recently
//!   used order by the emulated driver when a kernel or prefetch needs room the policy did not
//!   make. Regions under 2 MiB are packed into chunks by power-of-two slots and stay on the
//!   device; a region's last block takes a whole chunk.
//! - Host accesses synchronise the device and copy the bytes where they are.
//! - The clock is the host's monotonic clock since the backend opened, minus set-up. Recording
//!   events, kernels and copies are timed on the device (`cuda::timing`).

mod blocks;
mod copies;
mod copy_out;
mod host;
mod lanes;
mod release;
mod store;
mod unset;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaEvent, CudaStream};
use rustc_hash::{FxHashMap, FxHashSet};

use super::marks::Marks;
use super::timing::{HostClock, Pending, Recording, WorkMarks};
use super::vmm::{granularity, Place, Reserved};
use super::{cuda_err, CudaDevice, Kernels, TouchMode};
use crate::error::{Error, Result};
use crate::mechanism::budget::{BlockId, DeviceBudget};
use crate::mechanism::pool::Buffer;
use crate::mechanism::slab::{packs, slot_bytes, Slab, Slot};
use crate::region::RegionId;
use crate::seam::{
    Advice, BackendInfo, BackendKind, BackendStats, ByteRange, Destination, DeviceId, HostAccess, HostOp,
    KernelLaunch, Location, MemoryBackend, Recorder, Residency, Transfer, WorkMark, BLOCK_SIZE,
};
use blocks::Settle;
use lanes::{Lanes, ARENA_LANES};
use release::Releasing;
use store::{Arena, DevChunk, HostChunk, Store};

/// One 2 MiB block of a region. Its address maps `device` where it has one, else `host`,
/// else nothing.
#[derive(Debug, Default)]
struct VBlock {
    device: Option<DevChunk>,
    host: Option<HostChunk>,
    /// The host chunk holds the block's data (once `host_ready` completes).
    host_valid: bool,
    /// A copy into the host chunk still running.
    host_ready: Option<Arc<CudaEvent>>,
    /// Written since the region was allocated (else there is nothing to copy).
    data: bool,
    /// An eviction waits for this (its copy, or the block's last kernel) before the address
    /// is remapped to the host chunk.
    leaving: Option<Arc<CudaEvent>>,
    /// The copy in of its restore, still running: the next kernel using the block waits for
    /// it (and takes it), and an eviction before that kernel waits for it before unmapping.
    arrive: Option<Arc<CudaEvent>>,
    /// Order of last use on the device (0: none).
    stamp: u64,
    /// The last kernel (the backend's count, from 1) that touched it.
    last_kernel: u64,
    /// Host-preferred: kernels use it where it is.
    remote: bool,
    /// Its address still maps a device chunk it gave to another block's restore (its eviction
    /// or its region's free not done yet); remapped once it is.
    lent: bool,
    /// Brought by a prefetch and not used by a kernel since.
    prefetched: bool,
    /// In the arena, a block without data restored into a slot whose bytes were not set: it
    /// is zeroed before anything reads it (`BlockBackend::set_unset_blocks`). Each restore
    /// sets it; it means nothing off the device.
    unset: bool,
}

impl VBlock {
    /// The host chunk a restore copies the block's bytes from: one holding its written data.
    fn copy_source(&self) -> Option<&HostChunk> {
        self.host.as_ref().filter(|_| self.data && self.host_valid)
    }
}

#[derive(Debug)]
struct VRegion {
    /// Its address: its reserved range's, its slot's in the slab, or in the arena a handle in
    /// a range of addresses no memory has (its blocks move between slots).
    base: u64,
    /// The reserved range of its blocks (`Store::Mapped`); `None` for a region packed in the
    /// slab and in the arena.
    va: Option<Reserved>,
    /// A region under 2 MiB: its slot in the slab. It has no blocks.
    packed: Option<Slot>,
    bytes: u64,
    blocks: Vec<VBlock>,
}

impl VRegion {
    fn blocks_of(&self, offset: u64, len: u64) -> std::ops::Range<usize> {
        if len == 0 || self.blocks.is_empty() {
            return 0..0;
        }
        (offset / BLOCK_SIZE) as usize..(offset + len).div_ceil(BLOCK_SIZE) as usize
    }

    /// The range `offset..offset + len` holds all of block `b`'s bytes (its last block ends
    /// at the region's end).
    fn covers_block(&self, offset: u64, len: u64, b: usize) -> bool {
        let (lo, hi) = (b as u64 * BLOCK_SIZE, ((b as u64 + 1) * BLOCK_SIZE).min(self.bytes));
        offset <= lo && hi <= offset + len
    }

    /// The region's address (see `base`).
    fn addr(&self) -> u64 {
        self.base
    }

    /// Its reserved range (regions with blocks have one in `Store::Mapped`).
    fn va(&self) -> &Reserved {
        self.va.as_ref().expect("a mapped region with blocks has a reserved range")
    }

    /// The device address of block `b`'s data, which is on the device.
    fn device_addr(&self, b: usize) -> u64 {
        match &self.va {
            Some(_) => self.base + b as u64 * BLOCK_SIZE,
            None => self.blocks[b].device.as_ref().and_then(DevChunk::slot).expect("on the device"),
        }
    }

    /// Where kernels and copies find block `b`: its address in the reserved range, or in the
    /// arena its device slot, else its host chunk; `None` for an arena block in neither.
    fn block_addr(&self, b: usize) -> Option<u64> {
        if self.va.is_some() {
            return Some(self.base + b as u64 * BLOCK_SIZE);
        }
        let v = &self.blocks[b];
        v.device.as_ref().and_then(DevChunk::slot).or(v.host.as_ref().map(HostChunk::addr))
    }
}

/// Regions under 2 MiB, packed into device chunks (`mechanism::slab`).
#[derive(Debug, Default)]
struct Packed {
    /// Each chunk, and the range it is mapped at (`Store::Mapped`).
    chunks: Vec<(DevChunk, Option<Reserved>)>,
    slots: Slab,
}

/// Where the arena's region handles start: above every address a process has.
const ARENA_HANDLES: u64 = 1 << 63;

/// The budget's pool is not used here (free chunks are its spare pages).
#[derive(Debug)]
struct NoBuffer;

impl Buffer for NoBuffer {
    fn len(&self) -> u64 {
        0
    }
}

/// What the backend logs at `info` when it closes.
#[derive(Debug, Default)]
struct VmmLog {
    device_chunks_made: u64,
    host_chunks_made: u64,
    host_chunks_stolen: u64,
    remaps: u64,
    remap_ns: u64,
    /// Host time mapping restored blocks and issuing their copies.
    restore_ns: u64,
    cancelled_evictions: u64,
    waits_for_room: u64,
    /// Host waits for the device: count and time.
    host_waits: u64,
    wait_ns: u64,
    /// Bytes the emulated driver evicted for prefetches and for kernels.
    driver_evicted: [u64; 2],
    over_capacity: u64,
    /// Copies issued (after merging), the driver calls they took, and their host time.
    copies: u64,
    copy_calls: u64,
    copy_ns: u64,
    /// Host time making room for restores.
    room_ns: u64,
    /// Blocks of prefetches left where they were: no room without evicting the prefetch's own.
    prefetch_dropped: u64,
    /// Arena blocks restored without data and zeroed later, for a read or a partial write.
    zeroed_late: u64,
}

/// Kernel marks kept for evictions to wait on.
const KERNEL_MARKS: usize = 4096;

/// The CUDA backend with regions in virtual memory. See the module documentation.
pub struct BlockBackend {
    dev: CudaDevice,
    device: i32,
    store: Store,
    kernels: Kernels,
    compute: Arc<CudaStream>,
    /// Copies in, and copies out: one stream each in virtual memory, several in the arena.
    h2d: Lanes,
    d2h: Lanes,
    regions: FxHashMap<RegionId, VRegion>,
    slab: Packed,
    budget: DeviceBudget<NoBuffer, ()>,
    free_chunks: Vec<DevChunk>,
    host_free: Vec<HostChunk>,
    /// Host chunks made, and how many may be (the staging size).
    host_made: u64,
    host_limit: u64,
    /// Blocks with an eviction issued, in order (entries may be stale).
    leaving: VecDeque<(BlockId, Arc<CudaEvent>)>,
    /// Blocks to write back once their last kernel is done, in order (`copy_out.rs`).
    write_backs: VecDeque<BlockId>,
    releasing: VecDeque<Releasing>,
    /// When `settle` last looked at the work under way.
    settled_at: Instant,
    kernel_marks: VecDeque<(u64, Arc<CudaEvent>)>,
    /// Events no longer held, recorded again for later marks.
    marks: Marks,
    stats: BackendStats,
    log: VmmLog,
    /// The clock since it opened, set-up (host chunks, preloading data) taken off.
    clock: HostClock,
    /// Marks of the work before each step, timed at the end.
    work_marks: WorkMarks,
    recorder: Recorder,
    /// Device timing of kernels and copies while the recorder records.
    recording: Option<Recording>,
    info: BackendInfo,
    /// The mapping calls' counters when it opened (they count for the process).
    calls_at_open: [(u64, u64); 4],
    /// The pace a replayed program issued its kernels at.
    pace: crate::mechanism::pace::IssuePace,
    /// Handle addresses given to the arena's regions so far.
    handles_used: u64,
    /// The driver batches copies (`cuMemcpyBatchAsync`, CUDA 13).
    batched_copies: bool,
}

/// The process's mapping-call counters: (calls, host ns) per kind.
fn call_counters() -> [(u64, u64); 4] {
    use std::sync::atomic::Ordering::Relaxed;
    std::array::from_fn(|i| (super::vmm::CALLS[i].load(Relaxed), super::vmm::CALL_NS[i].load(Relaxed)))
}

impl std::fmt::Debug for BlockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockBackend").field("device", &self.dev.capabilities().name).finish()
    }
}

impl BlockBackend {
    /// Opens device `ordinal` with regions in virtual memory, emulating a GPU of `capacity`
    /// bytes. Errors (never panics) without a driver or device, or where the device has no
    /// virtual memory management.
    pub fn open(ordinal: usize, capacity: u64) -> Result<Self> {
        let dev = CudaDevice::open(ordinal)?;
        let device = ordinal as i32;
        let chunk = granularity(Place::Device(device))?;
        if chunk > BLOCK_SIZE || BLOCK_SIZE % chunk != 0 {
            return Err(Error::BackendUnavailable {
                backend: "cuda (vmm)".into(),
                reason: format!("device memory comes in {chunk}-byte chunks, not 2 MiB blocks"),
            });
        }
        let numa = dev
            .context()
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID)
            .ok()
            .filter(|&n| n >= 0)
            .unwrap_or(0);
        Self::open_with(dev, device, capacity, Store::Mapped { numa }, "regions in virtual memory")
    }

    /// Opens device `ordinal` with regions in an arena of device memory (`capacity` bytes of
    /// it allocated now, off the clock) and pinned host memory, emulating a GPU of `capacity`
    /// bytes. A region's data moves between the arena's slots, so its address is not fixed:
    /// only for a caller that finds data by region (a replay). Errors without a driver or
    /// device, or where the device memory cannot be allocated.
    pub fn open_arena(ordinal: usize, capacity: u64) -> Result<Self> {
        let dev = CudaDevice::open(ordinal)?;
        let mut arena = Arena::new(&dev);
        arena.reserve_device(capacity)?;
        Self::open_with(
            dev,
            ordinal as i32,
            capacity,
            Store::Arena(Box::new(arena)),
            "regions in a device arena",
        )
    }

    fn open_with(dev: CudaDevice, device: i32, capacity: u64, store: Store, placed: &str) -> Result<Self> {
        let c = dev.capabilities().clone();
        let kernels = Kernels::load(&dev)?;
        let compute = dev.new_stream()?;
        let lanes = if store.is_mapped() { 1 } else { ARENA_LANES };
        let (h2d, d2h) = (Lanes::new(&dev, lanes)?, Lanes::new(&dev, lanes)?);
        kernels.touch(&compute, &[], 1, 0)?;
        compute.synchronize().map_err(cuda_err("cuStreamSynchronize", "warm-up"))?;
        let start = Instant::now();
        let info = BackendInfo {
            kind: BackendKind::Cuda,
            description: format!(
                "{} (CUDA driver {}, compute {}.{}), {placed}, budget emulated in software",
                c.name, c.driver_version, c.compute_capability.0, c.compute_capability.1
            ),
            capacity,
            staging_bytes: 0,
            records_faults: false,
            clock_origin: Some(start),
        };
        Ok(Self {
            dev,
            device,
            store,
            kernels,
            compute,
            h2d,
            d2h,
            regions: FxHashMap::default(),
            slab: Packed::default(),
            budget: DeviceBudget::new(capacity),
            free_chunks: Vec::new(),
            host_free: Vec::new(),
            host_made: 0,
            host_limit: 0,
            leaving: VecDeque::new(),
            write_backs: VecDeque::new(),
            releasing: VecDeque::new(),
            settled_at: Instant::now(),
            kernel_marks: VecDeque::new(),
            marks: Marks::default(),
            stats: BackendStats::default(),
            log: VmmLog::default(),
            clock: HostClock::new(start),
            work_marks: WorkMarks::default(),
            recorder: Recorder::default(),
            recording: None,
            info,
            pace: Default::default(),
            calls_at_open: call_counters(),
            handles_used: 0,
            batched_copies: c.driver_version >= 13000,
        })
    }

    /// The same backend with up to `bytes` of host chunks for evicted data, of which `reserve`
    /// bytes are made now (set-up, off the clock: 0.55 ms per chunk on the H200).
    pub fn with_staging(mut self, bytes: u64, reserve: u64) -> Result<Self> {
        let bytes = match super::backend::host_memory_bytes() {
            Some(total) if bytes > total / 2 => total / 2,
            _ => bytes,
        };
        self.host_limit = bytes / BLOCK_SIZE;
        self.info.staging_bytes = self.host_limit * BLOCK_SIZE;
        let t0 = Instant::now();
        for _ in 0..(reserve.min(bytes) / BLOCK_SIZE) {
            let chunk = self.new_host_chunk()?;
            self.host_free.push(chunk);
        }
        // Taken from the end: lowest address first, so that blocks evicted together get
        // neighbouring chunks and their copies merge.
        self.host_free.reverse();
        self.clock.exclude_since(t0);
        Ok(self)
    }

    fn new_host_chunk(&mut self) -> Result<HostChunk> {
        let chunk = self.store.new_host(self.device)?;
        self.host_made += 1;
        self.log.host_chunks_made += 1;
        Ok(chunk)
    }

    fn ordinal(&self) -> DeviceId {
        DeviceId(self.device as u32)
    }

    /// The device address of a region (for tests).
    pub fn address(&self, id: RegionId) -> Result<u64> {
        Ok(self.region(id)?.addr())
    }

    fn timed<T>(&mut self, op: HostOp, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let t0 = Instant::now();
        let out = f(self);
        self.stats.host.add(op, t0.elapsed().as_nanos() as u64);
        out
    }

    fn region(&self, id: RegionId) -> Result<&VRegion> {
        self.regions.get(&id).ok_or(Error::UnknownRegion(id))
    }

    fn checked(&self, id: RegionId, offset: u64, len: u64) -> Result<()> {
        crate::seam::check_range(id, offset, len, self.region(id)?.bytes)
    }

    fn alloc_region(&mut self, id: RegionId, bytes: u64) -> Result<u64> {
        crate::seam::check_new_region(id, bytes, self.regions.contains_key(&id))?;
        self.timed(HostOp::Allocate, |this| {
            if packs(bytes) {
                let slot = this.slab_take(bytes)?;
                let r = VRegion { base: slot.addr, va: None, packed: Some(slot), bytes, blocks: Vec::new() };
                this.regions.insert(id, r);
                return Ok(slot.addr);
            }
            let n = bytes.div_ceil(BLOCK_SIZE);
            let (va, base) = if this.store.is_mapped() {
                let va = Reserved::new(n * BLOCK_SIZE)?;
                let base = va.va();
                (Some(va), base)
            } else {
                let base = ARENA_HANDLES + this.handles_used;
                this.handles_used += n * BLOCK_SIZE;
                (None, base)
            };
            let blocks = (0..n).map(|_| VBlock::default()).collect();
            this.regions.insert(id, VRegion { base, va, packed: None, bytes, blocks });
            Ok(base)
        })
    }

    /// A zeroed slot of the slab for `bytes` (under 2 MiB): its size class and address. The
    /// zeroing runs on `compute`, after the kernels of the slot's last region.
    fn slab_take(&mut self, bytes: u64) -> Result<Slot> {
        let slot = match self.slab.slots.take(bytes) {
            Some(slot) => slot,
            None => {
                // Room for the chunk first, as for a block's: a lent chunk is zeroed once the work
                // holding it is done (`compute` waits for it).
                let chunk = match self
                    .make_room(1, &Default::default(), blocks::Site::Kernel, blocks::Lend::Latest)?
                    .pop()
                {
                    Some(credit) => {
                        for e in credit.after.iter().filter(|e| !e.is_complete()) {
                            self.compute.wait(e).map_err(cuda_err("cuStreamWaitEvent", "a slab chunk"))?;
                        }
                        credit.chunk
                    }
                    None => self.take_chunk()?,
                };
                let (base, va) = match &chunk {
                    DevChunk::Slot(addr) => (*addr, None),
                    DevChunk::Mapped(phys) => {
                        let va = Reserved::new(BLOCK_SIZE)?;
                        va.map(0, BLOCK_SIZE, phys, 0)?;
                        va.grant(0, BLOCK_SIZE, self.device)?;
                        (va.va(), Some(va))
                    }
                };
                self.slab.chunks.push((chunk, va));
                self.budget.add_data(BLOCK_SIZE);
                self.budget.note_held();
                self.slab.slots.carve(bytes, base)
            }
        };
        // SAFETY: the slot is mapped for the device; the stream orders it after earlier kernels.
        unsafe {
            cudarc::driver::sys::cuMemsetD8Async(
                slot.addr,
                0,
                slot_bytes(bytes) as usize,
                self.compute.cu_stream(),
            )
        }
        .result()
        .map_err(cuda_err("cuMemsetD8Async", "a packed region"))?;
        Ok(slot)
    }

    fn advise_range(&mut self, range: ByteRange, advice: Advice) -> Result<()> {
        self.checked(range.region, range.offset, range.len)?;
        let r = self.regions.get_mut(&range.region).expect("checked");
        for b in r.blocks_of(range.offset, range.len) {
            let blk = &mut r.blocks[b];
            match advice {
                // No duplicates in this placement: a clean block's eviction copies nothing,
                // which is what read-mostly data gains from them.
                Advice::SetReadMostly | Advice::UnsetReadMostly => {}
                Advice::SetPreferredLocation(Location::Host) | Advice::SetAccessedByDevice => {
                    blk.remote = true
                }
                Advice::UnsetPreferredLocation
                | Advice::UnsetAccessedByDevice
                | Advice::SetPreferredLocation(Location::Device(_)) => blk.remote = false,
            }
        }
        Ok(())
    }

    fn sync_all(&mut self) -> Result<()> {
        self.dev.synchronize()?;
        self.timing();
        if let Some(rec) = self.recording.as_mut() {
            rec.resolve_all(&mut self.recorder); // all complete now
        }
        self.settle(Settle::All)
    }

    /// The device timing, started or stopped as the recorder was switched.
    fn timing(&mut self) -> Option<&mut Recording> {
        Recording::follow(&mut self.recording, &mut self.recorder, &self.compute, self.clock.start())
    }

    /// A timing mark on `stream` where recording.
    fn timing_mark(&mut self, stream: &CudaStream) -> Result<Option<CudaEvent>> {
        self.timing().map(|rec| rec.mark(stream)).transpose()
    }

    /// Closes a timed stretch of `stream` opened by `start` (a mark, or a kernel's start, where
    /// recording), as what `pending` makes of it (called only where recording).
    fn close_timed<S>(
        &mut self,
        stream: &CudaStream,
        start: Option<S>,
        pending: impl FnOnce(&Self, S, CudaEvent) -> Pending,
    ) -> Result<()> {
        let (Some(start), Some(rec)) = (start, self.recording.as_mut()) else { return Ok(()) };
        let end = rec.mark(stream)?;
        let pending = pending(self, start, end);
        if let Some(rec) = self.recording.as_mut() {
            rec.pending.push_back(pending);
            rec.resolve_some(&mut self.recorder);
        }
        Ok(())
    }
}

impl Drop for BlockBackend {
    fn drop(&mut self) {
        // Nothing may be unmapped under the device's feet.
        let _ = self.dev.synchronize();
        let _ = self.settle(Settle::All);
        for (_, r) in std::mem::take(&mut self.regions) {
            let _ = self.unmap_region(&r);
        }
        for va in self.slab.chunks.iter().filter_map(|(_, va)| va.as_ref()) {
            let _ = va.unmap(0, BLOCK_SIZE);
        }
        let l = &self.log;
        let now = call_counters();
        let calls: Vec<String> = ["create", "map", "set access", "unmap"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let (n, ns) = (now[i].0 - self.calls_at_open[i].0, now[i].1 - self.calls_at_open[i].1);
                format!("{name} {n} calls {:.1} ms", ns as f64 / 1e6)
            })
            .collect();
        let name =
            if self.store.is_mapped() { "cuda block backend (vmm)" } else { "cuda block backend (arena)" };
        if self.store.is_mapped() {
            tracing::info!("{name} mapping calls: {}", calls.join(", "));
        }
        tracing::info!(
            "{name}: {} device chunks made, {} host chunks made ({} taken from clean copies); {} evictions settled in {:.1} ms; restores issued in {:.1} ms; {} evictions cancelled by a use; {} times the emulated driver made room; {} host waits for the device ({:.1} ms); emulated driver evicted {:.1} MB for prefetches and {:.1} MB for kernels; {} chunks over the capacity",
            l.device_chunks_made,
            l.host_chunks_made,
            l.host_chunks_stolen,
            l.remaps,
            l.remap_ns as f64 / 1e6,
            l.restore_ns as f64 / 1e6,
            l.cancelled_evictions,
            l.waits_for_room,
            l.host_waits,
            l.wait_ns as f64 / 1e6,
            l.driver_evicted[0] as f64 / 1e6,
            l.driver_evicted[1] as f64 / 1e6,
            l.over_capacity,
        );
        tracing::info!(
            "{name} copies: {} issued in {} calls ({}), {:.1} ms of host time; room made in {:.1} ms; {} prefetched blocks left for want of room; {} blocks without data zeroed for a read; {} events created for marks",
            l.copies,
            l.copy_calls,
            if self.batched_copies { "batched" } else { "one call each" },
            l.copy_ns as f64 / 1e6,
            l.room_ns as f64 / 1e6,
            l.prefetch_dropped,
            l.zeroed_late,
            self.marks.created()
        );
    }
}

impl MemoryBackend for BlockBackend {
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
        self.timed(HostOp::Advise, |this| this.advise_range(range, advice))
    }

    fn migrate(&mut self, ranges: &[ByteRange], to: Destination) -> Result<()> {
        for r in ranges {
            self.checked(r.region, r.offset, r.len)?;
        }
        match to {
            Destination::Device(d) if d == self.ordinal() => {
                self.timed(HostOp::PrefetchToDevice, |this| this.prefetch_in(ranges))
            }
            Destination::Device(other) => Err(Error::InvalidArgument(format!(
                "this backend runs on device {}; asked for device {}",
                self.ordinal().0,
                other.0
            ))),
            Destination::Host => self.timed(HostOp::PrefetchToHost, |this| this.evict_ranges(ranges, false)),
            Destination::HostStaged => self.timed(HostOp::StageOut, |this| this.evict_ranges(ranges, true)),
            Destination::HostCopy => self.timed(HostOp::StageOut, |this| this.write_back_ranges(ranges)),
        }
    }

    fn discard(&mut self, ranges: &[ByteRange]) -> Result<()> {
        for r in ranges {
            self.checked(r.region, r.offset, r.len)?;
        }
        self.timed(HostOp::Discard, |this| this.discard_ranges(ranges))
    }

    fn launch(&mut self, kernel: &KernelLaunch<'_>) -> Result<()> {
        for a in kernel.accesses {
            self.checked(a.region, a.offset, a.len)?;
        }
        self.timed(HostOp::Launch, |this| this.launch_kernel(kernel))
    }

    fn host_access(&mut self, access: HostAccess<'_>) -> Result<()> {
        match access {
            HostAccess::Touch(accesses) => self.touch_host(accesses),
            HostAccess::Preload(range) => self.preload(range),
        }
    }

    fn copy(&mut self, id: RegionId, offset: u64, transfer: Transfer<'_>) -> Result<()> {
        match transfer {
            Transfer::HostRead(buf) | Transfer::KernelRead(buf) => self.read_bytes(id, offset, buf),
            Transfer::HostWrite(data) | Transfer::KernelWrite(data) => self.write_bytes(id, offset, data),
        }
    }

    fn program_host_time(&mut self, host_ns: u64) {
        self.pace.wait(host_ns);
    }

    fn synchronize(&mut self) -> Result<u64> {
        self.sync_all()?;
        Ok(self.clock.now())
    }

    fn mark_work(&mut self) -> Result<WorkMark> {
        self.work_marks.mark(&self.compute, &self.clock)
    }

    fn work_mark_ns(&mut self, mark: WorkMark) -> Result<u64> {
        self.work_marks.time(mark)
    }

    fn residency(&self, range: ByteRange) -> Result<Residency> {
        self.residency_of(range)
    }

    fn stats(&self) -> BackendStats {
        self.budget.report(self.stats)
    }

    fn events(&mut self) -> &mut Recorder {
        &mut self.recorder
    }
}

/// Touch-kernel ranges of a launch, at the regions' addresses; in the arena one per block,
/// where its data is, those adjacent there merged.
fn touch_ranges(
    regions: &FxHashMap<RegionId, VRegion>,
    kernel: &KernelLaunch<'_>,
) -> Vec<(u64, u64, TouchMode)> {
    let mut out: Vec<(u64, u64, TouchMode)> = Vec::new();
    for a in kernel.accesses.iter().filter(|a| a.len > 0) {
        let r = &regions[&a.region];
        let mode = TouchMode::from(a.mode);
        if r.va.is_some() || r.packed.is_some() {
            out.push((r.addr() + a.offset, a.len, mode));
            continue;
        }
        for b in r.blocks_of(a.offset, a.len) {
            let lo = (b as u64 * BLOCK_SIZE).max(a.offset);
            let hi = ((b as u64 + 1) * BLOCK_SIZE).min(a.offset + a.len);
            let addr = r.block_addr(b).expect("a launch places every block it touches") + lo % BLOCK_SIZE;
            match out.last_mut() {
                Some(last) if last.0 + last.1 == addr && last.2 == mode => last.1 += hi - lo,
                _ => out.push((addr, hi - lo, mode)),
            }
        }
    }
    out
}
