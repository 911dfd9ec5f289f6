//! `SimBackend`: a deterministic model of a GPU with unified memory, on a virtual clock.
//!
//! It keeps each region's bytes (sparse, so replaying gigabytes keeps nothing), per-page
//! residency on both sides (4 KiB pages, faults grown to the profile's fault unit, 2 MiB blocks
//! for eviction and advice), and charges every operation from a calibrated [`CostModel`].
//!
//! Timing model, in brief (docs/simulator.md has the whole of it):
//! - The host issues work without waiting; kernels run in order on one compute stream.
//! - Prefetches, driver evictions and fault migrations share the UM migration link, which
//!   serialises H2D and D2H unless the profile says it is full duplex.
//! - A kernel waits for data in flight to it, then stalls for its faults (and the evictions they
//!   force), then computes for `dur_ns` (or longer if its remote accesses are slower).
//! - Eviction under capacity pressure takes the least-recently-migrated 2 MiB block that the
//!   running kernel does not touch, as the driver does.
//! - Device capacity is the configured budget: the simulator emulates a GPU of that size.
//! - Staged evictions ([`MemoryBackendExt::stage_out`](crate::seam::MemoryBackendExt::stage_out)) copy device-only data into pinned staging
//!   buffers at the copy engine's rate instead of migrating it; the copies share the link with
//!   migrations (on the H200 a staged eviction beside a prefetch took as long as both in turn).
//!   Staged data comes back before a prefetch or kernel uses it (copied into the host's pages
//!   and migrated, end to end at the profile's rate), and to the host before a host access.
//! - Managed memory is pooled as the CUDA backend pools it (cudaFree synchronises the device):
//!   a freed region's buffer keeps its blocks on the device for the next region of its size,
//!   which takes them without first-touch faults (or, with relocation, for a staged region of
//!   its size coming back). Pooled pages count against the capacity: data that needs the room
//!   first sheds the longest pooled buffers (a discard; they are not handed out again). Pages
//!   discarded or dropped go back to the driver, and a new owner populates them afresh.
//!
//! Files: `region.rs` (a region's page and block state), `room.rs` (memory coming and going,
//! the driver's room-making), `transfer.rs` (prefetch, discard, advice), `staged.rs` (staged
//! evictions and their way back), `kernel.rs` (launches and faults), `host.rs` (the host's
//! side), `pages.rs` and `store.rs` (page sets and sparse bytes).

mod host;
mod kernel;
mod pages;
mod program;
mod region;
mod room;
mod staged;
mod store;
mod transfer;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

pub use crate::cost::{CostModel, H200_PROFILE};
use pages::PageSet;
use region::{
    for_each_page_chunk, Block, Moved, SimBuffer, SimRegion, WriteBack, ADV_ACCESSED_BY, ADV_PREFER_DEVICE,
    ADV_PREFER_HOST, ADV_READ_MOSTLY, PAGES_PER_BLOCK,
};
use store::PageStore;

use crate::mechanism::budget::{BlockId, DeviceBudget, Victims};
use crate::mechanism::pool::{Owner, Pooled};
use crate::mechanism::slab::{packs, Slab, Slot};

use crate::access::{Accessor, RangeAccess};
use crate::error::{Error, Result};
use crate::region::RegionId;
use crate::seam::{
    Advice, BackendInfo, BackendKind, BackendStats, ByteRange, Destination, DeviceId, Direction, HostAccess,
    HostOp, KernelLaunch, Location, MemEvent, MemoryBackend, MigrationCause, PageWork, Recorder, Residency,
    Transfer, WorkMark, BLOCK_SIZE, PAGE_SIZE,
};
use crate::units::Bytes;

/// Whether the caller's own host work costs simulated time, and the simulator's wall time in
/// the calls made since the caller last reported its work (`MemoryBackend::host_work`).
#[derive(Debug, Default)]
struct HostWork {
    charge: bool,
    in_calls_ns: u64,
}

/// First fake virtual address handed out; regions are 2 MiB aligned after it.
const BASE_ADDR: u64 = 0x7f00_0000_0000;

/// The calibrated unified-memory simulator. See the module documentation.
#[derive(Debug)]
pub struct SimBackend {
    cost: CostModel,
    unit_pages: usize,
    regions: HashMap<RegionId, SimRegion>,
    /// Bytes of the live regions: at most the profile's machine memory.
    allocated_bytes: u64,
    next_addr: u64,
    host_now: u64,
    /// When the program issued its latest kernel on the host clock
    /// ([`MemoryBackend::program_host_time`]).
    program_issue_ns: u64,
    /// The caller's own host work, where it is charged.
    host_work: HostWork,
    /// Host time of freeing the buffers shed from the pool since the last synchronisation.
    retired_free_ns: u64,
    /// When each kernel in the launch queue ends (at most `launch_queue_depth`).
    launched: std::collections::VecDeque<u64>,
    compute_free: u64,
    link_h2d: u64,
    link_d2h: u64,
    /// When the staged evictions issued so far end (their copies out, after which their pages
    /// are discarded): a population before then runs at the profile's slower rate.
    stage_out_until: u64,
    /// When the CUDA backend's `h2d` stream is next free: its prefetches and restores queue
    /// in order, populations of fresh pages among them, which do not occupy the link.
    h2d_stream: u64,
    /// Pinned staging memory: capacity and bytes in use.
    staging_capacity: u64,
    staged_bytes: u64,
    /// Bytes of staging copies kept for data restored and not written since (they hold
    /// staging slots too, and give them up when a stage-out needs one).
    kept_bytes: u64,
    /// Blocks with kept copies, oldest first (entries may be stale).
    kept_order: std::collections::VecDeque<BlockId>,
    /// The emulated device's memory: the data, the pooled buffers (freed regions' buffers with
    /// their blocks still on the device, as the CUDA backend pools them: a new region of a
    /// pooled size takes one without `cuMemAllocManaged` and its resident pages without
    /// first-touch faults), the staged pages of `spare` blocks (their device pages held for
    /// restores to come), and the blocks with device pages in the order the driver evicts
    /// them, least recently migrated first.
    budget: DeviceBudget<SimBuffer, u64>,
    /// Restores may bring a wholly staged region back into a pooled buffer of its size
    /// ([`SimBackend::with_relocation`]).
    relocate: bool,
    /// Room given up by an eviction is there only once its copy out (or, for data dropped,
    /// its last kernel) is done, as in the device arena: (when, bytes) of the room still held
    /// ([`SimBackend::with_room_after_copies`]). Off: room is there at the eviction's issue,
    /// as the managed backends' software budget counts it.
    room_after_copies: bool,
    freeing: Vec<(u64, u64)>,
    /// Regions under 2 MiB are packed in the slab's chunks and stay on the device, as in the
    /// device arena ([`SimBackend::with_small_regions_packed`]).
    pack_small: bool,
    /// Write-backs keep a staging copy of data on the device, as in the device arena
    /// ([`SimBackend::with_write_back`]); off, they do nothing, as in managed memory.
    write_back: bool,
    /// Write-backs queued, in order, until the device is done with their blocks.
    write_backs: std::collections::VecDeque<WriteBack>,
    /// When the host last issued the write-backs due.
    write_backs_at: u64,
    slab: Slab,
    /// Room for a program's outputs is made by staged evictions
    /// ([`SimBackend::with_staged_room`]).
    staged_room: bool,
    stats: BackendStats,
    events: Recorder,
    info: BackendInfo,
    /// Faults reach only a telemetry sink, after the fact, as on a GPU (see
    /// [`SimBackend::with_faults_reported_late`]).
    faults_late: bool,
}

/// How often the device arena looks for the write-backs due (`SETTLE_EVERY` in
/// `backends/cuda/block_backend/blocks.rs`): due ones go together, one batched call each time.
const WRITE_BACK_EVERY_NS: u64 = 100_000;

impl SimBackend {
    /// Runs `f`, adding the simulated host time it took to the counter of `op` (the CUDA
    /// backend measures the same calls on the host clock). Where host work is charged, the
    /// call's own wall time is noted, to leave out of it.
    fn host_timed<T>(&mut self, op: HostOp, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        // The device arena issues due write-backs in passing, at the start of its calls, at
        // most every `WRITE_BACK_EVERY_NS` (its `settle`).
        if !self.write_backs.is_empty() && self.host_now >= self.write_backs_at + WRITE_BACK_EVERY_NS {
            self.write_backs_at = self.host_now;
            self.issue_write_backs();
        }
        let (t0, wall) = (self.host_now, self.host_work.charge.then(std::time::Instant::now));
        let out = f(self);
        self.stats.host.add(op, self.host_now.saturating_sub(t0));
        if let Some(wall) = wall {
            self.host_work.in_calls_ns += wall.elapsed().as_nanos() as u64;
        }
        out
    }

    /// A simulator with `cost` emulating a device of `capacity` bytes (clamped to the
    /// profile's device memory).
    pub fn new(cost: CostModel, capacity: u64) -> Self {
        let unit_pages = (cost.fault_unit_bytes / PAGE_SIZE) as usize;
        let capacity = capacity.min(cost.device_memory_bytes).max(PAGE_SIZE);
        let description = format!("simulator, profile: {}", cost.name);
        let mut sim = Self {
            cost,
            unit_pages,
            regions: HashMap::default(),
            allocated_bytes: 0,
            next_addr: BASE_ADDR,
            host_now: 0,
            program_issue_ns: 0,
            host_work: HostWork::default(),
            retired_free_ns: 0,
            launched: std::collections::VecDeque::new(),
            compute_free: 0,
            link_h2d: 0,
            link_d2h: 0,
            stage_out_until: 0,
            h2d_stream: 0,
            staging_capacity: 0,
            staged_bytes: 0,
            kept_bytes: 0,
            kept_order: std::collections::VecDeque::new(),
            budget: DeviceBudget::new(capacity),
            relocate: false,
            room_after_copies: false,
            freeing: Vec::new(),
            pack_small: false,
            write_back: false,
            write_backs: Default::default(),
            write_backs_at: 0,
            slab: Slab::default(),
            staged_room: false,
            stats: BackendStats::default(),
            events: Recorder::default(),
            info: BackendInfo {
                kind: BackendKind::Sim,
                description: String::new(),
                capacity: 0,
                staging_bytes: 0,
                records_faults: true,
                clock_origin: None,
            },
            faults_late: false,
        };
        sim.info.description = description;
        sim.info.capacity = capacity;
        sim
    }

    /// The same simulator, saying (as a GPU backend does) that it does not report faults as
    /// they happen: a policy learns them only from a sink that delivers them late
    /// ([`crate::protocol::EventSink::late`]). Its events are the same; tests of the late path
    /// hold them back in the sink.
    pub fn with_faults_reported_late(mut self) -> Self {
        self.faults_late = true;
        self.info.records_faults = false;
        self
    }

    /// The same simulator with `bytes` of pinned staging memory for staged evictions (none by
    /// default: [`MemoryBackendExt::stage_out`](crate::seam::MemoryBackendExt::stage_out) then migrates).
    pub fn with_staging(mut self, bytes: u64) -> Self {
        // As on the CUDA backend: pinned memory is at most half the host's.
        let bytes = bytes.min(self.cost.host_memory_bytes / 2);
        self.staging_capacity = bytes;
        self.info.staging_bytes = bytes;
        self
    }

    /// The same simulator, letting restores bring a wholly staged region back into a pooled
    /// buffer of its size (another address), as the CUDA backend does for a caller that finds
    /// data by region (a replay). Off by default.
    pub fn with_relocation(mut self, on: bool) -> Self {
        self.relocate = on;
        self
    }

    /// The same simulator, with an evicted block's room there only once its copy out (or its
    /// last kernel, for data dropped) is done: the device arena's memory (`memory =
    /// "device"`), which a restore takes once the copy out of its last holder is done.
    pub fn with_room_after_copies(mut self, on: bool) -> Self {
        self.room_after_copies = on;
        self
    }

    /// The same simulator, with regions under 2 MiB packed into shared 2 MiB chunks by
    /// power-of-two slots, as the device arena (`memory = "device"`) packs them: they stay on
    /// the device (prefetches, evictions, stage-outs and discards leave them, and the emulated
    /// driver never takes them), zeroed at their allocation, and each chunk counts against
    /// the capacity whole from the first region that needs it on (`mechanism::slab`).
    pub fn with_small_regions_packed(mut self, on: bool) -> Self {
        self.pack_small = on;
        self
    }

    /// `ranges` without those of packed regions, which stay on the device (ranges of unknown
    /// regions stay, for the caller's check to refuse).
    fn unpacked<'a>(&self, ranges: &'a [ByteRange]) -> std::borrow::Cow<'a, [ByteRange]> {
        let packed = |r: &ByteRange| self.regions.get(&r.region).is_some_and(|x| x.packed.is_some());
        if self.slab.chunks() == 0 || !ranges.iter().any(packed) {
            return std::borrow::Cow::Borrowed(ranges);
        }
        std::borrow::Cow::Owned(ranges.iter().copied().filter(|r| !packed(r)).collect())
    }

    /// The same simulator as the device arena's model (`memory = "device"`), or not: room
    /// after copies ([`SimBackend::with_room_after_copies`]), small regions packed
    /// ([`SimBackend::with_small_regions_packed`]) and write-backs
    /// ([`SimBackend::with_write_back`]) together.
    pub fn with_device_arena(self, on: bool) -> Self {
        self.with_room_after_copies(on).with_small_regions_packed(on).with_write_back(on)
    }

    /// The same simulator, keeping a staging copy of the device data a write-back names
    /// ([`crate::seam::Destination::HostCopy`]), as the device arena keeps one in the block's
    /// host chunk. Off by default: managed memory's staging buffers hold evicted data only.
    pub fn with_write_back(mut self, on: bool) -> Self {
        self.write_back = on;
        self
    }

    /// The same simulator, making the room for a program's outputs by staged evictions where
    /// it has staging memory, as the CUDA backend does for a runtime whose policy stages its
    /// evictions. Off by default: the emulated driver evicts them.
    pub fn with_staged_room(mut self, on: bool) -> Self {
        self.staged_room = on;
        self
    }

    /// The same simulator, charging the caller's own host work ([`MemoryBackend::host_work`])
    /// to its host clock (`sim.policy_time = "measured"`). Off by default: simulated times then
    /// depend on nothing but the trace and the profile.
    pub fn with_host_work_charged(mut self, on: bool) -> Self {
        self.host_work = HostWork { charge: on, in_calls_ns: 0 };
        self
    }

    /// A simulator of the whole default H200.
    pub fn h200() -> Self {
        let cost = CostModel::h200();
        let cap = cost.device_memory_bytes;
        Self::new(cost, cap)
    }

    /// The cost model in use.
    pub fn cost(&self) -> &CostModel {
        &self.cost
    }

    fn region(&self, id: RegionId) -> Result<&SimRegion> {
        self.regions.get(&id).ok_or(Error::UnknownRegion(id))
    }

    fn region_mut(&mut self, id: RegionId) -> Result<&mut SimRegion> {
        self.regions.get_mut(&id).ok_or(Error::UnknownRegion(id))
    }

    fn checked(&self, id: RegionId, offset: u64, len: u64) -> Result<(usize, usize)> {
        let r = self.region(id)?;
        crate::seam::check_range(id, offset, len, r.bytes)?;
        Ok(r.page_range(offset, len))
    }

    fn emit(&mut self, event: impl FnOnce() -> MemEvent) {
        self.events.emit(event);
    }

    /// Records a migration of `bytes` at `offset` of `region` over `(start, end)`.
    fn emit_migration(
        &mut self,
        region: RegionId,
        offset: u64,
        bytes: u64,
        dir: Direction,
        cause: MigrationCause,
        (start_ns, end_ns): (u64, u64),
    ) {
        self.emit(|| MemEvent::Migration { region, offset, bytes, dir, cause, start_ns, end_ns });
    }

    /// The link clock a transfer in `dir` waits on.
    fn link(&mut self, dir: Direction) -> &mut u64 {
        match (dir, self.cost.um_full_duplex) {
            (Direction::D2H, true) => &mut self.link_d2h,
            _ => &mut self.link_h2d,
        }
    }

    /// Work on the `h2d` stream for `dur` from no earlier than `earliest`, after the work
    /// queued there: a copy in occupies the link as well; a population of fresh pages does not
    /// (on the H200 a copy either way beside it keeps its rate, `unimem probe --transfers`; the
    /// population's own rate is `population_ns`'s). Returns (start, end).
    fn occupy_h2d_stream(&mut self, earliest: u64, dur: u64, on_link: bool) -> (u64, u64) {
        let earliest = earliest.max(self.h2d_stream);
        let (start, end) = if on_link {
            self.occupy_link(Direction::H2D, earliest, dur)
        } else {
            (earliest, earliest + dur)
        };
        self.h2d_stream = end;
        (start, end)
    }

    /// Device time of populating `bytes` of fresh pages from `start`: at the profile's rate,
    /// but at `populate_beside_stage_out_rate_gbps` while the staged evictions issued so far
    /// run (until `stage_out_until`), as on the H200 (`docs/decisions.md`).
    fn population_ns(&self, start: u64, bytes: u64) -> u64 {
        let (fast, slow) =
            (self.cost.prefetch_populate_rate_gbps, self.cost.populate_beside_stage_out_rate_gbps);
        if bytes == 0 || self.stage_out_until <= start {
            return CostModel::transfer_ns(bytes, fast);
        }
        let window = self.stage_out_until - start;
        let all_slow = CostModel::transfer_ns(bytes, slow);
        if all_slow <= window {
            return all_slow;
        }
        let done = ((window as f64 * slow) as u64).min(bytes);
        window + CostModel::transfer_ns(bytes - done, fast)
    }

    /// Occupies the link in `dir` for `dur` from no earlier than `earliest`; returns (start, end).
    fn occupy_link(&mut self, dir: Direction, earliest: u64, dur: u64) -> (u64, u64) {
        let clock = self.link(dir);
        let start = (*clock).max(earliest);
        *clock = start + dur;
        (start, start + dur)
    }

    /// The time at which every kernel and host access issued so far completes (transfers
    /// still in flight on copy streams are not included).
    pub fn completion_ns(&self) -> u64 {
        self.host_now.max(self.compute_free).max(self.link_h2d).max(self.link_d2h).max(self.h2d_stream)
    }
}

impl MemoryBackend for SimBackend {
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
            // Nothing to bring, and nothing for its kernels to wait for.
            Destination::Device(DeviceId(0)) => {
                self.prefetch_ranges(&self.unpacked(ranges), Location::DEVICE)
            }
            Destination::Device(other) => Err(Error::InvalidArgument(format!(
                "the simulator has one device, device 0; asked for device {}",
                other.0
            ))),
            Destination::Host => self.prefetch_ranges(&self.unpacked(ranges), Location::Host),
            Destination::HostStaged => self.stage_ranges(&self.unpacked(ranges)),
            Destination::HostCopy => self.write_back_ranges(&self.unpacked(ranges)),
        }
    }

    fn discard(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.discard_ranges(&self.unpacked(ranges))
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

    fn mark_work(&mut self) -> Result<WorkMark> {
        Ok(WorkMark(self.completion_ns()))
    }

    fn work_mark_ns(&mut self, mark: WorkMark) -> Result<u64> {
        Ok(mark.0)
    }

    fn host_work(&mut self, wall_ns: u64) {
        if self.host_work.charge {
            self.host_now += wall_ns.saturating_sub(std::mem::take(&mut self.host_work.in_calls_ns));
        }
    }

    fn program_host_time(&mut self, host_ns: u64) {
        self.host_now = self.host_now.max(self.program_issue_ns.saturating_add(host_ns));
        self.program_issue_ns = self.host_now;
    }

    fn residency(&self, range: ByteRange) -> Result<Residency> {
        self.residency_of(range)
    }

    fn stats(&self) -> BackendStats {
        self.budget.report(self.stats)
    }

    fn events(&mut self) -> &mut Recorder {
        &mut self.events
    }

    fn program_streams(&mut self) -> Option<&mut dyn crate::seam::ProgramStreams> {
        Some(self)
    }
}

#[cfg(test)]
mod tests;
