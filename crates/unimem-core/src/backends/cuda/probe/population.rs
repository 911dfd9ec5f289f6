//! First-touch population on the device, by the conditions a program meets it.

use super::*;

/// The population row whose figure a probe's profile takes (`gpu_populate_latency_ns`): a
/// fresh buffer's first touch on the device pages that another buffer's discard released, as
/// a replay's new regions populate the pages its pool's discards released (a fresh
/// allocation's first touch is cheaper and made the simulator too fast on replays at full
/// budget).
pub const POPULATION_PROFILE_ROW: &str =
    "population per 64 KiB: a fresh buffer, on pages another's discard released";

/// First-touch population by faults on the device, per 64 KiB, under the conditions a program
/// meets it: a fresh buffer, a fresh buffer on pages that a discard or a `cuMemFree` of
/// another buffer released, a discarded buffer touched again, and many small allocations one
/// kernel each. Each is the median of three passes (seven for the small allocations); buffers of
/// `bytes` (at most two held at once).
/// `unimem probe --population` runs it alone; the full probe runs it first, before its other
/// rows have touched the device (population is fastest in a fresh process).
pub fn population(dev: &CudaDevice, bytes: u64) -> Result<Vec<Measurement>> {
    let bytes = buffer_bytes(bytes)?;
    let kernels = Kernels::load(dev)?;
    let s = dev.new_stream()?;
    population_rows(dev, &kernels, &s, bytes, &CostModel::h200())
}

/// [`population`] with the probe's kernels and stream, `bytes` already checked; the profile
/// row beside `default`'s figure.
pub(super) fn population_rows(
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
pub(super) fn lowest_and_highest(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}
