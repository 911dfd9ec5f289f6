//! The probe's rows on staged evictions, as the CUDA backend makes them: device-resident data
//! copied into pinned slots and its pages discarded; back to the device by repopulating the
//! pages (prefetch) and copying in; back to the host; beside transfers the other way. The data
//! is checked after each round trip.

use super::*;

/// The buffer under test, with a pinned staging slot per 2 MiB block of it.
pub(super) struct StagingProbe<'a> {
    pub c: &'a Ctx<'a>,
    pub pool: StagingPool,
    pub slots: Vec<Slot>,
}

/// A second buffer with slots of its own, staged out beside transfers into the first.
pub(super) struct Other {
    pub buf: ManagedBuffer,
    pub pool: StagingPool,
    pub slots: Vec<Slot>,
    pub runs: Vec<Run>,
}

/// What the staging rows give the profile.
pub(super) struct StageRates {
    pub d2h: f64,
    pub h2d: f64,
    pub host: f64,
    pub h2d_block_ns: u64,
    pub h2d_resident: f64,
}

impl<'a> StagingProbe<'a> {
    /// Pins a slot per block of `bytes`.
    fn new(c: &'a Ctx<'a>, bytes: u64) -> Result<Self> {
        let mut pool = StagingPool::new(c.dev, bytes);
        pool.reserve(bytes)?;
        let mut slots: Vec<Slot> = Vec::new();
        for _ in 0..bytes / SLOT_BYTES {
            slots.push(pool.take(c.s)?.ok_or_else(|| Error::Allocation {
                bytes,
                reason: "cannot pin staging memory for the probe".into(),
            })?);
        }
        Ok(Self { c, pool, slots })
    }

    /// The copies between `buf`'s blocks and the slots, one per block.
    pub fn runs_of(&self, buf: &ManagedBuffer) -> Vec<Run> {
        Run::per_slot(buf.ptr(), &self.slots)
    }

    /// `buf`'s blocks as (address, bytes) ranges, one per 2 MiB block, as the backend's
    /// restores go.
    pub fn pieces_of(&self, buf: &ManagedBuffer) -> Vec<(u64, u64)> {
        self.runs_of(buf).iter().map(|r| (r.dptr, r.bytes)).collect()
    }

    /// A staged eviction of `buf` on `st`: copied into the slots, its pages discarded.
    pub fn stage_out(&self, buf: &ManagedBuffer, st: &CudaStream) -> Result<()> {
        self.pool.copy(self.runs_of(buf), true, st)?;
        discard_batch(self.c.dev, &[(buf.ptr(), buf.len())], st).map(|_| ())
    }

    /// A kernel's first read of `a` over its second: about 1 where the pages are resident.
    pub fn resident(&self, a: &ManagedBuffer) -> Result<f64> {
        let (kernels, s) = (self.c.kernels, self.c.s);
        let t_after = timed(s, || kernels.touch(s, &[(a.ptr(), a.len(), TouchMode::Read)], 4096, 0))?;
        let t_again = timed(s, || kernels.touch(s, &[(a.ptr(), a.len(), TouchMode::Read)], 4096, 0))?;
        Ok(t_after as f64 / t_again as f64)
    }
}

/// Waits for `st`.
pub(super) fn sync(st: &CudaStream) -> Result<()> {
    st.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))
}

/// The pattern the rows check: one byte per page.
fn pattern(i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(7)
}

/// Checks `a` holds the pattern (callers synchronise first).
pub(super) fn check(a: &mut ManagedBuffer, what: &str) -> Result<()> {
    // SAFETY: callers synchronise first.
    let bad =
        unsafe { a.host_bytes() }.iter().step_by(4096).enumerate().filter(|(i, &b)| b != pattern(*i)).count();
    if bad > 0 {
        return Err(Error::cuda("staging", format!("{bad} pages wrong after {what}")));
    }
    Ok(())
}

/// Staged evictions, as the CUDA backend makes them: device-resident data copied into pinned
/// slots and its pages discarded; back to the device by repopulating the pages (prefetch) and
/// copying in; back to the host by a CPU copy into the discarded pages; and a staged eviction
/// beside a prefetch the other way. Checks the data survives each round trip. Returns the rates
/// (to pinned, back to the device, back to the host) and the extra time per block of bringing
/// it back block by block.
pub(super) fn stage_rates(c: &Ctx<'_>, n: &mut Notes, a: &mut ManagedBuffer) -> Result<StageRates> {
    let bytes = a.len();
    let mut st = StagingProbe::new(c, bytes)?;
    sync(c.s)?;
    // SAFETY: the streams are idle.
    unsafe { a.host_bytes() }.iter_mut().step_by(4096).enumerate().for_each(|(i, b)| *b = pattern(i));
    let (d2h, h2d) = stage_out_and_back(&st, n, a)?;
    let h2d_block_ns = in_pieces(&st, n, a, h2d)?;
    let h2d_resident = relocation(&st, n, a)?;
    let host = back_to_host(&st, n, a)?;
    let other = beside_the_other_way(&st, n, a)?;
    copy_engines_both_ways(&st, &other, n, a)?;
    calls_behind_copies(&st, &other, n, a)?;
    let Other { buf: e, pool: mut pool_e, slots: slots_e, .. } = other;
    for slot in slots_e {
        pool_e.release(slot, None);
    }
    sync(c.s)?;
    drop(e);
    for slot in std::mem::take(&mut st.slots) {
        st.pool.release(slot, None);
    }
    Ok(StageRates { d2h, h2d, host, h2d_block_ns, h2d_resident })
}

/// A staged eviction of the whole buffer, and seven ways back to the device, each checked; returns
/// (the eviction's rate, the best way back whose pages end up resident).
pub(super) fn stage_out_and_back(
    st: &StagingProbe<'_>,
    n: &mut Notes,
    a: &mut ManagedBuffer,
) -> Result<(f64, f64)> {
    let Ctx { dev, kernels, s, bytes, default, .. } = *st.c;
    let pool = &st.pool;
    place(a, Location::DEVICE, s)?;
    let t = timed(s, || st.stage_out(a, s))?;
    let d2h = n.note(
        "staged eviction: copy to pinned + discard",
        gbps(bytes, t),
        "GB/s",
        Some(default.stage_d2h_rate_gbps),
    );
    sync(s)?;
    // Back to the device, several ways; after each, whether the pages are device-resident (a
    // kernel reading them runs at HBM speed if so) and whether the data is intact.
    let sms = kernels.sms();
    let mut best = 0.0f64;
    for (k, name) in [
        "  back: prefetch (populate), then copy engine",
        "  back: discard-and-prefetch, then copy engine",
        "  back: copy kernel from mapped pinned memory",
        "  back: prefetch (populate), then copy kernel",
        "  back: copy engine into discarded pages, then prefetch",
        "  back: preferred location device, copy engine into discarded pages",
        "  back: prefetch (populate), then copy engine, again",
    ]
    .into_iter()
    .enumerate()
    {
        if k == 5 {
            let t = host_timed(|| a.advise(0, bytes, Advice::SetPreferredLocation(Location::DEVICE)))?;
            n.note(
                "    set preferred location device (host time)",
                t as f64 * (1u64 << 30) as f64 / bytes as f64,
                "ns per GiB",
                None,
            );
        }
        if k > 0 {
            place(a, Location::DEVICE, s)?;
            st.stage_out(a, s)?;
            sync(s)?;
        }
        let whole = [(a.ptr(), bytes)];
        let copy_kernel = || -> Result<()> {
            for Run { dptr, slot, bytes: len, .. } in st.runs_of(a) {
                kernels.copy(s, dptr, pool.ptr(slot) as u64, len, sms * 2)?;
            }
            Ok(())
        };
        let t = timed(s, || match k {
            0 => {
                a.prefetch(0, bytes, Location::DEVICE, s)?;
                pool.copy(st.runs_of(a), false, s)
            }
            1 => {
                crate::backends::cuda::discard_and_prefetch_batch(dev, &whole, Location::DEVICE, s)?;
                pool.copy(st.runs_of(a), false, s)
            }
            2 => copy_kernel(),
            3 => {
                a.prefetch(0, bytes, Location::DEVICE, s)?;
                copy_kernel()
            }
            5 => pool.copy(st.runs_of(a), false, s),
            6 => {
                a.prefetch(0, bytes, Location::DEVICE, s)?;
                pool.copy(st.runs_of(a), false, s)
            }
            _ => {
                pool.copy(st.runs_of(a), false, s)?;
                a.prefetch(0, bytes, Location::DEVICE, s)
            }
        })?;
        let rate = n.note(name, gbps(bytes, t), "GB/s", None);
        let ratio = n.note("    a kernel's first read after it / its second", st.resident(a)?, "x", None);
        sync(s)?;
        check(a, name)?;
        if k == 5 {
            a.advise(0, bytes, Advice::UnsetPreferredLocation)?;
        }
        if ratio < 3.0 {
            best = best.max(rate);
        }
    }
    let h2d = n.note(
        "staged data back to the device, best resident way",
        best,
        "GB/s",
        Some(default.stage_h2d_rate_gbps),
    );

    Ok((d2h, h2d))
}

/// The same in 2 MiB pieces, as the backend's evictions and restores of scattered blocks go;
/// returns the profile's extra time per block beyond `h2d` for the same bytes as one range.
pub(super) fn in_pieces(
    st: &StagingProbe<'_>,
    n: &mut Notes,
    a: &mut ManagedBuffer,
    h2d: f64,
) -> Result<u64> {
    let Ctx { dev, kernels, s, bytes, default, .. } = *st.c;
    let pool = &st.pool;
    // The same in 2 MiB pieces, one copy and one discard range per block, as a planner's
    // evictions of scattered blocks come: the fixed cost per piece.
    place(a, Location::DEVICE, s)?;
    let t = timed(s, || {
        for run in st.runs_of(a) {
            pool.copy(vec![run], true, s)?;
        }
        discard_batch(dev, &st.pieces_of(a), s).map(|_| ())
    })?;
    n.note("staged eviction in 2 MiB pieces", gbps(bytes, t), "GB/s", None);
    sync(s)?;
    // Back the way the CUDA backend brings staged data back: one batch prefetch with a range per
    // block (one larger range lost the data), then the copies; `hold`: behind a short kernel, as
    // the backend queues it. Returns (the time, the prefetch call's host time); checks the data.
    let back_by_block = |a: &mut ManagedBuffer, hold: bool, what: &str| -> Result<(u64, u64)> {
        let mut call_ns = 0;
        let t = timed(s, || {
            let pieces = st.pieces_of(a);
            if hold {
                kernels.touch_with_blocks(s, &[], 1, crate::backends::cuda::backend::HOLD_NS, 1)?;
            }
            call_ns = host_timed(|| prefetch_batch(dev, &pieces, Location::DEVICE, s).map(|_| ()))?;
            for run in st.runs_of(a) {
                pool.copy(vec![run], false, s)?;
            }
            Ok(())
        })?;
        sync(s)?;
        check(a, what)?;
        Ok((t, call_ns))
    };
    let (t, call_ns) = back_by_block(a, false, "2 MiB pieces")?;
    n.note("back to the device in 2 MiB pieces (one batch prefetch, copies)", gbps(bytes, t), "GB/s", None);
    // What each block costs beyond the same bytes as one range is the profile's
    // `stage_h2d_block_ns`.
    let blocks = (bytes / SLOT_BYTES).max(1);
    let per_block = (t as f64 - bytes as f64 / h2d.max(1e-9)).max(0.0) / blocks as f64;
    let block_ns =
        n.note("  per block beyond one range", per_block, "ns", Some(default.stage_h2d_block_ns as f64));
    // Whether that cost holds the calling thread (driver work in the call) or the stream.
    n.note("  the batch prefetch call's host time per block", call_ns as f64 / blocks as f64, "ns", None);
    // The same behind a short kernel: finding the stream busy, the driver defers the work
    // instead of doing it in the call.
    place(a, Location::DEVICE, s)?;
    st.stage_out(a, s)?;
    sync(s)?;
    let (t, held_ns) = back_by_block(a, true, "2 MiB pieces behind a short kernel")?;
    n.note("back in 2 MiB pieces behind a short kernel", gbps(bytes, t), "GB/s", None);
    n.note("  the batch prefetch call's host time per block", held_ns as f64 / blocks as f64, "ns", None);
    Ok(block_ns.round() as u64)
}

/// Back into another buffer whose pages are on the device (the backend's relocation).
pub(super) fn relocation(st: &StagingProbe<'_>, n: &mut Notes, a: &mut ManagedBuffer) -> Result<f64> {
    let Ctx { dev, kernels, s, bytes, default, .. } = *st.c;
    let pool = &st.pool;
    // Back into another buffer whose pages are on the device, as the backend relocates a
    // wholly staged region into a pooled buffer of its size: the copies alone.
    let mut other = ManagedBuffer::alloc(dev, bytes)?;
    kernels.touch(s, &[(other.ptr(), bytes, TouchMode::Write)], 4096, 0)?;
    place(a, Location::DEVICE, s)?;
    st.stage_out(a, s)?;
    sync(s)?;
    let into_other: Vec<Run> = st
        .runs_of(a)
        .into_iter()
        .map(|r| Run { alloc: other.ptr(), dptr: r.dptr - a.ptr() + other.ptr(), ..r })
        .collect();
    let t = timed(s, || pool.copy(into_other, false, s))?;
    let relocated = n.note(
        "back into another buffer's pages on the device (relocation)",
        gbps(bytes, t),
        "GB/s",
        Some(default.stage_h2d_resident_rate_gbps),
    );
    n.note("    a kernel's first read after it / its second", st.resident(&other)?, "x", None);
    sync(s)?;
    check(&mut other, "a relocation")?;
    drop(other);
    Ok(relocated)
}

/// Back to the host, three ways.
pub(super) fn back_to_host(st: &StagingProbe<'_>, n: &mut Notes, a: &mut ManagedBuffer) -> Result<f64> {
    let Ctx { dev, s, bytes, default, .. } = *st.c;
    let pool = &st.pool;
    // Back to the host, two ways: a CPU copy into the discarded pages, and populating them on
    // the host first (discard and prefetch to the host) then the CPU copy.
    let cpu_copy = |a: &mut ManagedBuffer, pool: &StagingPool| {
        for Run { dptr, slot, bytes: len, .. } in st.runs_of(a) {
            let (at, hptr) = ((dptr - a.ptr()) as usize, pool.ptr(slot));
            // SAFETY: the streams are idle; each slot holds `len` bytes of the buffer.
            unsafe {
                let host = a.host_bytes();
                std::ptr::copy_nonoverlapping(hptr, host[at..at + len as usize].as_mut_ptr(), len as usize);
            }
        }
    };
    place(a, Location::DEVICE, s)?;
    st.stage_out(a, s)?;
    sync(s)?;
    let t0 = Instant::now();
    cpu_copy(a, pool);
    n.note(
        "staged data back to the host: CPU copy into discarded pages",
        gbps(bytes, t0.elapsed().as_nanos() as u64),
        "GB/s",
        None,
    );
    check(a, "a return to the host")?;
    place(a, Location::DEVICE, s)?;
    st.stage_out(a, s)?;
    sync(s)?;
    let t0 = Instant::now();
    crate::backends::cuda::discard_and_prefetch_batch(dev, &[(a.ptr(), bytes)], Location::Host, s)?;
    sync(s)?;
    cpu_copy(a, pool);
    n.note(
        "staged data back to the host: populate on the host, CPU copy",
        gbps(bytes, t0.elapsed().as_nanos() as u64),
        "GB/s",
        None,
    );
    check(a, "a return to the host through populated pages")?;
    place(a, Location::DEVICE, s)?;
    st.stage_out(a, s)?;
    sync(s)?;
    let t0 = Instant::now();
    pool.copy(st.runs_of(a), false, s)?;
    sync(s)?;
    let host = n.note(
        "staged data back to the host: copy engine into discarded pages",
        gbps(bytes, t0.elapsed().as_nanos() as u64),
        "GB/s",
        Some(default.stage_host_rate_gbps),
    );
    let t0 = Instant::now();
    // SAFETY: the streams are idle.
    let sum: u64 = unsafe { a.host_bytes() }.iter().step_by(4096).map(|&b| b as u64).sum();
    std::hint::black_box(sum);
    n.note(
        "    a CPU read of every page after it",
        gbps(bytes, t0.elapsed().as_nanos() as u64),
        "GB/s",
        None,
    );
    check(a, "a return to the host by the copy engine")?;
    Ok(host)
}

/// A staged eviction of another buffer beside transfers the other way into `a`: a prefetch, a
/// copy back, the backend's restore, and which part of the two slows the other. Returns the
/// other buffer with its own staging slots, for the rows after.
pub(super) fn beside_the_other_way(
    st: &StagingProbe<'_>,
    n: &mut Notes,
    a: &mut ManagedBuffer,
) -> Result<Other> {
    let Ctx { dev, kernels, s, s2, bytes, .. } = *st.c;
    let sms = kernels.sms();
    let pool = &st.pool;
    // Beside transfers the other way: `e` is staged out (issued first, as the planner issues
    // evictions before prefetches) while `a` comes to the device by a prefetch, or by a copy
    // back from staging.
    let e = ManagedBuffer::alloc(dev, bytes)?;
    kernels.touch(s, &[(e.ptr(), bytes, TouchMode::Write)], 4096, 0)?;
    place(a, Location::Host, s)?;
    let t_one = timed(s, || a.prefetch(0, bytes, Location::DEVICE, s))?;
    place(a, Location::Host, s)?;
    let mut pool_e = StagingPool::new(dev, bytes);
    pool_e.reserve(bytes)?;
    let mut slots_e = Vec::new();
    for _ in 0..bytes / SLOT_BYTES {
        slots_e.push(pool_e.take(s2)?.ok_or_else(|| Error::Allocation { bytes, reason: "staging".into() })?);
    }
    let runs_e = Run::per_slot(e.ptr(), &slots_e);
    // `discard`: the stage-out discards the pages it copied (as the backend's does).
    let beside_with = |discard: bool, incoming: &dyn Fn() -> Result<()>| {
        timed(s, || {
            let fork = s.record_event(None).map_err(cuda_err("cuEventRecord", "duplex"))?;
            s2.wait(&fork).map_err(cuda_err("cuStreamWaitEvent", "duplex"))?;
            pool_e.copy(runs_e.clone(), true, s2)?;
            if discard {
                discard_batch(dev, &[(e.ptr(), bytes)], s2)?;
            }
            incoming()?;
            let join = s2.record_event(None).map_err(cuda_err("cuEventRecord", "duplex"))?;
            s.wait(&join).map_err(cuda_err("cuStreamWaitEvent", "duplex"))
        })
    };
    let beside = |incoming: &dyn Fn() -> Result<()>| beside_with(true, incoming);
    let t_both = beside(&|| a.prefetch(0, bytes, Location::DEVICE, s))?;
    n.note("staged eviction beside a prefetch H2D, aggregate", gbps(2 * bytes, t_both), "GB/s", None);
    n.note("  time of both / time of the prefetch alone", t_both as f64 / t_one as f64, "x", None);
    kernels.touch(s, &[(e.ptr(), bytes, TouchMode::Write)], 4096, 0)?;
    place(a, Location::DEVICE, s)?;
    st.stage_out(a, s)?;
    let t_both = beside(&|| {
        for Run { dptr, slot, bytes: len, .. } in st.runs_of(a) {
            kernels.copy(s, dptr, pool.ptr(slot) as u64, len, sms * 2)?;
        }
        Ok(())
    })?;
    n.note(
        "staged eviction beside a copy kernel back from staging, aggregate",
        gbps(2 * bytes, t_both),
        "GB/s",
        None,
    );
    sync(s)?;
    check(a, "a copy back beside a staged eviction")?;
    // Beside the backend's own way back (a batch prefetch with a range per block, then the
    // copies): whether a stage-out and a restore share one link or run both ways at once.
    let restore = |a: &ManagedBuffer| -> Result<()> {
        prefetch_batch(dev, &st.pieces_of(a), Location::DEVICE, s)?;
        pool.copy(st.runs_of(a), false, s)
    };
    let refill = |a: &ManagedBuffer| -> Result<()> {
        kernels.touch(s, &[(e.ptr(), bytes, TouchMode::Write)], 4096, 0)?;
        place(a, Location::DEVICE, s)?;
        st.stage_out(a, s)?;
        sync(s)
    };
    refill(a)?;
    let t_back = timed(s, || restore(a))?;
    sync(s)?;
    check(a, "a restore")?;
    let t_out = timed(s2, || {
        pool_e.copy(runs_e.clone(), true, s2)?;
        discard_batch(dev, &[(e.ptr(), bytes)], s2).map(|_| ())
    })?;
    sync(s2)?;
    refill(a)?;
    let t_both = beside(&|| restore(a))?;
    n.note(
        "staged eviction beside a restore (per-block prefetch, copies), aggregate",
        gbps(2 * bytes, t_both),
        "GB/s",
        None,
    );
    n.note("  time of both / the two alone in turn", t_both as f64 / (t_back + t_out) as f64, "x", None);
    sync(s)?;
    check(a, "a restore beside a staged eviction")?;
    // Which part of the two slows the other: the stage-out without its discard, and the
    // restore's copies alone (its pages repopulated before).
    refill(a)?;
    let t_both = beside_with(false, &|| restore(a))?;
    n.note("  the same, the stage-out not discarding", t_both as f64 / (t_back + t_out) as f64, "x", None);
    sync(s)?;
    check(a, "a restore beside a stage-out without discard")?;
    refill(a)?;
    let pieces = st.pieces_of(a);
    prefetch_batch(dev, &pieces, Location::DEVICE, s)?;
    sync(s)?;
    let t_copies = timed(s, || pool.copy(st.runs_of(a), false, s))?;
    sync(s)?;
    refill(a)?;
    prefetch_batch(dev, &pieces, Location::DEVICE, s)?;
    sync(s)?;
    let t_both = beside(&|| pool.copy(st.runs_of(a), false, s))?;
    n.note("  the restore's copies alone beside it", t_both as f64 / (t_copies + t_out) as f64, "x", None);
    sync(s)?;
    check(a, "restore copies beside a staged eviction")?;
    Ok(Other { buf: e, pool: pool_e, slots: slots_e, runs: runs_e })
}

/// The copy engines both ways at once, into `a`'s resident pages and out of `o`'s, then between
/// the pinned slots and plain device memory: the link's duplex apart from unified memory.
pub(super) fn copy_engines_both_ways(
    st: &StagingProbe<'_>,
    o: &Other,
    n: &mut Notes,
    a: &mut ManagedBuffer,
) -> Result<()> {
    let Ctx { kernels, s, s2, bytes, .. } = *st.c;
    let pool = &st.pool;
    let e = &o.buf;
    let pool_e = &o.pool;
    let runs_e = &o.runs;
    // The copy engines alone, both ways at once: into `a`'s pages and out of `e`'s, both
    // resident on the device (no discard, no prefetch); then the same between the pinned slots
    // and plain device memory, which tells the link's duplex from what unified memory adds.
    kernels.touch(s, &[(e.ptr(), bytes, TouchMode::Write)], 4096, 0)?;
    sync(s)?;
    let copies_both_ways = |into: &[Run], out: &[Run]| -> Result<f64> {
        let t_in = timed(s, || pool.copy(into.to_vec(), false, s))?;
        let t_out = timed(s2, || pool_e.copy(out.to_vec(), true, s2))?;
        sync(s2)?;
        let t_both = timed(s, || {
            let fork = s.record_event(None).map_err(cuda_err("cuEventRecord", "duplex"))?;
            s2.wait(&fork).map_err(cuda_err("cuStreamWaitEvent", "duplex"))?;
            pool_e.copy(out.to_vec(), true, s2)?;
            pool.copy(into.to_vec(), false, s)?;
            let join = s2.record_event(None).map_err(cuda_err("cuEventRecord", "duplex"))?;
            s.wait(&join).map_err(cuda_err("cuStreamWaitEvent", "duplex"))
        })?;
        Ok(t_both as f64 / (t_in + t_out) as f64)
    };
    let managed = copies_both_ways(&st.runs_of(a), runs_e)?;
    n.note("copy engines both ways at once, managed pages in place: time / in turn", managed, "x", None);
    sync(s)?;
    check(a, "copies into resident pages beside copies out")?;
    let plain = DeviceMemory::alloc(2 * bytes)?;
    // The first half of `plain` for the copies in, the second for the copies out.
    let (runs_in, runs_out) = (Run::per_slot(plain.0, &st.slots), Run::per_slot(plain.0 + bytes, &o.slots));
    let t = copies_both_ways(&runs_in, &runs_out)?;
    n.note("  the same with plain device memory (cuMemAlloc)", t, "x", None);
    sync(s)?;
    drop(plain);
    Ok(())
}

/// Whether a stage-out's discard and a restore's repopulation hold the calling thread until the
/// copies queued before them on their stream are done.
pub(super) fn calls_behind_copies(
    st: &StagingProbe<'_>,
    o: &Other,
    n: &mut Notes,
    a: &mut ManagedBuffer,
) -> Result<()> {
    let Ctx { dev, kernels, s, s2, bytes, .. } = *st.c;
    let pool = &st.pool;
    let e = &o.buf;
    let pool_e = &o.pool;
    let runs_e = &o.runs;
    // Whether the unified-memory calls of a stage-out and a restore hold the calling thread
    // until the copies queued before them on their stream are done: a discard behind `e`'s
    // copies out, a batch prefetch (repopulation) behind copies into `a`; each against the
    // same call on an idle stream, in milliseconds of host time beside the copies' own time.
    let t_copy = timed(s2, || pool_e.copy(runs_e.clone(), true, s2))?;
    sync(s2)?;
    let idle = host_timed(|| discard_batch(dev, &[(e.ptr(), bytes)], s2).map(|_| ()))?;
    sync(s2)?;
    kernels.touch(s, &[(e.ptr(), bytes, TouchMode::Write)], 4096, 0)?;
    sync(s)?;
    pool_e.copy(runs_e.clone(), true, s2)?;
    let behind = host_timed(|| discard_batch(dev, &[(e.ptr(), bytes)], s2).map(|_| ()))?;
    sync(s2)?;
    n.note("copies out of the device, their time", t_copy as f64 / 1e6, "ms", None);
    n.note("  a discard call after them (host time): idle stream", idle as f64 / 1e6, "ms", None);
    n.note("  the same, behind the copies on its stream", behind as f64 / 1e6, "ms", None);
    let restore_behind = |queued: bool| -> Result<u64> {
        st.stage_out(a, s)?;
        kernels.touch(s, &[(e.ptr(), bytes, TouchMode::Write)], 4096, 0)?;
        sync(s)?;
        if queued {
            pool_e.copy(runs_e.clone(), true, s)?;
        }
        let held = host_timed(|| prefetch_batch(dev, &st.pieces_of(a), Location::DEVICE, s).map(|_| ()))?;
        pool.copy(st.runs_of(a), false, s)?;
        sync(s)?;
        Ok(held)
    };
    let idle = restore_behind(false)?;
    let behind = restore_behind(true)?;
    n.note(
        "  a batch prefetch repopulating 2 MiB blocks (host time): idle stream",
        idle as f64 / 1e6,
        "ms",
        None,
    );
    n.note("  the same, behind the copies on its stream", behind as f64 / 1e6, "ms", None);
    check(a, "a restore behind copies")?;
    Ok(())
}
