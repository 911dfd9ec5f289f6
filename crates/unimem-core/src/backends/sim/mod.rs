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
//! - Staged evictions ([`MemoryBackend::stage_out`]) copy device-only data into pinned staging
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

mod pages;
mod store;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

pub use crate::cost::{CostModel, H200_PROFILE};
use pages::PageSet;
use store::PageStore;

use crate::mechanism::budget::{BlockId, DeviceBudget};
use crate::mechanism::pool::Buffer;

use crate::access::{Accessor, RangeAccess};
use crate::error::{Error, Result};
use crate::region::RegionId;
use crate::seam::{
    Advice, BackendInfo, BackendKind, BackendStats, ByteRange, Destination, DeviceId, Direction, HostAccess,
    HostOp, KernelLaunch, Location, MemEvent, MemoryBackend, MigrationCause, Recorder, Residency, Transfer,
    BLOCK_SIZE, PAGE_SIZE,
};
use crate::units::Bytes;

/// Whether the caller's own host work costs simulated time, and the simulator's wall time in
/// the calls made since the caller last reported its work (`MemoryBackend::host_work`).
#[derive(Debug, Default)]
struct HostWork {
    charge: bool,
    in_calls_ns: u64,
}

const PAGES_PER_BLOCK: usize = (BLOCK_SIZE / PAGE_SIZE) as usize;
const ADV_READ_MOSTLY: u8 = 1;
const ADV_PREFER_HOST: u8 = 2;
const ADV_PREFER_DEVICE: u8 = 4;
const ADV_ACCESSED_BY: u8 = 8;
/// First fake virtual address handed out; regions are 2 MiB aligned after it.
const BASE_ADDR: u64 = 0x7f00_0000_0000;

/// Per-2 MiB-block state the driver keeps.
#[derive(Debug, Clone, Copy, Default)]
struct Block {
    /// Migration stamp for least-recently-migrated eviction; 0 when not on the device.
    stamp: u64,
    /// When data in flight to the device arrives.
    ready_ns: u64,
    /// When the last kernel touching the block ends (D2H and discard wait for it).
    last_use_ns: u64,
    /// When its last staged eviction ends (its copy out and the discard of its pages).
    staged_until: u64,
    /// `ADV_*` flags.
    advice: u8,
}

/// A pooled buffer: its length (which of its blocks are on the device, the pool keeps).
#[derive(Debug)]
struct SimBuffer(u64);

impl Buffer for SimBuffer {
    fn len(&self) -> u64 {
        self.0
    }
}

#[derive(Debug)]
struct SimRegion {
    bytes: u64,
    pages: usize,
    on_device: PageSet,
    on_host: PageSet,
    /// Device pages a prefetch brought that no kernel has touched yet (for the metrics).
    prefetched: PageSet,
    /// Pages whose only copy is in a staging buffer (their bytes are kept in `host_data`).
    staged: PageSet,
    blocks: Vec<Block>,
    host_data: PageStore,
    dev_data: PageStore,
    /// Blocks whose pages are on the device although their data is staged: the region took
    /// over a pooled buffer (a relocation, see [`SimBackend::relocate`]) and no restore has
    /// used them yet.
    spare: Vec<bool>,
}

impl SimRegion {
    fn page_range(&self, offset: u64, len: u64) -> (usize, usize) {
        ((offset / PAGE_SIZE) as usize, (offset + len).div_ceil(PAGE_SIZE) as usize)
    }

    fn block_range(&self, start: usize, end: usize) -> std::ops::Range<usize> {
        if start >= end {
            return 0..0;
        }
        start / PAGES_PER_BLOCK..(end - 1) / PAGES_PER_BLOCK + 1
    }

    fn block_pages(&self, b: usize) -> (usize, usize) {
        (b * PAGES_PER_BLOCK, ((b + 1) * PAGES_PER_BLOCK).min(self.pages))
    }

    /// Staged pages of `s..e` in `spare` blocks (their device pages held for their restore).
    fn spare_pages_in(&self, s: usize, e: usize) -> usize {
        self.block_range(s, e)
            .filter(|&b| self.spare[b])
            .map(|b| {
                let (bs, be) = self.block_pages(b);
                self.staged.count(bs.max(s), be.min(e))
            })
            .sum()
    }

    /// Clears `spare` on the blocks of `s..e` with no staged page left.
    fn clear_spare_restored(&mut self, s: usize, e: usize) {
        for b in self.block_range(s, e) {
            let (bs, be) = self.block_pages(b);
            if self.spare[b] && self.staged.count(bs, be) == 0 {
                self.spare[b] = false;
            }
        }
    }

    /// Pages of `s..e` valid on both sides keep only their device copy (a GPU write collapsed
    /// them, or read-mostly was unset); returns how many.
    fn drop_host_duplicates(&mut self, s: usize, e: usize) -> usize {
        if !self.host_data.is_empty() {
            let (on_host, host_data) = (&self.on_host, &mut self.host_data);
            self.on_device.for_each(s, e, |p| {
                if on_host.contains(p) {
                    host_data.drop_page(p)
                }
            });
        }
        self.on_host.remove_in(&self.on_device, s, e)
    }

    /// The bytes of the device pages of `s..e` leave the device's store; those the host has no
    /// copy of go to the host's (the page sets are the caller's to update).
    fn device_bytes_to_host(&mut self, s: usize, e: usize) {
        if self.dev_data.is_empty() {
            return;
        }
        let (on_host, host_data, dev_data) = (&self.on_host, &mut self.host_data, &mut self.dev_data);
        self.on_device.for_each(s, e, |p| {
            let page = dev_data.take(p);
            if !on_host.contains(p) {
                host_data.put(p, page);
            }
        });
    }

    /// Pages of `s..e` valid on both sides keep only their host copy (a CPU write); returns
    /// how many device pages that frees.
    fn drop_device_duplicates(&mut self, s: usize, e: usize) -> usize {
        if !self.dev_data.is_empty() {
            let (on_device, dev_data) = (&self.on_device, &mut self.dev_data);
            self.on_host.for_each(s, e, |p| {
                if on_device.contains(p) {
                    dev_data.drop_page(p)
                }
            });
        }
        self.prefetched.remove(s, e);
        self.on_device.remove_in(&self.on_host, s, e)
    }
}

/// What moving pages to one side did.
#[derive(Debug, Default, Clone, Copy)]
struct Moved {
    /// Pages that crossed the link.
    transferred: usize,
    /// Pages that got a fresh, zeroed copy (no transfer).
    populated: usize,
    /// Pages whose duplicate on the other side was dropped (no transfer).
    dropped: usize,
}

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
    /// The caller's own host work, where it is charged.
    host_work: HostWork,
    /// Host time of freeing the buffers shed from the pool since the last synchronisation.
    retired_free_ns: u64,
    /// When each kernel in the launch queue ends (at most `launch_queue_depth`).
    launched: std::collections::VecDeque<u64>,
    compute_free: u64,
    link_h2d: u64,
    link_d2h: u64,
    /// Pinned staging memory: capacity and bytes in use.
    staging_capacity: u64,
    staged_bytes: u64,
    /// The emulated device's memory: the data, the pooled buffers (freed regions' buffers with
    /// their blocks still on the device, as the CUDA backend pools them: a new region of a
    /// pooled size takes one without `cuMemAllocManaged` and its resident pages without
    /// first-touch faults), the staged pages of `spare` blocks (their device pages held for
    /// restores to come), and the blocks with device pages in the order the driver evicts
    /// them, least recently migrated first.
    budget: DeviceBudget<SimBuffer, ()>,
    /// Restores may bring a wholly staged region back into a pooled buffer of its size
    /// ([`SimBackend::with_relocation`]).
    relocate: bool,
    stats: BackendStats,
    events: Recorder,
    info: BackendInfo,
    /// Faults reach only a telemetry sink, after the fact, as on a GPU (see
    /// [`SimBackend::with_faults_reported_late`]).
    faults_late: bool,
}

impl SimBackend {
    /// Runs `f`, adding the simulated host time it took to the counter of `op` (the CUDA
    /// backend measures the same calls on the host clock). Where host work is charged, the
    /// call's own wall time is noted, to leave out of it.
    fn host_timed<T>(&mut self, op: HostOp, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let (t0, wall) = (self.host_now, self.host_work.charge.then(std::time::Instant::now));
        let out = f(self);
        self.stats.host.add(op, self.host_now.saturating_sub(t0));
        if let Some(wall) = wall {
            self.host_work.in_calls_ns += wall.elapsed().as_nanos() as u64;
        }
        out
    }

    /// Holds the host for a prefetch call to the host whose work runs from `start` to `end`:
    /// for `prefetch_d2h_host_fraction` of it where the stream is idle when it is called
    /// (measured), for the call alone where the work must wait for earlier work (the driver
    /// queues it and returns). (Prefetches to the device always hold it for the call alone: the
    /// CUDA backend queues them behind a short kernel.)
    fn prefetch_to_host_hold(&mut self, start: u64, end: u64) {
        if start > self.host_now {
            self.host_now += self.cost.prefetch_deferred_call_ns;
        } else {
            let held = ((end - start) as f64 * self.cost.prefetch_d2h_host_fraction) as u64;
            self.host_now = self.host_now.max(start + held);
        }
    }

    /// A simulator with `cost` emulating a device of `capacity` bytes (clamped to the
    /// profile's device memory).
    pub fn new(cost: CostModel, capacity: u64) -> Self {
        let unit_pages = (cost.fault_unit_bytes / PAGE_SIZE) as usize;
        let capacity = capacity.min(cost.device_memory_bytes).max(PAGE_SIZE);
        let description = format!("simulator, profile \"{}\"", cost.name);
        let mut sim = Self {
            cost,
            unit_pages,
            regions: HashMap::default(),
            allocated_bytes: 0,
            next_addr: BASE_ADDR,
            host_now: 0,
            host_work: HostWork::default(),
            retired_free_ns: 0,
            launched: std::collections::VecDeque::new(),
            compute_free: 0,
            link_h2d: 0,
            link_d2h: 0,
            staging_capacity: 0,
            staged_bytes: 0,
            budget: DeviceBudget::new(capacity),
            relocate: false,
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
    /// default: [`MemoryBackend::stage_out`] then migrates).
    pub fn with_staging(mut self, bytes: u64) -> Self {
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

    /// Host write that a GPU kernel performs: the pages are made device-valid (faulting as a
    /// kernel would) and the bytes land in the device copy. Lets tests prove that data written
    /// on the device survives eviction and migration.
    pub fn kernel_write(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        // Declared as a write, as a trace records a kernel that only stores to the range.
        let acc =
            [RangeAccess { region: id, offset, len: data.len() as u64, mode: crate::AccessMode::Write }];
        self.launch_kernel(&KernelLaunch { name: "kernel_write", dur_ns: 0, accesses: &acc })?;
        self.store_bytes(id, offset, data)
    }

    /// Writes bytes where each page is valid now (the device copy if there is one).
    fn store_bytes(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        let r = self.region_mut(id)?;
        let (on_device, dev_data, host_data) = (&r.on_device, &mut r.dev_data, &mut r.host_data);
        for_each_page_chunk(offset, data.len(), |p, at, lo, hi| {
            let side = if on_device.contains(p) { &mut *dev_data } else { &mut *host_data };
            side.write(at, &data[lo..hi]);
        });
        Ok(())
    }

    /// Reads bytes as a GPU kernel would see them (pages made device-valid first).
    pub fn kernel_read(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let acc = [RangeAccess { region: id, offset, len: buf.len() as u64, mode: crate::AccessMode::Read }];
        self.launch_kernel(&KernelLaunch { name: "kernel_read", dur_ns: 0, accesses: &acc })?;
        self.view_bytes(id, offset, buf)
    }

    /// Reads bytes where each page is valid now (remote-mapped pages in place on the host, the
    /// rest from the device copy if there is one).
    fn view_bytes(&self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.region(id)?;
        for_each_page_chunk(offset, buf.len(), |p, at, lo, hi| {
            let side = if r.on_device.contains(p) { &r.dev_data } else { &r.host_data };
            side.read(at, &mut buf[lo..hi]);
        });
        Ok(())
    }

    fn region(&self, id: RegionId) -> Result<&SimRegion> {
        self.regions.get(&id).ok_or(Error::UnknownRegion(id))
    }

    fn region_mut(&mut self, id: RegionId) -> Result<&mut SimRegion> {
        self.regions.get_mut(&id).ok_or(Error::UnknownRegion(id))
    }

    fn checked(&self, id: RegionId, offset: u64, len: u64) -> Result<(usize, usize)> {
        let r = self.region(id)?;
        match offset.checked_add(len) {
            Some(end) if end <= r.bytes => Ok(r.page_range(offset, len)),
            _ => Err(Error::OutOfRange { region: id, offset, len, size: r.bytes }),
        }
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

    /// Occupies the link in `dir` for `dur` from no earlier than `earliest`; returns (start, end).
    fn occupy_link(&mut self, dir: Direction, earliest: u64, dur: u64) -> (u64, u64) {
        let clock = self.link(dir);
        let start = (*clock).max(earliest);
        *clock = start + dur;
        (start, start + dur)
    }

    fn note_device_added(&mut self, pages: usize) {
        self.budget.add_data(pages as u64 * PAGE_SIZE);
        self.budget.note_held();
    }

    /// Device pages leaving the working set: a new owner populates them afresh.
    fn note_device_released(&mut self, pages: usize) {
        self.budget.remove_data(pages as u64 * PAGE_SIZE);
    }

    /// Gives back the device pages of pooled buffers, the longest pooled first, until `need`
    /// more bytes fit in the capacity, as the CUDA backend does: one discard of their pages,
    /// costed as any discard, and the buffers retire (a new region of their size gets a new
    /// buffer).
    fn shed_pool(&mut self, need: u64) {
        let shed = self.budget.shed(need);
        if shed.is_empty() {
            return;
        }
        let mut bytes = 0;
        for e in shed {
            bytes += e.resident_bytes();
            self.retired_free_ns += self.cost.free_retired_ns(e.resident_bytes());
        }
        let dur = self.cost.discard_call_ns + CostModel::transfer_ns(bytes, self.cost.discard_rate_gbps);
        self.occupy_link(Direction::D2H, self.host_now, dur);
        self.host_now += self.discard_host_ns(bytes);
    }

    /// Waits for all the device's work, then frees the buffers shed from the pool since the
    /// last time, as the CUDA backend does once the device is idle (`free_retired_host_ns`
    /// and so on: their pages, discarded, are still mapped).
    fn sync_all(&mut self) {
        self.host_now = self.completion_ns() + std::mem::take(&mut self.retired_free_ns);
    }

    /// Host time of a discard call over `bytes` (measured per GiB of 2 MiB ranges).
    fn discard_host_ns(&self, bytes: u64) -> u64 {
        (bytes as f64 / (1u64 << 30) as f64 * self.cost.discard_host_ns_per_gib as f64) as u64
    }

    /// Re-stamps blocks that just received device pages (least-recently-migrated order).
    fn restamp(&mut self, id: RegionId, blocks: std::ops::Range<usize>) {
        let Some(r) = self.regions.get_mut(&id) else {
            return;
        };
        for b in blocks {
            let blk = &mut r.blocks[b];
            blk.stamp = self.budget.restamp(BlockId::new(id, b), blk.stamp);
        }
    }

    /// Drops blocks with no device pages left from the eviction order.
    fn unstamp_empty(&mut self, id: RegionId, blocks: std::ops::Range<usize>) {
        let Some(r) = self.regions.get_mut(&id) else {
            return;
        };
        for b in blocks {
            let (s, e) = r.block_pages(b);
            let blk = &mut r.blocks[b];
            if blk.stamp != 0 && r.on_device.count(s, e) == 0 {
                self.budget.unstamp(BlockId::new(id, b), blk.stamp);
                blk.stamp = 0;
            }
        }
    }

    /// Makes pages `s..e` device-valid. `duplicate` keeps host copies (read-mostly).
    fn move_to_device(&mut self, id: RegionId, s: usize, e: usize, duplicate: bool) -> Moved {
        let r = self.regions.get_mut(&id).expect("checked by caller");
        let host_only = r.on_host.count(s, e) - r.on_host.count_and(&r.on_device, s, e);
        let populated = r.on_device.count_neither(&r.on_host, s, e);
        if !r.host_data.is_empty() {
            let (on_host, on_device) = (&r.on_host, &r.on_device);
            let (host_data, dev_data) = (&mut r.host_data, &mut r.dev_data);
            on_host.for_each_not_in(on_device, s, e, |p| {
                let page = if duplicate { host_data.copy(p) } else { host_data.take(p) };
                dev_data.put(p, page);
            });
        }
        let added = r.on_device.insert(s, e);
        if !duplicate {
            r.on_host.remove(s, e);
        }
        self.note_device_added(added);
        Moved { transferred: host_only, populated, dropped: 0 }
    }

    /// Makes pages `s..e` host-valid and drops them from the device. Pages with no copy stay so.
    fn move_to_host(&mut self, id: RegionId, s: usize, e: usize) -> Moved {
        let r = self.regions.get_mut(&id).expect("checked by caller");
        let dup = r.on_device.count_and(&r.on_host, s, e);
        let dev_only = r.on_device.count(s, e) - dup;
        r.device_bytes_to_host(s, e);
        let (on_host, on_device) = (&mut r.on_host, &r.on_device);
        on_host.union_from(on_device, s, e);
        let removed = r.on_device.remove(s, e);
        r.prefetched.remove(s, e);
        self.budget.remove_data(removed as u64 * PAGE_SIZE);
        let blocks = r.block_range(s, e);
        self.unstamp_empty(id, blocks);
        Moved { transferred: dev_only, populated: 0, dropped: dup }
    }

    /// Sheds pooled pages (`shed_pool`), then evicts least-recently-migrated blocks not in
    /// `protect`, until `need` more bytes fit.
    /// Evictions occupy the D2H link from `earliest` (and after each block's last use); returns
    /// when the last of them completes, i.e. when the room is there (`earliest` if none).
    fn make_room(&mut self, need: u64, protect: &HashSet<BlockId>, earliest: u64) -> u64 {
        self.shed_pool(need);
        let mut done = earliest;
        // Evicting a block takes every device page of it back to the host. Where only the
        // running work's own blocks are left, it runs over capacity.
        let freed = |b: &BlockId| {
            let r = &self.regions[&b.region];
            let (s, e) = r.block_pages(b.block as usize);
            r.on_device.count(s, e) as u64 * PAGE_SIZE
        };
        for BlockId { region: id, block: b } in self.budget.victims(need, |b| protect.contains(b), freed) {
            let r = &self.regions[&id];
            let (s, e) = r.block_pages(b as usize);
            let last_use = r.blocks[b as usize].last_use_ns;
            let moved = self.move_to_host(id, s, e);
            let bytes = moved.transferred as u64 * PAGE_SIZE;
            let dur = CostModel::transfer_ns(bytes, self.cost.evict_d2h_rate_gbps)
                + CostModel::transfer_ns(
                    moved.dropped as u64 * PAGE_SIZE,
                    self.cost.duplicate_drop_rate_gbps,
                );
            let (start, end) = self.occupy_link(Direction::D2H, earliest.max(last_use), dur);
            done = done.max(end);
            self.stats.evicted_bytes += bytes;
            self.stats.driver_dropped_bytes += (moved.transferred + moved.dropped) as u64 * PAGE_SIZE;
            self.stats.d2h_bytes += bytes;
            self.emit_migration(
                id,
                s as u64 * PAGE_SIZE,
                bytes,
                Direction::D2H,
                MigrationCause::Eviction,
                (start, end),
            );
        }
        done
    }

    /// `ranges` less the blocks with staged pages whose stage-out has not ended by now: as the
    /// CUDA backend, a prefetch leaves them to the kernel that needs them (restoring pages soon
    /// after their discard is slow on the H200).
    fn settled(&self, ranges: &[ByteRange]) -> Vec<ByteRange> {
        let mut out: Vec<ByteRange> = Vec::with_capacity(ranges.len());
        for range in ranges {
            let r = &self.regions[&range.region];
            let (s, e) = r.page_range(range.offset, range.len);
            for b in r.block_range(s, e) {
                let (bs, be) = r.block_pages(b);
                if r.blocks[b].staged_until > self.host_now && r.staged.count(bs, be) > 0 {
                    continue;
                }
                let lo = (bs.max(s) as u64 * PAGE_SIZE).max(range.offset);
                let hi = (be.min(e) as u64 * PAGE_SIZE).min(range.offset + range.len);
                crate::seam::push_merged(
                    &mut out,
                    ByteRange { region: range.region, offset: lo, len: hi - lo },
                );
            }
        }
        out
    }

    /// Brings the staged pages of `s..e` back to the device, after making room (outside
    /// `protect`) from `earliest` on: the pages are repopulated and copied from the staging
    /// buffers over the link's H2D side. `prefetch`: a prefetch asked for them (they count in
    /// its metrics). Returns (pages, when they are there).
    fn restore_to_device(
        &mut self,
        id: RegionId,
        s: usize,
        e: usize,
        protect: &HashSet<BlockId>,
        earliest: u64,
        prefetch: bool,
    ) -> (usize, u64) {
        let runs = self.regions[&id].staged.runs(s, e);
        self.relocate(id);
        let mut pages = 0;
        let mut done = earliest;
        for (rs, re) in runs {
            let n = re - rs;
            let room_at = self.make_room(n as u64 * PAGE_SIZE, protect, earliest);
            // Pages of a pooled buffer taken over (the region relocated into it) are on the
            // device already: no repopulation, and the copy lands in resident pages.
            let r = &self.regions[&id];
            let spare_blocks = r.block_range(rs, re).filter(|&b| r.spare[b]).count();
            let resident = r.spare_pages_in(rs, re);
            self.budget.remove_spare(resident as u64 * PAGE_SIZE);
            let r = self.regions.get_mut(&id).expect("checked by caller");
            if !r.host_data.is_empty() {
                let (host_data, dev_data) = (&mut r.host_data, &mut r.dev_data);
                r.staged.for_each(rs, re, |p| dev_data.put(p, host_data.take(p)));
            }
            r.staged.remove(rs, re);
            r.clear_spare_restored(rs, re);
            r.on_device.insert(rs, re);
            if prefetch {
                // A prefetch's restore counts as prefetched (accuracy and timeliness).
                r.prefetched.insert(rs, re);
                self.stats.prefetch_arrived_bytes += (re - rs) as u64 * PAGE_SIZE;
            }
            let blocks = r.block_range(rs, re);
            self.staged_bytes -= n as u64 * PAGE_SIZE;
            self.note_device_added(n);
            let bytes = n as u64 * PAGE_SIZE;
            // A prefetch's own call cost is charged by the prefetch; a restore for a kernel
            // makes its own call, which repopulates the discarded pages (per range, as any).
            // Either way the CUDA backend repopulates one range per 2 MiB block, which the
            // driver does behind the copies before it (the probe's "time per block", between
            // two restores' copies on the H200), then copies the data in.
            let call = if prefetch { 0 } else { self.cost.batch_range_ns };
            let repopulated = blocks.len() - spare_blocks;
            let per_block = repopulated as u64 * self.cost.stage_h2d_block_ns;
            let resident_bytes = resident as u64 * PAGE_SIZE;
            let dur = call
                + per_block
                + CostModel::transfer_ns(bytes - resident_bytes, self.cost.stage_h2d_rate_gbps)
                + CostModel::transfer_ns(resident_bytes, self.cost.stage_h2d_resident_rate_gbps);
            let (start, end) = self.occupy_link(Direction::H2D, room_at.max(self.host_now), dur);
            let r = self.regions.get_mut(&id).expect("checked by caller");
            for b in blocks.clone() {
                r.blocks[b].ready_ns = r.blocks[b].ready_ns.max(end);
            }
            self.restamp(id, blocks);
            self.stats.h2d_bytes += bytes;
            self.stats.staged_in_bytes += bytes;
            self.emit_migration(
                id,
                rs as u64 * PAGE_SIZE,
                bytes,
                Direction::H2D,
                MigrationCause::Staging,
                (start, end),
            );
            pages += n;
            done = done.max(end);
        }
        (pages, done)
    }

    /// As a restore begins, when relocation is allowed: as the CUDA backend, a region whose
    /// every page is staged moves into a pooled buffer of its size with pages on the device,
    /// which need no repopulation, for this restore and the region's next ones (its blocks
    /// become `spare`); its own buffer, its pages discarded, goes to the pool.
    fn relocate(&mut self, id: RegionId) {
        let r = &self.regions[&id];
        let staged = !r.spare.contains(&true) && r.staged.count(0, r.pages) == r.pages;
        if !(self.relocate && staged) {
            return;
        }
        let Some(entry) = self.budget.pool_mut().take_resident(r.bytes) else { return };
        let r = self.regions.get_mut(&id).expect("checked by caller");
        r.spare = entry.resident;
        // Every page is staged: the spare blocks' pages, all of them.
        self.budget.add_spare(r.spare_pages_in(0, r.pages) as u64 * PAGE_SIZE);
        self.budget.pool_mut().put(SimBuffer(r.bytes), vec![false; r.blocks.len()], Vec::new(), None);
    }

    /// Brings the staged pages of `s..e` back to the host (the copy engine copies them into
    /// the host's pages, over the link) from `at`; returns when the copy is done.
    fn restore_to_host(&mut self, id: RegionId, s: usize, e: usize, at: u64) -> u64 {
        let r = self.regions.get_mut(&id).expect("checked by caller");
        let (staged, on_host) = (&mut r.staged, &mut r.on_host);
        on_host.union_from(staged, s, e);
        let n = staged.remove(s, e);
        if n == 0 {
            return at;
        }
        let bytes = n as u64 * PAGE_SIZE;
        self.staged_bytes -= bytes;
        self.stats.staged_in_bytes += bytes;
        let dur = CostModel::transfer_ns(bytes, self.cost.stage_host_rate_gbps);
        self.occupy_link(Direction::H2D, at, dur).1
    }

    /// Drops the staged copies of `s..e` (dead data); returns how many pages had one.
    fn drop_staged(&mut self, id: RegionId, s: usize, e: usize) -> usize {
        let r = self.regions.get_mut(&id).expect("checked by caller");
        if !r.host_data.is_empty() {
            let host_data = &mut r.host_data;
            r.staged.for_each(s, e, |p| host_data.drop_page(p));
        }
        // Pages taken over for data now dead go back to the driver.
        let spare = r.spare_pages_in(s, e);
        let n = r.staged.remove(s, e);
        r.clear_spare_restored(s, e);
        self.budget.remove_spare(spare as u64 * PAGE_SIZE);
        self.staged_bytes -= n as u64 * PAGE_SIZE;
        n
    }

    fn blocks_of(&self, ranges: impl Iterator<Item = (RegionId, u64, u64)>) -> HashSet<BlockId> {
        let mut set = HashSet::default();
        for (id, offset, len) in ranges {
            if let Some(r) = self.regions.get(&id) {
                let (s, e) = r.page_range(offset, len);
                set.extend(r.block_range(s, e).map(|b| BlockId::new(id, b)));
            }
        }
        set
    }

    /// Fault handling for one block segment of a kernel access: returns (fault groups,
    /// transferred pages, populated pages) after migrating every faulting unit. `in_run` carries
    /// whether the previous unit of the access faulted, so one contiguous run is one group even
    /// across block boundaries.
    fn fault_in(
        &mut self,
        id: RegionId,
        s: usize,
        e: usize,
        duplicate: bool,
        in_run: &mut bool,
    ) -> (u64, usize, usize) {
        let unit = self.unit_pages;
        let (us, ue) = self.unit_span(&self.regions[&id], s, e);
        let (mut groups, mut moved, mut populated) = (0u64, 0usize, 0usize);
        // Fast path: nothing on the device yet, so the whole span is one run (the common case
        // of streaming data in); otherwise find the runs of faulting units.
        if self.regions[&id].on_device.count(us, ue) == 0 {
            groups += u64::from(!*in_run);
            *in_run = true;
            let m = self.move_to_device(id, us, ue, duplicate);
            return (groups, m.transferred, m.populated);
        }
        let mut run_start = None;
        let mut u = us;
        while u < ue {
            let end = (u + unit).min(ue);
            let faults = self.regions[&id].on_device.count(u, end) < end - u;
            match (faults, run_start) {
                (true, None) => {
                    groups += u64::from(!*in_run);
                    run_start = Some(u);
                }
                (false, Some(start)) => {
                    let m = self.move_to_device(id, start, u, duplicate);
                    (moved, populated) = (moved + m.transferred, populated + m.populated);
                    run_start = None;
                }
                _ => {}
            }
            *in_run = faults;
            u = end;
        }
        if let Some(start) = run_start {
            let m = self.move_to_device(id, start, ue, duplicate);
            (moved, populated) = (moved + m.transferred, populated + m.populated);
        }
        (groups, moved, populated)
    }

    /// Pages `s..e` grown outward to whole fault units (units never cross a 2 MiB block).
    fn unit_span(&self, r: &SimRegion, s: usize, e: usize) -> (usize, usize) {
        let u = self.unit_pages;
        (s / u * u, (e.div_ceil(u) * u).min(r.pages))
    }

    fn fault_cost_ns(&self, groups: u64, moved: usize, populated: usize) -> u64 {
        groups * self.cost.gpu_fault_latency_ns
            + CostModel::transfer_ns(moved as u64 * PAGE_SIZE, self.cost.gpu_fault_rate_gbps)
            + (populated.div_ceil(self.unit_pages) as u64) * self.cost.gpu_populate_latency_ns
    }
}

/// Splits `offset..offset+len` at page boundaries: calls `f(page, byte offset, lo, hi)` where
/// `lo..hi` is the chunk's position in the caller's buffer.
fn for_each_page_chunk(offset: u64, len: usize, mut f: impl FnMut(usize, u64, usize, usize)) {
    let mut done = 0usize;
    while done < len {
        let at = offset + done as u64;
        let n = ((PAGE_SIZE - at % PAGE_SIZE) as usize).min(len - done);
        f((at / PAGE_SIZE) as usize, at, done, done + n);
        done += n;
    }
}

impl SimBackend {
    fn alloc_region(&mut self, id: RegionId, bytes: u64) -> Result<u64> {
        self.host_timed(HostOp::Allocate, |this| {
            crate::seam::check_new_region(id, bytes, this.regions.contains_key(&id))?;
            let limit = this.cost.machine_memory_bytes();
            if bytes > limit - this.allocated_bytes.min(limit) {
                return Err(Error::Allocation {
                    bytes,
                    reason: format!(
                        "the simulated machine holds at most {} of managed data ({} of device and {} of host \
                         memory: `device_memory_bytes` and `host_memory_bytes` of the profile \"{}\"), and {} is \
                         allocated",
                        Bytes(limit),
                        Bytes(this.cost.device_memory_bytes),
                        Bytes(this.cost.host_memory_bytes),
                        this.cost.name,
                        Bytes(this.allocated_bytes)
                    ),
                });
            }
            this.allocated_bytes += bytes;
            let pages = bytes.div_ceil(PAGE_SIZE) as usize;
            let addr = this.next_addr;
            this.next_addr += bytes.div_ceil(BLOCK_SIZE) * BLOCK_SIZE;
            let mut region = SimRegion {
                bytes,
                pages,
                on_device: PageSet::new(pages),
                on_host: PageSet::new(pages),
                prefetched: PageSet::new(pages),
                staged: PageSet::new(pages),
                blocks: vec![Block::default(); pages.div_ceil(PAGES_PER_BLOCK)],
                host_data: PageStore::default(),
                dev_data: PageStore::default(),
                spare: vec![false; pages.div_ceil(PAGES_PER_BLOCK)],
            };
            // A pooled buffer's pages on the device are already mapped (zeroed for the user).
            let mut pooled = Vec::new();
            match this.budget.pool_mut().take(bytes) {
                Some(entry) => {
                    for b in (0..entry.resident.len()).filter(|&b| entry.resident[b]) {
                        let (bs, be) = region.block_pages(b);
                        region.on_device.insert(bs, be);
                        pooled.push((b, be - bs));
                    }
                }
                None => this.host_now += this.cost.alloc_ns(bytes),
            }
            this.regions.insert(id, region);
            for (b, pages) in pooled {
                this.note_device_added(pages);
                this.restamp(id, b..b + 1);
            }
            Ok(addr)
        })
    }

    fn free_region(&mut self, id: RegionId) -> Result<()> {
        let r = self.regions.remove(&id).ok_or(Error::UnknownRegion(id))?;
        self.allocated_bytes -= r.bytes;
        self.staged_bytes -= r.staged.count(0, r.pages) as u64 * PAGE_SIZE;
        // The runtime pools managed memory: a free does not synchronise the device, and the
        // buffer keeps its blocks on the device (whole ones, as the CUDA backend accounts
        // them) for its next region.
        let resident: Vec<bool> = (0..r.blocks.len())
            .map(|b| {
                let (bs, be) = r.block_pages(b);
                r.spare[b] || r.on_device.count(bs, be) == be - bs
            })
            .collect();
        self.note_device_released(r.on_device.count(0, r.pages));
        self.budget.remove_spare(r.spare_pages_in(0, r.pages) as u64 * PAGE_SIZE);
        self.budget.pool_mut().put(SimBuffer(r.bytes), resident, Vec::new(), None);
        for (b, blk) in r.blocks.iter().enumerate() {
            self.budget.unstamp(BlockId::new(id, b), blk.stamp);
        }
        Ok(())
    }

    fn advise_range(&mut self, range: ByteRange, advice: Advice) -> Result<()> {
        self.host_timed(HostOp::Advise, |this| {
            let (s, e) = this.checked(range.region, range.offset, range.len)?;
            // Advice calls block the calling thread (host time measured by `unimem probe`).
            let per_gib = match advice {
                Advice::SetReadMostly => this.cost.advise_read_mostly_ns_per_gib as f64,
                Advice::UnsetReadMostly => this.cost.advise_unset_read_mostly_ns_per_gib as f64,
                // Measured for the pair of calls that maps data remotely.
                Advice::SetPreferredLocation(Location::Host) | Advice::SetAccessedByDevice => {
                    this.cost.advise_remote_ns_per_gib as f64 / 2.0
                }
                _ => 0.0,
            };
            this.host_now += (range.len as f64 / (1u64 << 30) as f64 * per_gib).round() as u64;
            let r = this.region_mut(range.region)?;
            let blocks = r.block_range(s, e);
            for b in blocks.clone() {
                let blk = &mut r.blocks[b];
                match advice {
                    Advice::SetReadMostly => blk.advice |= ADV_READ_MOSTLY,
                    Advice::UnsetReadMostly => blk.advice &= !ADV_READ_MOSTLY,
                    Advice::SetPreferredLocation(Location::Host) => {
                        blk.advice = (blk.advice & !ADV_PREFER_DEVICE) | ADV_PREFER_HOST
                    }
                    Advice::SetPreferredLocation(Location::Device(_)) => {
                        blk.advice = (blk.advice & !ADV_PREFER_HOST) | ADV_PREFER_DEVICE
                    }
                    Advice::UnsetPreferredLocation => blk.advice &= !(ADV_PREFER_HOST | ADV_PREFER_DEVICE),
                    Advice::SetAccessedByDevice => blk.advice |= ADV_ACCESSED_BY,
                    Advice::UnsetAccessedByDevice => blk.advice &= !ADV_ACCESSED_BY,
                }
            }
            if advice == Advice::UnsetReadMostly {
                // Duplicates collapse to the host copy: on the H200 a kernel read data just collapsed
                // at 7.3 GB/s, the fault-driven rate (`unimem probe`).
                let mut freed = 0;
                for b in blocks.clone() {
                    let (bs, be) = r.block_pages(b);
                    freed += r.drop_device_duplicates(bs, be);
                }
                this.note_device_released(freed);
                this.unstamp_empty(range.region, blocks);
                if freed > 0 {
                    let (region, offset, bytes) = (range.region, range.offset, freed as u64 * PAGE_SIZE);
                    this.emit(|| MemEvent::Drop { region, offset, bytes, from: Location::DEVICE });
                }
            }
            Ok(())
        })
    }

    fn prefetch_ranges(&mut self, ranges: &[ByteRange], to: Location) -> Result<()> {
        self.host_timed(HostOp::prefetch(to), |this| {
            for r in ranges {
                this.checked(r.region, r.offset, r.len)?;
            }
            let settled;
            // Nothing is staged most of the time: no block to leave out.
            let ranges = if to == Location::DEVICE && this.staged_bytes > 0 {
                settled = this.settled(ranges);
                &settled[..]
            } else {
                ranges
            };
            let protect = if to == Location::DEVICE {
                this.blocks_of(ranges.iter().map(|r| (r.region, r.offset, r.len)))
            } else {
                HashSet::default()
            };
            for (i, range) in ranges.iter().enumerate() {
                let call_ns = if i == 0 { this.cost.prefetch_call_ns } else { this.cost.batch_range_ns };
                let (s, e) = this.region(range.region)?.page_range(range.offset, range.len);
                this.stats.prefetch_ranges += 1;
                let id = range.region;
                match to {
                    Location::Device(_) => {
                        if e > s && this.regions[&id].staged.count(s, e) == e - s {
                            // All of it comes back from staging: the CUDA backend repopulates on a
                            // stream of its own, behind a short kernel, so the call holds the host
                            // neither for the link nor for the driver's work.
                            this.host_now += call_ns;
                            this.restore_to_device(id, s, e, &protect, this.host_now, true);
                            continue;
                        }
                        this.restore_to_device(id, s, e, &protect, this.host_now, true);
                        let r = &this.regions[&id];
                        let missing = (e - s) - r.on_device.count(s, e);
                        let blocks = r.block_range(s, e);
                        let read_mostly = blocks.clone().all(|b| r.blocks[b].advice & ADV_READ_MOSTLY != 0);
                        let room_at = this.make_room(missing as u64 * PAGE_SIZE, &protect, this.host_now);
                        let r = this.regions.get_mut(&id).expect("checked");
                        let (prefetched, on_device) = (&mut r.prefetched, &r.on_device);
                        prefetched.insert_not_in(on_device, s, e);
                        let m = this.move_to_device(id, s, e, read_mostly);
                        this.stats.prefetch_arrived_bytes += (m.transferred + m.populated) as u64 * PAGE_SIZE;
                        if read_mostly {
                            this.stats.duplicated_bytes += m.transferred as u64 * PAGE_SIZE;
                        }
                        let bytes = m.transferred as u64 * PAGE_SIZE;
                        let rate = if read_mostly {
                            this.cost.duplicate_prefetch_rate_gbps
                        } else {
                            this.cost.prefetch_h2d_rate_gbps
                        };
                        let dur = call_ns
                            + CostModel::transfer_ns(bytes, rate)
                            + CostModel::transfer_ns(
                                m.populated as u64 * PAGE_SIZE,
                                this.cost.prefetch_populate_rate_gbps,
                            );
                        let (start, end) = this.occupy_link(Direction::H2D, room_at, dur);
                        // The CUDA backend queues it behind a short kernel: the driver
                        // defers the work, and the call holds the host for itself alone.
                        this.host_now += this.cost.prefetch_deferred_call_ns;
                        this.stats.h2d_bytes += bytes;
                        this.stats.prefetch_h2d_bytes += bytes;
                        let r = this.regions.get_mut(&id).expect("checked");
                        for b in blocks.clone() {
                            r.blocks[b].ready_ns = r.blocks[b].ready_ns.max(end);
                        }
                        if m.transferred + m.populated > 0 {
                            this.restamp(id, blocks);
                        }
                        if m.populated > 0 {
                            let bytes = m.populated as u64 * PAGE_SIZE;
                            let offset = range.offset;
                            this.emit(|| MemEvent::Populate {
                                region: id,
                                offset,
                                bytes,
                                on: Location::DEVICE,
                            });
                        }
                        this.emit_migration(
                            id,
                            range.offset,
                            bytes,
                            Direction::H2D,
                            MigrationCause::Prefetch,
                            (start, end),
                        );
                    }
                    Location::Host => {
                        let r = &this.regions[&id];
                        let last_use =
                            r.block_range(s, e).map(|b| r.blocks[b].last_use_ns).max().unwrap_or(0);
                        let m = this.move_to_host(id, s, e);
                        let bytes = m.transferred as u64 * PAGE_SIZE;
                        let dur = call_ns
                            + CostModel::transfer_ns(bytes, this.cost.prefetch_d2h_rate_gbps)
                            + CostModel::transfer_ns(
                                m.dropped as u64 * PAGE_SIZE,
                                this.cost.duplicate_drop_rate_gbps,
                            );
                        let (start, end) = this.occupy_link(Direction::D2H, this.host_now.max(last_use), dur);
                        this.prefetch_to_host_hold(start, end);
                        this.stats.d2h_bytes += bytes;
                        this.stats.prefetch_d2h_bytes += bytes;
                        this.emit_migration(
                            id,
                            range.offset,
                            bytes,
                            Direction::D2H,
                            MigrationCause::Prefetch,
                            (start, end),
                        );
                    }
                }
            }
            Ok(())
        })
    }

    fn discard_ranges(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.host_timed(HostOp::Discard, |this| {
            for r in ranges {
                this.checked(r.region, r.offset, r.len)?;
            }
            let mut total = 0u64;
            let mut after = this.host_now;
            for range in ranges {
                let id = range.region;
                let r = this.regions.get_mut(&id).expect("checked");
                let (s, e) = r.page_range(range.offset, range.len);
                let blocks = r.block_range(s, e);
                after = after.max(blocks.clone().map(|b| r.blocks[b].last_use_ns).max().unwrap_or(0));
                // Trace replays keep no bytes: only walk pages when a side holds some.
                if !r.dev_data.is_empty() {
                    let dev_data = &mut r.dev_data;
                    r.on_device.for_each(s, e, |p| dev_data.drop_page(p));
                }
                if !r.host_data.is_empty() {
                    let host_data = &mut r.host_data;
                    r.on_host.for_each(s, e, |p| host_data.drop_page(p));
                }
                let had_copy = (e - s) - r.on_device.count_neither(&r.on_host, s, e);
                let dev = r.on_device.remove(s, e);
                let had_copy = had_copy + this.drop_staged(id, s, e);
                let r = this.regions.get_mut(&id).expect("checked");
                r.on_host.remove(s, e);
                r.prefetched.remove(s, e);
                // Discard does not return memory (h200-facts.md): the pages stay mapped, pooled.
                this.note_device_released(dev);
                let bytes = had_copy as u64 * PAGE_SIZE;
                total += bytes;
                this.unstamp_empty(id, blocks);
                this.emit(|| MemEvent::Drop {
                    region: id,
                    offset: range.offset,
                    bytes,
                    from: Location::DEVICE,
                });
            }
            let dur = this.cost.discard_call_ns + CostModel::transfer_ns(total, this.cost.discard_rate_gbps);
            this.occupy_link(Direction::D2H, after, dur);
            // The call itself holds the host (measured per GiB of 2 MiB ranges).
            let bytes: u64 = ranges.iter().map(|r| r.len).sum();
            this.host_now += this.discard_host_ns(bytes);
            this.stats.discarded_bytes += total;
            Ok(())
        })
    }

    fn stage_ranges(&mut self, ranges: &[ByteRange]) -> Result<()> {
        // What does not fit migrates as a prefetch to the host, after the stage-out's own
        // calls, as the CUDA backend does (and counts it).
        let migrate = self.host_timed(HostOp::StageOut, |this| {
            for r in ranges {
                this.checked(r.region, r.offset, r.len)?;
            }
            // Blocks that do not fit in the staging buffers, or hold no device-only data, migrate.
            let mut migrate: Vec<ByteRange> = Vec::new();
            let mut copies = 0u64;
            for range in ranges {
                let id = range.region;
                let (s, e) = this.regions[&id].page_range(range.offset, range.len);
                for b in this.regions[&id].block_range(s, e) {
                    let r = &this.regions[&id];
                    let (bs, be) = r.block_pages(b);
                    let (bs, be) = (bs.max(s), be.min(e));
                    let dev_only = r.on_device.count(bs, be) - r.on_device.count_and(&r.on_host, bs, be);
                    let bytes = dev_only as u64 * PAGE_SIZE;
                    if dev_only == 0 || this.staged_bytes + bytes > this.staging_capacity {
                        let (offset, len) = (bs as u64 * PAGE_SIZE, (be - bs) as u64 * PAGE_SIZE);
                        crate::seam::push_merged(
                            &mut migrate,
                            ByteRange { region: id, offset, len: len.min(r.bytes - offset) },
                        );
                        continue;
                    }
                    // The copy waits for the kernels using the block, on the copy engine's lane.
                    let last_use = r.blocks[b].last_use_ns;
                    let r = this.regions.get_mut(&id).expect("checked");
                    let (staged, on_device, on_host) = (&mut r.staged, &r.on_device, &r.on_host);
                    staged.insert_only_in(on_device, on_host, bs, be);
                    r.device_bytes_to_host(bs, be);
                    // Duplicates keep their host copy; every device page of the block is dropped.
                    let dropped = r.on_device.remove(bs, be);
                    r.prefetched.remove(bs, be);
                    this.note_device_released(dropped);
                    this.unstamp_empty(id, b..b + 1);
                    this.staged_bytes += bytes;
                    let start_at = this.host_now.max(last_use);
                    let dur = CostModel::transfer_ns(bytes, this.cost.stage_d2h_rate_gbps);
                    let (start, end) = this.occupy_link(Direction::D2H, start_at, dur);
                    this.regions.get_mut(&id).expect("checked").blocks[b].staged_until = end;
                    copies += 1;
                    this.stats.d2h_bytes += bytes;
                    this.stats.staged_out_bytes += bytes;
                    let offset = bs as u64 * PAGE_SIZE;
                    this.emit_migration(
                        id,
                        offset,
                        bytes,
                        Direction::D2H,
                        MigrationCause::Staging,
                        (start, end),
                    );
                }
            }
            if copies > 0 {
                // The copies' calls and the discard of their device pages hold the host.
                this.host_now += this.discard_host_ns(copies * BLOCK_SIZE);
            }
            Ok(migrate)
        })?;
        if migrate.is_empty() {
            return Ok(());
        }
        self.prefetch_ranges(&migrate, Location::Host)
    }

    fn launch_kernel(&mut self, kernel: &KernelLaunch<'_>) -> Result<()> {
        self.host_timed(HostOp::Launch, |this| {
            for a in kernel.accesses {
                this.checked(a.region, a.offset, a.len)?;
            }
            // The host issues the kernel at the end of its launch call; the device runs it when
            // free. With a full launch queue the call waits for the oldest kernel in it to end.
            let depth = this.cost.launch_queue_depth;
            if depth > 0 && this.launched.len() as u64 >= depth {
                let oldest = this.launched.pop_front().unwrap_or(0);
                this.host_now = this.host_now.max(oldest);
            }
            this.host_now += this.cost.launch_host_ns;
            // Staged data it uses comes back first (the kernel waits for it as for a prefetch):
            // over whole fault units, since a fault brings in the unit around a touched page.
            if this.staged_bytes > 0 {
                let protect = this.blocks_of(kernel.accesses.iter().map(|a| (a.region, a.offset, a.len)));
                for a in kernel.accesses {
                    let r = &this.regions[&a.region];
                    let (s, e) = r.page_range(a.offset, a.len);
                    let (us, ue) = this.unit_span(r, s, e);
                    if r.staged.count(us, ue) > 0 {
                        this.restore_to_device(a.region, us, ue, &protect, this.host_now, false);
                    }
                }
            }
            let issued = this.compute_free.max(this.host_now);
            // Wait for data already in flight to the device rather than faulting on it.
            let mut start = issued;
            for a in kernel.accesses {
                let r = &this.regions[&a.region];
                let (s, e) = r.page_range(a.offset, a.len);
                for b in r.block_range(s, e) {
                    start = start.max(r.blocks[b].ready_ns);
                }
            }

            // Metrics: pages a prefetch brought, used now for the first time, and whether they were
            // there before the kernel was ready to run.
            for a in kernel.accesses {
                let r = this.regions.get_mut(&a.region).expect("checked");
                let (s, e) = r.page_range(a.offset, a.len);
                let used = r.prefetched.remove(s, e) as u64 * PAGE_SIZE;
                if used > 0 {
                    let ready = r.block_range(s, e).map(|b| r.blocks[b].ready_ns).max().unwrap_or(0);
                    this.stats.prefetch_used_bytes += used;
                    if ready <= issued {
                        this.stats.prefetch_timely_bytes += used;
                    }
                }
            }

            // First pass: what is missing, so the driver can make room before migrating.
            let mut need_pages = 0usize;
            let mut any_missing = false;
            for a in kernel.accesses {
                let r = &this.regions[&a.region];
                let (s, e) = r.page_range(a.offset, a.len);
                let present = r.on_device.count(s, e);
                if present < e - s {
                    any_missing = true;
                    // Remote-mapped blocks use no device memory; the rest fault whole units in.
                    for b in r.block_range(s, e) {
                        let adv = r.blocks[b].advice;
                        if adv & ADV_PREFER_HOST != 0 && adv & ADV_ACCESSED_BY != 0 {
                            continue;
                        }
                        let (bs, be) = r.block_pages(b);
                        let (us, ue) = this.unit_span(r, bs.max(s), be.min(e));
                        need_pages += (ue - us) - r.on_device.count(us, ue);
                    }
                }
            }

            let (mut groups, mut moved, mut populated) = (0u64, 0usize, 0usize);
            let (mut remote_bytes, mut collapse_pages) = (0u64, 0usize);
            let mut room_at = start;
            let mut touched_new: Vec<(RegionId, std::ops::Range<usize>)> = Vec::new();
            // (region, offset, bytes) of fault migrations, for telemetry when recording.
            let mut fault_moves: Vec<(RegionId, u64, u64)> = Vec::new();
            if any_missing || kernel.accesses.iter().any(|a| a.mode.writes()) {
                if need_pages > 0 {
                    let protect = this.blocks_of(kernel.accesses.iter().map(|a| (a.region, a.offset, a.len)));
                    room_at = this.make_room(need_pages as u64 * PAGE_SIZE, &protect, start);
                }
                for a in kernel.accesses {
                    let id = a.region;
                    let r = &this.regions[&id];
                    let (s, e) = r.page_range(a.offset, a.len);
                    let mut in_run = false;
                    for b in r.block_range(s, e) {
                        let r = &this.regions[&id];
                        let adv = r.blocks[b].advice;
                        let (bs, be) = r.block_pages(b);
                        let (ss, se) = (bs.max(s), be.min(e));
                        if adv & ADV_READ_MOSTLY != 0 && a.mode.writes() {
                            // A GPU write to duplicated pages collapses them: a fault storm.
                            if r.on_device.count_and(&r.on_host, ss, se) > 0 {
                                let r = this.regions.get_mut(&id).expect("checked");
                                collapse_pages += r.drop_host_duplicates(ss, se);
                            }
                        }
                        let r = &this.regions[&id];
                        if r.on_device.count(ss, se) == se - ss {
                            in_run = false;
                            continue;
                        }
                        if adv & ADV_PREFER_HOST != 0 && adv & ADV_ACCESSED_BY != 0 {
                            let missing = (se - ss) - r.on_device.count(ss, se);
                            remote_bytes += missing as u64 * PAGE_SIZE;
                            let r = this.regions.get_mut(&id).expect("checked");
                            // First touch of pages with no copy populates them at the preferred location;
                            // pages already on the device stay the only valid copy.
                            let (on_host, on_device) = (&mut r.on_host, &r.on_device);
                            on_host.insert_not_in(on_device, ss, se);
                            in_run = false;
                            continue;
                        }
                        let duplicate = adv & ADV_READ_MOSTLY != 0 && !a.mode.writes();
                        let (g, m, p) = this.fault_in(id, ss, se, duplicate, &mut in_run);
                        if duplicate {
                            this.stats.duplicated_bytes += m as u64 * PAGE_SIZE;
                        }
                        groups += g;
                        moved += m;
                        populated += p;
                        if m + p > 0 {
                            touched_new.push((id, b..b + 1));
                        }
                        if m > 0 && this.events.is_recording() {
                            fault_moves.push((id, ss as u64 * PAGE_SIZE, m as u64 * PAGE_SIZE));
                        }
                        if p > 0 {
                            let (offset, bytes) = (ss as u64 * PAGE_SIZE, p as u64 * PAGE_SIZE);
                            this.emit(|| MemEvent::Populate {
                                region: id,
                                offset,
                                bytes,
                                on: Location::DEVICE,
                            });
                        }
                        if g > 0 {
                            let at = start;
                            this.emit(|| MemEvent::Fault {
                                region: id,
                                offset: ss as u64 * PAGE_SIZE,
                                bytes: (se - ss) as u64 * PAGE_SIZE,
                                by: Accessor::Device,
                                at_ns: at,
                            });
                        }
                    }
                }
            }

            let fault_ns = this.fault_cost_ns(groups, moved, populated)
                + collapse_pages as u64 * this.cost.duplicate_write_fault_ns_per_page;
            let mut begin = start;
            if fault_ns > 0 || room_at > start {
                // Faults share the migration link: they queue behind transfers already on it,
                // and the forced evictions come first.
                let (fs, fe) = this.occupy_link(Direction::H2D, room_at, fault_ns);
                begin = fe;
                // Each faulting segment gets its share of the fault interval, in order.
                let total = (moved as u64 * PAGE_SIZE).max(1);
                let mut at = fs;
                for (region, offset, bytes) in std::mem::take(&mut fault_moves) {
                    let end = (at + (fe - fs) * bytes / total).min(fe);
                    this.emit_migration(
                        region,
                        offset,
                        bytes,
                        Direction::H2D,
                        MigrationCause::Fault,
                        (at, end),
                    );
                    at = end;
                }
            }
            // Remote accesses cross the same link as migrations: they wait for transfers queued
            // on it (a conservative model; the hardware would share the bandwidth instead).
            let remote_ns = CostModel::transfer_ns(remote_bytes, this.cost.remote_rate_gbps);
            let remote_end =
                if remote_ns > 0 { this.occupy_link(Direction::H2D, begin, remote_ns).1 } else { begin };
            let end = (begin + kernel.dur_ns).max(remote_end);
            this.compute_free = end;
            if this.cost.launch_queue_depth > 0 {
                this.launched.push_back(end);
            }

            for (id, blocks) in touched_new {
                this.restamp(id, blocks);
            }
            for a in kernel.accesses {
                let r = this.regions.get_mut(&a.region).expect("checked");
                let (s, e) = r.page_range(a.offset, a.len);
                for b in r.block_range(s, e) {
                    r.blocks[b].last_use_ns = end;
                }
            }
            let h2d = moved as u64 * PAGE_SIZE;
            this.stats.kernels += 1;
            this.stats.gpu_faults += groups;
            this.stats.gpu_fault_bytes += h2d;
            this.stats.h2d_bytes += h2d;
            this.stats.remote_bytes += remote_bytes;
            let stall = end - issued - kernel.dur_ns;
            this.stats.stall_ns += stall;
            let name = kernel.name;
            this.emit(|| MemEvent::Kernel {
                name: name.to_string(),
                start_ns: issued,
                end_ns: end,
                stall_ns: stall,
            });
            Ok(())
        })
    }

    fn touch_host(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        for a in accesses {
            self.checked(a.region, a.offset, a.len)?;
        }
        // The CPU reads results after the device is done with them: as the CUDA backend, the
        // host waits for all the device's work (transfers in flight too), outside the call's
        // own host time.
        self.sync_all();
        self.host_timed(HostOp::HostAccess, |this| {
            let t = this.host_now;
            let mut cost = 0;
            for a in accesses {
                let id = a.region;
                let r = &this.regions[&id];
                let (s, e) = r.page_range(a.offset, a.len);
                cost = this.restore_to_host(id, s, e, t + cost) - t;
                if a.mode.writes() {
                    // Writing invalidates device duplicates: drop them, no transfer.
                    let r = this.regions.get_mut(&id).expect("checked");
                    let dropped = r.drop_device_duplicates(s, e);
                    let blocks = r.block_range(s, e);
                    this.note_device_released(dropped);
                    this.unstamp_empty(id, blocks);
                }
                let r = &this.regions[&id];
                let dev_only = r.on_device.count(s, e) - r.on_device.count_and(&r.on_host, s, e);
                if dev_only > 0 {
                    let moved = this.move_to_host(id, s, e);
                    let bytes = moved.transferred as u64 * PAGE_SIZE;
                    let dur = CostModel::transfer_ns(bytes, this.cost.cpu_fault_rate_gbps);
                    let (start, end) = this.occupy_link(Direction::D2H, t + cost, dur);
                    cost = end - t;
                    this.stats.cpu_faults += moved.transferred as u64;
                    this.stats.d2h_bytes += bytes;
                    this.emit_migration(
                        id,
                        a.offset,
                        bytes,
                        Direction::D2H,
                        MigrationCause::Fault,
                        (start, end),
                    );
                }
                let r = this.regions.get_mut(&id).expect("checked");
                // A CPU touch of pages with no copy populates them on the host.
                r.on_host.insert_not_in(&r.on_device, s, e);
            }
            this.host_now = t + cost;
            Ok(())
        })
    }

    fn sync(&mut self) -> Result<u64> {
        self.sync_all();
        Ok(self.host_now)
    }

    fn residency_of(&self, range: ByteRange) -> Result<Residency> {
        let (s, e) = self.checked(range.region, range.offset, range.len)?;
        let r = self.region(range.region)?;
        let dup = r.on_device.count_and(&r.on_host, s, e) as u64;
        let dev = r.on_device.count(s, e) as u64 - dup;
        let host = r.on_host.count(s, e) as u64 - dup;
        let staged = r.staged.count(s, e) as u64;
        let none = r.on_device.count_neither(&r.on_host, s, e) as u64 - staged;
        Ok(Residency {
            device: dev * PAGE_SIZE,
            host: host * PAGE_SIZE,
            duplicated: dup * PAGE_SIZE,
            unpopulated: none * PAGE_SIZE,
            staged: staged * PAGE_SIZE,
        })
    }

    fn preload(&mut self, range: ByteRange) -> Result<()> {
        let (s, e) = self.checked(range.region, range.offset, range.len)?;
        self.drop_staged(range.region, s, e);
        let r = self.region_mut(range.region)?;
        let mut dev_pages = Vec::new();
        r.on_device.for_each(s, e, |p| dev_pages.push(p));
        for &p in &dev_pages {
            let page = r.dev_data.take(p);
            r.host_data.put(p, page);
        }
        r.on_host.insert(s, e);
        let removed = r.on_device.remove(s, e);
        let blocks = r.block_range(s, e);
        self.note_device_released(removed);
        self.unstamp_empty(range.region, blocks);
        Ok(())
    }

    fn host_read(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let acc = [RangeAccess { region: id, offset, len: buf.len() as u64, mode: crate::AccessMode::Read }];
        self.touch_host(&acc)?;
        self.region(id)?.host_data.read(offset, buf);
        Ok(())
    }

    fn view(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.checked(id, offset, buf.len() as u64)?;
        self.view_bytes(id, offset, buf)
    }

    fn store(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        self.checked(id, offset, data.len() as u64)?;
        self.store_bytes(id, offset, data)
    }

    fn host_write(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        let acc =
            [RangeAccess { region: id, offset, len: data.len() as u64, mode: crate::AccessMode::Write }];
        self.touch_host(&acc)?;
        self.region_mut(id)?.host_data.write(offset, data);
        Ok(())
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
            Destination::Device(DeviceId(0)) => self.prefetch_ranges(ranges, Location::DEVICE),
            Destination::Device(other) => Err(Error::InvalidArgument(format!(
                "the simulator has one device, device 0; asked for device {}",
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

    fn completion_ns(&self) -> u64 {
        self.host_now.max(self.compute_free).max(self.link_h2d).max(self.link_d2h)
    }

    fn host_work(&mut self, wall_ns: u64) {
        if self.host_work.charge {
            self.host_now += wall_ns.saturating_sub(std::mem::take(&mut self.host_work.in_calls_ns));
        }
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
        &mut self.events
    }
}

#[cfg(test)]
mod tests;
