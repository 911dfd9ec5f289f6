use super::*;
use crate::backends::sim::SimBackend;
use crate::config::{Config, PolicyName};
use crate::cost::CostModel;
use crate::policy::{make_policy, make_replay_policy, Advisor, AdvisorSettings, NoHints};
use crate::seam::MemEvent;
use crate::trace::synth::{Pattern, Synth, SynthSpec};
use crate::trace::{TraceAccess, TraceEvent, TraceHeader, TraceWriter};

fn reader_of(events: impl IntoIterator<Item = TraceEvent>) -> TraceReader {
    let mut w = TraceWriter::new(Vec::new(), false, "mem", &TraceHeader::new("test")).unwrap();
    events.into_iter().for_each(|e| w.write(&e).unwrap());
    let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
    TraceReader::from_bytes("mem", bytes).unwrap()
}

fn replay(events: Vec<TraceEvent>, policy: PolicyName, budget: u64) -> ReplayReport {
    let mut config = Config::default();
    config.replay.oracle_lookahead = 4096;
    replay_with(events, policy, budget, &config, 0)
}

/// A replay as `unimem replay` runs it when `staging` is the trace's peak of live data.
fn replay_with(
    events: Vec<TraceEvent>,
    policy: PolicyName,
    budget: u64,
    config: &Config,
    staging: u64,
) -> ReplayReport {
    let cost = CostModel::h200();
    let mut backend = SimBackend::new(cost.clone(), budget);
    if staging > 0 {
        backend = backend.with_staging(staging).with_relocation(config.replay.relocate);
    }
    let mut policy = make_replay_policy(policy, budget, config, &cost);
    run(reader_of(events), &mut backend, policy.as_mut(), &mut |_| {}).unwrap()
}

/// 32 regions of 8 MiB read in order, over and over, on a device that holds half of them.
fn cyclic_stream() -> (SynthSpec, u64) {
    let spec = SynthSpec {
        pattern: Pattern::Streaming,
        events: 3000,
        regions: 32,
        region_bytes: 8 << 20,
        ..Default::default()
    };
    (spec, 128 << 20)
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
        TraceEvent::Kernel { name: "k".into(), dur_ns: 1_000_000, host_ns: None, acc: vec![read(1, mib4)] },
    ];
    let r = replay(events, PolicyName::None, 1 << 30);
    let cost = CostModel::h200();
    let fault = cost.gpu_fault_latency_ns + CostModel::transfer_ns(mib4, cost.gpu_fault_rate_gbps);
    // The host allocates and launches first; then the kernel faults its data in and runs.
    assert_eq!(r.time_ns, cost.alloc_ns(mib4) + cost.launch_host_ns + 1_000_000 + fault);
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
        TraceEvent::Kernel { name: "a".into(), dur_ns: 1000, host_ns: None, acc: vec![write(1)] },
        TraceEvent::Kernel { name: "b".into(), dur_ns: 1000, host_ns: None, acc: vec![write(2)] },
        TraceEvent::Kernel { name: "c".into(), dur_ns: 1000, host_ns: None, acc: vec![read(1, mib8)] },
    ];
    let r = replay(events, PolicyName::None, 12 << 20);
    assert_eq!(r.d2h_bytes, mib8, "4 MiB of each region was evicted");
    assert_eq!(r.evicted_bytes, mib8);
    assert_eq!(r.h2d_bytes, mib8 / 2, "only the evicted half of region 1 came back");
    assert!(r.peak_resident_bytes <= 12 << 20);
}

#[test]
fn oracle_beats_none_streaming_over_budget_and_holds_the_budget() {
    let (spec, budget) = cyclic_stream(); // half the 256 MiB dataset fits
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
    let (spec, budget) = cyclic_stream();
    let none = replay(Synth::new(spec).collect(), PolicyName::None, budget);
    let oracle = replay(Synth::new(spec).collect(), PolicyName::Oracle, budget);
    assert!(
        oracle.h2d_bytes * 10 < none.h2d_bytes * 7,
        "oracle {} vs none {}",
        oracle.h2d_bytes,
        none.h2d_bytes
    );
}

/// A decoder's weights streamed: `steps` steps of 8 passes over 16 layers, each layer one
/// 430 us kernel reading four matrices (24, 8, 32 and 32 MiB: 1.5 GiB in all); `split`: a
/// kernel per matrix instead (a pass of 64 kernels, 100 us per 24 MiB).
fn decoder(steps: u64, split: bool) -> Vec<TraceEvent> {
    let sizes = [24u64 << 20, 8 << 20, 32 << 20, 32 << 20];
    let mut events: Vec<TraceEvent> =
        (0..64).map(|id| TraceEvent::Alloc { id, bytes: sizes[id as usize % 4], name: None }).collect();
    for step in 0..steps {
        events.push(TraceEvent::Step { index: step });
        for _ in 0..8 {
            for layer in 0..16u64 {
                if split {
                    for m in 0..4 {
                        let (acc, dur_ns) =
                            (vec![read(4 * layer + m, sizes[m as usize])], sizes[m as usize] / 251);
                        events.push(TraceEvent::Kernel { name: "matrix".into(), dur_ns, host_ns: None, acc });
                    }
                    continue;
                }
                let acc = (0..4).map(|m| read(4 * layer + m, sizes[m as usize])).collect();
                events.push(TraceEvent::Kernel { name: "layer".into(), dur_ns: 430_000, host_ns: None, acc });
            }
        }
    }
    events
}

#[test]
fn keeping_a_share_of_every_layer_streams_a_decoder_faster() {
    // At half its weights, Belady keeps whole layers: the link idles through them and the
    // streamed layers arrive one behind another. A share of every layer kept (policy::keep)
    // moves about the same bytes in less time, for the oracle and (from its second step, having
    // seen one) for the advisor.
    let budget = 768 << 20;
    for policy in [PolicyName::Oracle, PolicyName::Advisor] {
        let mut on = Config::default();
        on.replay.oracle_lookahead = 4096;
        let mut off = on.clone();
        off.replay.oracle_keep_loops = false;
        off.advisor.keep_loops = false;
        let kept = replay_with(decoder(3, false), policy, budget, &on, 1536 << 20);
        let belady = replay_with(decoder(3, false), policy, budget, &off, 1536 << 20);
        let (k, b) = (kept.steps[2].time_ns as f64, belady.steps[2].time_ns as f64);
        assert!(k < 0.95 * b, "{policy:?}: last step {k} kept against {b}");
        let bytes = kept.h2d_bytes as f64 / belady.h2d_bytes as f64;
        assert!(bytes < 1.1, "{policy:?}: {bytes:.3}x the bytes in");
        assert!(kept.peak_resident_bytes <= budget);
    }
}

#[test]
fn an_advisor_keeps_a_share_within_its_first_step_once_the_loop_comes_round() {
    // Before any step has ended, the second pass's first kernel shows a reuse longer than the
    // budget: the advisor chooses its kept set from the first pass then, so the first step
    // (and a program that never marks a step) already streams less than without one.
    let budget = 768 << 20;
    let mut on = Config::default();
    on.replay.oracle_lookahead = 4096;
    let mut off = on.clone();
    off.advisor.keep_loops = false;
    let kept = replay_with(decoder(3, false), PolicyName::Advisor, budget, &on, 1536 << 20);
    let lru = replay_with(decoder(3, false), PolicyName::Advisor, budget, &off, 1536 << 20);
    // The first step with kernels (the allocations before it form a step of their own).
    let first =
        |r: &ReplayReport| r.steps.iter().find(|s| s.compute_floor_ns > 0).map_or(0, |s| s.time_ns) as f64;
    let (k, l) = (first(&kept), first(&lru));
    assert!(k < 0.95 * l, "first step {k} kept against {l}");
    let unmarked =
        || decoder(3, false).into_iter().filter(|e| !matches!(e, TraceEvent::Step { .. })).collect();
    let kept = replay_with(unmarked(), PolicyName::Advisor, budget, &on, 1536 << 20);
    let lru = replay_with(unmarked(), PolicyName::Advisor, budget, &off, 1536 << 20);
    assert!(
        (kept.time_ns as f64) < 0.95 * lru.time_ns as f64,
        "unmarked: {} against {}",
        kept.time_ns,
        lru.time_ns
    );
    assert!(kept.h2d_bytes < lru.h2d_bytes && kept.peak_resident_bytes <= budget);
}

#[test]
fn an_advisor_that_cannot_see_round_a_loop_keeps_what_belady_would() {
    // A kernel per matrix: a pass is 64 kernels, beyond the advisor's 16-kernel forecast, so
    // without a kept set it ranks the loop's data least recently used first and evicts just
    // what comes next; having seen a step, it keeps a share or a run (policy::keep).
    let mut on = Config::default();
    on.replay.oracle_lookahead = 4096;
    let mut off = on.clone();
    off.advisor.keep_loops = false;
    for budget in [384u64 << 20, 768 << 20] {
        let kept = replay_with(decoder(3, true), PolicyName::Advisor, budget, &on, 1536 << 20);
        let lru = replay_with(decoder(3, true), PolicyName::Advisor, budget, &off, 1536 << 20);
        let (k, l) = (kept.steps[2].time_ns as f64, lru.steps[2].time_ns as f64);
        assert!(k < 0.9 * l, "{budget}: last step {k} kept against {l}");
        assert!(kept.h2d_bytes < lru.h2d_bytes);
        assert!(kept.peak_resident_bytes <= budget);
    }
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

/// The synthetic patterns, read-only and with every other kernel updating its input in
/// place (so read-mostly duplicates cannot carry the result): the advisor is never slower than
/// `none`, holds the budget, and on uniform random access stays within 1.1x of `none`.
#[test]
fn advisor_on_synthetic_patterns_never_loses_to_none() {
    for pattern in Pattern::ALL {
        for write_every in [0, 2] {
            let spec = SynthSpec {
                pattern,
                events: 3000,
                regions: 32,
                region_bytes: 2 << 20,
                kernel_ns: 100_000,
                kernels_per_step: 32,
                seed: 7,
                write_every,
            };
            let events: Vec<TraceEvent> = Synth::new(spec).collect();
            let budget = 40 << 20; // the regions total 64 MiB
            let none = replay(events.clone(), PolicyName::None, budget);
            let advisor = replay(events, PolicyName::Advisor, budget);
            let ratio = advisor.time_ns as f64 / none.time_ns as f64;
            let what = format!("{pattern} (write every {write_every}): advisor/none = {ratio:.2}");
            assert!(ratio <= 1.0, "{what}");
            if pattern == Pattern::Random {
                assert!(ratio <= 1.1, "{what}");
            }
            assert!(advisor.peak_resident_bytes <= budget, "{what}: over the budget");
            assert!(advisor.prefetch.accuracy > 0.5, "{what}: accuracy {}", advisor.prefetch.accuracy);
        }
    }
}

/// Replays with `undeclared_every`, the advisor learning from faults or not.
fn replay_undeclared(events: Vec<TraceEvent>, every: u64, learn: bool, budget: u64) -> (ReplayReport, u64) {
    let cost = CostModel::h200();
    let mut backend = SimBackend::new(cost.clone(), budget);
    let mut config = Config::default();
    config.advisor.learn_from_faults = learn;
    let mut advisor = Advisor::new(AdvisorSettings::from_config(budget, &cost, &config.advisor));
    let options = Options { undeclared_every: every, ..Options::default() };
    let r = run_with(reader_of(events), &mut backend, &mut advisor, &mut |_| {}, options).unwrap();
    (r, advisor.learned_bytes())
}

/// The advisor never sees the accesses to one region in `every`; the backend performs them. With
/// learning on, their faults enter the history and the next step prefetches them.
#[test]
fn advisor_learns_undeclared_accesses_from_faults() {
    let (spec, budget) = cyclic_stream();
    let none = replay(Synth::new(spec).collect(), PolicyName::None, budget);
    for every in [1, 2] {
        let (blind, learned_off) = replay_undeclared(Synth::new(spec).collect(), every, false, budget);
        let (taught, learned) = replay_undeclared(Synth::new(spec).collect(), every, true, budget);
        eprintln!(
            "every {every}: none {} ms, blind {} ms ({} faults), learning {} ms ({} faults, {} MiB learned, pf {} MiB)",
            none.time_ns / 1_000_000,
            blind.time_ns / 1_000_000,
            blind.gpu_faults,
            taught.time_ns / 1_000_000,
            taught.gpu_faults,
            learned >> 20,
            taught.prefetch_h2d_bytes >> 20
        );
        assert_eq!(learned_off, 0, "nothing is learned with learn_from_faults off");
        assert!(learned > 0);
        // Streaming through twice the budget: what faulted in one step is prefetched in the next.
        assert!(taught.time_ns * 10 < blind.time_ns * 6, "learning pays");
        assert!(taught.gpu_faults * 3 < blind.gpu_faults);
    }
}

/// A sink that delivers the backend's events late, as CUPTI does on a GPU: what it got before
/// the previous look comes out at the next one.
#[derive(Default)]
struct LateSink {
    fresh: Vec<MemEvent>,
    held: std::collections::VecDeque<Vec<MemEvent>>,
    looks: u64,
    /// Looks an event waits before it is delivered (at least 1).
    lag: usize,
}

impl EventSink for LateSink {
    fn region(&mut self, _: RegionId, _: u64, _: Option<&str>, _: u64) -> Result<()> {
        Ok(())
    }
    fn freed(&mut self, _: RegionId) -> Result<()> {
        Ok(())
    }
    fn events(&mut self, events: &[MemEvent]) -> Result<()> {
        self.fresh.extend_from_slice(events);
        Ok(())
    }
    fn late(&mut self, out: &mut Vec<MemEvent>) -> Result<()> {
        self.looks += 1;
        self.held.push_back(std::mem::take(&mut self.fresh));
        while self.held.len() > self.lag.max(1) {
            out.extend(self.held.pop_front().unwrap_or_default());
        }
        Ok(())
    }
}

/// On a GPU the backend does not see faults; CUPTI reports them late. The advisor learns them
/// all the same, from a sink that delivers them late, placed by their time against the
/// kernels' device times.
#[test]
fn advisor_learns_undeclared_accesses_from_late_faults() {
    let (spec, budget) = cyclic_stream();
    let cost = CostModel::h200();
    // On the H200 CUPTI's reports came 190-370 kernels behind the host: 3 to 6 looks.
    let lag = 3;
    let run_late = |learn: bool| {
        let mut backend = SimBackend::new(cost.clone(), budget).with_faults_reported_late();
        let mut config = Config::default();
        config.advisor.learn_from_faults = learn;
        let settings = AdvisorSettings::from_config(budget, &cost, &config.advisor);
        let mut advisor = Advisor::new(settings);
        let mut sink = LateSink { lag, ..LateSink::default() };
        let options = Options { undeclared_every: 1, sink: Some(&mut sink), ..Options::default() };
        let r =
            run_with(reader_of(Synth::new(spec)), &mut backend, &mut advisor, &mut |_| {}, options).unwrap();
        (r, advisor.learned_bytes(), sink.looks)
    };
    let (blind, learned_off, looks_off) = run_late(false);
    let (taught, learned, looks) = run_late(true);
    let (on_time, _) = replay_undeclared(Synth::new(spec).collect(), 1, true, budget);
    eprintln!(
        "blind {} ms ({} faults), late {} ms ({} faults, {} MiB learned, {looks} looks), on time {} ms ({} faults)",
        blind.time_ns / 1_000_000,
        blind.gpu_faults,
        taught.time_ns / 1_000_000,
        taught.gpu_faults,
        learned >> 20,
        on_time.time_ns / 1_000_000,
        on_time.gpu_faults,
    );
    assert_eq!((learned_off, looks_off), (0, 0), "no learning, no looks at the sink");
    assert!(looks > 0 && learned > 0);
    assert!(taught.time_ns * 10 < blind.time_ns * 7, "learning late pays");
    assert!(taught.gpu_faults * 2 < blind.gpu_faults);
}

/// With every access declared there is nothing to learn from faults: what the advisor's own
/// prefetches populate (a region allocated early and first written by a later kernel) must
/// not be taken for the running kernel touching it.
#[test]
fn declared_programs_teach_nothing_from_faults() {
    let mib8 = 8 << 20;
    let access = |id, mode| TraceAccess { id, offset: 0, len: mib8, mode };
    let mut events = Vec::new();
    for step in 0..6u64 {
        let (a, b) = (10 * step + 1, 10 * step + 2);
        events.push(TraceEvent::Step { index: step });
        events.push(TraceEvent::Alloc { id: a, bytes: mib8, name: None });
        events.push(TraceEvent::Alloc { id: b, bytes: mib8, name: None });
        for (acc, name) in [
            (access(a, crate::AccessMode::Write), "a = f()"),
            (access(a, crate::AccessMode::Read), "g(a)"),
            (access(b, crate::AccessMode::Write), "b = h()"),
            (access(b, crate::AccessMode::Read), "k(b)"),
        ] {
            events.push(TraceEvent::Kernel {
                host_ns: None,
                name: std::sync::Arc::from(name),
                dur_ns: 2_000_000,
                acc: vec![acc],
            });
        }
        // Not freed: fresh memory every step (the pool would hand back populated pages).
    }
    let (r, learned) = replay_undeclared(events, 0, true, 1 << 30);
    assert!(r.prefetch.arrived_bytes > 0, "the advisor prefetched (populated) ahead: {:?}", r.prefetch);
    assert_eq!(learned, 0, "learned {learned} bytes from its own prefetches");
}

/// resnet50-train at 50% with the accesses to half its regions hidden, faults reported three
/// looks late (as CUPTI's on the H200): what the advisor learns late still pays.
#[test]
fn resnet_learns_hidden_accesses_from_late_faults() {
    let path =
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces/resnet50-train.jsonl.gz"));
    let stats = crate::trace::TraceStats::compute(TraceReader::open(path).unwrap()).unwrap();
    let budget = stats.peak_live_page_bytes / 2;
    let cost = CostModel::h200();
    let run = |learn: bool| {
        let mut backend =
            SimBackend::new(cost.clone(), budget).with_staging(budget).with_faults_reported_late();
        let mut config = Config::default();
        config.advisor.learn_from_faults = learn;
        let settings = AdvisorSettings::from_config(budget, &cost, &config.advisor);
        let mut advisor = Advisor::new(settings);
        let mut sink = LateSink { lag: 3, ..LateSink::default() };
        let options = Options { undeclared_every: 2, sink: Some(&mut sink), ..Options::default() };
        run_with(TraceReader::open(path).unwrap(), &mut backend, &mut advisor, &mut |_| {}, options).unwrap()
    };
    let (blind, taught) = (run(false), run(true));
    eprintln!(
        "blind {} ms, learning late {} ms, {:?}",
        blind.time_ns / 1_000_000,
        taught.time_ns / 1_000_000,
        taught.learning
    );
    assert_eq!(blind.learning, Learning::default());
    assert!(taught.learning.late_kernels > 100 && taught.learning.observed > 100, "{:?}", taught.learning);
    assert!(taught.time_ns * 13 < blind.time_ns * 10, "learning late pays on resnet50-train");
}

/// A simulator that notes the calls the replay makes that matter for data from before the
/// trace: allocations, host preloads and launches, in order; and the policy's host work it is
/// told of.
struct CallLog {
    sim: SimBackend,
    calls: Vec<String>,
    work_ns: u64,
}

impl MemoryBackend for CallLog {
    fn info(&self) -> &crate::seam::BackendInfo {
        self.sim.info()
    }
    fn allocate(&mut self, id: RegionId, bytes: u64) -> Result<u64> {
        self.calls.push(format!("alloc {}", id.0));
        self.sim.allocate(id, bytes)
    }
    fn free(&mut self, id: RegionId) -> Result<()> {
        self.sim.free(id)
    }
    fn advise(&mut self, range: ByteRange, advice: crate::seam::Advice) -> Result<()> {
        self.sim.advise(range, advice)
    }
    fn migrate(&mut self, ranges: &[ByteRange], to: crate::seam::Destination) -> Result<()> {
        self.sim.migrate(ranges, to)
    }
    fn discard(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.sim.discard(ranges)
    }
    fn launch(&mut self, kernel: &KernelLaunch<'_>) -> Result<()> {
        self.calls.push(format!("launch {}", kernel.name));
        self.sim.launch(kernel)
    }
    fn host_access(&mut self, access: crate::seam::HostAccess<'_>) -> Result<()> {
        if let crate::seam::HostAccess::Preload(range) = access {
            self.calls.push(format!("preload {}", range.region.0));
        }
        self.sim.host_access(access)
    }
    fn copy(&mut self, id: RegionId, offset: u64, transfer: crate::seam::Transfer<'_>) -> Result<()> {
        self.sim.copy(id, offset, transfer)
    }
    fn synchronize(&mut self) -> Result<u64> {
        self.calls.push("synchronize".into());
        self.sim.synchronize()
    }
    fn mark_work(&mut self) -> Result<crate::seam::WorkMark> {
        self.calls.push("mark".into());
        self.sim.mark_work()
    }
    fn work_mark_ns(&mut self, mark: crate::seam::WorkMark) -> Result<u64> {
        self.calls.push("time mark".into());
        self.sim.work_mark_ns(mark)
    }
    fn host_work(&mut self, wall_ns: u64) {
        self.work_ns += wall_ns;
        self.sim.host_work(wall_ns)
    }
    fn program_host_time(&mut self, host_ns: u64) {
        self.sim.program_host_time(host_ns)
    }
    fn residency(&self, range: ByteRange) -> Result<crate::seam::Residency> {
        self.sim.residency(range)
    }
    fn stats(&self) -> crate::seam::BackendStats {
        self.sim.stats()
    }
    fn events(&mut self) -> &mut crate::seam::Recorder {
        self.sim.events()
    }
}

/// Every hook of the policy is reported to the backend as host work, all of the policy's time
/// (what `sim.policy_time = "measured"` charges; the simulator's own test checks the charge).
#[test]
fn the_policys_time_is_reported_to_the_backend_as_host_work() {
    let (spec, budget) = cyclic_stream();
    let cost = CostModel::h200();
    let sim = SimBackend::new(cost.clone(), budget).with_host_work_charged(true);
    let mut backend = CallLog { sim, calls: Vec::new(), work_ns: 0 };
    let mut policy = make_policy(PolicyName::Advisor, budget, &Config::default(), &cost);
    let reader = reader_of(Synth::new(spec));
    let r = run_with(reader, &mut backend, policy.as_mut(), &mut |_| {}, Options::default()).unwrap();
    assert!(backend.work_ns > 0 && backend.work_ns == r.policy_ns, "{} vs {}", backend.work_ns, r.policy_ns);
}

/// Data from before the trace goes to the host as its region is allocated when a first pass
/// found it (the CLI's), and as its first read enters the window otherwise; the replay's
/// result is the same either way on the simulator. On a GPU the first is what matters: a
/// preload waits for the kernels queued before it, and ResNet's first step had 160 of them.
#[test]
fn data_from_before_the_trace_is_preloaded_at_allocation_when_known() {
    let mib = 1 << 20;
    let write = |id, len| TraceAccess { id, offset: 0, len, mode: crate::AccessMode::Write };
    let kernel = |name: &str, acc| TraceEvent::Kernel { name: name.into(), dur_ns: 1000, host_ns: None, acc };
    let events = vec![
        TraceEvent::Alloc { id: 1, bytes: 4 * mib, name: None },
        TraceEvent::Alloc { id: 2, bytes: 4 * mib, name: None },
        TraceEvent::Alloc { id: 3, bytes: 4 * mib, name: None },
        kernel("k0", vec![write(2, 4 * mib)]),
        kernel("k1", vec![read(1, 4 * mib), read(2, 4 * mib)]),
        TraceEvent::Host { name: "h".into(), acc: vec![write(3, 4 * mib)] },
    ];
    let stats = crate::trace::TraceStats::compute(reader_of(events.clone())).unwrap();
    assert_eq!(stats.pre_existing.len(), 1);
    assert!(stats.pre_existing.contains(&1), "{:?}", stats.pre_existing);
    let json = serde_json::to_value(&stats).unwrap();
    assert_eq!(json["pre_existing_regions"], 1, "reports give the number: {json}");

    let run = |known: Option<&crate::trace::RegionIds>| {
        let mut backend =
            CallLog { sim: SimBackend::new(CostModel::h200(), 64 * mib), calls: Vec::new(), work_ns: 0 };
        let options = Options { pre_existing: known, ..Options::default() };
        let r =
            run_with(reader_of(events.clone()), &mut backend, &mut NoHints, &mut |_| {}, options).unwrap();
        (r, backend.calls)
    };
    let (known, early) = run(Some(&stats.pre_existing));
    let (found, late) = run(None);
    assert_eq!(
        early,
        ["alloc 1", "preload 1", "alloc 2", "alloc 3", "launch k0", "launch k1", "synchronize"]
    );
    assert_eq!(late, ["alloc 1", "alloc 2", "alloc 3", "launch k0", "preload 1", "launch k1", "synchronize"]);
    assert_eq!((known.time_ns, known.h2d_bytes), (found.time_ns, found.h2d_bytes));
    assert_eq!(known.h2d_bytes, 4 * mib, "region 1 came from the host");
}

/// A step's start is marked as the step begins and timed only once the replay's work is done:
/// a GPU backend that waited for its queued work at every step would drain its queue there,
/// and the host would lose the lead it had over the device (the copies its plans issue ahead
/// would start only as the device reached them).
#[test]
fn steps_are_marked_as_they_begin_and_timed_once_the_work_is_done() {
    let mib = 1 << 20;
    let write = |id| TraceAccess { id, offset: 0, len: 4 * mib, mode: crate::AccessMode::Write };
    let kernel = |name: &str, dur_ns| TraceEvent::Kernel {
        name: name.into(),
        dur_ns,
        host_ns: None,
        acc: vec![write(1)],
    };
    let events = vec![
        TraceEvent::Step { index: 0 },
        TraceEvent::Alloc { id: 1, bytes: 4 * mib, name: None },
        kernel("a", 1_000_000),
        TraceEvent::Step { index: 1 },
        kernel("b", 2_000_000),
        kernel("c", 3_000_000),
    ];
    let mut backend =
        CallLog { sim: SimBackend::new(CostModel::h200(), 64 * mib), calls: Vec::new(), work_ns: 0 };
    let r = run_with(reader_of(events), &mut backend, &mut NoHints, &mut |_| {}, Options::default()).unwrap();
    let calls: Vec<&str> =
        backend.calls.iter().map(String::as_str).filter(|c| !c.starts_with("alloc")).collect();
    assert_eq!(
        calls,
        ["mark", "launch a", "mark", "launch b", "launch c", "synchronize", "time mark", "time mark"]
    );
    let steps: Vec<(u64, u64)> = r.steps.iter().map(|s| (s.index, s.compute_floor_ns)).collect();
    assert_eq!(steps, [(0, 1_000_000), (1, 5_000_000)]);
    // Each step's time is the simulator's: from the work before its mark to the next mark.
    assert!(r.steps[0].time_ns >= 1_000_000 && r.steps[1].time_ns >= 5_000_000, "{:?}", r.steps);
    assert_eq!(r.steps.iter().map(|s| s.time_ns).sum::<u64>(), r.time_ns);
}

#[test]
fn a_clairvoyant_advisor_plans_from_the_trace_where_its_predictors_cannot() {
    // 16 regions of 8 MiB, each read by one 1 ms kernel, in an order shuffled anew every
    // step, on a device that holds half of them: no history predicts the next region's use,
    // the trace does.
    let mut events: Vec<TraceEvent> =
        (1..=16).map(|id| TraceEvent::Alloc { id, bytes: 8 << 20, name: None }).collect();
    let mut order: Vec<u64> = (1..=16).collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for step in 0..4 {
        events.push(TraceEvent::Step { index: step });
        for i in (1..order.len()).rev() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            order.swap(i, (seed % (i as u64 + 1)) as usize);
        }
        for &id in &order {
            events.push(TraceEvent::Kernel {
                name: "k".into(),
                dur_ns: 1_000_000,
                host_ns: None,
                acc: vec![read(id, 8 << 20)],
            });
        }
    }
    let mut config = Config::default();
    config.replay.oracle_lookahead = 4096;
    let learned = replay_with(events.clone(), PolicyName::Advisor, 64 << 20, &config, 128 << 20);
    config.replay.clairvoyant_advisor = true;
    let seeing = replay_with(events, PolicyName::Advisor, 64 << 20, &config, 128 << 20);
    assert_eq!((learned.policy.as_str(), seeing.policy.as_str()), ("advisor", "advisor (clairvoyant)"));
    // Knowing each region's next use, its evictions take the one needed last: less comes back
    // in (here 320 MiB against 456; both bring each region in once in the first step).
    assert!(seeing.h2d_bytes < learned.h2d_bytes, "{} against {}", seeing.h2d_bytes, learned.h2d_bytes);
    assert!(seeing.h2d_bytes >= 128 << 20, "{seeing:?}");
    assert_eq!(seeing.peak_footprint_bytes, 64 << 20);
}

/// A training-like step: 64 activations of 2 MiB written in a forward pass faster than the
/// link can take them out, each read by the next kernel, then read back in reverse and freed;
/// half of them fit. The host issues a kernel no faster than the device runs one (as a GPU
/// replay's host does), so evictions are issued where room runs short. From its second step
/// the advisor writes back the activations it evicted before their reuse once their kernels
/// are past: their evictions copy nothing, the link out carries no more, and the replay is
/// faster.
#[test]
fn an_advisor_writes_back_what_it_evicted_last_step_ahead_of_its_eviction() {
    let (n, size) = (64u64, 2 << 20);
    let mut events = Vec::new();
    for step in 0..4u64 {
        events.push(TraceEvent::Step { index: step });
        let base = 1 + step * n;
        for i in 0..n {
            events.push(TraceEvent::Alloc { id: base + i, bytes: size, name: None });
            let mut acc =
                vec![TraceAccess { id: base + i, offset: 0, len: size, mode: crate::AccessMode::Write }];
            acc.extend((i > 0).then(|| read(base + i - 1, size)));
            events.push(TraceEvent::Kernel {
                name: "fwd".into(),
                dur_ns: 20_000,
                host_ns: Some(20_000),
                acc,
            });
        }
        for i in (0..n).rev() {
            let acc = vec![read(base + i, size)];
            events.push(TraceEvent::Kernel {
                name: "bwd".into(),
                dur_ns: 20_000,
                host_ns: Some(20_000),
                acc,
            });
            events.push(TraceEvent::Free { id: base + i });
        }
    }
    let budget = n * size / 2;
    let run_with = |write_back: bool| {
        let mut config = Config::default();
        config.advisor.write_back = write_back;
        let cost = CostModel::h200().device_arena();
        let mut backend = SimBackend::new(cost.clone(), budget)
            .with_staging(n * size)
            .with_relocation(true)
            .with_device_arena(true);
        let mut policy = make_replay_policy(PolicyName::Advisor, budget, &config, &cost);
        run(reader_of(events.clone()), &mut backend, policy.as_mut(), &mut |_| {}).unwrap()
    };
    let (off, on) = (run_with(false), run_with(true));
    assert_eq!(off.placement.written_back, 0);
    assert!(on.placement.written_back >= 3 * 8 * size, "{:?}", on.placement);
    assert!(on.placement.staged_clean >= on.placement.written_back / 2, "{:?}", on.placement);
    assert!(on.d2h_bytes <= off.d2h_bytes + off.d2h_bytes / 10, "{} against {}", on.d2h_bytes, off.d2h_bytes);
    assert!(on.time_ns < off.time_ns, "{} against {}", on.time_ns, off.time_ns);
}
