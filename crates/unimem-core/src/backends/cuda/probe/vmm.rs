//! The probe's rows on CUDA virtual memory management, measured beside managed memory before
//! either is chosen for moving data at the link's rate: physical chunks created on the device
//! (`cuMemCreate`) or in host memory (`CU_MEM_LOCATION_TYPE_HOST_NUMA`) and mapped behind one
//! reserved virtual range, so that a region moved to the host stays at its address and a
//! kernel touching it reads over the link instead of faulting. Also the managed-memory
//! question the staged evictions raise: whether a stage-out and a restore copy run at once.
//! The data is checked after every move.

use super::*;
use crate::backends::cuda::vmm::{granularity, Physical, Place, Reserved};

/// A 64 MiB chunk: a unit of mapping and copying.
const CHUNK: u64 = 64 << 20;
/// Chunks moved by the rate rows (at most the probe's buffer size).
const MAX_CHUNKS: u64 = 16;

/// Maps `chunk` whole at `offset` in `range` and gives the device read-write access.
fn map(range: &Reserved, offset: u64, chunk: &Physical, device: i32) -> Result<()> {
    range.map(offset, chunk.bytes(), chunk, 0)?;
    range.grant(offset, chunk.bytes(), device)
}

/// Pinned host memory (`cuMemHostAlloc`), freed on drop.
pub(super) struct Pinned {
    ptr: *mut u8,
}

impl Pinned {
    pub(super) fn new(bytes: u64) -> Result<Self> {
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: one out-pointer.
        unsafe { sys::cuMemHostAlloc(&mut p, bytes as usize, sys::CU_MEMHOSTALLOC_DEVICEMAP) }
            .result()
            .map_err(cuda_err("cuMemHostAlloc", format!("{} MiB", bytes >> 20)))?;
        Ok(Self { ptr: p.cast() })
    }

    pub(super) fn addr(&self) -> u64 {
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
pub(super) fn copy(dst: u64, src: u64, bytes: u64, stream: &CudaStream) -> Result<()> {
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

/// Times the work `f` enqueues on `s` and `s2` together: `s2` starts behind what `s` has
/// queued, and the time ends when both are done.
fn timed_on_two(
    s: &CudaStream,
    s2: &CudaStream,
    what: &'static str,
    f: impl FnOnce() -> Result<()>,
) -> Result<u64> {
    timed(s, || {
        let fork = s.record_event(None).map_err(cuda_err("cuEventRecord", what))?;
        s2.wait(&fork).map_err(cuda_err("cuStreamWaitEvent", what))?;
        f()?;
        let join = s2.record_event(None).map_err(cuda_err("cuEventRecord", what))?;
        s.wait(&join).map_err(cuda_err("cuStreamWaitEvent", what))
    })
}

/// Times the work `f` enqueues on `c.s` while a kernel holding every SM for 100 ms (a
/// program's kernel) runs on `c.s2`, started behind what `c.s` has queued; returns once the
/// spin is done too, so the next row starts on an idle device.
fn timed_beside_spin(c: &Ctx<'_>, what: &'static str, f: impl FnOnce() -> Result<()>) -> Result<u64> {
    let Ctx { kernels, s, s2, .. } = *c;
    let t = timed(s, || {
        let fork = s.record_event(None).map_err(cuda_err("cuEventRecord", what))?;
        s2.wait(&fork).map_err(cuda_err("cuStreamWaitEvent", what))?;
        kernels.touch(s2, &[], 1, 100_000_000)?;
        f()
    })?;
    sync(s2)?;
    Ok(t)
}

pub(super) fn sync(s: &CudaStream) -> Result<()> {
    s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))
}

/// The VMM rows and the managed copy-duplex row; needs a device that supports VMM.
pub(super) fn rows(c: &Ctx<'_>, n: &mut Notes) -> Result<()> {
    let Ctx { dev, kernels, s, s2, bytes, .. } = *c;
    let device = dev.ordinal() as i32;
    let chunks = (bytes / CHUNK).clamp(2, MAX_CHUNKS);
    let total = chunks * CHUNK;
    let granularity = granularity(Place::Device(device))?;
    n.note("VMM: allocation granularity on the device", granularity as f64, "bytes", None);

    // A device-backed range, and pinned host memory of the same size.
    let range = Reserved::new(total)?;
    let mut device_chunks = Vec::new();
    let t_map = host_timed(|| {
        for i in 0..chunks {
            let chunk = Physical::create(Place::Device(device), CHUNK)?;
            map(&range, i * CHUNK, &chunk, device)?;
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
    let t_h2d = timed(s, || copy(range.va(), host_a.addr(), total, s))?;
    let h2d = n.note("VMM: pinned host -> device chunks, 64 MiB copies", gbps(total, t_h2d), "GB/s", None);
    let t_d2h = timed(s, || copy(host_b.addr(), range.va(), total, s))?;
    let d2h = n.note("VMM: device chunks -> pinned host", gbps(total, t_d2h), "GB/s", None);
    // SAFETY: the copy is done (timed synchronises through its events' elapsed time).
    let back = unsafe { std::slice::from_raw_parts(host_b.ptr.cast::<u32>(), (total / 4) as usize) };
    let sum: u64 = back.iter().map(|&w| w as u64).sum();
    if sum != expected_sum(total / 4, 7) {
        return Err(Error::cuda("VMM probe", "data lost between pinned host and device chunks"));
    }
    let half = total / 2;
    let t_both = timed_on_two(s, s2, "vmm duplex", || {
        copy(range.va(), host_a.addr(), half, s)?;
        copy(host_b.addr(), range.va() + half, half, s2)?;
        Ok(())
    })?;
    let both = n.note("VMM: both ways at once (two streams), aggregate", gbps(total, t_both), "GB/s", None);
    n.note("VMM: aggregate / (H2D + D2H one way)", both / (h2d + d2h), "", None);

    // Unmapping: alone, and while a kernel runs on other memory (does it wait for the device?).
    sync(s)?;
    let t_unmap = host_timed(|| range.unmap(0, CHUNK))?;
    n.note("VMM: unmap of a 64 MiB chunk, device idle (host time)", t_unmap as f64, "ns", None);
    map(&range, 0, &device_chunks[0], device)?;
    let other = ManagedBuffer::alloc(dev, CHUNK)?;
    kernels.touch(s2, &[(other.ptr(), CHUNK, TouchMode::Write)], 4096, 50_000_000)?;
    let t_busy = host_timed(|| range.unmap(CHUNK, CHUNK))?;
    n.note("VMM: unmap while a 50 ms kernel runs on other memory (host time)", t_busy as f64, "ns", None);
    map(&range, CHUNK, &device_chunks[1], device)?;
    sync(s2)?;

    // Moving a chunk to host memory at the same address: copy out, unmap, map host memory.
    let host_chunk = Physical::create(Place::HostNuma(0), CHUNK)?;
    let staging = Reserved::new(CHUNK)?;
    map(&staging, 0, &host_chunk, device)?;
    let t_copy = timed(s, || copy(staging.va(), range.va(), CHUNK, s))?;
    n.note("VMM: device chunk -> HOST_NUMA chunk copy", gbps(CHUNK, t_copy), "GB/s", None);
    staging.unmap(0, CHUNK)?;
    let t_remap = host_timed(|| {
        range.unmap(0, CHUNK)?;
        map(&range, 0, &host_chunk, device)
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
        got = kernels.sum_u32(s, range.va(), words)?;
        Ok(())
    })?;
    n.note("VMM: kernel read of a chunk mapped to host memory", gbps(CHUNK, t_read), "GB/s", None);
    if got != expected_sum(words, 7) {
        return Err(Error::cuda("VMM probe", "a chunk remapped to host memory lost its data"));
    }
    range.unmap(0, CHUNK)?;
    for i in 1..chunks {
        range.unmap(i * CHUNK, CHUNK)?;
    }
    drop(host_chunk);
    drop(device_chunks);

    block_rows(c, n)?;
    managed_copy_duplex(c, n)
}

/// 2 MiB blocks: the unit a placement in VMM memory would move. Per block, the host time of
/// each call a block's move needs (create, map, grant, unmap, a remap to host memory at its
/// address), whether one call covers many blocks' mappings, and the copy rates both ways at once
/// in 2 MiB copies; beside them plain `cuMemAlloc` memory both ways at once.
fn block_rows(c: &Ctx<'_>, n: &mut Notes) -> Result<()> {
    let Ctx { dev, kernels, s, s2, .. } = *c;
    let device = dev.ordinal() as i32;
    let block = granularity(Place::Device(device))?.max(2 << 20);
    let blocks = 64u64;
    let total = blocks * block;
    let per = |ns: u64| ns as f64 / blocks as f64;

    let range = Reserved::new(total)?;
    let mut chunks = Vec::new();
    let t = host_timed(|| {
        for _ in 0..blocks {
            chunks.push(Physical::create(Place::Device(device), block)?);
        }
        Ok(())
    })?;
    n.note("VMM block: create a 2 MiB device chunk (host time)", per(t), "ns", None);
    let t = host_timed(|| (0..blocks).try_for_each(|i| range.map(i * block, block, &chunks[i as usize], 0)))?;
    n.note("VMM block: map a 2 MiB chunk (host time)", per(t), "ns", None);
    let t = host_timed(|| (0..blocks).try_for_each(|i| range.grant(i * block, block, device)))?;
    n.note("VMM block: set access on one 2 MiB mapping (host time)", per(t), "ns", None);
    let t = host_timed(|| range.grant(0, total, device))?;
    n.note("VMM block: set access on 64 mappings in one call, per block (host time)", per(t), "ns", None);
    let t = host_timed(|| (0..blocks).try_for_each(|i| range.unmap(i * block, block)))?;
    n.note("VMM block: unmap one 2 MiB mapping (host time)", per(t), "ns", None);
    (0..blocks).try_for_each(|i| range.map(i * block, block, &chunks[i as usize], 0))?;
    let t0 = std::time::Instant::now();
    let spans = range.unmap(0, total).is_ok();
    let t = t0.elapsed().as_nanos() as u64;
    n.note(
        "VMM block: one unmap over 64 adjacent mappings works (1 yes, 0 no)",
        spans as u8 as f64,
        "",
        None,
    );
    if spans {
        n.note("VMM block: that unmap, per block (host time)", per(t), "ns", None);
    } else {
        (0..blocks).try_for_each(|i| range.unmap(i * block, block))?;
    }

    // Host memory: a chunk per block (`cuMemMap` maps a whole allocation), each mapped at a
    // mirror range for copies, and at the range as an evicted block would be.
    n.note("VMM block: HOST_NUMA granularity", granularity(Place::HostNuma(0))? as f64, "bytes", None);
    let mut host = Vec::new();
    let t = host_timed(|| {
        for _ in 0..blocks {
            host.push(Physical::create(Place::HostNuma(0), block)?);
        }
        Ok(())
    })?;
    n.note("VMM block: create a 2 MiB HOST_NUMA chunk (host time)", per(t), "ns", None);
    let mirror = Reserved::new(total)?;
    (0..blocks).try_for_each(|i| range_map_grant(&mirror, i * block, block, &host[i as usize], device))?;
    let pinned = Pinned::new(total)?;
    fill(&pinned, total, 11);
    let t = timed(s, || copy(mirror.va(), pinned.addr(), total, s))?;
    n.note("VMM block: pinned -> HOST_NUMA memory, one copy", gbps(total, t), "GB/s", None);
    let t = host_timed(|| {
        for i in 0..blocks {
            range.map(i * block, block, &host[i as usize], 0)?;
            range.grant(i * block, block, device)?;
        }
        Ok(())
    })?;
    n.note("VMM block: map + set access of host memory per block (host time)", per(t), "ns", None);
    let words = total / 4;
    let got = kernels.sum_u32(s, range.va(), words)?;
    if got != expected_sum(words, 11) {
        return Err(Error::cuda("VMM probe", "blocks mapped to host memory lost their data"));
    }
    // Restore every block: copy in from the mirror through the chunks' own mapping, then remap
    // the block to its device chunk.
    let staging = Reserved::new(total)?;
    (0..blocks).try_for_each(|i| range_map_grant(&staging, i * block, block, &chunks[i as usize], device))?;
    let t = timed(s, || {
        (0..blocks).try_for_each(|i| copy(staging.va() + i * block, mirror.va() + i * block, block, s))
    })?;
    n.note("VMM block: HOST_NUMA -> device chunks, 2 MiB copies", gbps(total, t), "GB/s", None);
    sync(s)?;
    let t = host_timed(|| {
        for i in 0..blocks {
            range.unmap(i * block, block)?;
            range.map(i * block, block, &chunks[i as usize], 0)?;
            range.grant(i * block, block, device)?;
        }
        Ok(())
    })?;
    n.note("VMM block: remap a block from host memory to its device chunk (host time)", per(t), "ns", None);
    let got = kernels.sum_u32(s, range.va(), words)?;
    if got != expected_sum(words, 11) {
        return Err(Error::cuda("VMM probe", "blocks remapped to device chunks lost their data"));
    }
    // Both ways at once in 2 MiB copies: half the blocks out to host memory, half in.
    let half = blocks / 2;
    let t = timed_on_two(s, s2, "vmm block duplex", || {
        for i in 0..half {
            copy(mirror.va() + i * block, range.va() + i * block, block, s)?;
            copy(range.va() + (half + i) * block, mirror.va() + (half + i) * block, block, s2)?;
        }
        Ok(())
    })?;
    n.note("VMM block: 2 MiB copies both ways at once, aggregate", gbps(total, t), "GB/s", None);
    sync(s)?;
    let t = host_timed(|| {
        for i in 0..blocks {
            range.unmap(i * block, block)?;
            range.map(i * block, block, &host[i as usize], 0)?;
            range.grant(i * block, block, device)?;
        }
        Ok(())
    })?;
    n.note("VMM block: remap a block from its device chunk to host memory (host time)", per(t), "ns", None);
    (0..blocks).try_for_each(|i| range.unmap(i * block, block))?;
    (0..blocks).try_for_each(|i| staging.unmap(i * block, block))?;
    (0..blocks).try_for_each(|i| mirror.unmap(i * block, block))?;
    drop(chunks);

    // Plain device memory both ways at once with pinned memory.
    let plain = DeviceMemory::alloc(total)?;
    let other = Pinned::new(total)?;
    let t = timed_on_two(s, s2, "plain duplex", || {
        copy(plain.0, pinned.addr(), total / 2, s)?;
        copy(other.addr(), plain.0 + total / 2, total / 2, s2)?;
        Ok(())
    })?;
    n.note("cuMemAlloc memory <-> pinned both ways at once, aggregate", gbps(total, t), "GB/s", None);
    sync(s)?;
    Ok(())
}

fn range_map_grant(range: &Reserved, offset: u64, bytes: u64, chunk: &Physical, device: i32) -> Result<()> {
    range.map(offset, bytes, chunk, 0)?;
    range.grant(offset, bytes, device)
}

/// The managed copy probes' buffers: `total` bytes staged out of `a` (device-resident) into
/// `out`, and restored from `into` into `b` (device-resident).
#[derive(Clone, Copy)]
struct CopyBuffers<'a> {
    a: &'a ManagedBuffer,
    b: &'a ManagedBuffer,
    out: &'a Pinned,
    into: &'a Pinned,
    total: u64,
}

/// Managed memory: a stage-out (device-resident managed data copied into pinned memory) beside
/// a restore into another buffer's device-resident pages (a relocation's copy), against each
/// alone: do the two directions of copies between managed and pinned memory overlap?
fn managed_copy_duplex(c: &Ctx<'_>, n: &mut Notes) -> Result<()> {
    let Ctx { dev, kernels, s, bytes, .. } = *c;
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
    let bufs = CopyBuffers { a: &a, b: &b, out: &out, into: &into, total };
    let t_both = stage_out_beside_restore(c, bufs, (None, None))?;
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
    population_beside_copies(c, n, bufs, (t_out, t_in))?;
    kernel_copy_duplex(c, n, bufs, h2d)
}

/// A new region's first prefetch populates its pages on the device without a transfer. Does
/// it hold up a copy the other way (a stage-out), or one the same way (a restore), as the
/// simulator assumes when it puts population on the link?
fn population_beside_copies(
    c: &Ctx<'_>,
    n: &mut Notes,
    CopyBuffers { a, b, out, into, total }: CopyBuffers<'_>,
    (t_out, t_in): (u64, u64),
) -> Result<()> {
    let Ctx { dev, s, s2, .. } = *c;
    let fresh = || ManagedBuffer::alloc(dev, total);
    let f = fresh()?;
    let t_pop = timed(s2, || f.prefetch(0, total, Location::DEVICE, s2))?;
    n.note("managed: population of fresh pages by prefetch, alone", gbps(total, t_pop), "GB/s", None);
    // Each pair on fresh pages of its own: a prefetch of pages already on the device is free.
    let pairs = [
        (
            "stage-out beside a population",
            (out.addr(), a.ptr()),
            t_out,
            [
                "managed: stage-out beside a population, time / (the two in turn)",
                "managed: stage-out beside a population, time / (the longer alone)",
            ],
        ),
        (
            "restore beside a population",
            (b.ptr(), into.addr()),
            t_in,
            [
                "managed: restore beside a population, time / (the two in turn)",
                "managed: restore beside a population, time / (the longer alone)",
            ],
        ),
    ];
    // Kept to the end: freeing one (cuMemFree) would hand its pages to the next population.
    let mut populated = Vec::new();
    for (what, (dst, src), t_copy, labels) in pairs {
        let g = fresh()?;
        let t = timed_on_two(s, s2, what, || {
            copy(dst, src, total, s)?;
            g.prefetch(0, total, Location::DEVICE, s2)
        })?;
        pair(n, labels, t, (t_copy, t_pop));
        populated.push(g);
    }
    // Beside a program's kernel holding every SM: does the driver's population wait for it?
    let k = fresh()?;
    let t = timed_beside_spin(c, "population beside compute", || k.prefetch(0, total, Location::DEVICE, s))?;
    n.note(
        "managed: population beside a 100 ms kernel on every SM, time / alone",
        t as f64 / t_pop as f64,
        "",
        None,
    );
    // Does the call hold the host for the population, with its stream busy (as the backend
    // issues prefetches, behind a kernel)? A migration's call returns at once there.
    let q = fresh()?;
    c.kernels.touch(s, &[], 4096, 50_000_000)?;
    let held = host_timed(|| q.prefetch(0, total, Location::DEVICE, s))?;
    sync(s)?;
    n.note(
        "managed: population by prefetch on a busy stream, the call's host time / the population alone",
        held as f64 / t_pop as f64,
        "",
        None,
    );
    Ok(())
}

/// Notes two transfers' time together against the two in turn (1 when they serialise) and
/// against the longer alone (1 when they overlap fully).
fn pair(n: &mut Notes, [in_turn, longer]: [&'static str; 2], together: u64, (one, other): (u64, u64)) {
    let t = together as f64;
    n.note(in_turn, t / (one + other) as f64, "", None);
    n.note(longer, t / one.max(other) as f64, "", None);
}

/// Times a stage-out of `a` into `out` on one stream beside a restore of `into` into `b` on
/// the other, each by a copy kernel of this many blocks or (`None`) by the copy engine.
fn stage_out_beside_restore(
    c: &Ctx<'_>,
    CopyBuffers { a, b, out, into, total }: CopyBuffers<'_>,
    (out_blocks, in_blocks): (Option<u32>, Option<u32>),
) -> Result<u64> {
    let Ctx { kernels, s, s2, .. } = *c;
    timed_on_two(s, s2, "stage-out beside a restore", || {
        match out_blocks {
            Some(blocks) => kernels.copy(s, out.addr(), a.ptr(), total, blocks)?,
            None => copy(out.addr(), a.ptr(), total, s)?,
        }
        match in_blocks {
            Some(blocks) => kernels.copy(s2, b.ptr(), into.addr(), total, blocks)?,
            None => copy(b.ptr(), into.addr(), total, s2)?,
        }
        Ok(())
    })
}

/// A copy kernel moves data over the link without a copy engine: the SMs store into mapped
/// pinned memory (a stage-out) or load from it (a restore). Does it run beside the copy
/// engine's copy the other way, where two copy-engine copies of managed memory do not? And how
/// many thread blocks does it need?
fn kernel_copy_duplex(c: &Ctx<'_>, n: &mut Notes, bufs: CopyBuffers<'_>, ce_h2d: f64) -> Result<()> {
    let CopyBuffers { a, b, out, into, total } = bufs;
    let Ctx { kernels, s, s2, .. } = *c;
    let sms = kernels.sms();
    // Data the stage-outs must carry: the device's words, changed on the device.
    kernels.add_u32(s, a.ptr(), total / 4, 7)?;
    let mut k_d2h = 0.0;
    let rows = [
        (16, "managed: stage-out by a copy kernel of 16 blocks, alone"),
        (32, "managed: stage-out by a copy kernel of 32 blocks, alone"),
        (64, "managed: stage-out by a copy kernel of 64 blocks, alone"),
        (sms * 2, "managed: stage-out by a copy kernel of 2 blocks per SM, alone"),
    ];
    for (blocks, label) in rows {
        let t = timed(s, || kernels.copy(s, out.addr(), a.ptr(), total, blocks))?;
        k_d2h = n.note(label, gbps(total, t), "GB/s", None);
    }
    let t = timed(s, || kernels.copy(s, b.ptr(), into.addr(), total, sms * 2))?;
    let k_h2d = n.note("managed: restore by a copy kernel, alone", gbps(total, t), "GB/s", None);
    let both = |by| stage_out_beside_restore(c, bufs, by);
    let t = both((Some(sms * 2), None))?;
    let agg = n.note(
        "managed: copy-kernel stage-out beside a copy-engine restore, aggregate",
        gbps(2 * total, t),
        "GB/s",
        None,
    );
    n.note("managed: that aggregate / (one way + the other)", agg / (k_d2h + ce_h2d), "", None);
    let t = both((Some(16), None))?;
    n.note("managed: that, the copy kernel of 16 blocks, aggregate", gbps(2 * total, t), "GB/s", None);
    let t = both((Some(sms), Some(sms)))?;
    n.note(
        "managed: copy-kernel stage-out beside a copy-kernel restore, aggregate",
        gbps(2 * total, t),
        "GB/s",
        None,
    );
    let t = both((None, Some(sms * 2)))?;
    let agg = n.note(
        "managed: copy-engine stage-out beside a copy-kernel restore, aggregate",
        gbps(2 * total, t),
        "GB/s",
        None,
    );
    n.note("managed: that aggregate / (one way + the other)", agg / (k_h2d + ce_h2d), "", None);
    // A stage-out bounced through plain device memory: a device-side copy kernel, then the
    // copy engine out of `cuMemAlloc` memory beside the copy engine's restore into managed pages.
    let plain = DeviceMemory::alloc(total)?;
    let bounce = |by_kernel: bool| {
        timed_on_two(s, s2, "bounce duplex", || {
            // In 64 MiB pieces, as a stage-out of many blocks would go.
            for off in (0..total).step_by(CHUNK as usize) {
                if by_kernel {
                    kernels.copy(s, plain.0 + off, a.ptr() + off, CHUNK, sms * 2)?;
                } else {
                    copy(plain.0 + off, a.ptr() + off, CHUNK, s)?;
                }
                copy(out.addr() + off, plain.0 + off, CHUNK, s)?;
            }
            copy(b.ptr(), into.addr(), total, s2)?;
            Ok(())
        })
    };
    let t = bounce(true)?;
    n.note(
        "managed: stage-out bounced through device memory by a kernel, beside a restore, aggregate",
        gbps(2 * total, t),
        "GB/s",
        None,
    );
    let t = bounce(false)?;
    n.note(
        "managed: stage-out bounced through device memory by the copy engine, beside a restore, aggregate",
        gbps(2 * total, t),
        "GB/s",
        None,
    );
    // A copy kernel beside a kernel holding every SM (a program's kernel): does it get to run?
    let t = timed_beside_spin(c, "copy beside compute", || kernels.copy(s, out.addr(), a.ptr(), total, 64))?;
    n.note(
        "managed: a 64-block copy kernel's stage-out beside a 100 ms kernel on every SM, its time",
        t as f64 / 1e6,
        "ms",
        None,
    );
    let got = kernels.sum_u32(s, b.ptr(), total / 4)?;
    if got != expected_sum(total / 4, 3) {
        return Err(Error::cuda("managed copy probe", "a copy kernel's restore lost data"));
    }
    // The stage-outs copied `a` (the device's data, written by the touch) to `out`: compare.
    let want = kernels.sum_u32(s, a.ptr(), total / 4)?;
    // SAFETY: the probe owns `total` bytes of pinned memory at `out`; the stream is idle.
    let words = unsafe { std::slice::from_raw_parts(out.ptr.cast::<u32>(), (total / 4) as usize) };
    if words.iter().map(|&w| w as u64).sum::<u64>() != want {
        return Err(Error::cuda("managed copy probe", "a copy kernel's stage-out lost data"));
    }
    Ok(())
}
