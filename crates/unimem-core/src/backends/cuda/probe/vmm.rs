//! The probe's rows on CUDA virtual memory management, measured beside managed memory before
//! either is chosen for moving data at the link's rate: physical chunks created on the device
//! (`cuMemCreate`) or in host memory (`CU_MEM_LOCATION_TYPE_HOST_NUMA`) and mapped behind one
//! reserved virtual range, so that a region moved to the host stays at its address and a
//! kernel touching it reads over the link instead of faulting. Also the managed-memory
//! question the staged evictions raise: whether a stage-out and a restore copy run at once.
//! The data is checked after every move.

use super::*;

/// A 64 MiB chunk: a unit of mapping and copying.
const CHUNK: u64 = 64 << 20;
/// Chunks moved by the rate rows (at most the probe's buffer size).
const MAX_CHUNKS: u64 = 16;

/// Where a physical chunk lives.
#[derive(Clone, Copy)]
enum Place {
    Device(i32),
    HostNuma(i32),
}

fn prop(place: Place) -> sys::CUmemAllocationProp {
    let (type_, id) = match place {
        Place::Device(d) => (sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, d),
        Place::HostNuma(n) => (sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA, n),
    };
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType_enum(0),
        location: sys::CUmemLocation { type_, id },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// Physical memory of one chunk, released on drop (after any mapping of it is gone).
struct Physical(sys::CUmemGenericAllocationHandle);

impl Physical {
    fn create(place: Place, bytes: u64) -> Result<Self> {
        let mut h: sys::CUmemGenericAllocationHandle = 0;
        let p = prop(place);
        // SAFETY: one out-handle and a property struct that outlives the call.
        unsafe { sys::cuMemCreate(&mut h, bytes as usize, &p, 0) }
            .result()
            .map_err(cuda_err("cuMemCreate", format!("{} MiB", bytes >> 20)))?;
        Ok(Self(h))
    }
}

impl Drop for Physical {
    fn drop(&mut self) {
        // SAFETY: created above; a handle still mapped is kept alive by the driver until unmapped.
        unsafe { sys::cuMemRelease(self.0) };
    }
}

/// A reserved virtual range, freed on drop (callers unmap first).
struct Reserved {
    va: u64,
    bytes: u64,
}

impl Reserved {
    fn new(bytes: u64) -> Result<Self> {
        let mut va = 0u64;
        // SAFETY: one out-pointer; no fixed address asked.
        unsafe { sys::cuMemAddressReserve(&mut va, bytes as usize, 0, 0, 0) }
            .result()
            .map_err(cuda_err("cuMemAddressReserve", format!("{} MiB", bytes >> 20)))?;
        Ok(Self { va, bytes })
    }

    /// Maps `chunk` at `offset` and gives the device read-write access.
    fn map(&self, offset: u64, chunk: &Physical, device: i32) -> Result<()> {
        let va = self.va + offset;
        // SAFETY: the range lies inside the reservation and is not mapped.
        unsafe { sys::cuMemMap(va, CHUNK as usize, 0, chunk.0, 0) }
            .result()
            .map_err(cuda_err("cuMemMap", "probe chunk"))?;
        let access = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: device,
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the range was just mapped.
        unsafe { sys::cuMemSetAccess(va, CHUNK as usize, &access, 1) }
            .result()
            .map_err(cuda_err("cuMemSetAccess", "probe chunk"))
    }

    fn unmap(&self, offset: u64) -> Result<()> {
        // SAFETY: the chunk at `offset` was mapped by `map`.
        unsafe { sys::cuMemUnmap(self.va + offset, CHUNK as usize) }
            .result()
            .map_err(cuda_err("cuMemUnmap", "probe chunk"))
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        // SAFETY: reserved above; every mapping in it was undone by its owner.
        unsafe { sys::cuMemAddressFree(self.va, self.bytes as usize) };
    }
}

/// Pinned host memory (`cuMemHostAlloc`), freed on drop.
struct Pinned {
    ptr: *mut u8,
}

impl Pinned {
    fn new(bytes: u64) -> Result<Self> {
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: one out-pointer.
        unsafe { sys::cuMemHostAlloc(&mut p, bytes as usize, 0) }
            .result()
            .map_err(cuda_err("cuMemHostAlloc", format!("{} MiB", bytes >> 20)))?;
        Ok(Self { ptr: p.cast() })
    }

    fn addr(&self) -> u64 {
        self.ptr as u64
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated above; callers synchronise before dropping.
        unsafe { sys::cuMemFreeHost(self.ptr.cast()) };
    }
}

/// Copies `bytes` from `src` to `dst` on `stream` (either side device or pinned host memory).
fn copy(dst: u64, src: u64, bytes: u64, stream: &CudaStream) -> Result<()> {
    // SAFETY: both ranges are owned by the probe and live until the stream has run the copy.
    unsafe { sys::cuMemcpyAsync(dst, src, bytes as usize, stream.cu_stream()) }
        .result()
        .map_err(cuda_err("cuMemcpyAsync", "probe"))
}

/// The sum of the words the host wrote as their index plus `seed`, over `words` words.
fn expected_sum(words: u64, seed: u32) -> u64 {
    (0..words).map(|i| (i as u32).wrapping_add(seed) as u64).sum()
}

/// Fills pinned memory with word index + `seed`.
fn fill(p: &Pinned, bytes: u64, seed: u32) {
    // SAFETY: the probe owns `bytes` of pinned memory at `p`, aligned for u32; no copy runs.
    let words = unsafe { std::slice::from_raw_parts_mut(p.ptr.cast::<u32>(), (bytes / 4) as usize) };
    for (i, w) in words.iter_mut().enumerate() {
        *w = (i as u32).wrapping_add(seed);
    }
}

fn sync(s: &CudaStream) -> Result<()> {
    s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))
}

/// The VMM rows and the managed copy-duplex row; needs a device that supports VMM.
pub(super) fn rows(c: &Ctx<'_>, n: &mut Notes) -> Result<()> {
    let Ctx { dev, kernels, s, s2, bytes, .. } = *c;
    let device = dev.ordinal() as i32;
    let chunks = (bytes / CHUNK).clamp(2, MAX_CHUNKS);
    let total = chunks * CHUNK;
    let mut granularity = 0usize;
    let p = prop(Place::Device(device));
    let option = sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM;
    // SAFETY: one out-value and a property struct that outlives the call.
    unsafe { sys::cuMemGetAllocationGranularity(&mut granularity, &p, option) }
        .result()
        .map_err(cuda_err("cuMemGetAllocationGranularity", "device"))?;
    n.note("VMM: allocation granularity on the device", granularity as f64, "bytes", None);

    // A device-backed range, and pinned host memory of the same size.
    let range = Reserved::new(total)?;
    let mut device_chunks = Vec::new();
    let t_map = host_timed(|| {
        for i in 0..chunks {
            let chunk = Physical::create(Place::Device(device), CHUNK)?;
            range.map(i * CHUNK, &chunk, device)?;
            device_chunks.push(chunk);
        }
        Ok(())
    })?;
    n.note(
        "VMM: create + map + set access, per 64 MiB device chunk (host time)",
        t_map as f64 / chunks as f64,
        "ns",
        None,
    );
    let (host_a, host_b) = (Pinned::new(total)?, Pinned::new(total)?);
    fill(&host_a, total, 7);

    // One way each, then both at once on two streams.
    let t_h2d = timed(s, || copy(range.va, host_a.addr(), total, s))?;
    let h2d = n.note("VMM: pinned host -> device chunks, 64 MiB copies", gbps(total, t_h2d), "GB/s", None);
    let t_d2h = timed(s, || copy(host_b.addr(), range.va, total, s))?;
    let d2h = n.note("VMM: device chunks -> pinned host", gbps(total, t_d2h), "GB/s", None);
    // SAFETY: the copy is done (timed synchronises through its events' elapsed time).
    let back = unsafe { std::slice::from_raw_parts(host_b.ptr.cast::<u32>(), (total / 4) as usize) };
    let sum: u64 = back.iter().map(|&w| w as u64).sum();
    if sum != expected_sum(total / 4, 7) {
        return Err(Error::cuda("VMM probe", "data lost between pinned host and device chunks"));
    }
    let half = total / 2;
    let t_both = timed(s, || {
        let fork = s.record_event(None).map_err(cuda_err("cuEventRecord", "vmm duplex"))?;
        s2.wait(&fork).map_err(cuda_err("cuStreamWaitEvent", "vmm duplex"))?;
        copy(range.va, host_a.addr(), half, s)?;
        copy(host_b.addr(), range.va + half, half, s2)?;
        let join = s2.record_event(None).map_err(cuda_err("cuEventRecord", "vmm duplex"))?;
        s.wait(&join).map_err(cuda_err("cuStreamWaitEvent", "vmm duplex"))
    })?;
    let both = n.note("VMM: both ways at once (two streams), aggregate", gbps(total, t_both), "GB/s", None);
    n.note("VMM: aggregate / (H2D + D2H one way)", both / (h2d + d2h), "", None);

    // Unmapping: alone, and while a kernel runs on other memory (does it wait for the device?).
    sync(s)?;
    let t_unmap = host_timed(|| range.unmap(0))?;
    n.note("VMM: unmap of a 64 MiB chunk, device idle (host time)", t_unmap as f64, "ns", None);
    range.map(0, &device_chunks[0], device)?;
    let other = ManagedBuffer::alloc(dev, CHUNK)?;
    kernels.touch(s2, &[(other.ptr(), CHUNK, TouchMode::Write)], 4096, 50_000_000)?;
    let t_busy = host_timed(|| range.unmap(CHUNK))?;
    n.note("VMM: unmap while a 50 ms kernel runs on other memory (host time)", t_busy as f64, "ns", None);
    range.map(CHUNK, &device_chunks[1], device)?;
    sync(s2)?;

    // Moving a chunk to host memory at the same address: copy out, unmap, map host memory.
    let host_chunk = Physical::create(Place::HostNuma(0), CHUNK)?;
    let staging = Reserved::new(CHUNK)?;
    staging.map(0, &host_chunk, device)?;
    let t_copy = timed(s, || copy(staging.va, range.va, CHUNK, s))?;
    n.note("VMM: device chunk -> HOST_NUMA chunk copy", gbps(CHUNK, t_copy), "GB/s", None);
    staging.unmap(0)?;
    let t_remap = host_timed(|| {
        range.unmap(0)?;
        range.map(0, &host_chunk, device)
    })?;
    n.note(
        "VMM: remap a 64 MiB chunk to HOST_NUMA memory at the same address (host time)",
        t_remap as f64,
        "ns",
        None,
    );
    // A kernel reads it over the link, and finds the data.
    let words = CHUNK / 4;
    let mut got = 0;
    let t_read = timed(s, || {
        got = kernels.sum_u32(s, range.va, words)?;
        Ok(())
    })?;
    n.note("VMM: kernel read of a chunk mapped to host memory", gbps(CHUNK, t_read), "GB/s", None);
    if got != expected_sum(words, 7) {
        return Err(Error::cuda("VMM probe", "a chunk remapped to host memory lost its data"));
    }
    range.unmap(0)?;
    for i in 1..chunks {
        range.unmap(i * CHUNK)?;
    }
    drop(host_chunk);
    drop(device_chunks);

    managed_copy_duplex(c, n)
}

/// Managed memory: a stage-out (device-resident managed data copied into pinned memory) beside
/// a restore into another buffer's device-resident pages (a relocation's copy), against each
/// alone: do the two directions of copies between managed and pinned memory overlap?
fn managed_copy_duplex(c: &Ctx<'_>, n: &mut Notes) -> Result<()> {
    let Ctx { dev, kernels, s, s2, bytes, .. } = *c;
    let total = (bytes / CHUNK).clamp(2, MAX_CHUNKS) * CHUNK;
    let (a, b) = (ManagedBuffer::alloc(dev, total)?, ManagedBuffer::alloc(dev, total)?);
    kernels.touch(s, &[(a.ptr(), total, TouchMode::Write), (b.ptr(), total, TouchMode::Write)], 4096, 0)?;
    sync(s)?;
    let (out, into) = (Pinned::new(total)?, Pinned::new(total)?);
    fill(&into, total, 3);
    let t_out = timed(s, || copy(out.addr(), a.ptr(), total, s))?;
    let d2h = n.note("managed: device-resident -> pinned copy alone", gbps(total, t_out), "GB/s", None);
    let t_in = timed(s, || copy(b.ptr(), into.addr(), total, s))?;
    let h2d = n.note("managed: pinned -> device-resident copy alone", gbps(total, t_in), "GB/s", None);
    let t_both = timed(s, || {
        let fork = s.record_event(None).map_err(cuda_err("cuEventRecord", "managed duplex"))?;
        s2.wait(&fork).map_err(cuda_err("cuStreamWaitEvent", "managed duplex"))?;
        copy(out.addr(), a.ptr(), total, s)?;
        copy(b.ptr(), into.addr(), total, s2)?;
        let join = s2.record_event(None).map_err(cuda_err("cuEventRecord", "managed duplex"))?;
        s.wait(&join).map_err(cuda_err("cuStreamWaitEvent", "managed duplex"))
    })?;
    let both = n.note(
        "managed: stage-out beside a restore into resident pages, aggregate",
        gbps(2 * total, t_both),
        "GB/s",
        None,
    );
    n.note("managed: that aggregate / (one way + the other)", both / (h2d + d2h), "", None);
    let got = kernels.sum_u32(s, b.ptr(), total / 4)?;
    if got != expected_sum(total / 4, 3) {
        return Err(Error::cuda("managed copy probe", "a restore beside a stage-out lost data"));
    }
    Ok(())
}
