//! The runtime's host time per operator of a PyTorch program (criterion): the operators, in
//! order, of ResNet-50's training as the PyTorch bridge recorded them on the H200
//! (`docs/data/torch-resnet50-trace-61a6e0b.jsonl.gz`: 2,953 operators, 6 steps), driven
//! through the calls the bridge makes (`launch_on`, `alloc_on` for the outputs an operator
//! allocates as it runs, `finish_on`, `free_on`), on the simulator at half the program's peak,
//! built as the bridge builds its runtime (staging memory; the advisor's outputs' room staged).
//! The simulator stands in for the GPU, so this is the runtime's own time: the engine's
//! round trip, planning and bookkeeping, without the driver's calls.
//! Run: `cargo bench -p unimem-benches --bench program_ops`.

use std::collections::HashMap;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use unimem_core::config::PolicyName;
use unimem_core::trace::{TraceEvent, TraceReader};
use unimem_core::{Budget, ProgramStream, RangeAccess, RegionId, Runtime};

const TRACE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/data/torch-resnet50-trace-61a6e0b.jsonl.gz");

/// The recorded events, with each operator's outputs (regions allocated just before it that it
/// writes) taken out of its accesses: the bridge allocates them while the operator is open.
enum Call {
    Alloc { id: u64, bytes: u64, output: bool },
    Free { id: u64 },
    Op { accesses: Vec<(u64, RangeAccess)> },
    Step,
}

fn calls() -> (Vec<Call>, u64, u64) {
    let events: Vec<TraceEvent> = TraceReader::open(TRACE.as_ref()).unwrap().map(|e| e.unwrap()).collect();
    let mut out = Vec::new();
    let mut pending: Vec<(u64, u64)> = Vec::new();
    let mut live = 0u64;
    let mut peak = 0u64;
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    let mut kernels = 0;
    for e in events {
        match e {
            TraceEvent::Alloc { id, bytes, .. } => pending.push((id, bytes)),
            TraceEvent::Kernel { acc, .. } => {
                kernels += 1;
                let outputs: Vec<u64> = pending
                    .iter()
                    .filter(|(id, _)| {
                        acc.iter().any(|a| a.id == *id && a.mode == unimem_core::AccessMode::Write)
                    })
                    .map(|p| p.0)
                    .collect();
                for &(id, bytes) in pending.iter().filter(|p| !outputs.contains(&p.0)) {
                    out.push(Call::Alloc { id, bytes, output: false });
                }
                let accesses = acc
                    .iter()
                    .filter(|a| !outputs.contains(&a.id))
                    .map(|a| {
                        let r =
                            RangeAccess { region: RegionId(0), offset: a.offset, len: a.len, mode: a.mode };
                        (a.id, r)
                    })
                    .collect();
                out.push(Call::Op { accesses });
                for &(id, bytes) in pending.iter().filter(|p| outputs.contains(&p.0)) {
                    out.push(Call::Alloc { id, bytes, output: true });
                }
                for &(id, bytes) in &pending {
                    sizes.insert(id, bytes);
                    live += bytes;
                }
                peak = peak.max(live);
                pending.clear();
            }
            TraceEvent::Free { id } => {
                if let Some(i) = pending.iter().position(|p| p.0 == id) {
                    pending.remove(i);
                } else {
                    live -= sizes.remove(&id).unwrap_or(0);
                    out.push(Call::Free { id });
                }
            }
            TraceEvent::Step { .. } => out.push(Call::Step),
            _ => {}
        }
    }
    for (id, bytes) in pending {
        out.push(Call::Alloc { id, bytes, output: false });
    }
    (out, kernels, peak)
}

/// Drives the calls; an operator's outputs are allocated between its launch and its finish.
fn run(rt: Runtime, calls: &[Call]) {
    let s = ProgramStream(0);
    let mut ids: HashMap<u64, RegionId> = HashMap::new();
    let mut open = false;
    for c in calls {
        match c {
            Call::Alloc { id, bytes, output } => {
                let r = rt.alloc_on("torch", *bytes, s, *output && open).unwrap();
                ids.insert(*id, r.id);
            }
            Call::Free { id } => rt.free_on(ids.remove(id).unwrap(), s).unwrap(),
            Call::Op { accesses } => {
                if open {
                    rt.finish_on(s).unwrap();
                }
                let acc: Vec<RangeAccess> =
                    accesses.iter().map(|(id, a)| RangeAccess { region: ids[id], ..*a }).collect();
                rt.launch_on("op", &acc, s).unwrap();
                open = true;
            }
            Call::Step => {
                if std::mem::take(&mut open) {
                    rt.finish_on(s).unwrap();
                }
                rt.step().unwrap();
            }
        }
    }
    rt.synchronize().unwrap();
}

fn program_ops(c: &mut Criterion) {
    let (calls, kernels, peak) = calls();
    let mut g = c.benchmark_group("resnet50_torch_operators_at_half");
    g.sample_size(10).throughput(Throughput::Elements(kernels));
    for policy in [PolicyName::None, PolicyName::Advisor] {
        g.bench_function(policy.as_str(), |b| {
            b.iter_batched(
                || {
                    // As the bridge builds it: staging and, for the advisor, the outputs' room
                    // staged.
                    let budget = Budget::Bytes(peak / 2);
                    Runtime::builder().simulator().budget(budget).policy(policy).build().unwrap()
                },
                |rt| run(rt, &calls),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, program_ops);
criterion_main!(benches);
