//! The probe's rows on managed memory: faults, prefetches, duplex, advice, remote access,
//! discards.

use super::*;

/// Fault-driven H2D rates.
pub(super) struct FaultRates {
    /// The GPU replay's kernel (one touch per 4 KiB page over the whole grid): the profile's.
    pub replay: f64,
    /// A read of every 16 bytes.
    pub dense: f64,
}

/// What prefetches cost.
pub(super) struct PrefetchCosts {
    pub h2d: f64,
    pub h2d_host: f64,
    pub d2h: f64,
    pub d2h_host: f64,
    pub call_ns: f64,
    pub batch_ns: f64,
    pub deferred_ns: f64,
}

/// What read-mostly advice costs.
pub(super) struct ReadMostly {
    pub advise_ns_per_gib: f64,
    pub prefetch_rate: f64,
    pub drop_rate: f64,
    pub unset_ns_per_gib: f64,
}

/// What remote mapping costs.
pub(super) struct Remote {
    pub advise_ns_per_gib: f64,
    pub rate: f64,
}

/// What discards cost.
pub(super) struct Discard {
    pub rate: f64,
    pub host_ns_per_gib: f64,
}

/// Fault-driven reads of host-resident data: the replay kernel's, a dense read's, one block's.
pub(super) fn fault_rates(c: &Ctx<'_>, n: &mut Notes, a: &ManagedBuffer) -> Result<FaultRates> {
    let Ctx { kernels, s, bytes, default, .. } = *c;
    // Fault-driven H2D, the profile's rate: host-resident data read by the kernel a GPU replay
    // launches (the touch kernel, one byte per 4 KiB page, the whole grid), no hints. Its
    // threads fault on pages all over the range at once; the same kernel reading every 16
    // bytes (next row) faults on a narrow moving window, which the driver serves 1.4-2.2x
    // faster. The replays fault as the first does, so the profile takes it.
    let t = timed(s, || kernels.touch(s, &[(a.ptr(), bytes, TouchMode::Read)], 4096, 0))?;
    let fault_rate = n.note(
        "fault-driven H2D rate, one touch per 4 KiB page (replay kernel; profile)",
        gbps(bytes, t),
        "GB/s",
        Some(default.gpu_fault_rate_gbps),
    );
    place(a, Location::Host, s)?;
    let t = timed(s, || kernels.touch(s, &[(a.ptr(), bytes, TouchMode::Read)], 16, 0))?;
    let dense_rate = n.note(
        "fault-driven H2D rate, every 16 bytes",
        gbps(bytes, t),
        "GB/s",
        Some(default.gpu_fault_rate_gbps),
    );

    // The same read with one block of 256 threads: far fewer pages in flight at once.
    place(a, Location::Host, s)?;
    let small = bytes.min(256 << 20);
    let t = timed(s, || kernels.touch_with_blocks(s, &[(a.ptr(), small, TouchMode::Read)], 16, 0, 1))?;
    n.note(
        "fault-driven H2D rate, one thread block",
        gbps(small, t),
        "GB/s",
        Some(default.gpu_fault_rate_gbps),
    );

    Ok(FaultRates { replay: fault_rate, dense: dense_rate })
}

/// A streaming read with the prefetch of each chunk pipelined, against the dense fault rate.
pub(super) fn streaming(c: &Ctx<'_>, n: &mut Notes, a: &ManagedBuffer, dense_rate: f64) -> Result<()> {
    let Ctx { kernels, s, s2, bytes, .. } = *c;
    // Streaming with prefetch: a copy stream moves chunk k+1 while the compute stream reads
    // chunk k, each read waiting on an event recorded after its chunk's prefetch. What the
    // advisor's engine does; measured against the fault-driven rate of the same run.
    place(a, Location::Host, s)?;
    let piece = (256u64 << 20).min(bytes);
    let pieces = bytes / piece;
    let t = timed(s, || {
        let start = s.record_event(None).map_err(cuda_err("cuEventRecord", "stream"))?;
        s2.wait(&start).map_err(cuda_err("cuStreamWaitEvent", "stream"))?;
        for k in 0..pieces {
            a.prefetch(k * piece, piece, Location::DEVICE, s2)?;
            let landed = s2.record_event(None).map_err(cuda_err("cuEventRecord", "stream"))?;
            s.wait(&landed).map_err(cuda_err("cuStreamWaitEvent", "stream"))?;
            kernels.touch(s, &[(a.ptr() + k * piece, piece, TouchMode::Read)], 16, 0)?;
        }
        Ok(())
    })?;
    n.note(
        "streaming read, prefetch pipelined in 256 MiB chunks",
        gbps(pieces * piece, t),
        "GB/s",
        Some(47.2),
    );
    n.note(
        "  same, over the fault-driven read (every 16 bytes)",
        gbps(pieces * piece, t) / dense_rate,
        "x",
        None,
    );

    Ok(())
}

/// CPU reads of GPU-resident data (CPU faults); returns their time.
pub(super) fn cpu_faults(c: &Ctx<'_>, n: &mut Notes, a: &mut ManagedBuffer) -> Result<u64> {
    let Ctx { s, bytes, default, .. } = *c;
    // CPU reads of GPU-resident data (CPU faults).
    s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
    let t0 = Instant::now();
    // SAFETY: the stream is idle.
    let sum: u64 = unsafe { a.host_bytes() }.iter().step_by(1024).map(|&b| b as u64).sum();
    let cpu_ns = t0.elapsed().as_nanos() as u64;
    std::hint::black_box(sum);
    n.note("CPU-fault D2H rate", gbps(bytes, cpu_ns), "GB/s", Some(default.cpu_fault_rate_gbps));

    Ok(cpu_ns)
}

/// Prefetches each way in one call, in 2 MiB calls and batches, and the host time their calls
/// take on an idle and a busy stream.
pub(super) fn prefetch_costs(c: &Ctx<'_>, n: &mut Notes, a: &ManagedBuffer) -> Result<PrefetchCosts> {
    let Ctx { dev, kernels, s, bytes, default, .. } = *c;
    // Prefetch in one call each way; and how long the call itself holds the calling thread,
    // as a share of the transfer (an asynchronous call would hold it for microseconds).
    let mut h2d_call = 0;
    let t_h2d = timed(s, || {
        h2d_call = host_timed(|| a.prefetch(0, bytes, Location::DEVICE, s))?;
        Ok(())
    })?;
    let h2d = n.note(
        "prefetch H2D rate, one call",
        gbps(bytes, t_h2d),
        "GB/s",
        Some(default.prefetch_h2d_rate_gbps),
    );
    let h2d_host = n.note(
        "  share of it the calling thread is blocked",
        (h2d_call as f64 / t_h2d as f64).min(1.0),
        "",
        Some(default.prefetch_h2d_host_fraction),
    );
    let mut d2h_call = 0;
    let t_d2h = timed(s, || {
        d2h_call = host_timed(|| a.prefetch(0, bytes, Location::Host, s))?;
        Ok(())
    })?;
    let d2h = n.note(
        "prefetch D2H rate, one call",
        gbps(bytes, t_d2h),
        "GB/s",
        Some(default.prefetch_d2h_rate_gbps),
    );
    let d2h_host = n.note(
        "  share of it the calling thread is blocked",
        (d2h_call as f64 / t_d2h as f64).min(1.0),
        "",
        Some(default.prefetch_d2h_host_fraction),
    );

    // Per-call cost: the same bytes in 2 MiB calls.
    let chunk = 2u64 << 20;
    let calls = bytes / chunk;
    let t_small =
        timed(s, || (0..calls).try_for_each(|i| a.prefetch(i * chunk, chunk, Location::DEVICE, s)))?;
    n.note("prefetch H2D rate, 2 MiB calls", gbps(bytes, t_small), "GB/s", None);
    let call_ns = n.note(
        "prefetch fixed cost per call",
        (t_small.saturating_sub(t_h2d)) as f64 / calls as f64,
        "ns",
        Some(default.prefetch_call_ns as f64),
    );
    place(a, Location::Host, s)?;

    // Batch prefetch of the same 2 MiB ranges.
    let ranges: Vec<(u64, u64)> = (0..calls).map(|i| (a.ptr() + i * chunk, chunk)).collect();
    let t_batch = timed(s, || prefetch_batch(dev, &ranges, Location::DEVICE, s))?;
    n.note("batch prefetch H2D rate, 2 MiB ranges", gbps(bytes, t_batch), "GB/s", None);
    let batch_ns = n.note(
        "batch prefetch cost per extra range",
        (t_batch.saturating_sub(t_h2d)) as f64 / calls.saturating_sub(1).max(1) as f64,
        "ns",
        Some(default.batch_range_ns as f64),
    );

    // Host time of a prefetch call as a replay issues them, 64 MiB a call: the stream idle, or
    // still running a kernel (as the backend issues them: behind a short kernel, the call
    // holds the host far less than on an idle stream).
    let piece = 64u64 << 20;
    let count = (bytes / piece).min(8);
    let rows: [(bool, bool, &str); 4] = [
        (false, false, "prefetch call host time, host-resident data, idle stream"),
        (false, true, "prefetch call host time, host-resident data, stream busy"),
        (true, false, "prefetch call host time, fresh pages (population), idle stream"),
        (true, true, "prefetch call host time, fresh pages (population), stream busy"),
    ];
    let mut deferred = Vec::new();
    for (fresh, busy, name) in rows {
        let f = if fresh { Some(ManagedBuffer::alloc(dev, count * piece)?) } else { None };
        let buf = f.as_ref().unwrap_or(a);
        if !fresh {
            place(a, Location::Host, s)?;
        }
        if busy {
            kernels.touch(s, &[], 4096, 50_000_000)?; // spins 50 ms
        }
        let held =
            host_timed(|| (0..count).try_for_each(|i| buf.prefetch(i * piece, piece, Location::DEVICE, s)))?;
        s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
        let per_call = n.note(name, held as f64 / count as f64, "ns", None);
        if busy {
            deferred.push(per_call);
        }
    }
    let deferred_ns = n.note(
        "prefetch call host time on a busy stream (profile)",
        deferred.iter().sum::<f64>() / deferred.len() as f64,
        "ns",
        Some(default.prefetch_deferred_call_ns as f64),
    );
    place(a, Location::Host, s)?;

    Ok(PrefetchCosts { h2d, h2d_host, d2h, d2h_host, call_ns, batch_ns, deferred_ns })
}

/// Whether prefetches each way at once run at their one-way rates (`h2d`, `d2h`).
pub(super) fn full_duplex(c: &Ctx<'_>, n: &mut Notes, a: &ManagedBuffer, h2d: f64, d2h: f64) -> Result<bool> {
    let Ctx { dev, kernels, s, s2, bytes, .. } = *c;
    // Duplex: a second buffer goes device -> host while the first comes host -> device.
    let b = ManagedBuffer::alloc(dev, bytes)?;
    kernels.touch(s, &[(b.ptr(), bytes, TouchMode::Write)], 4096, 0)?; // populated on the device
    place(a, Location::Host, s)?;
    let t_both = timed(s, || {
        let fork = s.record_event(None).map_err(cuda_err("cuEventRecord", "duplex"))?;
        s2.wait(&fork).map_err(cuda_err("cuStreamWaitEvent", "duplex"))?;
        a.prefetch(0, bytes, Location::DEVICE, s)?;
        b.prefetch(0, bytes, Location::Host, s2)?;
        let join = s2.record_event(None).map_err(cuda_err("cuEventRecord", "duplex"))?;
        s.wait(&join).map_err(cuda_err("cuStreamWaitEvent", "duplex"))
    })?;
    let aggregate =
        n.note("H2D + D2H prefetch concurrently, aggregate", gbps(2 * bytes, t_both), "GB/s", None);
    // Full duplex would carry both directions at once near their one-way rates; the one-way
    // D2H rate itself varies (10-17 GB/s, host page population), so judge by the sum.
    let full_duplex = aggregate > 0.8 * (h2d + d2h);
    n.note("aggregate / (H2D + D2H one-way) (> 0.8: full duplex)", aggregate / (h2d + d2h), "", None);
    drop(b);

    Ok(full_duplex)
}

/// An isolated GPU fault: one touch per 2 MiB of host-resident data.
pub(super) fn isolated_fault(c: &Ctx<'_>, n: &mut Notes, a: &ManagedBuffer) -> Result<f64> {
    let Ctx { kernels, s, bytes, .. } = *c;
    let chunk = 2u64 << 20;
    let calls = bytes / chunk;
    // Isolated faults: one touch per 2 MiB of host-resident data.
    place(a, Location::Host, s)?;
    let t = timed(s, || kernels.touch(s, &[(a.ptr(), bytes, TouchMode::Read)], chunk as u32, 0))?;
    let isolated =
        n.note("isolated GPU fault (1 touch per 2 MiB)", t as f64 / calls as f64, "ns", Some(15_800.0));

    Ok(isolated)
}

/// Read-mostly advice: setting it, duplicates made and dropped, and collapsing them.
pub(super) fn read_mostly(c: &Ctx<'_>, n: &mut Notes, a: &ManagedBuffer) -> Result<ReadMostly> {
    let Ctx { kernels, s, bytes, default, .. } = *c;
    // Read-mostly: setting it (host time: the call blocks), prefetching to the device creates
    // duplicates, prefetching to the host drops them. Both sides timed by the host clock, since
    // the calls do their work on the host as much as on the copy engines.
    place(a, Location::Host, s)?;
    let t0 = std::time::Instant::now();
    a.advise(0, bytes, Advice::SetReadMostly)?;
    let per_gib = t0.elapsed().as_nanos() as f64 * (1u64 << 30) as f64 / bytes as f64;
    let advise_rm = n.note(
        "set read-mostly on host data (host time)",
        per_gib,
        "ns per GiB",
        Some(default.advise_read_mostly_ns_per_gib as f64),
    );
    let t0 = std::time::Instant::now();
    place(a, Location::DEVICE, s)?;
    let dup_rate = n.note(
        "prefetch H2D creating read-mostly duplicates",
        gbps(bytes, t0.elapsed().as_nanos() as u64),
        "GB/s",
        Some(default.duplicate_prefetch_rate_gbps),
    );
    let t = timed(s, || a.prefetch(0, bytes, Location::Host, s))?;
    let drop_rate =
        n.note("drop read-mostly duplicate", gbps(bytes, t), "GB/s", Some(default.duplicate_drop_rate_gbps));
    let attrs = a.attributes(0, bytes)?;
    a.advise(0, bytes, Advice::UnsetReadMostly)?;
    if !attrs.read_mostly {
        return Err(Error::cuda("cuMemRangeGetAttribute", "read-mostly advice did not stick"));
    }
    // Collapsing duplicates: unsetting read-mostly while both copies exist, as the planner
    // does before a kernel writes read-mostly data. Host time of the call, then the device's
    // first read of the data after it (the copies left).
    a.advise(0, bytes, Advice::SetReadMostly)?;
    place(a, Location::DEVICE, s)?;
    let t = timed(s, || kernels.touch(s, &[(a.ptr(), bytes, TouchMode::Read)], 4096, 0))?;
    n.note("a kernel's read of read-mostly duplicates (control)", gbps(bytes, t), "GB/s", None);
    let t0 = std::time::Instant::now();
    a.advise(0, bytes, Advice::UnsetReadMostly)?;
    let unset_rm = n.note(
        "unset read-mostly on duplicated device data (host time)",
        t0.elapsed().as_nanos() as f64 * (1u64 << 30) as f64 / bytes as f64,
        "ns per GiB",
        Some(default.advise_unset_read_mostly_ns_per_gib as f64),
    );
    let t = timed(s, || kernels.touch(s, &[(a.ptr(), bytes, TouchMode::Read)], 4096, 0))?;
    n.note("  a kernel's read of it after", gbps(bytes, t), "GB/s", None);

    Ok(ReadMostly {
        advise_ns_per_gib: advise_rm,
        prefetch_rate: dup_rate,
        drop_rate,
        unset_ns_per_gib: unset_rm,
    })
}

/// Remote access to host-preferred, device-mapped data.
pub(super) fn remote(c: &Ctx<'_>, n: &mut Notes, a: &ManagedBuffer) -> Result<Remote> {
    let Ctx { kernels, s, bytes, default, .. } = *c;
    // Remote: host-preferred and accessed by the device: read in place over the link.
    place(a, Location::Host, s)?;
    let t = host_timed(|| {
        a.advise(0, bytes, Advice::SetPreferredLocation(Location::Host))?;
        a.advise(0, bytes, Advice::SetAccessedByDevice)
    })?;
    let advise_remote = n.note(
        "set preferred host + accessed by (host time)",
        t as f64 * (1u64 << 30) as f64 / bytes as f64,
        "ns per GiB",
        Some(default.advise_remote_ns_per_gib as f64),
    );
    let t = timed(s, || kernels.touch(s, &[(a.ptr(), bytes, TouchMode::Read)], 16, 0))?;
    let remote = n.note(
        "GPU remote read of host-preferred data",
        gbps(bytes, t),
        "GB/s",
        Some(default.remote_rate_gbps),
    );
    a.advise(0, bytes, Advice::UnsetAccessedByDevice)?;
    a.advise(0, bytes, Advice::UnsetPreferredLocation)?;

    Ok(Remote { advise_ns_per_gib: advise_remote, rate: remote })
}

/// Discards (where the driver has them) and what prefetching discarded pages costs.
pub(super) fn discards(c: &Ctx<'_>, n: &mut Notes, a: &ManagedBuffer) -> Result<Discard> {
    let Ctx { dev, s, bytes, default, .. } = *c;
    let chunk = 2u64 << 20;
    // Discard device-resident data; prefetching it back only revalidates pages that stayed
    // mapped (discard does not return memory): the simulator's pool.
    place(a, Location::DEVICE, s)?;
    let whole = [(a.ptr(), bytes)];
    let mut discard_rate = default.discard_rate_gbps;
    let mut discard_host = default.discard_host_ns_per_gib as f64;
    if dev.capabilities().discard_batch {
        let mut call = 0;
        let t = timed(s, || {
            call = host_timed(|| discard_batch(dev, &whole, s).map(|_| ()))?;
            Ok(())
        })?;
        discard_rate = n.note("discard (batch)", gbps(bytes, t), "GB/s", Some(default.discard_rate_gbps));
        n.note(
            "  host time of the call, one range",
            call as f64 * (1u64 << 30) as f64 / bytes as f64,
            "ns per GiB",
            None,
        );
        // The same in 2 MiB ranges, as a planner issues them.
        place(a, Location::DEVICE, s)?;
        let small: Vec<(u64, u64)> = (0..bytes / chunk).map(|i| (a.ptr() + i * chunk, chunk)).collect();
        let call = host_timed(|| discard_batch(dev, &small, s).map(|_| ()))?;
        s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
        discard_host = n.note(
            "  host time of the call, 2 MiB ranges",
            call as f64 * (1u64 << 30) as f64 / bytes as f64,
            "ns per GiB",
            Some(default.discard_host_ns_per_gib as f64),
        );
        place(a, Location::DEVICE, s)?;
        discard_batch(dev, &whole, s)?;
        let t = timed(s, || a.prefetch(0, bytes, Location::DEVICE, s))?;
        n.note("prefetch of discarded device pages (still mapped)", gbps(bytes, t), "GB/s", None);
        // Dead data on the host (the facts' case): discarded, then prefetched to the device.
        place(a, Location::Host, s)?;
        discard_batch(dev, &whole, s)?;
        let t = timed(s, || a.prefetch(0, bytes, Location::DEVICE, s))?;
        n.note(
            "prefetch of discarded host pages (population)",
            gbps(bytes, t),
            "GB/s",
            Some(default.prefetch_populate_rate_gbps),
        );
    }

    Ok(Discard { rate: discard_rate, host_ns_per_gib: discard_host })
}

/// A prefetch of fresh pages: population without a transfer.
pub(super) fn prefetch_population(c: &Ctx<'_>, n: &mut Notes) -> Result<f64> {
    let Ctx { dev, s, bytes, default, .. } = *c;
    // Prefetch of pages with no copy anywhere (fresh memory): population by prefetch.
    let d = ManagedBuffer::alloc(dev, bytes)?;
    let t = timed(s, || d.prefetch(0, bytes, Location::DEVICE, s))?;
    let populate_rate = n.note(
        "prefetch of fresh pages (population)",
        gbps(bytes, t),
        "GB/s",
        Some(default.prefetch_populate_rate_gbps),
    );
    drop(d);
    s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;

    Ok(populate_rate)
}
