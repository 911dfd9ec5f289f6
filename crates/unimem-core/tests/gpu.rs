//! Tests on a real GPU: `cargo test -p unimem-core --features gpu-tests` on a machine with an
//! NVIDIA GPU (the project runs them on the H200 through `scripts/gpu-pack.sh`). They allocate
//! at most 4 GiB of managed memory, far below free device memory, and never write a range that
//! holds read-mostly duplicates.
#![cfg(feature = "gpu-tests")]

use unimem_core::backends::cuda::{
    discard_and_prefetch_batch, discard_batch, prefetch_batch, probe, CudaDevice, FreeMemory, Kernels,
    ManagedBuffer, TouchMode,
};
use unimem_core::seam::{Advice, Location};
use unimem_core::Error;

const GIB: u64 = 1 << 30;

fn device() -> CudaDevice {
    CudaDevice::open(0).expect("these tests need a CUDA device")
}

/// Fills a buffer with its word index (from the host) and returns the sum of the words.
fn fill(buf: &mut ManagedBuffer) -> u64 {
    // SAFETY: no device work is using the buffer.
    let bytes = unsafe { buf.host_bytes() };
    let words: &mut [u32] = bytemuck_words(bytes);
    let mut sum = 0u64;
    for (i, w) in words.iter_mut().enumerate() {
        *w = i as u32;
        sum += i as u32 as u64;
    }
    sum
}

fn bytemuck_words(bytes: &mut [u8]) -> &mut [u32] {
    assert_eq!(bytes.as_ptr() as usize % 4, 0);
    // SAFETY: managed allocations are page aligned; any bit pattern is a valid u32.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), bytes.len() / 4) }
}

fn host_sum(buf: &mut ManagedBuffer) -> u64 {
    // SAFETY: callers synchronise first.
    bytemuck_words(unsafe { buf.host_bytes() }).iter().map(|&w| w as u64).sum()
}

#[test]
fn capabilities_are_probed() {
    let dev = device();
    let c = dev.capabilities();
    assert!(c.managed_memory && c.concurrent_managed_access, "{c:?}");
    assert!(c.total_bytes > 0 && c.free_bytes <= c.total_bytes);
    eprintln!("{c:?}");
}

#[test]
fn oversubscription_is_refused_before_any_allocation() {
    let dev = device();
    let (free, _) = dev.mem_info().unwrap();
    let e = ManagedBuffer::alloc(&dev, free).unwrap_err();
    assert!(matches!(e, Error::Allocation { .. }), "{e}");
    assert!(e.to_string().contains("can hang the GPU"), "{e}");
    assert!(e.to_string().contains(r#"oversubscribe = "allow""#), "names the key: {e}");
}

/// The guard that reads free memory only when it matters (the backend's) refuses what does
/// not fit on a fresh reading, even right after allocations its estimate counted.
#[test]
fn the_cached_guard_refuses_on_a_fresh_reading() {
    let dev = device();
    let mut guard = FreeMemory::default();
    let small: Vec<ManagedBuffer> = (0..16).map(|_| guard.alloc(&dev, 64 << 20, false).unwrap()).collect();
    let (free, _) = dev.mem_info().unwrap();
    let e = guard.alloc(&dev, free, false).unwrap_err();
    assert!(matches!(e, Error::Allocation { .. }), "{e}");
    assert!(e.to_string().contains(r#"oversubscribe = "allow""#), "names the key: {e}");
    // Within the estimate: allocated without a new reading, and usable.
    let more = guard.alloc(&dev, 64 << 20, false).unwrap();
    assert_eq!(more.len() + small.iter().map(|b| b.len()).sum::<u64>(), 17 * (64 << 20));
}

#[test]
fn advice_and_prefetch_show_in_range_attributes() {
    let dev = device();
    let s = dev.new_stream().unwrap();
    let buf = ManagedBuffer::alloc(&dev, 64 << 20).unwrap();
    buf.advise(0, buf.len(), Advice::SetReadMostly).unwrap();
    assert!(buf.attributes(0, buf.len()).unwrap().read_mostly);
    buf.advise(0, buf.len(), Advice::UnsetReadMostly).unwrap();
    assert!(!buf.attributes(0, buf.len()).unwrap().read_mostly);
    buf.advise(0, buf.len(), Advice::SetPreferredLocation(Location::Host)).unwrap();
    assert_eq!(buf.attributes(0, buf.len()).unwrap().preferred, Some(Location::Host));
    buf.advise(0, buf.len(), Advice::UnsetPreferredLocation).unwrap();
    buf.prefetch(0, buf.len(), Location::DEVICE, &s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(buf.attributes(0, buf.len()).unwrap().last_prefetch, Some(Location::DEVICE));
    prefetch_batch(&dev, &[(buf.ptr(), 32 << 20), (buf.ptr() + (32 << 20), 32 << 20)], Location::Host, &s)
        .unwrap();
    s.synchronize().unwrap();
    assert_eq!(buf.attributes(0, buf.len()).unwrap().last_prefetch, Some(Location::Host));
    assert!(buf.prefetch(0, buf.len() + 1, Location::DEVICE, &s).is_err(), "ranges are checked");
}

/// 4 GiB through every placement: GPU faults, prefetch both ways, GPU writes evicted back,
/// read-mostly duplicates (read only), remote access, and discard. Checksums on both sides.
#[test]
fn data_survives_prefetch_evict_duplicate_remote_and_discard_cycles() {
    let dev = device();
    let k = Kernels::load(&dev).unwrap();
    let s = dev.new_stream().unwrap();
    let mut a = ManagedBuffer::alloc(&dev, 2 * GIB).unwrap();
    let mut b = ManagedBuffer::alloc(&dev, 2 * GIB).unwrap();
    let words = a.len() / 4;
    let sum_a = fill(&mut a);
    let sum_b = fill(&mut b);

    // GPU reads fault the host data in.
    assert_eq!(k.sum_u32(&s, a.ptr(), words).unwrap(), sum_a);
    // Prefetch both ways, then a GPU write that is evicted back to the host.
    prefetch_batch(&dev, &[(b.ptr(), b.len())], Location::DEVICE, &s).unwrap();
    k.add_u32(&s, b.ptr(), words, 3).unwrap();
    b.prefetch(0, b.len(), Location::Host, &s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(host_sum(&mut b), sum_b + 3 * words, "device writes survived the eviction");
    // Read-mostly: duplicates on the device, read there, dropped by a prefetch to the host.
    a.advise(0, a.len(), Advice::SetReadMostly).unwrap();
    a.prefetch(0, a.len(), Location::DEVICE, &s).unwrap();
    assert_eq!(k.sum_u32(&s, a.ptr(), words).unwrap(), sum_a);
    a.prefetch(0, a.len(), Location::Host, &s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(host_sum(&mut a), sum_a);
    a.advise(0, a.len(), Advice::UnsetReadMostly).unwrap(); // before any GPU write
                                                            // Remote: host-preferred and mapped; GPU reads and writes in place.
    a.advise(0, a.len(), Advice::SetPreferredLocation(Location::Host)).unwrap();
    a.advise(0, a.len(), Advice::SetAccessedByDevice).unwrap();
    assert_eq!(k.sum_u32(&s, a.ptr(), words).unwrap(), sum_a);
    k.add_u32(&s, a.ptr(), words, 1).unwrap();
    s.synchronize().unwrap();
    assert_eq!(host_sum(&mut a), sum_a + words);
    a.advise(0, a.len(), Advice::UnsetAccessedByDevice).unwrap();
    a.advise(0, a.len(), Advice::UnsetPreferredLocation).unwrap();
    // Discard: the contents are dead; new data written afterwards is intact, on both sides.
    assert!(discard_batch(&dev, &[(b.ptr(), b.len())], &s).unwrap(), "CUDA 13 has the discard call");
    discard_and_prefetch_batch(&dev, &[(b.ptr(), b.len())], Location::DEVICE, &s).unwrap();
    s.synchronize().unwrap();
    let sum_b2 = fill(&mut b);
    k.add_u32(&s, b.ptr(), words, 2).unwrap();
    assert_eq!(k.sum_u32(&s, b.ptr(), words).unwrap(), sum_b2 + 2 * words);
    s.synchronize().unwrap();
    assert_eq!(host_sum(&mut b), sum_b2 + 2 * words);
}

#[test]
fn touch_kernel_spins_for_its_duration_when_data_is_resident() {
    let dev = device();
    let k = Kernels::load(&dev).unwrap();
    let s = dev.new_stream().unwrap();
    let buf = ManagedBuffer::alloc(&dev, 256 << 20).unwrap();
    buf.prefetch(0, buf.len(), Location::DEVICE, &s).unwrap();
    k.touch(&s, &[(buf.ptr(), buf.len(), TouchMode::Write)], 4096, 0).unwrap();
    s.synchronize().unwrap();
    let t0 = std::time::Instant::now();
    k.touch(&s, &[(buf.ptr(), buf.len(), TouchMode::Read)], 4096, 2_000_000).unwrap();
    s.synchronize().unwrap();
    let took = t0.elapsed().as_micros();
    assert!((2_000..4_000).contains(&took), "a 2 ms kernel on resident data took {took} us");
}

#[test]
fn probe_measures_and_writes_a_valid_profile() {
    let dev = device();
    let r = probe::run(&dev, 512 << 20).unwrap();
    for m in &r.measurements {
        assert!(m.value.is_finite() && m.value >= 0.0, "{m:?}");
        eprintln!("{:<50} {:>10.2} {:<5} (profile {:?})", m.name, m.value, m.unit, m.profile_value);
    }
    r.profile.validate("probe").unwrap();
    assert!(r.profile.prefetch_h2d_rate_gbps > r.profile.gpu_fault_rate_gbps, "prefetch beats faults");
    // Allocations cost host time, and the profile's line through their sizes says how much.
    let small =
        r.measurements.iter().find(|m| m.name.starts_with("cuMemAllocManaged of 2 MiB (")).unwrap().value;
    assert!(
        small > 0.0 && r.profile.alloc_host_ns as f64 <= 2.0 * small + 1000.0,
        "{small} vs {:?}",
        r.profile
    );
    let streaming = r.measurements.iter().find(|m| m.name.starts_with("streaming read")).unwrap().value;
    assert!(streaming > 3.0 * r.profile.gpu_fault_rate_gbps, "pipelined prefetch {streaming} GB/s vs faults");
}

/// `unimem probe --transfers`: every row measured, the data intact through every move (the
/// rows fail otherwise), copies at a plausible share of the link, and a chunk mapped to host
/// memory still read by a kernel at its address.
#[test]
fn transfer_rows_move_data_intact() {
    let dev = device();
    let rows = probe::transfers(&dev, 1 << 30).unwrap();
    let value = |name: &str| {
        rows.iter()
            .find(|m| m.name.starts_with(name))
            .unwrap_or_else(|| panic!("no row {name}: {rows:?}"))
            .value
    };
    for m in &rows {
        assert!(m.value.is_finite() && m.value > 0.0, "{m:?}");
        eprintln!("{:<80} {:>12.2} {}", m.name, m.value, m.unit);
    }
    assert!(value("VMM: pinned host -> device chunks") > 10.0);
    assert!(value("VMM: device chunks -> pinned host") > 10.0);
    assert!(value("VMM: kernel read of a chunk mapped to host memory") > 1.0);
    assert!(value("managed: stage-out beside a restore") > 10.0);
}

/// `unimem probe --population`: every row a plausible time per 64 KiB, and a discarded buffer
/// touched again slower than a fresh one (0.4 GB/s against 11-16 on the H200): why the pool
/// hands out its most resident buffer first and sheds by freeing, never by reuse.
#[test]
fn probe_population_rows() {
    let dev = device();
    let rows = probe::population(&dev, 256 << 20).unwrap();
    let value = |start: &str| rows.iter().find(|m| m.name.starts_with(start)).unwrap().value;
    for m in rows.iter().filter(|m| m.name.starts_with("population per 64 KiB")) {
        eprintln!("{:<80} {:>10.2} {}", m.name, m.value, m.unit);
        // 64 KiB at the HBM's 4.8 TB/s is 14 ns; at 1 GB/s 66 us.
        assert!((100.0..1e6).contains(&m.value), "{m:?}");
    }
    let fresh = value("population per 64 KiB: a fresh buffer");
    let again = value("population per 64 KiB: a discarded buffer touched again");
    assert!(again > 2.0 * fresh, "a discarded buffer again {again} ns, a fresh one {fresh} ns");
}

mod backend {
    //! The `CudaBackend` behind the `MemoryBackend` seam, where it differs from the simulator:
    //! kernel timing, residency against range attributes, and replays with every policy (the
    //! contract both keep is `tests/contract.rs`).

    use unimem_core::backends::cuda::CudaBackend;
    use unimem_core::config::{Config, PolicyName};
    use unimem_core::replay;
    use unimem_core::seam::{ByteRange, KernelLaunch, Location, MemoryBackend, MemoryBackendExt};
    use unimem_core::trace::synth::{Pattern, Synth, SynthSpec};
    use unimem_core::trace::{TraceHeader, TraceReader, TraceWriter};
    use unimem_core::{AccessMode, CostModel, RangeAccess, RegionId};

    const MIB: u64 = 1 << 20;

    fn pattern(seed: u32, bytes: u64) -> Vec<u8> {
        (0..bytes / 4)
            .flat_map(|i| (i as u32).wrapping_mul(2654435761).wrapping_add(seed).to_le_bytes())
            .collect()
    }

    /// Replays an encoded trace with `policy` on a fresh CUDA backend emulating `budget` bytes.
    fn replay_on_gpu(
        bytes: &'static [u8],
        budget: u64,
        policy: PolicyName,
        config: &Config,
    ) -> replay::ReplayReport {
        // With staging, as `unimem replay` opens it.
        let mut gpu = CudaBackend::open(0, budget, false).unwrap().with_staging(budget, budget).unwrap();
        let mut p = unimem_core::policy::make_policy(policy, budget, config, &CostModel::h200());
        replay::run(TraceReader::from_bytes("gpu", bytes).unwrap(), &mut gpu, p.as_mut(), &mut |_| {})
            .unwrap()
    }

    fn read_kernel(b: &mut CudaBackend, id: RegionId, bytes: u64) {
        let acc = [RangeAccess { region: id, offset: 0, len: bytes, mode: AccessMode::Read }];
        b.launch(&KernelLaunch { name: "read", dur_ns: 1000, accesses: &acc }).unwrap();
    }

    /// Recording, the backend times kernels on the device (a resident kernel takes about its
    /// `dur_ns`, one that faults longer, the excess its stall) and reports when a freed
    /// region's work finished, after that work's kernel, and when the host issued each kernel.
    #[test]
    fn recorded_kernels_and_releases_are_timed_on_the_device() {
        use unimem_core::seam::MemEvent;
        let mut b = CudaBackend::open(0, 1 << 30, false).unwrap();
        b.record_events(true);
        let origin = b.event_clock_origin().expect("a real-time clock");
        let (id, size) = (RegionId(1), 256 * MIB);
        b.allocate(id, size).unwrap();
        b.write(id, 0, &pattern(3, size)).unwrap();
        read_kernel(&mut b, id, size); // faults 256 MiB in
        let dur = 2_000_000;
        let acc = [RangeAccess { region: id, offset: 0, len: size, mode: AccessMode::Read }];
        b.launch(&KernelLaunch { name: "resident", dur_ns: dur, accesses: &acc }).unwrap();
        b.free(id).unwrap();
        b.synchronize().unwrap();
        let host_after_sync = origin.elapsed().as_nanos() as u64;
        let mut events = Vec::new();
        b.drain_events(&mut events);
        eprintln!("recorded: {events:?}");
        let kernels: Vec<(u64, u64, u64)> = events
            .iter()
            .filter_map(|e| match e {
                MemEvent::Kernel { start_ns, end_ns, stall_ns, .. } => Some((*start_ns, *end_ns, *stall_ns)),
                _ => None,
            })
            .collect();
        assert_eq!(kernels.len(), 2, "{events:?}");
        let (faulting, resident) = (kernels[0], kernels[1]);
        assert!(faulting.2 > 10_000_000, "256 MiB by faults stalls for tens of ms: {faulting:?}");
        let took = resident.1 - resident.0;
        assert!(took >= dur * 9 / 10 && took < dur * 3, "resident kernel took {took} ns for {dur}");
        assert!(resident.0 >= faulting.1 - 1_000, "in stream order: {kernels:?}");
        // Each kernel says when the host issued it, on the same clock: before it started (up to
        // the microseconds of putting device times on the host's clock).
        for e in &events {
            if let MemEvent::Kernel { start_ns, issued_ns, .. } = e {
                let issued = issued_ns.expect("the backend says when it issued each kernel");
                assert!(issued <= start_ns + 1_000_000, "issued at {issued}, started at {start_ns}");
                assert!(issued <= host_after_sync, "issued at {issued}, before {host_after_sync}");
            }
        }
        let released = events.iter().find_map(|e| match e {
            MemEvent::Released { region, at_ns } if *region == id => Some(*at_ns),
            _ => None,
        });
        let released = released.expect("a release event");
        assert!(released + 1_000 >= resident.1, "released after its last kernel: {released} vs {resident:?}");
        // Everything had completed by the synchronize: on the host's clock (up to the error of
        // putting device times on it, microseconds) the release came before it.
        assert!(
            released <= host_after_sync + 1_000_000,
            "on the same clock as the host: {released} vs {host_after_sync}"
        );
    }

    /// The backend's account of where data is agrees with the driver's range attributes.
    #[test]
    fn residency_agrees_with_range_attributes() {
        let mut b = CudaBackend::open(0, 1 << 30, false).unwrap();
        let id = RegionId(1);
        b.allocate(id, 256 * MIB).unwrap();
        b.write(id, 0, &pattern(1, 256 * MIB)).unwrap();
        b.prefetch(&[ByteRange::whole(id, 256 * MIB)], Location::DEVICE).unwrap();
        b.synchronize().unwrap();
        let r = b.residency(ByteRange::whole(id, 256 * MIB)).unwrap();
        assert_eq!(r.device, 256 * MIB);
        let attrs = b.buffer(id).unwrap().attributes(0, 256 * MIB).unwrap();
        assert_eq!(attrs.last_prefetch, Some(Location::DEVICE), "{attrs:?}");
        b.prefetch(&[ByteRange::whole(id, 256 * MIB)], Location::Host).unwrap();
        b.synchronize().unwrap();
        assert_eq!(b.residency(ByteRange::whole(id, 256 * MIB)).unwrap().host, 256 * MIB);
        let attrs = b.buffer(id).unwrap().attributes(0, 256 * MIB).unwrap();
        assert_eq!(attrs.last_prefetch, Some(Location::Host), "{attrs:?}");
    }

    /// A synthetic streaming trace (1 GiB of data, 512 MiB budget) replayed on the GPU with
    /// every policy: each finishes above the compute floor, the advisor beats `none`, and every
    /// report says the CUDA backend ran.
    #[test]
    fn replays_run_on_the_gpu_with_every_policy() {
        let spec = SynthSpec {
            pattern: Pattern::Streaming,
            events: 4000,
            regions: 64,
            region_bytes: 16 * MIB,
            kernel_ns: 200_000,
            kernels_per_step: 64,
            seed: 1,
            write_every: 0,
        };
        let bytes: &'static [u8] = Box::leak(Synth::encode(spec).unwrap().into_boxed_slice());
        let budget = 512 * MIB;
        let mut times = Vec::new();
        for policy in [PolicyName::None, PolicyName::Oracle, PolicyName::Advisor] {
            let r = replay_on_gpu(bytes, budget, policy, &Config::default());
            eprintln!(
                "{policy}: {:.1} ms, {:.2}x floor, H2D {} D2H {} faults {}, prefetch {:?}",
                r.time_ns as f64 / 1e6,
                r.over_floor(),
                r.h2d_bytes,
                r.d2h_bytes,
                r.gpu_faults,
                r.prefetch
            );
            if policy != PolicyName::None {
                // The stream is read in order: what is prefetched is used, and what the kernels
                // need comes by prefetch, not by faults. (On-time is only a share here: the host
                // issues each kernel before its data lands on this link-bound stream, each
                // prefetch starting behind a 20 us kernel.)
                let m = r.prefetch;
                assert!(m.used_bytes > 0 && m.accuracy > 0.9 && m.coverage > 0.99, "{policy}: {m:?}");
                assert!((0.0..=1.0).contains(&m.timeliness), "{policy}: {m:?}");
                assert!(r.gpu_faults < 16, "{policy}: {} fault groups", r.gpu_faults);
            }
            assert_eq!(r.backend, unimem_core::BackendKind::Cuda);
            assert!(r.time_ns >= r.compute_floor_ns, "{policy}: faster than the floor?");
            assert!(r.peak_resident_bytes <= budget + 64 * MIB, "{policy}: {}", r.peak_resident_bytes);
            // The host time of the calls is measured: every kernel launched, and the hints a
            // policy gave are part of its own time.
            let host = r.backend_host;
            assert!(host.launch > 0 && host.allocate > 0, "{policy}: {host:?}");
            assert!(host.hints() <= r.policy_ns, "{policy}: hints {host:?} vs policy {}", r.policy_ns);
            if policy != PolicyName::None {
                assert!(host.prefetch_to_device > 0, "{policy}: {host:?}");
            }
            times.push(r.time_ns);
        }
        assert!(times[2] < times[0], "advisor {} vs none {}", times[2], times[0]);
    }

    /// Issue 4's streaming benchmark: kernels read a 4 GiB managed buffer (on the host at the
    /// start) in 256 MiB chunks, one after another. Effective rate = 4 GiB / replay time, with
    /// no hints (fault-driven) and with the advisor, in the same run.
    #[test]
    fn streaming_4gib_with_the_advisor_against_faults() {
        use std::sync::Arc;
        use unimem_core::trace::{TraceAccess, TraceEvent};
        let (total, chunk) = (4u64 << 30, 256 * MIB);
        let mut w = TraceWriter::new(Vec::new(), false, "gpu", &TraceHeader::new("streaming-4gib")).unwrap();
        w.write(&TraceEvent::Alloc { id: 1, bytes: total, name: Some("stream".into()) }).unwrap();
        // Steps: 0 = a pass, 1 = the host updates the data (so the next pass starts on the host
        // too), 2 = a pass.
        for pass in 0..2u64 {
            if pass > 0 {
                w.write(&TraceEvent::Step { index: 1 }).unwrap();
                let acc = vec![TraceAccess { id: 1, offset: 0, len: total, mode: AccessMode::Write }];
                w.write(&TraceEvent::Host { name: Arc::from("host_update"), acc }).unwrap();
            }
            w.write(&TraceEvent::Step { index: 2 * pass }).unwrap();
            for k in 0..total / chunk {
                let acc = vec![TraceAccess { id: 1, offset: k * chunk, len: chunk, mode: AccessMode::Read }];
                w.write(&TraceEvent::Kernel {
                    name: Arc::from("read_chunk"),
                    dur_ns: 1000,
                    host_ns: None,
                    acc,
                })
                .unwrap();
            }
        }
        let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
        let mut rates = Vec::new();
        let mut migrate_only = Config::default();
        migrate_only.advisor.placements.clear();
        let runs = [
            (PolicyName::None, Config::default(), "none"),
            (PolicyName::Advisor, Config::default(), "advisor"),
            (PolicyName::Advisor, migrate_only, "advisor (migration only)"),
        ];
        for (policy, config, label) in runs {
            let r = replay_on_gpu(bytes, total + (1 << 30), policy, &config);
            // Per pass: the kernels' time (the host update between passes is not streaming).
            let passes: Vec<_> = r.steps.iter().filter(|s| s.compute_floor_ns > 0).collect();
            for s in &passes {
                let gbps = total as f64 / s.time_ns as f64;
                eprintln!(
                    "STREAM {label} step {}: {:.1} ms, {gbps:.1} GB/s",
                    s.index,
                    s.time_ns as f64 / 1e6
                );
            }
            let best = passes.iter().map(|s| total as f64 / s.time_ns as f64).fold(0.0, f64::max);
            rates.push(best);
        }
        eprintln!(
            "STREAM none {:.1} GB/s, advisor {:.1} GB/s, migration only {:.1}",
            rates[0], rates[1], rates[2]
        );
        assert!(
            rates[1] > 4.0 * rates[0],
            "the advisor streams at {:.1} GB/s vs faults {:.1}",
            rates[1],
            rates[0]
        );
    }
}

/// Fresh managed memory populated on the device by a prefetch is much cheaper than by a
/// kernel's first-touch faults, and is as fast to use afterwards (the simulator's and the
/// planners' premise).
#[test]
fn populating_by_prefetch_beats_faults_and_costs_nothing_later() {
    let dev = device();
    let k = Kernels::load(&dev).unwrap();
    let (s, h) = (dev.new_stream().unwrap(), dev.new_stream().unwrap());
    let (n, size) = (100, 8u64 << 20);
    let time = |f: &mut dyn FnMut()| {
        s.synchronize().unwrap();
        let t0 = std::time::Instant::now();
        f();
        s.synchronize().unwrap();
        h.synchronize().unwrap();
        t0.elapsed().as_secs_f64() * 1e3
    };
    let a: Vec<ManagedBuffer> = (0..n).map(|_| ManagedBuffer::alloc(&dev, size).unwrap()).collect();
    let b: Vec<ManagedBuffer> = (0..n).map(|_| ManagedBuffer::alloc(&dev, size).unwrap()).collect();
    let touch = |x: &ManagedBuffer, m| k.touch(&s, &[(x.ptr(), size, m)], 4096, 0).unwrap();
    let by_faults = time(&mut || a.iter().for_each(|x| touch(x, TouchMode::Write)));
    let by_prefetch = time(&mut || {
        for x in &b {
            x.prefetch(0, size, Location::DEVICE, &h).unwrap();
            s.join(&h).unwrap();
            touch(x, TouchMode::Write);
        }
    });
    let later_a = time(&mut || a.iter().for_each(|x| touch(x, TouchMode::Read)));
    let later_b = time(&mut || b.iter().for_each(|x| touch(x, TouchMode::Read)));
    eprintln!("populate {n} x 8 MiB: faults {by_faults:.1} ms, prefetch {by_prefetch:.1} ms; later reads {later_a:.2} / {later_b:.2} ms");
    assert!(by_prefetch * 3.0 < by_faults, "prefetch {by_prefetch:.1} ms vs faults {by_faults:.1} ms");
    assert!(
        later_b < 3.0 * later_a + 0.5,
        "prefetch-populated memory reads slower: {later_b:.2} vs {later_a:.2} ms"
    );
}

/// A host-executed kernel through the runtime on the GPU (the tensors' CPU launch path): the
/// touch that places and times it must leave the data intact, and what the body stores lands.
#[test]
fn host_executed_kernels_on_the_gpu_keep_and_store_data() {
    use unimem_core::backends::cuda::CudaBackend;
    use unimem_core::config::PolicyName;
    use unimem_core::{AccessMode, RangeAccess, Runtime};
    let gpu = CudaBackend::open(0, 64 << 20, false).unwrap();
    let rt = Runtime::builder().backend(Box::new(gpu)).policy(PolicyName::Advisor).build().unwrap();
    let r = rt.alloc("x", 8 << 20).unwrap();
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i * 7 + 3) as u8).collect();
    rt.write(r.id, 0, &data).unwrap();
    let acc = [RangeAccess { region: r.id, offset: 0, len: 8 << 20, mode: AccessMode::ReadWrite }];
    for round in 0..3u8 {
        rt.launch_cpu("add", 1000, &acc, |io| {
            let seen = io.bytes(0).to_vec();
            let want: Vec<u8> = data.iter().map(|b| b.wrapping_add(round)).collect();
            assert!(seen == want, "round {round}: the kernel saw other bytes than were stored");
            for b in io.bytes_mut(0).unwrap() {
                *b = b.wrapping_add(1);
            }
        })
        .unwrap();
    }
    let mut back = vec![0u8; 8 << 20];
    rt.read(r.id, 0, &mut back).unwrap();
    assert!(back.iter().zip(&data).all(|(b, d)| *b == d.wrapping_add(3)));
}

/// A real kernel launched through the runtime (the tensors' CUDA path): placed by the backend,
/// enqueued on its compute stream with the data's device address, and its writes land.
#[test]
fn native_kernels_run_through_the_runtime() {
    use std::sync::Arc;
    use unimem_core::backends::cuda::CudaBackend;
    use unimem_core::config::PolicyName;
    use unimem_core::{AccessMode, RangeAccess, Runtime};
    let dev = device();
    let kernels = Arc::new(Kernels::load(&dev).unwrap());
    let gpu = CudaBackend::open(0, 64 << 20, false).unwrap();
    let rt = Runtime::builder().backend(Box::new(gpu)).policy(PolicyName::Advisor).build().unwrap();
    let words = 4u64 << 20; // 16 MiB of u32
    let r = rt.alloc("w", words * 4).unwrap();
    let data: Vec<u8> = (0..words as u32).flat_map(|i| i.to_le_bytes()).collect();
    rt.write(r.id, 0, &data).unwrap();
    let acc = [RangeAccess { region: r.id, offset: 0, len: words * 4, mode: AccessMode::ReadWrite }];
    for _ in 0..3 {
        let k = kernels.clone();
        rt.launch_native("add_u32", &acc, move |l| k.add_u32(l.stream, l.ptrs[0], words, 1)).unwrap();
    }
    let stats = rt.synchronize().unwrap();
    assert_eq!(stats.backend_stats.kernels, 3);
    let mut back = vec![0u8; (words * 4) as usize];
    rt.read(r.id, 0, &mut back).unwrap();
    let ok =
        back.chunks(4).enumerate().all(|(i, w)| u32::from_le_bytes(w.try_into().unwrap()) == i as u32 + 3);
    assert!(ok, "every word got +3");
}

/// A program recorded on the GPU: each kernel's time is measured with CUDA events (spin
/// kernels take their declared time, real kernels their own), in launch order, each kernel
/// after the first carries the program's host time since the one before, and the trace
/// replays on the simulator.
#[test]
fn a_program_recorded_on_the_gpu_has_measured_kernel_times() {
    use std::sync::Arc;
    use unimem_core::backends::cuda::CudaBackend;
    use unimem_core::config::PolicyName;
    use unimem_core::trace::{TraceEvent, TraceReader};
    use unimem_core::{AccessMode, RangeAccess, Runtime};
    let dir = std::env::temp_dir().join(format!("unimem-gpu-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gpu.jsonl.gz");
    let dev = device();
    let kernels = Arc::new(Kernels::load(&dev).unwrap());
    let gpu = CudaBackend::open(0, 256 << 20, false).unwrap();
    let rt = Runtime::builder()
        .backend(Box::new(gpu))
        .policy(PolicyName::Advisor)
        .record_trace(&path)
        .build()
        .unwrap();
    let words = 16u64 << 20; // 64 MiB of u32
    let r = rt.alloc("w", words * 4).unwrap();
    rt.write(r.id, 0, &vec![0u8; (words * 4) as usize]).unwrap();
    let acc = [RangeAccess { region: r.id, offset: 0, len: words * 4, mode: AccessMode::ReadWrite }];
    // More kernels than the backend times at once, so the trace waits for times mid-run.
    for i in 0..700 {
        if i % 100 == 0 {
            rt.step().unwrap();
        }
        if i == 301 {
            // The program's own host work between two kernels.
            std::thread::sleep(std::time::Duration::from_millis(3));
        }
        if i % 2 == 0 {
            rt.launch("spin", 200_000, &acc).unwrap();
        } else {
            let k = kernels.clone();
            rt.launch_native("add_u32", &acc, move |l| k.add_u32(l.stream, l.ptrs[0], words, 1)).unwrap();
        }
    }
    rt.synchronize().unwrap();
    drop(rt);
    let reader = TraceReader::open(&path).unwrap();
    assert!(reader.header().meta["kernel_times"].as_str().unwrap().starts_with("measured"));
    let times: Vec<(String, u64, Option<u64>)> = reader
        .filter_map(|e| match e.unwrap() {
            TraceEvent::Kernel { name, dur_ns, host_ns, .. } => Some((name.to_string(), dur_ns, host_ns)),
            _ => None,
        })
        .collect();
    assert_eq!(times.len(), 700, "every kernel of the run");
    assert_eq!(times[0].2, None, "the first kernel has no kernel before it");
    let host: Vec<u64> = times[1..].iter().map(|t| t.2.expect("host time after the first")).collect();
    assert!(host[300] >= 3_000_000, "the 3 ms of host work before kernel 301: {} ns", host[300]);
    let mut sorted = host.clone();
    sorted.sort_unstable();
    // The loop issues a kernel every few microseconds (the launch call, and the native
    // kernel's reply): far below the sleep.
    assert!(sorted[sorted.len() / 2] < 1_000_000, "median host time {} ns", sorted[sorted.len() / 2]);
    for (i, (name, dur, _)) in times.iter().enumerate() {
        let want = if i % 2 == 0 { "spin" } else { "add_u32" };
        assert_eq!(name, want, "kernel {i} in launch order");
        if i == 0 {
            // A backend-timed kernel's slice starts before its waits for data: the first one
            // waits for the 64 MiB the host wrote (1.3-2.5 ms over the link).
            assert!((150_000..50_000_000).contains(dur), "spin {i}: {dur} ns");
        } else if i % 2 == 0 {
            // The spin kernel takes its declared 200 us with its data resident.
            assert!((150_000..2_000_000).contains(dur), "spin {i}: {dur} ns");
        } else {
            // 64 MiB read and written at HBM rates: tens of microseconds, never zero.
            assert!((5_000..5_000_000).contains(dur), "add_u32 {i}: {dur} ns");
        }
    }
    let stats = unimem_core::trace::TraceStats::compute(TraceReader::open(&path).unwrap()).unwrap();
    assert_eq!((stats.kernels, stats.steps), (700, 7));
    assert_eq!(stats.program_host_ns, host.iter().sum::<u64>());
    std::fs::remove_dir_all(&dir).unwrap();
}
