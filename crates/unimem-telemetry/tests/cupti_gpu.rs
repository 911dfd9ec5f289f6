//! CUPTI on a real GPU (`--features gpu-tests`): a program that moves known amounts, and the
//! per-region bytes CUPTI reports for it; the cost of collecting on a faulting workload.
#![cfg(feature = "gpu-tests")]

use unimem_core::backends::cuda::{CudaDevice, Kernels, ManagedBuffer, TouchMode};
use unimem_core::seam::Location;
use unimem_core::RegionId;
use unimem_telemetry::cupti::{to_events, CuptiSource};
use unimem_telemetry::Summary;

const MIB: u64 = 1 << 20;

fn fill(buf: &mut ManagedBuffer, v: u8) {
    // SAFETY: no device work uses the buffer meanwhile (callers synchronise).
    unsafe { buf.host_bytes() }.iter_mut().step_by(4096).for_each(|b| *b = v);
}

/// One test: CUPTI is process-wide, so the measurements run in order.
#[test]
fn cupti_bytes_match_known_amounts_and_collecting_cost_is_measured() {
    let dev = CudaDevice::open(0).unwrap();
    let k = Kernels::load(&dev).unwrap();
    let s = dev.new_stream().unwrap();

    // The cost: a fault-driven read of 1 GiB of host data, without and with collection. CUPTI
    // reports on managed memory allocated after collection started (seen on the H200), so each
    // side gets a buffer of its own.
    let mut big = ManagedBuffer::alloc(&dev, 1 << 30).unwrap();
    let faulting = |big: &mut ManagedBuffer| {
        fill(big, 1);
        let t0 = std::time::Instant::now();
        k.touch(&s, &[(big.ptr(), big.len(), TouchMode::Read)], 4096, 0).unwrap();
        s.synchronize().unwrap();
        t0.elapsed().as_secs_f64() * 1e3
    };
    faulting(&mut big); // warm-up
    let off: Vec<f64> = (0..3).map(|_| faulting(&mut big)).collect();
    drop(big);
    let source = CuptiSource::start(0).unwrap();
    let mut big = ManagedBuffer::alloc(&dev, 1 << 30).unwrap();
    faulting(&mut big); // warm-up
    let on: Vec<f64> = (0..3).map(|_| faulting(&mut big)).collect();
    assert!(!source.drain().unwrap().is_empty(), "CUPTI saw the faults");
    let e = CuptiSource::start(0).unwrap_err();
    assert!(e.to_string().contains("once per process"), "{e}");
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[1]
    };
    let (off, on) = (median(off), median(on));
    // A measurement, recorded in docs/benchmarks.md (a timed assertion would be flaky).
    eprintln!("CUPTI cost: fault-driven 1 GiB read {off:.1} ms off, {on:.1} ms on: {:.3}x", on / off);

    // Known amounts: A 256 MiB in; B 128 MiB in and back out; C 64 MiB faulted in.
    let mut a = ManagedBuffer::alloc(&dev, 256 * MIB).unwrap();
    let mut b = ManagedBuffer::alloc(&dev, 128 * MIB).unwrap();
    let mut c = ManagedBuffer::alloc(&dev, 64 * MIB).unwrap();
    for (x, v) in [(&mut a, 2), (&mut b, 3), (&mut c, 4)] {
        fill(x, v);
    }
    source.drain().unwrap(); // only what follows counts
    a.prefetch(0, a.len(), Location::DEVICE, &s).unwrap();
    b.prefetch(0, b.len(), Location::DEVICE, &s).unwrap();
    b.prefetch(0, b.len(), Location::Host, &s).unwrap();
    k.touch(&s, &[(c.ptr(), c.len(), TouchMode::Read)], 4096, 0).unwrap();
    s.synchronize().unwrap();
    let records = source.drain().unwrap();
    let regions = [(RegionId(1), &a), (RegionId(2), &b), (RegionId(3), &c)];
    let find = |addr: u64, _t: u64| {
        regions
            .iter()
            .find(|(_, x)| addr >= x.ptr() && addr < x.ptr() + x.len())
            .map(|(id, x)| (*id, addr - x.ptr()))
    };
    let s = Summary::of(&to_events(&records, &|t| t, &find));
    eprintln!("CUPTI: {} records; {:?}; by cause {:?}", records.len(), s.regions, s.totals.by_cause);
    let mut flags = std::collections::BTreeMap::new();
    for r in &records {
        *flags.entry((r.kind, r.flags)).or_insert(0u64) += r.value;
    }
    eprintln!("CUPTI (kind, flags) -> value: {flags:?}");
    let within = |got: u64, want: u64| (got as f64 - want as f64).abs() <= 0.05 * want as f64;
    let r = |id| s.regions.get(&RegionId(id)).copied().unwrap_or_default();
    assert!(within(r(1).h2d_bytes, 256 * MIB) && r(1).d2h_bytes == 0, "A: {:?}", r(1));
    assert!(within(r(2).h2d_bytes, 128 * MIB) && within(r(2).d2h_bytes, 128 * MIB), "B: {:?}", r(2));
    assert!(within(r(3).h2d_bytes, 64 * MIB) && r(3).faults > 0, "C: {:?}", r(3));
    let cause = |name: &str| s.totals.by_cause.iter().find(|(c, _)| c == name).map_or(0, |c| c.1);
    assert!(within(cause("prefetch"), 512 * MIB), "A in, B in and out by prefetch: {:?}", s.totals.by_cause);
    assert!(within(cause("fault"), 64 * MIB), "C by faults: {:?}", s.totals.by_cause);

    // Thrashing: the GPU and the CPU write the same 16 pages in turn, 300 times; the driver
    // notices the pages moving back and forth and reports it (thrashing, and throttling or
    // remote mapping, as its policy decides).
    let mut d = ManagedBuffer::alloc(&dev, 2 * MIB).unwrap();
    fill(&mut d, 5);
    let hot = 64 * 1024;
    let stream = dev.new_stream().unwrap();
    source.drain().unwrap();
    let t0 = std::time::Instant::now();
    for i in 0..300u32 {
        k.touch(&stream, &[(d.ptr(), hot, TouchMode::Write)], 4096, 0).unwrap();
        stream.synchronize().unwrap();
        // SAFETY: the kernel is done (synchronised above).
        let bytes = unsafe { d.host_bytes() };
        bytes[..hot as usize].iter_mut().step_by(4096).for_each(|b| *b = i as u8);
    }
    let ping_pong_ms = t0.elapsed().as_secs_f64() * 1e3;
    let records = source.drain().unwrap();
    let find = |addr: u64, _t: u64| {
        (addr >= d.ptr() && addr < d.ptr() + d.len()).then(|| (RegionId(4), addr - d.ptr()))
    };
    let events = to_events(&records, &|t| t, &find);
    let s = Summary::of(&events);
    let r = s.regions.get(&RegionId(4)).copied().unwrap_or_default();
    let mut kinds = std::collections::BTreeMap::new();
    for r in &records {
        *kinds.entry((r.kind, r.flags)).or_insert(0u64) += 1;
    }
    eprintln!(
        "CUPTI thrashing: 300 turns in {ping_pong_ms:.1} ms; {} records, (kind, flags) -> count {kinds:?}; region {r:?}; remote maps {:?}",
        records.len(),
        s.totals.remote_mapped
    );
    assert!(
        r.thrashing > 0 || r.throttled_ns > 0 || r.remote_mapped_bytes > 0,
        "the driver reported no thrashing, throttling or remote mapping: {r:?}"
    );
}
