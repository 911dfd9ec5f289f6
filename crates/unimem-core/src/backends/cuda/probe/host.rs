//! The probe's host-time rows: launches, the launch queue, allocations and frees, pinning.

use super::*;

/// What the host pays for launches and allocations.
pub(super) struct HostCosts {
    pub launch_ns: f64,
    pub queue_depth: f64,
    pub alloc_ns: f64,
    pub alloc_per_gib: f64,
}

/// Host time of kernel launches (and how many queue), of launches through the backend, and
/// of managed allocations and frees by size.
pub(super) fn host_costs(c: &Ctx<'_>, n: &mut Notes, a: &ManagedBuffer) -> Result<HostCosts> {
    let Ctx { dev, kernels, s, s2, bytes, default } = *c;
    // Host time of a kernel launch (with the event wait and record a backend puts around it)
    // and of a managed allocation: the simulator charges them to its host clock, since a
    // kernel shorter than a launch leaves the device waiting for the host.
    let tiny = ManagedBuffer::alloc(dev, 1 << 20)?;
    let touch = [(tiny.ptr(), 4096u64, TouchMode::Read)];
    kernels.touch(s, &touch, 4096, 0)?; // its page is resident from here on
    s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
    let launches = 500u64;
    let t = host_timed(|| {
        let mut done = s.record_event(None).map_err(cuda_err("cuEventRecord", "launch probe"))?;
        for _ in 0..launches {
            s.wait(&done).map_err(cuda_err("cuStreamWaitEvent", "launch probe"))?;
            kernels.touch(s, &touch, 4096, 0)?;
            done = s.record_event(None).map_err(cuda_err("cuEventRecord", "launch probe"))?;
        }
        Ok(())
    })?;
    s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
    drop(tiny);
    n.note("kernel launch with an event wait and record (host time)", t as f64 / launches as f64, "ns", None);
    // How far the host runs ahead of the device: kernels far longer than a launch, each behind
    // an event wait and followed by a record as the backend launches them, until a launch call
    // holds the host for a good part of a kernel (the driver's queue is full).
    let spin = 200_000u64;
    let ahead = 4096usize;
    let mut held = Vec::with_capacity(ahead);
    let mut done = s.record_event(None).map_err(cuda_err("cuEventRecord", "queue probe"))?;
    for _ in 0..ahead {
        let t0 = Instant::now();
        s.wait(&done).map_err(cuda_err("cuStreamWaitEvent", "queue probe"))?;
        kernels.touch(s, &[], 4096, spin)?;
        done = s.record_event(None).map_err(cuda_err("cuEventRecord", "queue probe"))?;
        held.push(t0.elapsed().as_nanos() as u64);
    }
    s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
    // Launches that returned at once (a lone slow one, the thread descheduled, is not the
    // queue filling: from there on every launch waits about a kernel).
    let quick = held.iter().filter(|&&h| h <= spin / 2).count();
    let depth = if quick < ahead { quick } else { 0 };
    let depth = n.note(
        "kernel launches queued before a launch waits (profile; 0: none waited)",
        depth as f64,
        "",
        None,
    );
    // The backend's launch does more than the driver's call (its account of the blocks, the
    // events a policy's feedback reads), several times the row above. The profile takes the
    // backend's.
    let launch_ns = n.note(
        "kernel launch through the CUDA backend, 3 regions resident (host time, profile)",
        backend_launch_ns(dev.ordinal())?,
        "ns",
        Some(default.launch_host_ns as f64),
    );
    // Managed allocations by size (a program's tensors run from bytes to hundreds of MiB):
    // the profile takes a line through these (host time = fixed + per GiB).
    let alloc_sizes: [(u64, u64, &str); 4] = [
        (64 << 10, 64, "cuMemAllocManaged of 64 KiB (host time)"),
        (2 << 20, 64, "cuMemAllocManaged of 2 MiB (host time)"),
        (32 << 20, 32, "cuMemAllocManaged of 32 MiB (host time)"),
        (256 << 20, 8, "cuMemAllocManaged of 256 MiB (host time)"),
    ];
    let mut points = Vec::new();
    for (size, count, name) in alloc_sizes {
        let mut fresh = Vec::new();
        let t = host_timed(|| {
            for _ in 0..count {
                fresh.push(ManagedBuffer::alloc(dev, size)?);
            }
            Ok(())
        })?;
        let freed = host_timed(|| {
            drop(fresh);
            Ok(())
        })?;
        let per = n.note(name, t as f64 / count as f64, "ns", None);
        n.note("  its cuMemFree, the device idle", freed as f64 / count as f64, "ns", None);
        points.push((size as f64 / (1u64 << 30) as f64, per));
    }
    let (alloc_ns, alloc_per_gib) = line_through(&points);
    let alloc_ns = n.note(
        "cuMemAllocManaged, fixed part (host time, profile)",
        alloc_ns,
        "ns",
        Some(default.alloc_host_ns as f64),
    );
    let alloc_per_gib = n.note(
        "cuMemAllocManaged, per GiB (host time, profile)",
        alloc_per_gib,
        "ns",
        Some(default.alloc_host_ns_per_gib as f64),
    );
    // Freeing buffers whose pages were populated on the device and then discarded, as the
    // backends free the buffers their pools shed. Not in the profile: freed at once after their
    // discard they cost several times what a replay's closing synchronisation pays for its
    // shed buffers, and the profile keeps the replays' figure (`free_retired_host_ns`).
    for (size, count, name) in [
        (2u64 << 20, 64u64, "cuMemFree of 2 MiB populated on the device, then discarded (host time)"),
        (32 << 20, 16, "cuMemFree of 32 MiB populated on the device, then discarded (host time)"),
    ] {
        let shed = (0..count).map(|_| ManagedBuffer::alloc(dev, size)).collect::<Result<Vec<_>>>()?;
        let ranges: Vec<(u64, u64, TouchMode)> =
            shed.iter().map(|b| (b.ptr(), size, TouchMode::Write)).collect();
        kernels.touch(s, &ranges, 4096, 0)?;
        let pages: Vec<(u64, u64)> = shed.iter().map(|b| (b.ptr(), size)).collect();
        discard_batch(dev, &pages, s)?;
        s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
        let t = host_timed(|| {
            drop(shed);
            Ok(())
        })?;
        n.note(name, t as f64 / count as f64, "ns", Some(default.free_retired_ns(size) as f64));
    }
    // The same while a kernel on another stream faults its way through host-resident data, as
    // a replay allocates while its kernels run: whether the driver's fault servicing holds
    // allocations up. (Not in the profile: the simulator's allocations do not wait for faults.)
    place(a, Location::Host, s)?;
    kernels.touch(s2, &[(a.ptr(), bytes, TouchMode::Read)], 4096, 0)?;
    let read = s2.record_event(None).map_err(cuda_err("cuEventRecord", "probe"))?;
    let mut fresh = Vec::new();
    let busy = host_timed(|| {
        for _ in 0..64 {
            fresh.push(ManagedBuffer::alloc(dev, 2 << 20)?);
        }
        Ok(())
    })?;
    let faulting = !read.is_complete();
    s2.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
    drop(fresh);
    n.note(
        if faulting {
            "cuMemAllocManaged of 2 MiB while a kernel faults (host time)"
        } else {
            "cuMemAllocManaged of 2 MiB while a kernel faults (host time; it had finished)"
        },
        busy as f64 / 64.0,
        "ns",
        None,
    );
    pinning(c, n)?;

    Ok(HostCosts { launch_ns, queue_depth: depth, alloc_ns, alloc_per_gib })
}

/// Host time of pinning staging memory (`cuMemHostAlloc`, as `StagingPool` grows) by chunk
/// size with the device idle, and of a 64 MiB chunk while a 50 ms kernel runs on another
/// stream: whether pinning waits for the device. Not in the profile.
fn pinning(c: &Ctx<'_>, n: &mut Notes) -> Result<()> {
    let Ctx { dev, kernels, s2, .. } = *c;
    dev.context().bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "pinning probe"))?;
    let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
    let pin = |bytes: u64| -> Result<(*mut std::ffi::c_void, u64)> {
        let t0 = Instant::now();
        // SAFETY: a plain allocation, freed below.
        let p = unsafe { cudarc::driver::result::malloc_host(bytes as usize, flags) }
            .map_err(cuda_err("cuMemHostAlloc", "pinning probe"))?;
        Ok((p, t0.elapsed().as_nanos() as u64))
    };
    let unpin = |p: *mut std::ffi::c_void| -> Result<()> {
        // SAFETY: allocated by `pin`, freed once, the device idle.
        unsafe { cudarc::driver::result::free_host(p) }.map_err(cuda_err("cuMemFreeHost", "pinning probe"))
    };
    for (size, count, name) in [
        (64u64 << 20, 4u32, "cuMemHostAlloc of 64 MiB, the device idle (host time)"),
        (1 << 30, 1, "cuMemHostAlloc of 1 GiB, the device idle (host time)"),
    ] {
        let mut total = 0;
        for _ in 0..count {
            let (p, t) = pin(size)?;
            total += t;
            unpin(p)?;
        }
        let per = n.note(name, total as f64 / count as f64, "ns", None);
        n.note("  its rate", size as f64 / per, "GB/s", None);
    }
    let kernel_ns = 50_000_000u64;
    kernels.touch(s2, &[], 4096, kernel_ns)?;
    let ran = s2.record_event(None).map_err(cuda_err("cuEventRecord", "pinning probe"))?;
    let (p, t) = pin(64 << 20)?;
    let waited = ran.is_complete();
    s2.synchronize().map_err(cuda_err("cuStreamSynchronize", "pinning probe"))?;
    unpin(p)?;
    n.note(
        if waited {
            "cuMemHostAlloc of 64 MiB beside a 50 ms kernel (host time; it returned after the kernel)"
        } else {
            "cuMemHostAlloc of 64 MiB beside a 50 ms kernel (host time; the kernel still ran)"
        },
        t as f64,
        "ns",
        None,
    );
    Ok(())
}

/// Host time of one launch through [`super::CudaBackend`], each kernel reading and writing
/// three of four resident 2 MiB regions, as a replay launches them.
pub(super) fn backend_launch_ns(ordinal: usize) -> Result<f64> {
    use crate::seam::{KernelLaunch, MemoryBackend};
    let mut b = crate::backends::cuda::CudaBackend::open(ordinal, 1 << 30, false)?;
    let bytes = 2u64 << 20;
    let acc: Vec<crate::access::RangeAccess> = (1..=4)
        .map(|i| {
            let region = crate::region::RegionId(i);
            b.allocate(region, bytes).map(|_| crate::access::RangeAccess {
                region,
                offset: 0,
                len: bytes,
                mode: crate::AccessMode::ReadWrite,
            })
        })
        .collect::<Result<_>>()?;
    b.launch(&KernelLaunch { name: "populate", dur_ns: 0, accesses: &acc })?;
    b.synchronize()?;
    let (before, n) = (b.stats().host.launch, 1000usize);
    for i in 0..n {
        b.launch(&KernelLaunch { name: "probe", dur_ns: 0, accesses: &acc[i % 2..i % 2 + 3] })?;
    }
    b.synchronize()?;
    Ok((b.stats().host.launch - before) as f64 / n as f64)
}
