//! What page population gets of the device while a copy runs beside it, each timed on its own
//! stream (`unimem probe --transfers`). A new region's first prefetch populates fresh pages on
//! the device, and a restore into a staged block's own pages repopulates them; both come while
//! the staged evictions of other data copy out. Timing the two together says whether the copy
//! is held up (it is not); only the population's own time says what it waits.

use super::vmm::{copy, sync, Pinned};
use super::*;

/// The copy that runs beside a population, on the other stream.
#[derive(Clone, Copy)]
enum Beside {
    Nothing,
    /// Device-resident managed memory to pinned memory by the copy engine (a stage-out).
    StageOut,
    /// Pinned memory into device-resident managed pages by the copy engine (a restore).
    Restore,
    /// `cuMemAlloc` memory to pinned memory by the copy engine.
    PlainOut,
    /// Device-resident managed memory to pinned memory by a copy kernel.
    KernelOut,
    /// Device-resident managed memory to `cuMemAlloc` memory (a bounce's first half).
    DeviceToDevice,
    /// A repopulation of discarded pages per 2 MiB block, issued behind a short kernel as the
    /// backend issues restores into a staged block's own pages.
    Repopulation,
    /// A stage-out in 64 MiB pieces, each piece's pages discarded once copied, as the backend's
    /// staged evictions go (the stage-out's data is lost: it runs last).
    StageOutDiscarding,
}

/// The buffers the copies move between: `total` bytes each.
struct Buffers {
    managed: ManagedBuffer,
    resident: ManagedBuffer,
    plain: DeviceMemory,
    pinned: Pinned,
    total: u64,
}

/// The rows (see the module documentation): a population of fresh pages alone and beside each
/// kind of copy, and a repopulation of discarded pages alone and beside a stage-out, each with
/// the population's own rate and the copy's. Returns the rate of a population beside a
/// stage-out that discards its pages as it goes, as the backend's staged evictions do (the
/// profile's `populate_beside_stage_out_rate_gbps`).
pub(super) fn rows(c: &Ctx<'_>, n: &mut Notes) -> Result<f64> {
    let Ctx { dev, kernels, s, bytes, .. } = *c;
    let total = bytes.clamp(256 << 20, 1 << 30) / (2 << 20) * (2 << 20);
    // A quarter of the copy: it runs wholly beside the copy.
    let pop = total / 4;
    let b = Buffers {
        managed: ManagedBuffer::alloc(dev, total)?,
        resident: ManagedBuffer::alloc(dev, total)?,
        plain: DeviceMemory::alloc(total)?,
        pinned: Pinned::new(total)?,
        total,
    };
    let all = [(b.managed.ptr(), total, TouchMode::Write), (b.resident.ptr(), total, TouchMode::Write)];
    kernels.touch(s, &all, 4096, 0)?;
    sync(s)?;
    let rows: [(Beside, &'static str, Option<&'static str>); 6] = [
        (Beside::Nothing, "population of fresh pages by prefetch, alone", None),
        (
            Beside::StageOut,
            "population beside a stage-out (managed -> pinned, copy engine)",
            Some("that stage-out beside the population"),
        ),
        (
            Beside::Restore,
            "population beside a restore (pinned -> resident managed, copy engine)",
            Some("that restore beside the population"),
        ),
        (
            Beside::PlainOut,
            "population beside a copy of cuMemAlloc memory -> pinned (copy engine)",
            Some("that copy beside the population"),
        ),
        (
            Beside::KernelOut,
            "population beside a stage-out by a copy kernel",
            Some("that copy kernel beside the population"),
        ),
        (
            Beside::DeviceToDevice,
            "population beside a managed -> cuMemAlloc copy on the device (copy engine)",
            Some("that device copy beside the population"),
        ),
    ];
    // Kept to the end: a freed buffer's pages would serve the next population.
    let mut fresh = Vec::new();
    for (beside, label, copy_label) in rows {
        let f = ManagedBuffer::alloc(dev, pop)?;
        let (t_pop, t_copy) = beside_copy(c, &b, beside, |s2| f.prefetch(0, pop, Location::DEVICE, s2))?;
        n.note(label, gbps(pop, t_pop), "GB/s", None);
        if let Some(l) = copy_label {
            n.note(l, gbps(total, t_copy), "GB/s", None);
        }
        fresh.push(f);
    }
    // Repopulation: pages discarded (after a stage-out) brought back by prefetch, as a restore
    // into a staged block's own pages does before its copy in.
    let mut repop = |beside, label: &'static str| -> Result<()> {
        let f = ManagedBuffer::alloc(dev, pop)?;
        place(&f, Location::DEVICE, s)?;
        let blocks: Vec<(u64, u64)> =
            (0..pop / SLOT_BYTES).map(|i| (f.ptr() + i * SLOT_BYTES, SLOT_BYTES)).collect();
        discard_batch(dev, &blocks, s)?;
        sync(s)?;
        let (t, _) = beside_copy(c, &b, beside, |s2| prefetch_batch(dev, &blocks, Location::DEVICE, s2))?;
        n.note(label, gbps(pop, t), "GB/s", None);
        Ok(())
    };
    repop(Beside::Nothing, "repopulation of discarded pages, per 2 MiB block, alone")?;
    repop(Beside::StageOut, "repopulation of discarded pages beside a stage-out")?;
    repop(Beside::Restore, "repopulation of discarded pages beside a restore")?;
    // A new buffer populated on the pages another buffer's discard released, as a replay's new
    // regions are once the stage-outs' discards run.
    let mut released = |beside, label: &'static str| -> Result<()> {
        let x = ManagedBuffer::alloc(dev, pop)?;
        place(&x, Location::DEVICE, s)?;
        discard_batch(dev, &[(x.ptr(), pop)], s)?;
        sync(s)?;
        let f = ManagedBuffer::alloc(dev, pop)?;
        let (t, _) = beside_copy(c, &b, beside, |s2| f.prefetch(0, pop, Location::DEVICE, s2))?;
        n.note(label, gbps(pop, t), "GB/s", None);
        fresh.push(x);
        fresh.push(f);
        Ok(())
    };
    released(Beside::Repopulation, "population on pages another's discard released, beside a repopulation")?;
    released(Beside::Nothing, "population on pages another's discard released, alone")?;
    released(Beside::StageOut, "population on pages another's discard released, beside a stage-out")?;
    let f = ManagedBuffer::alloc(dev, pop)?;
    let (t, t_copy) =
        beside_copy(c, &b, Beside::StageOutDiscarding, |s2| f.prefetch(0, pop, Location::DEVICE, s2))?;
    let rate = n.note(
        "population beside a stage-out discarding its pages as it goes",
        gbps(pop, t),
        "GB/s",
        Some(c.default.populate_beside_stage_out_rate_gbps),
    );
    n.note("that stage-out beside the population", gbps(total, t_copy), "GB/s", None);
    fresh.push(f);
    drop(fresh);
    Ok(rate)
}

/// Runs the copy `beside` on the probe's first stream and `work` on the second, both from one
/// point; returns the device time of `work` and of the copy, each on its own stream. `work`
/// goes behind a short kernel, as the backend issues populations: on an idle stream the
/// prefetch call would populate on the spot.
fn beside_copy(
    c: &Ctx<'_>,
    b: &Buffers,
    beside: Beside,
    work: impl FnOnce(&CudaStream) -> Result<()>,
) -> Result<(u64, u64)> {
    let Ctx { kernels, s, s2, .. } = *c;
    let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let ev = |st: &CudaStream| st.record_event(flags).map_err(cuda_err("cuEventRecord", "probe beside"));
    let fork = ev(s)?;
    s2.wait(&fork).map_err(cuda_err("cuStreamWaitEvent", "probe beside"))?;
    let c0 = ev(s)?;
    let total = b.total;
    match beside {
        Beside::Nothing => {}
        Beside::StageOut => copy(b.pinned.addr(), b.managed.ptr(), total, s)?,
        Beside::Restore => copy(b.resident.ptr(), b.pinned.addr(), total, s)?,
        Beside::PlainOut => copy(b.pinned.addr(), b.plain.0, total, s)?,
        Beside::KernelOut => kernels.copy(s, b.pinned.addr(), b.managed.ptr(), total, kernels.sms() * 2)?,
        Beside::Repopulation => {
            let blocks: Vec<(u64, u64)> =
                (0..total / SLOT_BYTES).map(|i| (b.resident.ptr() + i * SLOT_BYTES, SLOT_BYTES)).collect();
            discard_batch(c.dev, &blocks, s)?;
            kernels.touch(s, &[], 1, 20_000)?;
            prefetch_batch(c.dev, &blocks, Location::DEVICE, s)?;
        }
        Beside::StageOutDiscarding => {
            let piece = 64u64 << 20;
            for off in (0..total).step_by(piece as usize) {
                copy(b.pinned.addr() + off, b.managed.ptr() + off, piece, s)?;
                discard_batch(c.dev, &[(b.managed.ptr() + off, piece)], s)?;
            }
        }
        Beside::DeviceToDevice => {
            // As long as a link copy: the device copy is fast, so it runs many times.
            for _ in 0..16 {
                copy(b.plain.0, b.managed.ptr(), total, s)?;
            }
        }
    }
    let c1 = ev(s)?;
    kernels.touch(s2, &[], 1, 20_000)?;
    let w0 = ev(s2)?;
    work(s2)?;
    let w1 = ev(s2)?;
    sync(s)?;
    sync(s2)?;
    Ok((event_ns(&w0, &w1)?, event_ns(&c0, &c1)?))
}
