//! `unimem probe`: measures what unified memory costs on this device and derives a calibration
//! profile for the simulator. Each measurement mirrors a row of `h200-facts.md`; managed memory
//! stays at three buffers of the probe size (8 GiB at most in all).

use std::time::Instant;

use cudarc::driver::{sys, CudaStream};

use super::staging::{Run, Slot, StagingPool, SLOT_BYTES};
use super::{cuda_err, discard_batch, prefetch_batch, CudaDevice, Kernels, ManagedBuffer, TouchMode};
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::seam::{Advice, Location};

/// Largest probe buffer: three of them must stay within 8 GiB of managed memory.
pub const MAX_PROBE_BYTES: u64 = (8u64 << 30) / 3;

/// The probe's buffer size for `bytes` asked: rounded down to 2 MiB, at most
/// [`MAX_PROBE_BYTES`], at least 64 MiB.
fn buffer_bytes(bytes: u64) -> Result<u64> {
    let bytes = bytes.min(MAX_PROBE_BYTES) / (2 << 20) * (2 << 20);
    if bytes < 64 << 20 {
        return Err(Error::InvalidArgument("the probe needs buffers of at least 64 MiB".into()));
    }
    Ok(bytes)
}

/// One measured quantity, with the value the default (H200) profile assumes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Measurement {
    /// What was measured.
    pub name: &'static str,
    /// The value.
    pub value: f64,
    /// Its unit.
    pub unit: &'static str,
    /// The embedded profile's value, where it has one.
    pub profile_value: Option<f64>,
}

/// Everything the probe found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeReport {
    /// Device capabilities.
    pub capabilities: super::Capabilities,
    /// Bytes per probe buffer.
    pub buffer_bytes: u64,
    /// The measurements.
    pub measurements: Vec<Measurement>,
    /// The calibration profile derived from them.
    #[serde(skip)]
    pub profile: CostModel,
}

/// Times the work `f` enqueues on `stream`, with CUDA events (milliseconds -> ns).
fn timed(stream: &CudaStream, f: impl FnOnce() -> Result<()>) -> Result<u64> {
    let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let start = stream.record_event(flags).map_err(cuda_err("cuEventRecord", "probe start"))?;
    f()?;
    let end = stream.record_event(flags).map_err(cuda_err("cuEventRecord", "probe end"))?;
    let ms = start.elapsed_ms(&end).map_err(cuda_err("cuEventElapsedTime", "probe"))?;
    Ok((ms as f64 * 1e6).round().max(1.0) as u64)
}

/// Host time of the call `f` alone (not of the work it enqueues).
fn host_timed(f: impl FnOnce() -> Result<()>) -> Result<u64> {
    let t0 = std::time::Instant::now();
    f()?;
    Ok(t0.elapsed().as_nanos() as u64)
}

/// The least-squares line through `points` (x, y): its value at 0 and its slope, neither
/// below zero.
fn line_through(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len().max(1) as f64;
    let (mx, my) = points.iter().fold((0.0, 0.0), |(x, y), p| (x + p.0 / n, y + p.1 / n));
    let var: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let cov: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = if var > 0.0 { (cov / var).max(0.0) } else { 0.0 };
    ((my - slope * mx).max(0.0), slope)
}

fn gbps(bytes: u64, ns: u64) -> f64 {
    bytes as f64 / ns.max(1) as f64
}

/// Moves a whole buffer to `to` (untimed set-up) and waits.
fn place(buf: &ManagedBuffer, to: Location, stream: &CudaStream) -> Result<()> {
    buf.prefetch(0, buf.len(), to, stream)?;
    stream.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))
}

/// Plain device memory (`cuMemAlloc`), freed on drop: the probe's control for copies that
/// involve no unified memory.
struct DeviceMemory(u64);

impl DeviceMemory {
    fn alloc(bytes: u64) -> Result<Self> {
        let mut ptr = 0u64;
        // SAFETY: one out-pointer; the context is current (the probe's device is open).
        unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes as usize) }
            .result()
            .map_err(cuda_err("cuMemAlloc", format!("{bytes} bytes for the probe")))?;
        Ok(Self(ptr))
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc above; callers synchronise before dropping.
        unsafe { sys::cuMemFree_v2(self.0) };
    }
}

/// Staged evictions, as the CUDA backend makes them: device-resident data copied into pinned
/// slots and its pages discarded; back to the device by repopulating the pages (prefetch) and
/// copying in; back to the host by a CPU copy into the discarded pages; and a staged eviction
/// beside a prefetch the other way. Checks the data survives each round trip. Returns the rates
/// (to pinned, back to the device, back to the host) and the extra time per block of bringing
/// it back block by block.
fn stage_rates(
    dev: &CudaDevice,
    a: &mut ManagedBuffer,
    kernels: &Kernels,
    (s, s2): (&CudaStream, &CudaStream),
    note: &mut dyn FnMut(&'static str, f64, &'static str, Option<f64>) -> f64,
) -> Result<(f64, f64, f64, u64, f64)> {
    let default = CostModel::h200();
    let bytes = a.len();
    let mut pool = StagingPool::new(dev, bytes);
    pool.reserve(bytes)?;
    let mut slots: Vec<Slot> = Vec::new();
    for _ in 0..bytes / SLOT_BYTES {
        slots.push(pool.take(s)?.ok_or_else(|| Error::Allocation {
            bytes,
            reason: "cannot pin staging memory for the probe".into(),
        })?);
    }
    let runs_of = |buf: &ManagedBuffer| -> Vec<Run> {
        slots
            .iter()
            .enumerate()
            .map(|(i, &slot)| (buf.ptr(), buf.ptr() + i as u64 * SLOT_BYTES, slot, SLOT_BYTES))
            .collect()
    };
    // Its blocks as (address, bytes) ranges, one per 2 MiB block, as the backend's restores go.
    let pieces_of =
        |buf: &ManagedBuffer| -> Vec<(u64, u64)> { runs_of(buf).iter().map(|r| (r.1, r.3)).collect() };
    let sync = |st: &CudaStream| st.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"));
    let stage_out = |buf: &ManagedBuffer, pool: &StagingPool, st: &CudaStream| -> Result<()> {
        pool.copy(runs_of(buf), true, st)?;
        discard_batch(dev, &[(buf.ptr(), buf.len())], st).map(|_| ())
    };
    // A pattern to check: one byte per page.
    sync(s)?;
    let pattern = |i: usize| (i as u8).wrapping_mul(31).wrapping_add(7);
    // SAFETY: the streams are idle.
    unsafe { a.host_bytes() }.iter_mut().step_by(4096).enumerate().for_each(|(i, b)| *b = pattern(i));
    let check = |a: &mut ManagedBuffer, what: &str| -> Result<()> {
        // SAFETY: callers synchronise first.
        let bad = unsafe { a.host_bytes() }
            .iter()
            .step_by(4096)
            .enumerate()
            .filter(|(i, &b)| b != pattern(*i))
            .count();
        if bad > 0 {
            return Err(Error::Cuda {
                call: "staging".into(),
                detail: format!("{bad} pages wrong after {what}"),
            });
        }
        Ok(())
    };

    place(a, Location::DEVICE, s)?;
    let t = timed(s, || stage_out(a, &pool, s))?;
    let d2h = note(
        "staged eviction: copy to pinned + discard",
        gbps(bytes, t),
        "GB/s",
        Some(default.stage_d2h_rate_gbps),
    );
    sync(s)?;
    // Back to the device, several ways; after each, whether the pages are device-resident (a
    // kernel reading them runs at HBM speed if so) and whether the data is intact.
    let resident = |a: &ManagedBuffer| -> Result<f64> {
        let t_after = timed(s, || kernels.touch(s, &[(a.ptr(), a.len(), TouchMode::Read)], 4096, 0))?;
        let t_again = timed(s, || kernels.touch(s, &[(a.ptr(), a.len(), TouchMode::Read)], 4096, 0))?;
        Ok(t_after as f64 / t_again as f64)
    };
    let sms = 132u32;
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
            note(
                "    set preferred location device (host time)",
                t as f64 * (1u64 << 30) as f64 / bytes as f64,
                "ns per GiB",
                None,
            );
        }
        if k > 0 {
            place(a, Location::DEVICE, s)?;
            stage_out(a, &pool, s)?;
            sync(s)?;
        }
        let whole = [(a.ptr(), bytes)];
        let copy_kernel = || -> Result<()> {
            for (_, dptr, slot, len) in runs_of(a) {
                kernels.copy(s, dptr, pool.ptr(slot) as u64, len, sms * 2)?;
            }
            Ok(())
        };
        let t = timed(s, || match k {
            0 => {
                a.prefetch(0, bytes, Location::DEVICE, s)?;
                pool.copy(runs_of(a), false, s)
            }
            1 => {
                super::discard_and_prefetch_batch(dev, &whole, Location::DEVICE, s)?;
                pool.copy(runs_of(a), false, s)
            }
            2 => copy_kernel(),
            3 => {
                a.prefetch(0, bytes, Location::DEVICE, s)?;
                copy_kernel()
            }
            5 => pool.copy(runs_of(a), false, s),
            6 => {
                a.prefetch(0, bytes, Location::DEVICE, s)?;
                pool.copy(runs_of(a), false, s)
            }
            _ => {
                pool.copy(runs_of(a), false, s)?;
                a.prefetch(0, bytes, Location::DEVICE, s)
            }
        })?;
        let rate = note(name, gbps(bytes, t), "GB/s", None);
        let ratio = note("    a kernel's first read after it / its second", resident(a)?, "x", None);
        sync(s)?;
        check(a, name)?;
        if k == 5 {
            a.advise(0, bytes, Advice::UnsetPreferredLocation)?;
        }
        if ratio < 3.0 {
            best = best.max(rate);
        }
    }
    let h2d = note(
        "staged data back to the device, best resident way",
        best,
        "GB/s",
        Some(default.stage_h2d_rate_gbps),
    );

    // The same in 2 MiB pieces, one copy and one discard range per block, as a planner's
    // evictions of scattered blocks come: the fixed cost per piece.
    place(a, Location::DEVICE, s)?;
    let t = timed(s, || {
        for run in runs_of(a) {
            pool.copy(vec![run], true, s)?;
        }
        discard_batch(dev, &pieces_of(a), s).map(|_| ())
    })?;
    note("staged eviction in 2 MiB pieces", gbps(bytes, t), "GB/s", None);
    sync(s)?;
    // Back the way the CUDA backend brings staged data back: one batch prefetch with a range per
    // block (one larger range lost the data), then the copies; `hold`: behind a short kernel, as
    // the backend queues it. Returns (the time, the prefetch call's host time); checks the data.
    let back_by_block = |a: &mut ManagedBuffer, hold: bool, what: &str| -> Result<(u64, u64)> {
        let mut call_ns = 0;
        let t = timed(s, || {
            let pieces = pieces_of(a);
            if hold {
                kernels.touch_with_blocks(s, &[], 1, super::backend::HOLD_NS, 1)?;
            }
            call_ns = host_timed(|| prefetch_batch(dev, &pieces, Location::DEVICE, s).map(|_| ()))?;
            for run in runs_of(a) {
                pool.copy(vec![run], false, s)?;
            }
            Ok(())
        })?;
        sync(s)?;
        check(a, what)?;
        Ok((t, call_ns))
    };
    let (t, call_ns) = back_by_block(a, false, "2 MiB pieces")?;
    note("back to the device in 2 MiB pieces (one batch prefetch, copies)", gbps(bytes, t), "GB/s", None);
    // What each block costs beyond the same bytes as one range is the profile's
    // `stage_h2d_block_ns`.
    let blocks = (bytes / SLOT_BYTES).max(1);
    let per_block = (t as f64 - bytes as f64 / h2d.max(1e-9)).max(0.0) / blocks as f64;
    let block_ns =
        note("  per block beyond one range", per_block, "ns", Some(default.stage_h2d_block_ns as f64));
    // Whether that cost holds the calling thread (driver work in the call) or the stream.
    note("  the batch prefetch call's host time per block", call_ns as f64 / blocks as f64, "ns", None);
    // The same behind a short kernel: finding the stream busy, the driver defers the work
    // instead of doing it in the call.
    place(a, Location::DEVICE, s)?;
    stage_out(a, &pool, s)?;
    sync(s)?;
    let (t, held_ns) = back_by_block(a, true, "2 MiB pieces behind a short kernel")?;
    note("back in 2 MiB pieces behind a short kernel", gbps(bytes, t), "GB/s", None);
    note("  the batch prefetch call's host time per block", held_ns as f64 / blocks as f64, "ns", None);
    // Back into another buffer whose pages are on the device, as the backend relocates a
    // wholly staged region into a pooled buffer of its size: the copies alone.
    let mut other = ManagedBuffer::alloc(dev, bytes)?;
    kernels.touch(s, &[(other.ptr(), bytes, TouchMode::Write)], 4096, 0)?;
    place(a, Location::DEVICE, s)?;
    stage_out(a, &pool, s)?;
    sync(s)?;
    let into_other: Vec<Run> = runs_of(a)
        .into_iter()
        .map(|(_, d, slot, len)| (other.ptr(), d - a.ptr() + other.ptr(), slot, len))
        .collect();
    let t = timed(s, || pool.copy(into_other, false, s))?;
    let relocated = note(
        "back into another buffer's pages on the device (relocation)",
        gbps(bytes, t),
        "GB/s",
        Some(default.stage_h2d_resident_rate_gbps),
    );
    note("    a kernel's first read after it / its second", resident(&other)?, "x", None);
    sync(s)?;
    check(&mut other, "a relocation")?;
    drop(other);

    // Back to the host, two ways: a CPU copy into the discarded pages, and populating them on
    // the host first (discard and prefetch to the host) then the CPU copy.
    let cpu_copy = |a: &mut ManagedBuffer, pool: &StagingPool| {
        for (_, dptr, slot, len) in runs_of(a) {
            let (at, hptr) = ((dptr - a.ptr()) as usize, pool.ptr(slot));
            // SAFETY: the streams are idle; each slot holds `len` bytes of the buffer.
            unsafe {
                let host = a.host_bytes();
                std::ptr::copy_nonoverlapping(hptr, host[at..at + len as usize].as_mut_ptr(), len as usize);
            }
        }
    };
    place(a, Location::DEVICE, s)?;
    stage_out(a, &pool, s)?;
    sync(s)?;
    let t0 = Instant::now();
    cpu_copy(a, &pool);
    note(
        "staged data back to the host: CPU copy into discarded pages",
        gbps(bytes, t0.elapsed().as_nanos() as u64),
        "GB/s",
        None,
    );
    check(a, "a return to the host")?;
    place(a, Location::DEVICE, s)?;
    stage_out(a, &pool, s)?;
    sync(s)?;
    let t0 = Instant::now();
    super::discard_and_prefetch_batch(dev, &[(a.ptr(), bytes)], Location::Host, s)?;
    sync(s)?;
    cpu_copy(a, &pool);
    note(
        "staged data back to the host: populate on the host, CPU copy",
        gbps(bytes, t0.elapsed().as_nanos() as u64),
        "GB/s",
        None,
    );
    check(a, "a return to the host through populated pages")?;
    place(a, Location::DEVICE, s)?;
    stage_out(a, &pool, s)?;
    sync(s)?;
    let t0 = Instant::now();
    pool.copy(runs_of(a), false, s)?;
    sync(s)?;
    let host = note(
        "staged data back to the host: copy engine into discarded pages",
        gbps(bytes, t0.elapsed().as_nanos() as u64),
        "GB/s",
        Some(default.stage_host_rate_gbps),
    );
    let t0 = Instant::now();
    // SAFETY: the streams are idle.
    let sum: u64 = unsafe { a.host_bytes() }.iter().step_by(4096).map(|&b| b as u64).sum();
    std::hint::black_box(sum);
    note("    a CPU read of every page after it", gbps(bytes, t0.elapsed().as_nanos() as u64), "GB/s", None);
    check(a, "a return to the host by the copy engine")?;

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
    let runs_e: Vec<Run> = slots_e
        .iter()
        .enumerate()
        .map(|(i, &slot)| (e.ptr(), e.ptr() + i as u64 * SLOT_BYTES, slot, SLOT_BYTES))
        .collect();
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
    note("staged eviction beside a prefetch H2D, aggregate", gbps(2 * bytes, t_both), "GB/s", None);
    note("  time of both / time of the prefetch alone", t_both as f64 / t_one as f64, "x", None);
    kernels.touch(s, &[(e.ptr(), bytes, TouchMode::Write)], 4096, 0)?;
    place(a, Location::DEVICE, s)?;
    stage_out(a, &pool, s)?;
    let t_both = beside(&|| {
        for (_, dptr, slot, len) in runs_of(a) {
            kernels.copy(s, dptr, pool.ptr(slot) as u64, len, sms * 2)?;
        }
        Ok(())
    })?;
    note(
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
        prefetch_batch(dev, &pieces_of(a), Location::DEVICE, s)?;
        pool.copy(runs_of(a), false, s)
    };
    let refill = |a: &ManagedBuffer| -> Result<()> {
        kernels.touch(s, &[(e.ptr(), bytes, TouchMode::Write)], 4096, 0)?;
        place(a, Location::DEVICE, s)?;
        stage_out(a, &pool, s)?;
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
    note(
        "staged eviction beside a restore (per-block prefetch, copies), aggregate",
        gbps(2 * bytes, t_both),
        "GB/s",
        None,
    );
    note("  time of both / the two alone in turn", t_both as f64 / (t_back + t_out) as f64, "x", None);
    sync(s)?;
    check(a, "a restore beside a staged eviction")?;
    // Which part of the two slows the other: the stage-out without its discard, and the
    // restore's copies alone (its pages repopulated before).
    refill(a)?;
    let t_both = beside_with(false, &|| restore(a))?;
    note("  the same, the stage-out not discarding", t_both as f64 / (t_back + t_out) as f64, "x", None);
    sync(s)?;
    check(a, "a restore beside a stage-out without discard")?;
    refill(a)?;
    let pieces = pieces_of(a);
    prefetch_batch(dev, &pieces, Location::DEVICE, s)?;
    sync(s)?;
    let t_copies = timed(s, || pool.copy(runs_of(a), false, s))?;
    sync(s)?;
    refill(a)?;
    prefetch_batch(dev, &pieces, Location::DEVICE, s)?;
    sync(s)?;
    let t_both = beside(&|| pool.copy(runs_of(a), false, s))?;
    note("  the restore's copies alone beside it", t_both as f64 / (t_copies + t_out) as f64, "x", None);
    sync(s)?;
    check(a, "restore copies beside a staged eviction")?;
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
    let managed = copies_both_ways(&runs_of(a), &runs_e)?;
    note("copy engines both ways at once, managed pages in place: time / in turn", managed, "x", None);
    sync(s)?;
    check(a, "copies into resident pages beside copies out")?;
    let plain = DeviceMemory::alloc(2 * bytes)?;
    // One 2 MiB run per slot, at consecutive blocks from `base` (the first half of `plain`
    // for the copies in, the second for the copies out).
    let plain_runs = |base: u64, slots: &[Slot]| -> Vec<Run> {
        slots
            .iter()
            .enumerate()
            .map(|(i, &slot)| (base, base + i as u64 * SLOT_BYTES, slot, SLOT_BYTES))
            .collect()
    };
    let t = copies_both_ways(&plain_runs(plain.0, &slots), &plain_runs(plain.0 + bytes, &slots_e))?;
    note("  the same with plain device memory (cuMemAlloc)", t, "x", None);
    sync(s)?;
    drop(plain);
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
    note("copies out of the device, their time", t_copy as f64 / 1e6, "ms", None);
    note("  a discard call after them (host time): idle stream", idle as f64 / 1e6, "ms", None);
    note("  the same, behind the copies on its stream", behind as f64 / 1e6, "ms", None);
    let restore_behind = |queued: bool| -> Result<u64> {
        stage_out(a, &pool, s)?;
        kernels.touch(s, &[(e.ptr(), bytes, TouchMode::Write)], 4096, 0)?;
        sync(s)?;
        if queued {
            pool_e.copy(runs_e.clone(), true, s)?;
        }
        let held = host_timed(|| prefetch_batch(dev, &pieces_of(a), Location::DEVICE, s).map(|_| ()))?;
        pool.copy(runs_of(a), false, s)?;
        sync(s)?;
        Ok(held)
    };
    let idle = restore_behind(false)?;
    let behind = restore_behind(true)?;
    note(
        "  a batch prefetch repopulating 2 MiB blocks (host time): idle stream",
        idle as f64 / 1e6,
        "ms",
        None,
    );
    note("  the same, behind the copies on its stream", behind as f64 / 1e6, "ms", None);
    check(a, "a restore behind copies")?;
    for slot in slots_e {
        pool_e.release(slot, None);
    }
    sync(s)?;
    drop(e);
    for slot in slots {
        pool.release(slot, None);
    }
    Ok((d2h, h2d, host, block_ns.round() as u64, relocated))
}

/// Host time of one launch through [`super::CudaBackend`], each kernel reading and writing
/// three of four resident 2 MiB regions, as a replay launches them.
fn backend_launch_ns(ordinal: usize) -> Result<f64> {
    use crate::seam::{KernelLaunch, MemoryBackend};
    let mut b = super::CudaBackend::open(ordinal, 1 << 30, false)?;
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

/// Runs every measurement on `dev` with buffers of `bytes` (rounded down to 2 MiB, at most
/// [`MAX_PROBE_BYTES`]).
pub fn run(dev: &CudaDevice, bytes: u64) -> Result<ProbeReport> {
    let bytes = buffer_bytes(bytes)?;
    if !dev.capabilities().concurrent_managed_access {
        return Err(Error::BackendUnavailable {
            backend: "cuda".into(),
            reason: "the device lacks concurrent managed access: prefetch and advice cannot be measured"
                .into(),
        });
    }
    let kernels = Kernels::load(dev)?;
    let s = dev.new_stream()?;
    let s2 = dev.new_stream()?;
    let default = CostModel::h200();
    let mut out: Vec<Measurement> = Vec::new();
    let mut note = |name, value, unit, profile_value: Option<f64>| {
        out.push(Measurement { name, value, unit, profile_value });
        value
    };

    // First-touch population first, before the rows below leave their buffers and the driver's
    // state behind, as a replay starts in a process of its own: after them, fresh 2 MiB
    // allocations read 8285-8615 ns per 64 KiB on one lending, against 5287 alone.
    let mut populate_ns = None;
    for m in population_rows(dev, &kernels, &s, bytes, &default)? {
        let value = note(m.name, m.value, m.unit, m.profile_value);
        if m.name == POPULATION_PROFILE_ROW {
            populate_ns = Some(value);
        }
    }
    let populate_ns = populate_ns.expect("population_rows measures the profile row");

    let mut a = ManagedBuffer::alloc(dev, bytes)?;
    // CPU first touch: the pages start on the host.
    // SAFETY: nothing runs on the device yet.
    unsafe { a.host_bytes() }.iter_mut().step_by(4096).enumerate().for_each(|(i, b)| *b = i as u8);

    // Fault-driven H2D, the profile's rate: host-resident data read by the kernel a GPU replay
    // launches (the touch kernel, one byte per 4 KiB page, the whole grid), no hints. Its
    // threads fault on pages all over the range at once; the same kernel reading every 16
    // bytes (next row) faults on a narrow moving window, which the driver serves 1.4-2.2x
    // faster. The simulator matches the replays with the first (docs/benchmarks.md, eleventh
    // session).
    let t = timed(&s, || kernels.touch(&s, &[(a.ptr(), bytes, TouchMode::Read)], 4096, 0))?;
    let fault_rate = note(
        "fault-driven H2D rate, one touch per 4 KiB page (replay kernel; profile)",
        gbps(bytes, t),
        "GB/s",
        Some(default.gpu_fault_rate_gbps),
    );
    place(&a, Location::Host, &s)?;
    let t = timed(&s, || kernels.touch(&s, &[(a.ptr(), bytes, TouchMode::Read)], 16, 0))?;
    let dense_rate = note(
        "fault-driven H2D rate, every 16 bytes",
        gbps(bytes, t),
        "GB/s",
        Some(default.gpu_fault_rate_gbps),
    );

    // The same read with one block of 256 threads: far fewer pages in flight at once.
    place(&a, Location::Host, &s)?;
    let small = bytes.min(256 << 20);
    let t = timed(&s, || kernels.touch_with_blocks(&s, &[(a.ptr(), small, TouchMode::Read)], 16, 0, 1))?;
    note(
        "fault-driven H2D rate, one thread block",
        gbps(small, t),
        "GB/s",
        Some(default.gpu_fault_rate_gbps),
    );

    // Streaming with prefetch: a copy stream moves chunk k+1 while the compute stream reads
    // chunk k, each read waiting on an event recorded after its chunk's prefetch. What the
    // advisor's engine does; measured against the fault-driven rate of the same run.
    place(&a, Location::Host, &s)?;
    let piece = (256u64 << 20).min(bytes);
    let pieces = bytes / piece;
    let t = timed(&s, || {
        let start = s.record_event(None).map_err(cuda_err("cuEventRecord", "stream"))?;
        s2.wait(&start).map_err(cuda_err("cuStreamWaitEvent", "stream"))?;
        for k in 0..pieces {
            a.prefetch(k * piece, piece, Location::DEVICE, &s2)?;
            let landed = s2.record_event(None).map_err(cuda_err("cuEventRecord", "stream"))?;
            s.wait(&landed).map_err(cuda_err("cuStreamWaitEvent", "stream"))?;
            kernels.touch(&s, &[(a.ptr() + k * piece, piece, TouchMode::Read)], 16, 0)?;
        }
        Ok(())
    })?;
    note("streaming read, prefetch pipelined in 256 MiB chunks", gbps(pieces * piece, t), "GB/s", Some(47.2));
    note(
        "  same, over the fault-driven read (every 16 bytes)",
        gbps(pieces * piece, t) / dense_rate,
        "x",
        None,
    );

    // CPU reads of GPU-resident data (CPU faults).
    s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
    let t0 = Instant::now();
    // SAFETY: the stream is idle.
    let sum: u64 = unsafe { a.host_bytes() }.iter().step_by(1024).map(|&b| b as u64).sum();
    let cpu_ns = t0.elapsed().as_nanos() as u64;
    std::hint::black_box(sum);
    note("CPU-fault D2H rate", gbps(bytes, cpu_ns), "GB/s", Some(default.cpu_fault_rate_gbps));

    // Prefetch in one call each way; and how long the call itself holds the calling thread,
    // as a share of the transfer (an asynchronous call would hold it for microseconds).
    let mut h2d_call = 0;
    let t_h2d = timed(&s, || {
        h2d_call = host_timed(|| a.prefetch(0, bytes, Location::DEVICE, &s))?;
        Ok(())
    })?;
    let h2d =
        note("prefetch H2D rate, one call", gbps(bytes, t_h2d), "GB/s", Some(default.prefetch_h2d_rate_gbps));
    let h2d_host = note(
        "  share of it the calling thread is blocked",
        (h2d_call as f64 / t_h2d as f64).min(1.0),
        "",
        Some(default.prefetch_h2d_host_fraction),
    );
    let mut d2h_call = 0;
    let t_d2h = timed(&s, || {
        d2h_call = host_timed(|| a.prefetch(0, bytes, Location::Host, &s))?;
        Ok(())
    })?;
    let d2h =
        note("prefetch D2H rate, one call", gbps(bytes, t_d2h), "GB/s", Some(default.prefetch_d2h_rate_gbps));
    let d2h_host = note(
        "  share of it the calling thread is blocked",
        (d2h_call as f64 / t_d2h as f64).min(1.0),
        "",
        Some(default.prefetch_d2h_host_fraction),
    );

    // Per-call cost: the same bytes in 2 MiB calls.
    let chunk = 2u64 << 20;
    let calls = bytes / chunk;
    let t_small =
        timed(&s, || (0..calls).try_for_each(|i| a.prefetch(i * chunk, chunk, Location::DEVICE, &s)))?;
    note("prefetch H2D rate, 2 MiB calls", gbps(bytes, t_small), "GB/s", None);
    let call_ns = note(
        "prefetch fixed cost per call",
        (t_small.saturating_sub(t_h2d)) as f64 / calls as f64,
        "ns",
        Some(default.prefetch_call_ns as f64),
    );
    place(&a, Location::Host, &s)?;

    // Batch prefetch of the same 2 MiB ranges.
    let ranges: Vec<(u64, u64)> = (0..calls).map(|i| (a.ptr() + i * chunk, chunk)).collect();
    let t_batch = timed(&s, || prefetch_batch(dev, &ranges, Location::DEVICE, &s))?;
    note("batch prefetch H2D rate, 2 MiB ranges", gbps(bytes, t_batch), "GB/s", None);
    let batch_ns = note(
        "batch prefetch cost per extra range",
        (t_batch.saturating_sub(t_h2d)) as f64 / calls.saturating_sub(1).max(1) as f64,
        "ns",
        Some(default.batch_range_ns as f64),
    );

    // Host time of a prefetch call as a replay issues them, 64 MiB a call: the stream idle, or
    // still running a kernel. In replays on the H200 1289 prefetch ranges held the host 7.6 ms
    // in all, far less than the share of the transfer measured above on an idle stream.
    let piece = 64u64 << 20;
    let n = (bytes / piece).min(8);
    let rows: [(bool, bool, &str); 4] = [
        (false, false, "prefetch call host time, host-resident data, idle stream"),
        (false, true, "prefetch call host time, host-resident data, stream busy"),
        (true, false, "prefetch call host time, fresh pages (population), idle stream"),
        (true, true, "prefetch call host time, fresh pages (population), stream busy"),
    ];
    let mut deferred = Vec::new();
    for (fresh, busy, name) in rows {
        let f = if fresh { Some(ManagedBuffer::alloc(dev, n * piece)?) } else { None };
        let buf = f.as_ref().unwrap_or(&a);
        if !fresh {
            place(&a, Location::Host, &s)?;
        }
        if busy {
            kernels.touch(&s, &[], 4096, 50_000_000)?; // spins 50 ms
        }
        let held =
            host_timed(|| (0..n).try_for_each(|i| buf.prefetch(i * piece, piece, Location::DEVICE, &s)))?;
        s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
        let per_call = note(name, held as f64 / n as f64, "ns", None);
        if busy {
            deferred.push(per_call);
        }
    }
    let deferred_ns = note(
        "prefetch call host time on a busy stream (profile)",
        deferred.iter().sum::<f64>() / deferred.len() as f64,
        "ns",
        Some(default.prefetch_deferred_call_ns as f64),
    );
    place(&a, Location::Host, &s)?;

    // Duplex: a second buffer goes device -> host while the first comes host -> device.
    let b = ManagedBuffer::alloc(dev, bytes)?;
    kernels.touch(&s, &[(b.ptr(), bytes, TouchMode::Write)], 4096, 0)?; // populated on the device
    place(&a, Location::Host, &s)?;
    let t_both = timed(&s, || {
        let fork = s.record_event(None).map_err(cuda_err("cuEventRecord", "duplex"))?;
        s2.wait(&fork).map_err(cuda_err("cuStreamWaitEvent", "duplex"))?;
        a.prefetch(0, bytes, Location::DEVICE, &s)?;
        b.prefetch(0, bytes, Location::Host, &s2)?;
        let join = s2.record_event(None).map_err(cuda_err("cuEventRecord", "duplex"))?;
        s.wait(&join).map_err(cuda_err("cuStreamWaitEvent", "duplex"))
    })?;
    let aggregate = note("H2D + D2H prefetch concurrently, aggregate", gbps(2 * bytes, t_both), "GB/s", None);
    // Full duplex would carry both directions at once near their one-way rates; the one-way
    // D2H rate itself varies (10-17 GB/s, host page population), so judge by the sum.
    let full_duplex = aggregate > 0.8 * (h2d + d2h);
    note("aggregate / (H2D + D2H one-way) (> 0.8: full duplex)", aggregate / (h2d + d2h), "", None);
    drop(b);

    // Isolated faults: one touch per 2 MiB of host-resident data.
    place(&a, Location::Host, &s)?;
    let t = timed(&s, || kernels.touch(&s, &[(a.ptr(), bytes, TouchMode::Read)], chunk as u32, 0))?;
    let isolated =
        note("isolated GPU fault (1 touch per 2 MiB)", t as f64 / calls as f64, "ns", Some(15_800.0));

    // Read-mostly: setting it (host time: the call blocks), prefetching to the device creates
    // duplicates, prefetching to the host drops them. Both sides timed by the host clock, since
    // the calls do their work on the host as much as on the copy engines.
    place(&a, Location::Host, &s)?;
    let t0 = std::time::Instant::now();
    a.advise(0, bytes, Advice::SetReadMostly)?;
    let per_gib = t0.elapsed().as_nanos() as f64 * (1u64 << 30) as f64 / bytes as f64;
    let advise_rm = note(
        "set read-mostly on host data (host time)",
        per_gib,
        "ns per GiB",
        Some(default.advise_read_mostly_ns_per_gib as f64),
    );
    let t0 = std::time::Instant::now();
    place(&a, Location::DEVICE, &s)?;
    let dup_rate = note(
        "prefetch H2D creating read-mostly duplicates",
        gbps(bytes, t0.elapsed().as_nanos() as u64),
        "GB/s",
        Some(default.duplicate_prefetch_rate_gbps),
    );
    let t = timed(&s, || a.prefetch(0, bytes, Location::Host, &s))?;
    let drop_rate =
        note("drop read-mostly duplicate", gbps(bytes, t), "GB/s", Some(default.duplicate_drop_rate_gbps));
    let attrs = a.attributes(0, bytes)?;
    a.advise(0, bytes, Advice::UnsetReadMostly)?;
    if !attrs.read_mostly {
        return Err(Error::Cuda {
            call: "cuMemRangeGetAttribute".into(),
            detail: "read-mostly advice did not stick".into(),
        });
    }
    // Collapsing duplicates: unsetting read-mostly while both copies exist, as the planner
    // does before a kernel writes read-mostly data. Host time of the call, then the device's
    // first read of the data after it (the copies left).
    a.advise(0, bytes, Advice::SetReadMostly)?;
    place(&a, Location::DEVICE, &s)?;
    let t = timed(&s, || kernels.touch(&s, &[(a.ptr(), bytes, TouchMode::Read)], 4096, 0))?;
    note("a kernel's read of read-mostly duplicates (control)", gbps(bytes, t), "GB/s", None);
    let t0 = std::time::Instant::now();
    a.advise(0, bytes, Advice::UnsetReadMostly)?;
    let unset_rm = note(
        "unset read-mostly on duplicated device data (host time)",
        t0.elapsed().as_nanos() as f64 * (1u64 << 30) as f64 / bytes as f64,
        "ns per GiB",
        Some(default.advise_unset_read_mostly_ns_per_gib as f64),
    );
    let t = timed(&s, || kernels.touch(&s, &[(a.ptr(), bytes, TouchMode::Read)], 4096, 0))?;
    note("  a kernel's read of it after", gbps(bytes, t), "GB/s", None);

    // Remote: host-preferred and accessed by the device: read in place over the link.
    place(&a, Location::Host, &s)?;
    let t = host_timed(|| {
        a.advise(0, bytes, Advice::SetPreferredLocation(Location::Host))?;
        a.advise(0, bytes, Advice::SetAccessedByDevice)
    })?;
    let advise_remote = note(
        "set preferred host + accessed by (host time)",
        t as f64 * (1u64 << 30) as f64 / bytes as f64,
        "ns per GiB",
        Some(default.advise_remote_ns_per_gib as f64),
    );
    let t = timed(&s, || kernels.touch(&s, &[(a.ptr(), bytes, TouchMode::Read)], 16, 0))?;
    let remote = note(
        "GPU remote read of host-preferred data",
        gbps(bytes, t),
        "GB/s",
        Some(default.remote_rate_gbps),
    );
    a.advise(0, bytes, Advice::UnsetAccessedByDevice)?;
    a.advise(0, bytes, Advice::UnsetPreferredLocation)?;

    // Discard device-resident data; prefetching it back only revalidates pages that stayed
    // mapped (discard does not return memory): the simulator's pool.
    place(&a, Location::DEVICE, &s)?;
    let whole = [(a.ptr(), bytes)];
    let mut discard_rate = default.discard_rate_gbps;
    let mut discard_host = default.discard_host_ns_per_gib as f64;
    if dev.capabilities().discard_batch {
        let mut call = 0;
        let t = timed(&s, || {
            call = host_timed(|| discard_batch(dev, &whole, &s).map(|_| ()))?;
            Ok(())
        })?;
        discard_rate = note("discard (batch)", gbps(bytes, t), "GB/s", Some(default.discard_rate_gbps));
        note(
            "  host time of the call, one range",
            call as f64 * (1u64 << 30) as f64 / bytes as f64,
            "ns per GiB",
            None,
        );
        // The same in 2 MiB ranges, as a planner issues them.
        place(&a, Location::DEVICE, &s)?;
        let small: Vec<(u64, u64)> = (0..bytes / chunk).map(|i| (a.ptr() + i * chunk, chunk)).collect();
        let call = host_timed(|| discard_batch(dev, &small, &s).map(|_| ()))?;
        s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
        discard_host = note(
            "  host time of the call, 2 MiB ranges",
            call as f64 * (1u64 << 30) as f64 / bytes as f64,
            "ns per GiB",
            Some(default.discard_host_ns_per_gib as f64),
        );
        place(&a, Location::DEVICE, &s)?;
        discard_batch(dev, &whole, &s)?;
        let t = timed(&s, || a.prefetch(0, bytes, Location::DEVICE, &s))?;
        note("prefetch of discarded device pages (still mapped)", gbps(bytes, t), "GB/s", None);
        // Dead data on the host (the facts' case): discarded, then prefetched to the device.
        place(&a, Location::Host, &s)?;
        discard_batch(dev, &whole, &s)?;
        let t = timed(&s, || a.prefetch(0, bytes, Location::DEVICE, &s))?;
        note(
            "prefetch of discarded host pages (population)",
            gbps(bytes, t),
            "GB/s",
            Some(default.prefetch_populate_rate_gbps),
        );
    }

    let (stage_d2h, stage_h2d, stage_host, stage_h2d_block, stage_h2d_resident) =
        if dev.capabilities().discard_batch {
            stage_rates(dev, &mut a, &kernels, (&s, &s2), &mut note)?
        } else {
            (
                default.stage_d2h_rate_gbps,
                default.stage_h2d_rate_gbps,
                default.stage_host_rate_gbps,
                default.stage_h2d_block_ns,
                default.stage_h2d_resident_rate_gbps,
            )
        };

    // Prefetch of pages with no copy anywhere (fresh memory): population by prefetch.
    let d = ManagedBuffer::alloc(dev, bytes)?;
    let t = timed(&s, || d.prefetch(0, bytes, Location::DEVICE, &s))?;
    let populate_rate = note(
        "prefetch of fresh pages (population)",
        gbps(bytes, t),
        "GB/s",
        Some(default.prefetch_populate_rate_gbps),
    );
    drop(d);
    s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;

    // Host time of a kernel launch (with the event wait and record a backend puts around it)
    // and of a managed allocation: the simulator charges them to its host clock, since a
    // kernel shorter than a launch leaves the device waiting for the host.
    let tiny = ManagedBuffer::alloc(dev, 1 << 20)?;
    let touch = [(tiny.ptr(), 4096u64, TouchMode::Read)];
    kernels.touch(&s, &touch, 4096, 0)?; // its page is resident from here on
    s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
    let launches = 500u64;
    let t = host_timed(|| {
        let mut done = s.record_event(None).map_err(cuda_err("cuEventRecord", "launch probe"))?;
        for _ in 0..launches {
            s.wait(&done).map_err(cuda_err("cuStreamWaitEvent", "launch probe"))?;
            kernels.touch(&s, &touch, 4096, 0)?;
            done = s.record_event(None).map_err(cuda_err("cuEventRecord", "launch probe"))?;
        }
        Ok(())
    })?;
    s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
    drop(tiny);
    note("kernel launch with an event wait and record (host time)", t as f64 / launches as f64, "ns", None);
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
        kernels.touch(&s, &[], 4096, spin)?;
        done = s.record_event(None).map_err(cuda_err("cuEventRecord", "queue probe"))?;
        held.push(t0.elapsed().as_nanos() as u64);
    }
    s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
    // Launches that returned at once (a lone slow one, the thread descheduled, is not the
    // queue filling: from there on every launch waits about a kernel).
    let quick = held.iter().filter(|&&h| h <= spin / 2).count();
    let depth = if quick < ahead { quick } else { 0 };
    let depth = note(
        "kernel launches queued before a launch waits (profile; 0: none waited)",
        depth as f64,
        "",
        None,
    );
    // The backend's launch does more than the driver's call (its account of the blocks, the
    // events a policy's feedback reads): replays paid 22-25 us a kernel where the row above
    // reads 4-5. The profile takes the backend's.
    let launch_ns = note(
        "kernel launch through the CUDA backend, 3 regions resident (host time, profile)",
        backend_launch_ns(dev.ordinal())?,
        "ns",
        Some(default.launch_host_ns as f64),
    );
    // Managed allocations by size: replays paid about 100 us for each new buffer (ResNet's
    // tensors run from 4 bytes to 256 MiB) where one of 4 MiB took 11-14 us here. The profile
    // takes a line through these (host time = fixed + per GiB).
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
        let per = note(name, t as f64 / count as f64, "ns", None);
        note("  its cuMemFree, the device idle", freed as f64 / count as f64, "ns", None);
        points.push((size as f64 / (1u64 << 30) as f64, per));
    }
    let (alloc_ns, alloc_per_gib) = line_through(&points);
    let alloc_ns = note(
        "cuMemAllocManaged, fixed part (host time, profile)",
        alloc_ns,
        "ns",
        Some(default.alloc_host_ns as f64),
    );
    let alloc_per_gib = note(
        "cuMemAllocManaged, per GiB (host time, profile)",
        alloc_per_gib,
        "ns",
        Some(default.alloc_host_ns_per_gib as f64),
    );
    // Freeing buffers whose pages were populated on the device and then discarded, as the
    // backends free the buffers their pools shed. Not in the profile: freed at once after their
    // discard, 32 MiB buffers took 286 us each on the H200 (8.9 ms per GiB), where a replay's
    // closing synchronisation freed its shed buffers (18 MB on average) for 76-100 us each;
    // the profile keeps the replays' figure (`free_retired_host_ns`, h200.toml).
    for (size, count, name) in [
        (2u64 << 20, 64u64, "cuMemFree of 2 MiB populated on the device, then discarded (host time)"),
        (32 << 20, 16, "cuMemFree of 32 MiB populated on the device, then discarded (host time)"),
    ] {
        let shed = (0..count).map(|_| ManagedBuffer::alloc(dev, size)).collect::<Result<Vec<_>>>()?;
        let ranges: Vec<(u64, u64, TouchMode)> =
            shed.iter().map(|b| (b.ptr(), size, TouchMode::Write)).collect();
        kernels.touch(&s, &ranges, 4096, 0)?;
        let pages: Vec<(u64, u64)> = shed.iter().map(|b| (b.ptr(), size)).collect();
        discard_batch(dev, &pages, &s)?;
        s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))?;
        let t = host_timed(|| {
            drop(shed);
            Ok(())
        })?;
        note(name, t as f64 / count as f64, "ns", Some(default.free_retired_ns(size) as f64));
    }
    // The same while a kernel on another stream faults its way through host-resident data, as
    // a replay allocates while its kernels run: whether the driver's fault servicing holds
    // allocations up. (Not in the profile: the simulator's allocations do not wait for faults.)
    place(&a, Location::Host, &s)?;
    kernels.touch(&s2, &[(a.ptr(), bytes, TouchMode::Read)], 4096, 0)?;
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
    note(
        if faulting {
            "cuMemAllocManaged of 2 MiB while a kernel faults (host time)"
        } else {
            "cuMemAllocManaged of 2 MiB while a kernel faults (host time; it had finished)"
        },
        busy as f64 / 64.0,
        "ns",
        None,
    );

    let (major, minor) = dev.capabilities().compute_capability;
    let unit_transfer = default.fault_unit_bytes as f64 / fault_rate;
    let profile = CostModel {
        name: format!("{} (sm_{major}{minor}, unimem probe)", dev.capabilities().name),
        device_memory_bytes: dev.capabilities().total_bytes,
        host_memory_bytes: super::backend::host_memory_bytes().unwrap_or(default.host_memory_bytes),
        gpu_fault_rate_gbps: fault_rate,
        gpu_fault_latency_ns: (isolated - unit_transfer).max(0.0).round() as u64,
        fault_unit_bytes: default.fault_unit_bytes,
        gpu_populate_latency_ns: populate_ns.round() as u64,
        cpu_fault_rate_gbps: gbps(bytes, cpu_ns),
        prefetch_call_ns: call_ns.round() as u64,
        prefetch_deferred_call_ns: deferred_ns.round() as u64,
        prefetch_h2d_rate_gbps: h2d,
        prefetch_d2h_rate_gbps: d2h,
        batch_range_ns: batch_ns.round() as u64,
        prefetch_populate_rate_gbps: populate_rate,
        evict_d2h_rate_gbps: d2h,
        um_full_duplex: full_duplex,
        duplicate_drop_rate_gbps: drop_rate,
        duplicate_prefetch_rate_gbps: dup_rate,
        prefetch_h2d_host_fraction: h2d_host,
        prefetch_d2h_host_fraction: d2h_host,
        advise_remote_ns_per_gib: advise_remote.round() as u64,
        discard_host_ns_per_gib: discard_host.round() as u64,
        advise_read_mostly_ns_per_gib: advise_rm.round() as u64,
        advise_unset_read_mostly_ns_per_gib: unset_rm.round() as u64,
        duplicate_write_fault_ns_per_page: default.duplicate_write_fault_ns_per_page,
        remote_rate_gbps: remote,
        discard_rate_gbps: discard_rate,
        discard_call_ns: default.discard_call_ns,
        launch_host_ns: launch_ns.round() as u64,
        launch_queue_depth: depth as u64,
        alloc_host_ns: alloc_ns.round() as u64,
        alloc_host_ns_per_gib: alloc_per_gib.round() as u64,
        free_retired_host_ns: default.free_retired_host_ns,
        free_retired_host_ns_per_gib: default.free_retired_host_ns_per_gib,
        stage_d2h_rate_gbps: stage_d2h,
        stage_h2d_rate_gbps: stage_h2d,
        stage_host_rate_gbps: stage_host,
        stage_h2d_block_ns: stage_h2d_block,
        stage_h2d_resident_rate_gbps: stage_h2d_resident,
    };
    profile.validate("probe")?;
    Ok(ProbeReport {
        capabilities: dev.capabilities().clone(),
        buffer_bytes: bytes,
        measurements: out,
        profile,
    })
}

/// The population row whose figure a probe's profile takes (`gpu_populate_latency_ns`): a
/// fresh buffer's first touch on the device pages that another buffer's discard released, as
/// a replay's new regions populate the pages its pool's discards released. On three lendings
/// of 2026-12-01 (the median of each one's probes) it put the simulator within 0-2% of ResNet's
/// replays at full budget with `none`, where fresh 2 MiB allocations (the figure before) put it
/// at 1.19 and 1.21x on two of them.
pub const POPULATION_PROFILE_ROW: &str =
    "population per 64 KiB: a fresh buffer, on pages another's discard released";

/// First-touch population by faults on the device, per 64 KiB, under the conditions a program
/// meets it: a fresh buffer, a fresh buffer on pages that a discard or a `cuMemFree` of
/// another buffer released, a discarded buffer touched again, and many small allocations one
/// kernel each. Each is the median of three passes (seven for the small allocations); buffers of
/// `bytes` (at most two held at once).
/// `unimem probe --population` runs it alone; the full probe runs it first, before its other
/// rows (see docs/benchmarks.md, eleventh session).
pub fn population(dev: &CudaDevice, bytes: u64) -> Result<Vec<Measurement>> {
    let bytes = buffer_bytes(bytes)?;
    let kernels = Kernels::load(dev)?;
    let s = dev.new_stream()?;
    population_rows(dev, &kernels, &s, bytes, &CostModel::h200())
}

/// [`population`] with the probe's kernels and stream, `bytes` already checked; the profile
/// row beside `default`'s figure.
fn population_rows(
    dev: &CudaDevice,
    kernels: &Kernels,
    s: &CudaStream,
    bytes: u64,
    default: &CostModel,
) -> Result<Vec<Measurement>> {
    let unit = default.fault_unit_bytes;
    let per_unit = |ns: u64, len: u64| ns as f64 / (len / unit) as f64;
    let first_touch =
        |b: &ManagedBuffer| timed(s, || kernels.touch(s, &[(b.ptr(), b.len(), TouchMode::Write)], 4096, 0));
    let discard = |b: &ManagedBuffer| -> Result<()> {
        discard_batch(dev, &[(b.ptr(), b.len())], s)?;
        s.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    // (fresh, on pages a discard released, the discarded one again, on pages a free released)
    let mut rows: [Vec<f64>; 4] = Default::default();
    for _ in 0..3 {
        let x = ManagedBuffer::alloc(dev, bytes)?;
        rows[0].push(per_unit(first_touch(&x)?, bytes));
        discard(&x)?;
        let y = ManagedBuffer::alloc(dev, bytes)?;
        rows[1].push(per_unit(first_touch(&y)?, bytes));
        rows[2].push(per_unit(first_touch(&x)?, bytes));
        drop(x);
        let z = ManagedBuffer::alloc(dev, bytes)?;
        rows[3].push(per_unit(first_touch(&z)?, bytes));
    }
    let mut out = Vec::new();
    let names = [
        "population per 64 KiB: a fresh buffer",
        POPULATION_PROFILE_ROW,
        "population per 64 KiB: a discarded buffer touched again",
        "population per 64 KiB: a fresh buffer, on pages cuMemFree released",
    ];
    for (name, row) in names.into_iter().zip(rows) {
        let (lo, hi) = lowest_and_highest(&row);
        let profile_value =
            (name == POPULATION_PROFILE_ROW).then_some(default.gpu_populate_latency_ns as f64);
        out.push(Measurement { name, value: median(row), unit: "ns", profile_value });
        out.push(Measurement { name: "  lowest of three", value: lo, unit: "ns", profile_value: None });
        out.push(Measurement { name: "  highest of three", value: hi, unit: "ns", profile_value: None });
    }
    // Many fresh allocations, one kernel each, less the same kernels on resident pages.
    for (size, name) in [
        (2u64 << 20, "population per 64 KiB: fresh 2 MiB allocations, one kernel each"),
        (32 << 20, "population per 64 KiB: fresh 32 MiB allocations, one kernel each"),
    ] {
        let count = (bytes / 4 / size).max(1);
        let mut v = Vec::new();
        // Seven passes: the passes of one probe spread up to 1.5x (2 MiB: 6006-9180 ns).
        for _ in 0..7 {
            let fresh = (0..count).map(|_| ManagedBuffer::alloc(dev, size)).collect::<Result<Vec<_>>>()?;
            let touch_all = || {
                timed(s, || {
                    fresh
                        .iter()
                        .try_for_each(|b| kernels.touch(s, &[(b.ptr(), size, TouchMode::Write)], 4096, 0))
                })
            };
            let first = touch_all()?;
            let again = touch_all()?;
            v.push(per_unit(first.saturating_sub(again), count * size));
        }
        let (lo, hi) = lowest_and_highest(&v);
        out.push(Measurement { name, value: median(v), unit: "ns", profile_value: None });
        out.push(Measurement { name: "  lowest of seven", value: lo, unit: "ns", profile_value: None });
        out.push(Measurement { name: "  highest of seven", value: hi, unit: "ns", profile_value: None });
    }
    Ok(out)
}

/// The lowest and the highest of some readings.
fn lowest_and_highest(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}
