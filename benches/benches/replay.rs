//! Replay and simulator throughput (criterion). Run: `cargo bench -p unimem-benches`.
//! Figures are recorded in docs/benchmarks.md with date and machine.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

/// The same allocator as the `unimem` binary, so the figures match what users run.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use unimem_core::backends::sim::{CostModel, SimBackend};
use unimem_core::config::{Config, PolicyName};
use unimem_core::replay;
use unimem_core::trace::synth::{Pattern, Synth, SynthSpec};
use unimem_core::trace::{TraceReader, TraceStats};
use unimem_core::{AccessMode, KernelLaunch, MemoryBackend, RangeAccess, RegionId};

/// A synthetic trace encoded in memory (plain JSON Lines), and its event count.
fn encoded(pattern: Pattern, events: u64) -> (&'static [u8], u64) {
    let spec = SynthSpec {
        pattern,
        events,
        regions: 256,
        region_bytes: 1 << 20,
        kernel_ns: 20_000,
        ..Default::default()
    };
    (Box::leak(Synth::encode(spec).unwrap().into_boxed_slice()), events)
}

fn replay_none(c: &mut Criterion) {
    let (bytes, events) = encoded(Pattern::Streaming, 200_000);
    let stats = TraceStats::compute(TraceReader::from_bytes("bench", bytes).unwrap()).unwrap();
    let budget = stats.peak_live_page_bytes / 2;
    let mut g = c.benchmark_group("replay");
    g.sample_size(10).throughput(Throughput::Elements(events));
    g.bench_function("none_streaming_50pct_200k_events", |b| {
        b.iter_batched(
            || (TraceReader::from_bytes("bench", bytes).unwrap(), SimBackend::new(CostModel::h200(), budget)),
            |(reader, mut sim)| {
                let mut policy = unimem_core::policy::make_policy(
                    PolicyName::None,
                    budget,
                    &Config::default(),
                    &CostModel::h200(),
                );
                replay::run(reader, &mut sim, policy.as_mut(), &mut |_| {}).unwrap()
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("parse_only_200k_events", |b| {
        b.iter(|| {
            let reader = TraceReader::from_bytes("bench", bytes).unwrap();
            reader.fold(0u64, |n, event| {
                event.unwrap();
                n + 1
            })
        })
    });
    g.finish();
}

fn replay_oracle(c: &mut Criterion) {
    let (bytes, events) = encoded(Pattern::Graph, 20_000);
    let stats = TraceStats::compute(TraceReader::from_bytes("bench", bytes).unwrap()).unwrap();
    let budget = stats.peak_live_page_bytes / 2;
    let mut g = c.benchmark_group("replay");
    g.sample_size(10).throughput(Throughput::Elements(events));
    g.bench_function("oracle_graph_50pct_20k_events", |b| {
        b.iter_batched(
            || (TraceReader::from_bytes("bench", bytes).unwrap(), SimBackend::new(CostModel::h200(), budget)),
            |(reader, mut sim)| {
                let cost = CostModel::h200();
                let mut policy =
                    unimem_core::policy::make_policy(PolicyName::Oracle, budget, &Config::default(), &cost);
                replay::run(reader, &mut sim, policy.as_mut(), &mut |_| {}).unwrap()
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

/// The simulator's cost for one kernel whose data is resident: the floor of per-launch overhead.
fn sim_launch(c: &mut Criterion) {
    let mut sim = SimBackend::h200();
    let ids: Vec<RegionId> = (1..=8).map(RegionId).collect();
    for &id in &ids {
        sim.allocate(id, 1 << 20).unwrap();
    }
    let acc: Vec<RangeAccess> = ids
        .iter()
        .map(|&region| RangeAccess { region, offset: 0, len: 1 << 20, mode: AccessMode::ReadWrite })
        .collect();
    sim.launch(&KernelLaunch { name: "warm", dur_ns: 1, accesses: &acc }).unwrap();
    c.bench_function("sim/launch_8_resident_regions", |b| {
        b.iter(|| sim.launch(&KernelLaunch { name: "k", dur_ns: 1000, accesses: &acc }).unwrap())
    });
}

/// The advisor's per-access cost: one access observed by the tournament of predictors (which
/// also scores and forecasts at each kernel end), with 100,000 live regions learned. Each
/// kernel touches 4 regions of a step that repeats, as training does.
fn advisor_observe(c: &mut Criterion) {
    use unimem_core::policy::advisor::{Observation, Predictor, RegionKey, Tournament};
    const REGIONS: u64 = 100_000;
    const PER_KERNEL: u64 = 4;
    let mut t = Tournament::standard();
    let mut kernel = 0u64;
    let feed = |t: &mut Tournament, kernel: &mut u64| {
        for j in 0..PER_KERNEL {
            let key = RegionKey((*kernel * PER_KERNEL + j) % REGIONS);
            t.observe(&Observation { key, offset: 0, len: 4096, mode: AccessMode::Read, kernel: *kernel });
        }
        t.end_kernel(*kernel);
        *kernel += 1;
        if kernel.is_multiple_of(REGIONS / PER_KERNEL) {
            t.on_step();
        }
    };
    // Two whole steps first, so every region is known to every predictor.
    for _ in 0..2 * REGIONS / PER_KERNEL {
        feed(&mut t, &mut kernel);
    }
    let mut g = c.benchmark_group("advisor");
    g.throughput(Throughput::Elements(PER_KERNEL));
    g.bench_function("tournament_kernel_of_4_accesses_100k_regions", |b| {
        b.iter(|| feed(&mut t, &mut kernel))
    });
    g.finish();
}

/// The planners' host time on a real trace: resnet50-train replayed on the simulator with each
/// policy at 100% and 50%. On a GPU this time sits between kernel launches; the difference to
/// `none` is the policy's (its planning, learning and hint bookkeeping).
fn replay_resnet(c: &mut Criterion) {
    let path =
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../traces/resnet50-train.jsonl.gz"));
    let open = || TraceReader::open(path).unwrap();
    let stats = TraceStats::compute(open()).unwrap();
    let mut g = c.benchmark_group("resnet50-train");
    g.sample_size(10).throughput(Throughput::Elements(stats.kernels));
    for (pct, budget) in [(100, stats.peak_live_page_bytes), (50, stats.peak_live_page_bytes / 2)] {
        for policy in [PolicyName::None, PolicyName::Oracle, PolicyName::Advisor] {
            g.bench_function(format!("{policy}_{pct}pct"), |b| {
                b.iter_batched(
                    // With staging memory as large as the budget, as `unimem replay` opens it.
                    || (open(), SimBackend::new(CostModel::h200(), budget).with_staging(budget)),
                    |(reader, mut sim)| {
                        let cost = CostModel::h200();
                        let mut p =
                            unimem_core::policy::make_policy(policy, budget, &Config::default(), &cost);
                        replay::run(reader, &mut sim, p.as_mut(), &mut |_| {}).unwrap()
                    },
                    BatchSize::PerIteration,
                )
            });
        }
    }
    g.finish();
}

/// The planners' host time per kernel with 10,000 live regions at half the memory they need:
/// a random pattern over 10,000 regions of 64 KiB, replayed on the simulator with each policy.
/// The difference to `none` is the policy's time (learning, planning, hint bookkeeping), which
/// on a GPU sits between kernel launches.
fn plan_many_regions(c: &mut Criterion) {
    let spec = SynthSpec {
        pattern: Pattern::Random,
        events: 60_000,
        regions: 10_000,
        region_bytes: 64 << 10,
        kernel_ns: 20_000,
        ..Default::default()
    };
    let bytes: &'static [u8] = Box::leak(Synth::encode(spec).unwrap().into_boxed_slice());
    let stats = TraceStats::compute(TraceReader::from_bytes("bench", bytes).unwrap()).unwrap();
    let budget = stats.peak_live_page_bytes / 2;
    let mut g = c.benchmark_group("plan_10k_regions_50pct");
    g.sample_size(10).throughput(Throughput::Elements(stats.kernels));
    for policy in [PolicyName::None, PolicyName::Oracle, PolicyName::Advisor] {
        g.bench_function(format!("{policy}_per_kernel"), |b| {
            b.iter_batched(
                || {
                    let sim = SimBackend::new(CostModel::h200(), budget).with_staging(budget);
                    (TraceReader::from_bytes("bench", bytes).unwrap(), sim)
                },
                |(reader, mut sim)| {
                    let cost = CostModel::h200();
                    let mut p = unimem_core::policy::make_policy(policy, budget, &Config::default(), &cost);
                    replay::run(reader, &mut sim, p.as_mut(), &mut |_| {}).unwrap()
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

/// Choosing what a step keeps of its read-only data (`policy::keep::keep_set`, once a step in
/// both placing policies): a decoder step of 8 passes over 64 layers (512 kernels), each layer
/// reading four matrices (24, 8, 32 and 32 MiB), at half its weights.
fn keep_set_decoder(c: &mut Criterion) {
    use unimem_core::policy::keep::{keep_set, LoopKernel, Runs};
    const MIB: u64 = 1 << 20;
    // What the advisor asks: the best run where its 16-kernel forecast does not span the loop.
    const ADVISOR_RUNS: Runs = Runs::Beyond(16);
    let sizes = [24 * MIB, 8 * MIB, 32 * MIB, 32 * MIB];
    let kernels: Vec<LoopKernel<u32>> = (0..8 * 64u32)
        .map(|k| {
            let layer = k % 64;
            LoopKernel {
                dur_ns: 430_000,
                read_only: (0..4).map(|m| (4 * layer + m, sizes[m as usize])).collect(),
                other: MIB,
            }
        })
        .collect();
    let budget = 64 * 96 * MIB / 2;
    c.bench_function("keep_set_decoder_512_kernels", |b| {
        b.iter(|| keep_set(&kernels, budget, CostModel::h200().link_rate_gbps, ADVISOR_RUNS))
    });
    // A kernel per operator (`scripts/gen-decode-trace.py`): 8 passes over 16 layers of five
    // kernels, four reading a matrix each and one a KV cache (other data), at a quarter.
    let kernels: Vec<LoopKernel<u32>> = (0..8 * 16u32)
        .flat_map(|k| {
            let layer = k % 16;
            let matrix = move |m: u32| LoopKernel {
                dur_ns: sizes[m as usize] / MIB * 4500,
                read_only: vec![(4 * layer + m, sizes[m as usize])],
                other: 64 << 10,
            };
            let attn = LoopKernel { dur_ns: 27_000, read_only: Vec::new(), other: 6 * MIB };
            [matrix(0), attn, matrix(1), matrix(2), matrix(3)]
        })
        .collect();
    let budget = 16 * 102 * MIB / 4;
    c.bench_function("keep_set_operators_640_kernels", |b| {
        b.iter(|| keep_set(&kernels, budget, CostModel::h200().link_rate_gbps, ADVISOR_RUNS))
    });
}

criterion_group!(
    benches,
    keep_set_decoder,
    replay_none,
    replay_oracle,
    sim_launch,
    advisor_observe,
    replay_resnet,
    plan_many_regions
);
criterion_main!(benches);
