//! A tensor program records its own trace (`Runtime::builder().record_trace`, as
//! `UNIMEM_TRACE_RECORD` asks of every runtime): names, launches with their declared ranges,
//! host accesses, steps; the trace replays on the simulator with the program's own totals.

use unimem_core::config::{Config, PolicyName};
use unimem_core::trace::{TraceEvent, TraceReader, TraceStats};
use unimem_core::{CostModel, Runtime, SimBackend};
use unimem_tensor::{launch_cpu, Tensor};

const BUDGET: u64 = 12 << 20;

/// Three layers of 2 MiB weights, 4 MiB activations per layer, two steps.
fn train(rt: &Runtime) -> Vec<f32> {
    let n = 1 << 20; // f32s: 4 MiB
    let w: Vec<Tensor<f32>> = (0..3)
        .map(|l| Tensor::from_fn(rt, &format!("w{l}"), &[n / 2], |i| (i[0] % 5) as f32 + l as f32).unwrap())
        .collect();
    let input = Tensor::<f32>::from_fn(rt, "input", &[n], |i| (i[0] % 3) as f32).unwrap();
    for _ in 0..2 {
        rt.step().unwrap();
        let mut acts = vec![input.clone()];
        for (l, w) in w.iter().enumerate() {
            let out = Tensor::<f32>::uninit(rt, &format!("act{l}"), &[n]).unwrap();
            let prev = acts.last().unwrap().clone();
            launch_cpu(rt, "forward", 40_000, &[prev.read(), w.read(), out.write()], |io| {
                let (x, w): (Vec<f32>, Vec<f32>) = (io.read(0)?, io.read(1)?);
                io.write(2, &x.iter().enumerate().map(|(i, v)| v * 0.5 + w[i % w.len()]).collect::<Vec<_>>())
            })
            .unwrap();
            acts.push(out);
        }
        for (l, w) in w.iter().enumerate().rev() {
            launch_cpu(rt, "backward", 60_000, &[acts[l + 1].read(), w.read_write()], |io| {
                let (a, w): (Vec<f32>, Vec<f32>) = (io.read(0)?, io.read(1)?);
                io.write(1, &w.iter().enumerate().map(|(i, v)| v - 1e-4 * a[2 * i]).collect::<Vec<_>>())
            })
            .unwrap();
        }
    }
    w.iter().map(|w| w.to_vec().unwrap()[7]).collect()
}

#[test]
fn a_tensor_program_records_a_trace_that_replays_with_its_totals() {
    let dir = std::env::temp_dir().join(format!("unimem-tensor-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("train.jsonl.gz");
    let sim = SimBackend::new(CostModel::h200(), BUDGET);
    let rt = Runtime::builder()
        .backend(Box::new(sim))
        .policy(PolicyName::Advisor)
        .record_trace(&path)
        .build()
        .unwrap();
    let weights = train(&rt);
    let live = rt.synchronize().unwrap();
    drop(rt);
    assert!(weights.iter().all(|w| w.is_finite()));

    let reader = TraceReader::open(&path).unwrap();
    assert_eq!(reader.header().meta["kernel_times"], "declared");
    assert_eq!(reader.header().meta["budget_bytes"], BUDGET);
    let events: Vec<TraceEvent> = reader.map(|e| e.unwrap()).collect();
    let names: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            TraceEvent::Alloc { name, .. } => name.as_deref(),
            _ => None,
        })
        .collect();
    assert!(names.contains(&"w0") && names.contains(&"act2"), "{names:?}");
    assert_eq!(events.iter().filter(|e| matches!(e, TraceEvent::Step { .. })).count(), 2);
    assert!(events.iter().any(|e| matches!(e, TraceEvent::Host { .. })), "host writes and reads are in it");
    let stats = TraceStats::compute(TraceReader::open(&path).unwrap()).unwrap();
    assert_eq!(stats.kernels, 12);
    assert_eq!(stats.compute_floor_ns, 2 * 3 * (40_000 + 60_000));
    // The simulated device and the program's host share no clock: no host time is recorded.
    assert_eq!(stats.program_host_ns, 0);

    let mut sim = SimBackend::new(CostModel::h200(), BUDGET);
    let mut policy =
        unimem_core::policy::make_policy(PolicyName::Advisor, BUDGET, &Config::default(), &CostModel::h200());
    let report =
        unimem_core::replay::run(TraceReader::open(&path).unwrap(), &mut sim, policy.as_mut(), &mut |_| {})
            .unwrap();
    let b = &live.backend_stats;
    assert_eq!((report.kernels, report.h2d_bytes, report.d2h_bytes), (b.kernels, b.h2d_bytes, b.d2h_bytes));
    assert_eq!(report.time_ns, live.elapsed_ns);
    std::fs::remove_dir_all(&dir).unwrap();
}
