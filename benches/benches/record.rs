//! What recording a program's trace costs it (criterion): the same program on a runtime with
//! and without `trace.record`, wall time per launch through to the last kernel's completion.
//! Run: `cargo bench -p unimem-benches --bench record`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use unimem_core::backends::sim::{CostModel, SimBackend};
use unimem_core::config::PolicyName;
use unimem_core::{AccessMode, RangeAccess, Runtime};

const REGIONS: u64 = 64;
const LAUNCHES: u64 = 20_000;
const MIB: u64 = 1 << 20;

/// Launches of three accesses each over `REGIONS` regions of 1 MiB, at half their size, a
/// step every 64 launches.
fn program(rt: Runtime) {
    let regions: Vec<_> = (0..REGIONS).map(|i| rt.alloc(&format!("t{i}"), MIB).unwrap()).collect();
    for k in 0..LAUNCHES {
        if k % 64 == 0 {
            rt.step().unwrap();
        }
        let at = |j: u64, mode| RangeAccess {
            region: regions[((k + j) % REGIONS) as usize].id,
            offset: 0,
            len: MIB,
            mode,
        };
        rt.launch(
            "k",
            20_000,
            &[at(0, AccessMode::Read), at(7, AccessMode::Read), at(13, AccessMode::Write)],
        )
        .unwrap();
    }
    rt.synchronize().unwrap();
}

fn record(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("unimem-bench-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut g = c.benchmark_group("runtime_20k_launches");
    g.sample_size(10).throughput(Throughput::Elements(LAUNCHES));
    for recorded in [false, true] {
        let name = if recorded { "recorded_gz" } else { "unrecorded" };
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let sim = SimBackend::new(CostModel::h200(), REGIONS * MIB / 2);
                    let builder = Runtime::builder().backend(Box::new(sim)).policy(PolicyName::Advisor);
                    let builder =
                        if recorded { builder.record_trace(dir.join("t.jsonl.gz")) } else { builder };
                    builder.build().unwrap()
                },
                // The runtime is dropped inside the measurement: its trace is finished then.
                program,
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, record);
criterion_main!(benches);
