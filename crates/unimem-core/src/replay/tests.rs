use super::*;
use crate::backend::sim::SimBackend;
use crate::trace::synth::{Pattern, Synth, SynthSpec};
use crate::trace::{TraceHeader, TraceWriter};

fn reader_of(events: impl IntoIterator<Item = TraceEvent>) -> TraceReader {
    let mut w = TraceWriter::new(Vec::new(), false, "mem", &TraceHeader::new("test")).unwrap();
    events.into_iter().for_each(|e| w.write(&e).unwrap());
    let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
    TraceReader::from_bytes("mem", bytes).unwrap()
}

fn replay(events: Vec<TraceEvent>, policy: PolicyName, budget: u64) -> ReplayReport {
    let cost = CostModel::h200();
    let mut backend = SimBackend::new(cost.clone(), budget);
    let mut config = Config::default();
    config.replay.oracle_lookahead = 4096;
    let mut policy = make_policy(policy, budget, &config, &cost);
    run(reader_of(events), &mut backend, policy.as_mut(), &mut |_| {}).unwrap()
}

fn read(id: u64, len: u64) -> TraceAccess {
    TraceAccess { id, offset: 0, len, mode: crate::AccessMode::Read }
}

#[test]
fn none_policy_pays_exactly_the_fault_model() {
    // One 4 MiB host-resident region read once: one contiguous fault group, 4 MiB at 4.41 GB/s.
    let mib4 = 4 << 20;
    let events = vec![
        TraceEvent::Alloc { id: 1, bytes: mib4, name: None },
        TraceEvent::Host {
            name: "init".into(),
            acc: vec![TraceAccess { mode: crate::AccessMode::Write, ..read(1, mib4) }],
        },
        TraceEvent::Kernel { name: "k".into(), dur_ns: 1_000_000, acc: vec![read(1, mib4)] },
    ];
    let r = replay(events, PolicyName::None, 1 << 30);
    let cost = CostModel::h200();
    let fault = cost.gpu_fault_latency_ns + CostModel::transfer_ns(mib4, cost.gpu_fault_rate_gbps);
    assert_eq!(r.time_ns, 1_000_000 + fault);
    assert_eq!((r.h2d_bytes, r.gpu_faults, r.compute_floor_ns), (mib4, 1, 1_000_000));
    assert_eq!(r.peak_resident_bytes, mib4);
}

#[test]
fn written_then_evicted_data_costs_both_ways() {
    // Two 8 MiB outputs on a 12 MiB device. Writing region 2 evicts the two oldest 2 MiB blocks
    // of region 1 (4 MiB: just enough room). Reading region 1 again faults those 4 MiB back; the
    // rest of region 1 is protected (the kernel uses it), so two blocks of region 2 go.
    let mib8 = 8 << 20;
    let write = |id| TraceAccess { mode: crate::AccessMode::Write, ..read(id, mib8) };
    let events = vec![
        TraceEvent::Alloc { id: 1, bytes: mib8, name: None },
        TraceEvent::Alloc { id: 2, bytes: mib8, name: None },
        TraceEvent::Kernel { name: "a".into(), dur_ns: 1000, acc: vec![write(1)] },
        TraceEvent::Kernel { name: "b".into(), dur_ns: 1000, acc: vec![write(2)] },
        TraceEvent::Kernel { name: "c".into(), dur_ns: 1000, acc: vec![read(1, mib8)] },
    ];
    let r = replay(events, PolicyName::None, 12 << 20);
    assert_eq!(r.d2h_bytes, mib8, "4 MiB of each region was evicted");
    assert_eq!(r.evicted_bytes, mib8);
    assert_eq!(r.h2d_bytes, mib8 / 2, "only the evicted half of region 1 came back");
    assert!(r.peak_resident_bytes <= 12 << 20);
}

#[test]
fn oracle_beats_none_streaming_over_budget_and_holds_the_budget() {
    let spec = SynthSpec {
        pattern: Pattern::Streaming,
        events: 3000,
        regions: 32,
        region_bytes: 8 << 20,
        ..Default::default()
    };
    let budget = 128 << 20; // half the 256 MiB dataset
    let none = replay(Synth::new(spec).collect(), PolicyName::None, budget);
    let oracle = replay(Synth::new(spec).collect(), PolicyName::Oracle, budget);
    assert_eq!(none.compute_floor_ns, oracle.compute_floor_ns);
    // Link-bound: 8 MiB in (171 us at 48.9 GB/s) and 8 MiB back (500 us at 16.8 GB/s) per
    // 100 us kernel for the oracle, against 1.9 ms of faults plus the same eviction for none.
    assert!(oracle.time_ns * 2 < none.time_ns, "oracle {} vs none {}", oracle.time_ns, none.time_ns);
    assert!(oracle.peak_resident_bytes <= budget, "{} > {budget}", oracle.peak_resident_bytes);
    assert!(oracle.prefetch_h2d_bytes > 0 && oracle.gpu_faults < none.gpu_faults);
}

#[test]
fn oracle_keeps_part_of_a_cyclic_stream_resident() {
    // 32 regions swept in order on a device that holds 16: LRM evicts exactly what comes next
    // and moves every region on every sweep; Belady keeps about half of them resident. (An
    // early-prefetch rule that evicts each region right after its use moves as much as LRM.)
    let spec = SynthSpec {
        pattern: Pattern::Streaming,
        events: 3000,
        regions: 32,
        region_bytes: 8 << 20,
        ..Default::default()
    };
    let budget = 128 << 20;
    let none = replay(Synth::new(spec).collect(), PolicyName::None, budget);
    let oracle = replay(Synth::new(spec).collect(), PolicyName::Oracle, budget);
    assert!(
        oracle.h2d_bytes * 10 < none.h2d_bytes * 7,
        "oracle {} vs none {}",
        oracle.h2d_bytes,
        none.h2d_bytes
    );
}

#[test]
fn at_full_budget_oracle_reaches_the_floor_after_warm_up() {
    let spec = SynthSpec {
        pattern: Pattern::Graph,
        events: 4000,
        regions: 16,
        region_bytes: 4 << 20,
        kernels_per_step: 100,
        ..Default::default()
    };
    let r = replay(Synth::new(spec).collect(), PolicyName::Oracle, 1 << 30);
    assert!(r.steps.len() >= 5, "{:?}", r.steps.len());
    for s in &r.steps[2..r.steps.len() - 1] {
        let over = s.time_ns as f64 / s.compute_floor_ns as f64;
        assert!(over < 1.05, "step {} at {over:.3}x the floor", s.index);
    }
}

#[test]
fn steps_partition_the_total_time() {
    let spec = SynthSpec {
        pattern: Pattern::Random,
        events: 2000,
        regions: 8,
        region_bytes: 1 << 20,
        kernels_per_step: 50,
        ..Default::default()
    };
    let r = replay(Synth::new(spec).collect(), PolicyName::None, 4 << 20);
    assert_eq!(r.steps.iter().map(|s| s.time_ns).sum::<u64>(), r.time_ns);
    assert_eq!(r.steps.iter().map(|s| s.compute_floor_ns).sum::<u64>(), r.compute_floor_ns);
    assert_eq!(r.steps[0].index, 0);
}
