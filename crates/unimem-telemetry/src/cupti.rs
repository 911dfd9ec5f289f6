//! The CUPTI source: the driver's unified-memory counters (bytes moved each way with their
//! cause, CPU page faults, thrashing, throttling and remote mapping, and GPU page faults on
//! request) as [`MemEvent`]s, attributed to regions by address and time.
//!
//! CUPTI hands activity records to two C callbacks with no user data, so the records collect
//! in one process-wide buffer; [`CuptiSource`] is a handle on it (one per process). Start it
//! before allocating the memory to observe: on the H200 (CUDA 13.0) CUPTI reported nothing for
//! managed memory allocated before collection started.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use unimem_core::MemoryBackendExt;

use std::collections::HashMap;

use cudarc::cupti::sys;
use unimem_core::protocol::EventSink;
use unimem_core::seam::{Direction, MemEvent, MigrationCause, RemoteMapCause};
use unimem_core::{Accessor, Error, RegionId, Result};

/// One unified-memory counter record, as CUPTI reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UmRecord {
    /// Counter kind (`CUpti_ActivityUnifiedMemoryCounterKind`).
    pub kind: u32,
    /// Bytes for transfers; the fault count or, for CPU faults, the faulting PC.
    pub value: u64,
    /// Start and end, in CUPTI's nanosecond clock.
    pub start: u64,
    /// End.
    pub end: u64,
    /// Virtual address concerned.
    pub address: u64,
    /// Cause or access-type flags.
    pub flags: u32,
}

static RECORDS: Mutex<Vec<UmRecord>> = Mutex::new(Vec::new());
/// CUPTI's activity API is configured once per process: enabling it again after disabling it
/// delivered no more unified-memory records on the H200 (CUDA 13.0), so a second start is
/// refused rather than silently collecting nothing.
static STARTED: AtomicBool = AtomicBool::new(false);

const BUFFER_BYTES: usize = 8 << 20;
const ALIGN: usize = 8;

fn cupti(call: &str, r: sys::CUptiResult) -> Result<()> {
    if r == sys::CUptiResult::CUPTI_SUCCESS {
        Ok(())
    } else {
        Err(Error::cuda(call, format!("{r:?}")))
    }
}

unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let layout = std::alloc::Layout::from_size_align(BUFFER_BYTES, ALIGN).expect("valid layout");
    // SAFETY: CUPTI passes valid out-pointers; the buffer is freed in buffer_completed.
    unsafe {
        *buffer = std::alloc::alloc(layout);
        *size = if (*buffer).is_null() { 0 } else { BUFFER_BYTES };
        *max_records = 0;
    }
}

unsafe extern "C" fn buffer_completed(
    _ctx: cudarc::driver::sys::CUcontext,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    if buffer.is_null() {
        return;
    }
    let mut out = Vec::new();
    let mut record: *mut sys::CUpti_Activity = std::ptr::null_mut();
    // SAFETY: CUPTI filled `valid` bytes of `buffer` with records; each record starts with its
    // kind, and unified-memory counter records (every version) start with the fields read.
    unsafe {
        while sys::cuptiActivityGetNextRecord(buffer, valid, &mut record) == sys::CUptiResult::CUPTI_SUCCESS {
            let kind = std::ptr::read_unaligned(record as *const u32);
            if kind == sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER as u32 {
                let r = std::ptr::read_unaligned(record as *const sys::CUpti_ActivityUnifiedMemoryCounter2);
                out.push(UmRecord {
                    kind: r.counterKind as u32,
                    value: r.value,
                    start: r.start,
                    end: r.end,
                    address: r.address,
                    flags: r.flags,
                });
            }
        }
        std::alloc::dealloc(
            buffer,
            std::alloc::Layout::from_size_align(BUFFER_BYTES, ALIGN).expect("valid layout"),
        );
    }
    RECORDS.lock().unwrap_or_else(|e| e.into_inner()).extend(out);
}

/// Collecting CUPTI's unified-memory counters. See the module documentation.
#[derive(Debug)]
pub struct CuptiSource {
    /// Counter kinds the device accepted.
    pub kinds: Vec<u32>,
}

impl CuptiSource {
    /// Starts collecting every unified-memory counter the log uses, GPU page faults included.
    /// Fails with a clear error where CUPTI is missing or another source is active.
    pub fn start(device: u32) -> Result<Self> {
        Self::start_with(device, true)
    }

    /// Starts collecting the unified-memory counters `device` supports, GPU page faults only if
    /// `gpu_faults`: the driver logs every fault group then, which costs a faulting replay
    /// another 6-7% (docs/decisions.md).
    pub fn start_with(device: u32, gpu_faults: bool) -> Result<Self> {
        // SAFETY: only tries to load the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::BackendUnavailable {
                backend: "cupti".into(),
                reason: "libcupti is not installed (no CUDA toolkit on this machine)".into(),
            });
        }
        if STARTED.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidArgument(
                "CUPTI collection can be started once per process, and it was started already".into(),
            ));
        }
        use sys::CUpti_ActivityUnifiedMemoryCounterKind as K;
        let wanted = [
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT,
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
            // Collecting any counter costs the driver the same (on the H200, each kind alone,
            // even these three that a replay never triggers, slowed an advisor replay as much as
            // all of them: docs/benchmarks.md), so these cost nothing beyond the others.
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING,
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING,
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP,
        ];
        let mut kinds = Vec::new();
        let wanted = wanted
            .into_iter()
            .filter(|&k| gpu_faults || k != K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT);
        for kind in wanted {
            let mut config = sys::CUpti_ActivityUnifiedMemoryCounterConfig {
                scope: sys::CUpti_ActivityUnifiedMemoryCounterScope::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE,
                kind,
                deviceId: device,
                enable: 1,
            };
            // SAFETY: one valid config. A kind the device does not support is refused: skip it.
            if unsafe { sys::cuptiActivityConfigureUnifiedMemoryCounter(&mut config, 1) }
                == sys::CUptiResult::CUPTI_SUCCESS
            {
                kinds.push(kind as u32);
            }
        }
        let started = (|| {
            // SAFETY: the callbacks are valid for the life of the process.
            cupti("cuptiActivityRegisterCallbacks", unsafe {
                sys::cuptiActivityRegisterCallbacks(Some(buffer_requested), Some(buffer_completed))
            })?;
            // SAFETY: enabling a record kind.
            cupti("cuptiActivityEnable", unsafe {
                sys::cuptiActivityEnable(sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)
            })
        })();
        started?;
        Ok(Self { kinds })
    }

    /// Flushes CUPTI's buffers and takes the records collected so far.
    pub fn drain(&self) -> Result<Vec<UmRecord>> {
        // SAFETY: flushing completed buffers (1 = CUPTI_ACTIVITY_FLAG_FLUSH_FORCED).
        cupti("cuptiActivityFlushAll", unsafe { sys::cuptiActivityFlushAll(1) })?;
        Ok(std::mem::take(&mut *RECORDS.lock().unwrap_or_else(|e| e.into_inner())))
    }
}

impl Drop for CuptiSource {
    fn drop(&mut self) {
        // SAFETY: disabling what start enabled, then flushing.
        unsafe {
            sys::cuptiActivityDisable(sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
            sys::cuptiActivityFlushAll(1);
        }
        RECORDS.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// The process's CUPTI collection, started by the first call (with GPU page-fault records if
/// that call asks for them) and shared by every later one: CUPTI starts once per process, and
/// only once a CUDA context exists (open the device first; it answers `NOT_READY` before).
pub fn shared(gpu_faults: bool) -> Result<&'static CuptiSource> {
    static SOURCE: std::sync::OnceLock<std::result::Result<CuptiSource, String>> = std::sync::OnceLock::new();
    SOURCE
        .get_or_init(|| CuptiSource::start_with(0, gpu_faults).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| Error::InvalidArgument(format!("telemetry on a GPU needs CUPTI: {e}")))
}

/// The sink for telemetry written to `inner` from `backend`, as `settings` ask: `inner` itself
/// on the simulator (its events are complete) and on a GPU with `cupti` off (the backend's own
/// events only); otherwise a [`CuptiSink`] around it, fed by the shared CUPTI collection
/// ([`shared`], GPU fault records if `gpu_fault_records`), which must start before the memory
/// it observes is allocated.
pub fn sink_for<S: EventSink + Send + 'static>(
    inner: S,
    backend: &dyn unimem_core::MemoryBackend,
    settings: &unimem_core::config::TelemetryConfig,
) -> Result<Box<dyn EventSink + Send>> {
    Ok(match backend.event_clock_origin() {
        Some(origin) if settings.cupti => {
            Box::new(CuptiSink::new(inner, shared(settings.gpu_fault_records)?, origin)?)
        }
        _ => Box::new(inner),
    })
}

/// The records as events: times through `clock` (CUPTI's clock to the events' clock), regions
/// by `find` (address and time -> region and offset); records whose address belongs to no
/// region are skipped. Migration flags carry the cause; a CPU fault's `value` is the faulting
/// PC, so it counts one fault. Thrashing and throttling flags say whether the CPU is the
/// processor concerned (`CUPTI_ACTIVITY_FLAG_THRASHING_IN_CPU`, `..._THROTTLING_IN_CPU`, both
/// bit 0); remote-map flags carry the cause.
pub fn to_events(
    records: &[UmRecord],
    clock: &dyn Fn(u64) -> u64,
    find: &dyn Fn(u64, u64) -> Option<(RegionId, u64)>,
) -> Vec<MemEvent> {
    use sys::CUpti_ActivityUnifiedMemoryCounterKind as K;
    // CUPTI's migration causes: 1 user (cudaMemPrefetchAsync), 2 coherence, 3 the driver's
    // own prefetching, 4 eviction, 5 access counters. On the H200 a fault-driven read of 64 MiB
    // came as 58.7 MB "driver prefetch" and 8.4 MB "coherence" (GPU test cupti_gpu.rs): both
    // are what an access pulled in, so they count as fault-driven here.
    let cause = |flags: u32| match flags {
        1 => MigrationCause::Prefetch,
        4 => MigrationCause::Eviction,
        _ => MigrationCause::Fault,
    };
    let in_cpu = |flags: u32| if flags & 1 != 0 { Accessor::Host } else { Accessor::Device };
    let remote_cause = |flags: u32| match flags {
        1 => RemoteMapCause::Coherence,
        2 => RemoteMapCause::Thrashing,
        3 => RemoteMapCause::Policy,
        4 => RemoteMapCause::OutOfMemory,
        5 => RemoteMapCause::Eviction,
        _ => RemoteMapCause::Unknown,
    };
    let mut out = Vec::new();
    for r in records {
        let (start_ns, end_ns) = (clock(r.start), clock(r.end.max(r.start)));
        let Some((region, offset)) = find(r.address, start_ns) else { continue };
        let migration = |dir| MemEvent::Migration {
            region,
            offset,
            bytes: r.value,
            dir,
            cause: cause(r.flags),
            start_ns,
            end_ns,
        };
        let event = match r.kind {
            k if k == K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD as u32 => {
                migration(Direction::H2D)
            }
            k if k == K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH as u32 => {
                migration(Direction::D2H)
            }
            k if k == K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT as u32 => {
                MemEvent::Fault { region, offset, bytes: 0, by: Accessor::Device, at_ns: start_ns }
            }
            k if k == K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT as u32 => {
                MemEvent::Fault { region, offset, bytes: 0, by: Accessor::Host, at_ns: start_ns }
            }
            k if k == K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING as u32 => {
                MemEvent::Thrashing { region, offset, bytes: r.value, by: in_cpu(r.flags), at_ns: start_ns }
            }
            k if k == K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING as u32 => {
                MemEvent::Throttling { region, offset, by: in_cpu(r.flags), start_ns, end_ns }
            }
            k if k == K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP as u32 => {
                MemEvent::RemoteMap {
                    region,
                    offset,
                    bytes: r.value,
                    cause: remote_cause(r.flags),
                    at_ns: start_ns,
                }
            }
            _ => continue, // peer-to-peer transfers: one device here
        };
        out.push(event);
    }
    out
}

/// CUPTI's clock against the events' clock: `(cupti_ns, instant)` read together.
fn clock_pair() -> Result<(u64, Instant)> {
    // The pair whose two host readings are closest brackets the CUPTI reading best.
    let mut best: Option<(Duration, u64, Instant)> = None;
    for _ in 0..5 {
        let t0 = Instant::now();
        let mut ts = 0u64;
        // SAFETY: one valid out-pointer.
        cupti("cuptiGetTimestamp", unsafe { sys::cuptiGetTimestamp(&mut ts) })?;
        let gap = t0.elapsed();
        if best.is_none_or(|b| gap < b.0) {
            best = Some((gap, ts, t0 + gap / 2));
        }
    }
    let (_, ts, at) = best.expect("five samples");
    Ok((ts, at))
}

/// One region's tenancy of an address range.
#[derive(Debug, Clone, Copy)]
struct Tenant {
    region: RegionId,
    bytes: u64,
    /// When the device finished the work issued before its free (`None`: not freed yet).
    released_ns: Option<u64>,
}

/// Which region held which addresses when: a pool gives the same addresses to several regions
/// in turn, and the device runs behind the host, so an address alone does not say whose a
/// record is. A record belongs to the first region given its address that was not yet
/// released when it happened (the last one, for a record after every release).
#[derive(Debug, Default)]
pub struct Tenancy {
    /// Tenants of each base address, in allocation order.
    tenants: BTreeMap<u64, Vec<Tenant>>,
    /// Where each region's tenancy is: (base, index in its list).
    by_region: HashMap<RegionId, (u64, usize)>,
}

impl Tenancy {
    /// Region `id` was given `bytes` at `address`.
    pub fn allocated(&mut self, id: RegionId, address: u64, bytes: u64) {
        let list = self.tenants.entry(address).or_default();
        list.push(Tenant { region: id, bytes, released_ns: None });
        self.by_region.insert(id, (address, list.len() - 1));
    }

    /// The device finished the work issued before region `id`'s free at `at_ns`.
    pub fn released(&mut self, id: RegionId, at_ns: u64) {
        if let Some(&(base, i)) = self.by_region.get(&id) {
            if let Some(t) = self.tenants.get_mut(&base).and_then(|l| l.get_mut(i)) {
                t.released_ns = Some(at_ns);
            }
        }
    }

    /// Region `id` moved from its buffer to `address` at `at_ns` (see
    /// [`MemEvent::Relocated`]): its old tenancy ends there, a new one of its size begins.
    pub fn relocated(&mut self, id: RegionId, address: u64, at_ns: u64) {
        let Some(&(base, i)) = self.by_region.get(&id) else { return };
        let Some(bytes) = self.tenants.get(&base).and_then(|l| l.get(i)).map(|t| t.bytes) else { return };
        self.released(id, at_ns);
        self.allocated(id, address, bytes);
    }

    /// The region holding `address` at `t_ns`, and the offset into it.
    pub fn find(&self, address: u64, t_ns: u64) -> Option<(RegionId, u64)> {
        // Live buffers do not overlap, so the nearest base at or below the address that holds
        // it is the one; a few more are looked at for ranges an older, larger buffer held.
        for (&base, list) in self.tenants.range(..=address).rev().take(8) {
            // Called once per CUPTI record: no collecting, two passes over a short list.
            let mut holding = list.iter().filter(|t| address < base + t.bytes);
            let Some(last) = holding.clone().next_back() else { continue };
            let tenant = holding.find(|t| t.released_ns.is_none_or(|r| t_ns < r)).unwrap_or(last);
            return Some((tenant.region, address - base));
        }
        None
    }
}

/// A replay's telemetry on a GPU. The regions and the backend's own events (kernels timed on
/// the device, releases of freed regions) pass to `inner` as they come; CUPTI's records are
/// attributed when they are asked for (`EventSink::late`, for a policy that learns from
/// faults) and when the sink is closed (`EventSink::close`): by address, and where a pool
/// gave the same addresses to several regions in turn, by time (a record belongs to the
/// first of them not yet released when it happened).
pub struct CuptiSink<'a, S: EventSink> {
    inner: S,
    source: &'a CuptiSource,
    /// CUPTI's clock reading at the events' clock's origin.
    cupti_at_origin: u64,
    tenancy: Tenancy,
}

impl<S: EventSink> std::fmt::Debug for CuptiSink<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuptiSink").field("regions", &self.tenancy.by_region.len()).finish()
    }
}

impl<'a, S: EventSink> CuptiSink<'a, S> {
    /// A sink writing to `inner`, with CUPTI's records from `source`; `origin` is where the
    /// backend's event clock starts ([`unimem_core::seam::MemoryBackendExt::event_clock_origin`]).
    /// Records collected before this call are dropped.
    pub fn new(inner: S, source: &'a CuptiSource, origin: Instant) -> Result<Self> {
        source.drain()?;
        let (ts, at) = clock_pair()?;
        let since_origin = at.saturating_duration_since(origin).as_nanos() as u64;
        Ok(Self {
            inner,
            source,
            cupti_at_origin: ts.saturating_sub(since_origin),
            tenancy: Tenancy::default(),
        })
    }

    /// CUPTI's records collected since the last call, attributed, in time order (records of
    /// work the device has not finished come at a later call).
    fn attributed_records(&mut self) -> Result<Vec<MemEvent>> {
        let records = self.source.drain()?;
        let origin = self.cupti_at_origin;
        let clock = move |ts: u64| ts.saturating_sub(origin);
        let mut events = to_events(&records, &clock, &|a, t| self.tenancy.find(a, t));
        let skipped = records.len() as u64 - events.len() as u64;
        if skipped > 0 {
            tracing::info!("{skipped} of {} CUPTI records were for memory outside any region", records.len());
        }
        events.sort_by_key(|e| match e {
            MemEvent::Migration { start_ns, .. } => *start_ns,
            MemEvent::Fault { at_ns, .. } => *at_ns,
            _ => 0,
        });
        Ok(events)
    }
}

impl<S: EventSink> EventSink for CuptiSink<'_, S> {
    fn region(&mut self, id: RegionId, bytes: u64, name: Option<&str>, address: u64) -> Result<()> {
        self.tenancy.allocated(id, address, bytes);
        self.inner.region(id, bytes, name, address)
    }

    fn freed(&mut self, id: RegionId) -> Result<()> {
        self.inner.freed(id)
    }

    fn events(&mut self, events: &[MemEvent]) -> Result<()> {
        for e in events {
            match *e {
                MemEvent::Released { region, at_ns } => self.tenancy.released(region, at_ns),
                MemEvent::Relocated { region, to, at_ns, .. } => self.tenancy.relocated(region, to, at_ns),
                _ => {}
            }
        }
        self.inner.events(events)
    }

    /// Writes CUPTI's records, then closes the inner sink: for a [`unimem_core::Runtime`],
    /// which closes its sink when the last handle is dropped.
    fn close(&mut self) -> Result<()> {
        self.late(&mut Vec::new())?;
        self.inner.close()
    }

    /// CUPTI's records so far (a forced flush), written to the log and handed to the caller:
    /// the replay and the runtime feed the faults among them to a policy that learns from
    /// faults, since the CUDA backend cannot see them.
    fn late(&mut self, out: &mut Vec<MemEvent>) -> Result<()> {
        let events = self.attributed_records()?;
        self.inner.events(&events)?;
        out.extend(events);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_addresses_are_attributed_by_time() {
        let mut t = Tenancy::default();
        let (a, b, c) = (RegionId(1), RegionId(2), RegionId(3));
        t.allocated(a, 1 << 30, 4 << 20);
        t.allocated(c, (1 << 30) + (8 << 20), 2 << 20);
        // `a` is freed on the host, its buffer goes to `b`; the device finished a's work at 500.
        t.allocated(b, 1 << 30, 4 << 20);
        t.released(a, 500);
        assert_eq!(t.find((1 << 30) + 4096, 499), Some((a, 4096)), "before the release: a");
        assert_eq!(t.find((1 << 30) + 4096, 500), Some((b, 4096)), "from the release on: b");
        assert_eq!(t.find((1 << 30) + (8 << 20) + 1, 0), Some((c, 1)));
        assert_eq!(t.find((1 << 30) + (5 << 20), 0), None, "between buffers");
        assert_eq!(t.find(1 << 20, 0), None, "below every buffer");
        // After every tenant's release, the last one keeps the record (pooled pages moving).
        t.released(b, 900);
        assert_eq!(t.find(1 << 30, 1000), Some((b, 0)));
    }

    #[test]
    fn a_relocated_region_is_found_at_its_new_address_from_the_move_on() {
        let mut t = Tenancy::default();
        let (a, d) = (RegionId(1), RegionId(4));
        let (old, new) = (1u64 << 30, (1u64 << 30) + (64 << 20));
        t.allocated(a, old, 4 << 20);
        t.allocated(d, new, 4 << 20);
        t.released(d, 300); // freed: its buffer waits in the pool
        t.relocated(a, new, 700);
        assert_eq!(t.find(new + 8, 200), Some((d, 8)), "before d's release: d");
        assert_eq!(t.find(new + 8, 800), Some((a, 8)), "after the move: a");
        assert_eq!(t.find(old + 8, 600), Some((a, 8)), "before the move: a, at its old address");
        t.allocated(RegionId(5), old, 4 << 20);
        assert_eq!(t.find(old + 8, 800), Some((RegionId(5), 8)), "the old buffer's next tenant");
        t.released(a, 900);
        assert_eq!(t.find(new + 8, 850), Some((a, 8)), "the free releases the new tenancy");
        t.relocated(RegionId(9), new, 1000); // unknown: nothing changes
        assert_eq!(t.find(new + 8, 1100), Some((a, 8)));
    }

    #[test]
    fn every_counter_kind_decodes_with_its_flags() {
        use sys::CUpti_ActivityUnifiedMemoryCounterKind as K;
        let rec = |kind: K, value, flags, address| UmRecord {
            kind: kind as u32,
            value,
            start: 100,
            end: 250,
            address,
            flags,
        };
        let base = 1u64 << 30;
        let records = [
            rec(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD, 4096, 1, base),
            rec(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH, 8192, 4, base + 4096),
            rec(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD, 4096, 2, base),
            rec(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT, 3, 0, base),
            rec(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT, 0xdead_beef, 0, base),
            rec(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING, 65536, 1, base + 8192),
            rec(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING, 4096, 0, base),
            rec(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING, 0, 0, base),
            rec(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP, 2 << 20, 2, base),
            rec(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP, 4096, 9, base),
            rec(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOD, 4096, 0, base),
            rec(K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD, 4096, 1, 1 << 20),
        ];
        let r = RegionId(7);
        let find = |a: u64, _| (a >= base && a < base + (4 << 20)).then(|| (r, a - base));
        let events = to_events(&records, &|t| t + 1000, &find);
        let migration = |offset, bytes, dir, cause| MemEvent::Migration {
            region: r,
            offset,
            bytes,
            dir,
            cause,
            start_ns: 1100,
            end_ns: 1250,
        };
        assert_eq!(
            events,
            vec![
                migration(0, 4096, Direction::H2D, MigrationCause::Prefetch),
                migration(4096, 8192, Direction::D2H, MigrationCause::Eviction),
                migration(0, 4096, Direction::H2D, MigrationCause::Fault),
                MemEvent::Fault { region: r, offset: 0, bytes: 0, by: Accessor::Device, at_ns: 1100 },
                MemEvent::Fault { region: r, offset: 0, bytes: 0, by: Accessor::Host, at_ns: 1100 },
                MemEvent::Thrashing {
                    region: r,
                    offset: 8192,
                    bytes: 65536,
                    by: Accessor::Host,
                    at_ns: 1100
                },
                MemEvent::Thrashing { region: r, offset: 0, bytes: 4096, by: Accessor::Device, at_ns: 1100 },
                MemEvent::Throttling {
                    region: r,
                    offset: 0,
                    by: Accessor::Device,
                    start_ns: 1100,
                    end_ns: 1250
                },
                MemEvent::RemoteMap {
                    region: r,
                    offset: 0,
                    bytes: 2 << 20,
                    cause: RemoteMapCause::Thrashing,
                    at_ns: 1100
                },
                MemEvent::RemoteMap {
                    region: r,
                    offset: 0,
                    bytes: 4096,
                    cause: RemoteMapCause::Unknown,
                    at_ns: 1100
                },
            ],
            "device-to-device records and addresses outside every region are skipped"
        );
    }
}
