//! Managed allocations and the unified-memory calls on them.

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext, CudaStream};

use super::{cuda_err, CudaDevice};
use crate::error::{Error, Result};
use crate::seam::{Advice, Location};

/// Device memory unimem leaves free for the driver and other users when it checks an
/// allocation against the free memory (the oversubscription guard).
pub const RESERVE_BYTES: u64 = 1 << 30;

/// How long a reading of free device memory stands in for a new one (see [`FreeMemory`]).
const FREE_MEMORY_TTL: std::time::Duration = std::time::Duration::from_millis(100);

/// Free device memory for the oversubscription guard of a caller that allocates often, without
/// a `cuMemGetInfo` for every allocation (about 60 us of host time each on the H200, on the
/// host path that issues kernels). The
/// estimate is the last reading less every byte allocated since, as if each allocation were
/// on the device already; it is read again when it is older than 100 ms or when
/// an allocation would not fit it, so a refusal always rests on a fresh reading.
#[derive(Debug, Default)]
pub struct FreeMemory {
    /// The last reading, when, and bytes allocated since.
    read: Option<(u64, std::time::Instant)>,
    since: u64,
}

impl FreeMemory {
    /// Allocates `bytes` of managed memory under the guard (as [`ManagedBuffer::alloc_with`]).
    pub fn alloc(
        &mut self,
        dev: &CudaDevice,
        bytes: u64,
        allow_oversubscription: bool,
    ) -> Result<ManagedBuffer> {
        let estimate = match self.read {
            Some((free, at)) if at.elapsed() < FREE_MEMORY_TTL => free.saturating_sub(self.since),
            _ => 0,
        };
        let free = if bytes.saturating_add(RESERVE_BYTES) <= estimate {
            estimate
        } else {
            let (free, _) = dev.mem_info()?;
            (self.read, self.since) = (Some((free, std::time::Instant::now())), 0);
            free
        };
        let buf = ManagedBuffer::alloc_within(dev, bytes, allow_oversubscription, free)?;
        self.since += bytes;
        Ok(buf)
    }
}

/// A `cuMemAllocManaged` region, freed on drop. Freeing synchronises the device (that is why
/// the runtime pools regions); errors in drop are logged, never panics.
#[derive(Debug)]
pub struct ManagedBuffer {
    ptr: sys::CUdeviceptr,
    bytes: u64,
    ordinal: i32,
    ctx: Arc<CudaContext>,
}

// SAFETY: the pointer is a device address valid in any thread of the process once the context
// is bound; the buffer owns it exclusively.
unsafe impl Send for ManagedBuffer {}
unsafe impl Sync for ManagedBuffer {}

/// What `cuMemRangeGetAttribute` reports for a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeAttributes {
    /// Read-mostly advice is set on every page.
    pub read_mostly: bool,
    /// The preferred location, if one is set on every page.
    pub preferred: Option<Location>,
    /// Where the last prefetch of every page went, if they agree.
    pub last_prefetch: Option<Location>,
}

fn location(dev: i32, loc: Location) -> sys::CUmemLocation {
    match loc {
        Location::Device(_) => {
            sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: dev }
        }
        Location::Host => {
            sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, id: 0 }
        }
    }
}

/// Decodes a device id as the range attributes report it (`-1` is the CPU, `-2` none).
fn decode(id: i32) -> Option<Location> {
    match id {
        -1 => Some(Location::Host),
        d if d >= 0 => Some(Location::DEVICE),
        _ => None,
    }
}

impl ManagedBuffer {
    /// Allocates `bytes` of managed memory (attached globally). Refuses, with an error naming
    /// the config key that permits it, any allocation that would leave less than
    /// [`RESERVE_BYTES`] of the device free: more managed memory than the GPU has free can
    /// hang it.
    pub fn alloc(dev: &CudaDevice, bytes: u64) -> Result<Self> {
        Self::alloc_with(dev, bytes, false)
    }

    /// [`ManagedBuffer::alloc`], past the device's free memory where `allow_oversubscription`
    /// (the config's `oversubscribe = "allow"`).
    pub fn alloc_with(dev: &CudaDevice, bytes: u64, allow_oversubscription: bool) -> Result<Self> {
        let (free, _) = dev.mem_info()?;
        Self::alloc_within(dev, bytes, allow_oversubscription, free)
    }

    /// [`ManagedBuffer::alloc_with`] against `free` bytes of free device memory as read by the
    /// caller (`FreeMemory`). Private: a caller-supplied figure must never bypass the guard.
    fn alloc_within(dev: &CudaDevice, bytes: u64, allow_oversubscription: bool, free: u64) -> Result<Self> {
        if bytes == 0 {
            return Err(Error::Allocation { bytes, reason: "size must be at least 1 byte".into() });
        }
        if !allow_oversubscription && bytes.saturating_add(RESERVE_BYTES) > free {
            return Err(Error::Allocation {
                bytes,
                reason: format!(
                    "the device has {free} bytes free and unimem keeps {RESERVE_BYTES} in reserve; \
                     managed memory beyond free device memory can hang the GPU. Emulate a small \
                     GPU with `budget` instead; config key `oversubscribe = \"allow\"` lifts \
                     this check"
                ),
            });
        }
        dev.context().bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "alloc"))?;
        // SAFETY: a plain allocation; the bytes are uninitialised until written, and unimem only
        // exposes them as bytes.
        let ptr =
            unsafe { result::malloc_managed(bytes as usize, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
                .map_err(cuda_err("cuMemAllocManaged", format!("{bytes} bytes")))?;
        Ok(Self { ptr, bytes, ordinal: dev.ordinal() as i32, ctx: dev.context().clone() })
    }

    /// The device address (the same address is valid on the host).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.bytes
    }

    /// Never true: allocations have at least one byte.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The bytes, seen from the host. Touching them migrates pages to the host (CPU faults).
    ///
    /// # Safety
    /// 1. No kernel or copy that uses this buffer may run while the slice lives (synchronise
    ///    first): the device has no concurrent host access to managed memory here.
    pub unsafe fn host_bytes(&mut self) -> &mut [u8] {
        std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.bytes as usize)
    }

    fn check(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.bytes && len > 0 => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "range {offset}+{len} is outside (or empty in) a managed buffer of {} bytes",
                self.bytes
            ))),
        }
    }

    /// Applies `advice` to `offset..offset+len` (`cuMemAdvise_v2`).
    pub fn advise(&self, offset: u64, len: u64, advice: Advice) -> Result<()> {
        use sys::CUmem_advise as A;
        self.check(offset, len)?;
        let dev = location(self.ordinal, Location::DEVICE);
        let (a, loc) = match advice {
            Advice::SetReadMostly => (A::CU_MEM_ADVISE_SET_READ_MOSTLY, dev),
            Advice::UnsetReadMostly => (A::CU_MEM_ADVISE_UNSET_READ_MOSTLY, dev),
            Advice::SetPreferredLocation(l) => {
                (A::CU_MEM_ADVISE_SET_PREFERRED_LOCATION, location(self.ordinal, l))
            }
            Advice::UnsetPreferredLocation => (A::CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, dev),
            Advice::SetAccessedByDevice => (A::CU_MEM_ADVISE_SET_ACCESSED_BY, dev),
            Advice::UnsetAccessedByDevice => (A::CU_MEM_ADVISE_UNSET_ACCESSED_BY, dev),
        };
        self.ctx.bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "advise"))?;
        // SAFETY: the range lies inside this managed allocation (checked).
        unsafe { result::mem_advise(self.ptr + offset, len as usize, a, loc) }
            .map_err(cuda_err("cuMemAdvise_v2", format!("{advice:?} on {len} bytes")))
    }

    /// Prefetches `offset..offset+len` to `to` on `stream` (`cuMemPrefetchAsync_v2`).
    pub fn prefetch(&self, offset: u64, len: u64, to: Location, stream: &CudaStream) -> Result<()> {
        self.check(offset, len)?;
        self.ctx.bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "prefetch"))?;
        // SAFETY: the range lies inside this managed allocation (checked); the stream is live.
        unsafe {
            result::mem_prefetch_async(
                self.ptr + offset,
                len as usize,
                location(self.ordinal, to),
                stream.cu_stream(),
            )
        }
        .map_err(cuda_err("cuMemPrefetchAsync_v2", format!("{len} bytes to {to}")))
    }

    /// Reads the range attributes of `offset..offset+len`.
    pub fn attributes(&self, offset: u64, len: u64) -> Result<RangeAttributes> {
        self.check(offset, len)?;
        let get = |attr: sys::CUmem_range_attribute| -> Result<i32> {
            let mut value: i32 = 0;
            // SAFETY: these attributes are one 32-bit integer each; the range is in the buffer.
            unsafe {
                sys::cuMemRangeGetAttribute(
                    (&mut value as *mut i32).cast(),
                    4,
                    attr,
                    self.ptr + offset,
                    len as usize,
                )
            }
            .result()
            .map_err(cuda_err("cuMemRangeGetAttribute", format!("{attr:?}")))?;
            Ok(value)
        };
        use sys::CUmem_range_attribute as R;
        Ok(RangeAttributes {
            read_mostly: get(R::CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY)? == 1,
            preferred: decode(get(R::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION)?),
            last_prefetch: decode(get(R::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION)?),
        })
    }
}

impl crate::mechanism::pool::Buffer for ManagedBuffer {
    fn len(&self) -> u64 {
        ManagedBuffer::len(self)
    }
}

impl Drop for ManagedBuffer {
    fn drop(&mut self) {
        let freed = self.ctx.bind_to_thread().and_then(|_| {
            // SAFETY: allocated by cuMemAllocManaged, freed once; cuMemFree waits for the device.
            unsafe { result::memory_free(self.ptr) }
        });
        if let Err(e) = freed {
            tracing::warn!("cuMemFree of a {}-byte managed buffer failed: {e:?}", self.bytes);
        }
    }
}

/// Prefetches many ranges in one call (`cuMemPrefetchBatchAsync`, CUDA 13) where the driver
/// has it, else one `cuMemPrefetchAsync_v2` per range. Ranges are (address, bytes) inside
/// managed buffers the caller owns.
pub fn prefetch_batch(
    dev: &CudaDevice,
    ranges: &[(u64, u64)],
    to: Location,
    stream: &CudaStream,
) -> Result<()> {
    if ranges.is_empty() {
        return Ok(());
    }
    dev.context().bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "prefetch"))?;
    let loc = location(dev.ordinal() as i32, to);
    if dev.capabilities().prefetch_batch && ranges.len() > 1 {
        match batch_to(sys::cuMemPrefetchBatchAsync, "cuMemPrefetchBatchAsync", dev, ranges, to, stream) {
            Ok(()) => return Ok(()),
            // Hints are best effort: where the batch call refuses, single calls still run.
            Err(e) => tracing::debug!(error = %e, "batch prefetch refused; falling back to single calls"),
        }
    }
    for &(ptr, len) in ranges {
        // SAFETY: the caller passes ranges of managed buffers it owns.
        unsafe { result::mem_prefetch_async(ptr, len as usize, loc, stream.cu_stream()) }
            .map_err(cuda_err("cuMemPrefetchAsync_v2", format!("{len} bytes to {to}")))?;
    }
    Ok(())
}

/// Discards ranges (`cuMemDiscardBatchAsync`): their contents become undefined without any
/// transfer. Without the batch call there is no discard: returns `Ok(false)` and does nothing.
pub fn discard_batch(dev: &CudaDevice, ranges: &[(u64, u64)], stream: &CudaStream) -> Result<bool> {
    if ranges.is_empty() {
        return Ok(true);
    }
    if !dev.capabilities().discard_batch {
        return Ok(false);
    }
    dev.context().bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "discard"))?;
    let mut ptrs: Vec<sys::CUdeviceptr> = ranges.iter().map(|r| r.0).collect();
    let mut sizes: Vec<usize> = ranges.iter().map(|r| r.1 as usize).collect();
    // SAFETY: arrays of `ranges.len()` entries of managed memory the caller owns.
    unsafe {
        sys::cuMemDiscardBatchAsync(
            ptrs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            ranges.len(),
            0,
            stream.cu_stream(),
        )
    }
    .result()
    .map_err(cuda_err("cuMemDiscardBatchAsync", format!("{} ranges", ranges.len())))?;
    Ok(true)
}

/// Discards ranges and prefetches them to `to` in one call
/// (`cuMemDiscardAndPrefetchBatchAsync`): the pages are populated at `to` without copying the
/// dead contents. Falls back to a plain batch prefetch (which copies) without the call.
pub fn discard_and_prefetch_batch(
    dev: &CudaDevice,
    ranges: &[(u64, u64)],
    to: Location,
    stream: &CudaStream,
) -> Result<()> {
    if ranges.is_empty() {
        return Ok(());
    }
    if !dev.capabilities().discard_and_prefetch_batch {
        return prefetch_batch(dev, ranges, to, stream);
    }
    dev.context().bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "discard"))?;
    batch_to(
        sys::cuMemDiscardAndPrefetchBatchAsync,
        "cuMemDiscardAndPrefetchBatchAsync",
        dev,
        ranges,
        to,
        stream,
    )
}

/// The signature the CUDA 13 batch calls with a destination share.
type BatchToFn = unsafe fn(
    *mut sys::CUdeviceptr,
    *mut usize,
    usize,
    *mut sys::CUmemLocation,
    *mut usize,
    usize,
    std::ffi::c_ulonglong,
    sys::CUstream,
) -> sys::CUresult;

/// Calls a batch call that moves `ranges` to one location `to` (the context is bound).
fn batch_to(
    call: BatchToFn,
    name: &str,
    dev: &CudaDevice,
    ranges: &[(u64, u64)],
    to: Location,
    stream: &CudaStream,
) -> Result<()> {
    let mut ptrs: Vec<sys::CUdeviceptr> = ranges.iter().map(|r| r.0).collect();
    let mut sizes: Vec<usize> = ranges.iter().map(|r| r.1 as usize).collect();
    let mut loc = location(dev.ordinal() as i32, to);
    let mut loc_idx: usize = 0;
    // SAFETY: arrays of `ranges.len()` entries of managed memory the caller owns; one
    // location, applying from index 0.
    unsafe {
        call(
            ptrs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            ranges.len(),
            &mut loc,
            &mut loc_idx,
            1,
            0,
            stream.cu_stream(),
        )
    }
    .result()
    .map_err(cuda_err(name, format!("{} ranges to {to}", ranges.len())))
}
