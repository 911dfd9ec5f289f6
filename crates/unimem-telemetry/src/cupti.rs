//! The CUPTI source: the driver's unified-memory counters (bytes moved each way with their
//! cause, GPU and CPU page faults, thrashing, throttling, remote mapping) as [`MemEvent`]s,
//! attributed to regions by address.
//!
//! CUPTI hands activity records to two C callbacks with no user data, so the records collect
//! in one process-wide buffer; [`CuptiSource`] is a handle on it (one per process). Start it
//! before allocating the memory to observe: on the H200 (CUDA 13.0) CUPTI reported nothing for
//! managed memory allocated before collection started.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cudarc::cupti::sys;
use unimem_core::backend::{Direction, MemEvent, MigrationCause};
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
        Err(Error::Cuda { call: call.into(), detail: format!("{r:?}") })
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
    /// Starts collecting every unified-memory counter `device` supports. Fails with a clear
    /// error where CUPTI is missing or another source is active.
    pub fn start(device: u32) -> Result<Self> {
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
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING,
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING,
            K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP,
        ];
        let mut kinds = Vec::new();
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

/// The records as events, attributed by `find` (address -> region and offset); records whose
/// address belongs to no region are skipped. Migration flags carry the cause; a CPU fault's
/// `value` is the faulting PC, so it counts one fault.
pub fn to_events(records: &[UmRecord], find: &dyn Fn(u64) -> Option<(RegionId, u64)>) -> Vec<MemEvent> {
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
    let mut out = Vec::new();
    for r in records {
        let Some((region, offset)) = find(r.address) else { continue };
        let event = match r.kind {
            k if k == K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD as u32 => {
                MemEvent::Migration {
                    region,
                    offset,
                    bytes: r.value,
                    dir: Direction::H2D,
                    cause: cause(r.flags),
                    start_ns: r.start,
                    end_ns: r.end.max(r.start),
                }
            }
            k if k == K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH as u32 => {
                MemEvent::Migration {
                    region,
                    offset,
                    bytes: r.value,
                    dir: Direction::D2H,
                    cause: cause(r.flags),
                    start_ns: r.start,
                    end_ns: r.end.max(r.start),
                }
            }
            k if k == K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT as u32 => {
                MemEvent::Fault { region, offset, bytes: 0, by: Accessor::Device, at_ns: r.start }
            }
            k if k == K::CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT as u32 => {
                MemEvent::Fault { region, offset, bytes: 0, by: Accessor::Host, at_ns: r.start }
            }
            _ => continue, // thrashing, throttling, remote map: no event kind of their own yet
        };
        out.push(event);
    }
    out
}
