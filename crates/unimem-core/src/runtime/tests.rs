use std::sync::atomic::{AtomicU64, Ordering};

use super::*;
use crate::backends::sim::{CostModel, SimBackend};
use crate::config::PolicyName;
use crate::AccessMode;

const MIB: u64 = 1 << 20;

fn runtime(budget: u64) -> Runtime {
    let sim = SimBackend::new(CostModel::h200(), budget);
    Runtime::builder().backend(Box::new(sim)).policy(PolicyName::Advisor).build().unwrap()
}

fn acc(region: RegionId, len: u64, mode: AccessMode) -> RangeAccess {
    RangeAccess { region, offset: 0, len, mode }
}

#[test]
fn the_runtime_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Runtime>();
}

#[test]
fn bytes_round_trip_through_kernels_and_eviction() {
    let rt = runtime(4 * MIB);
    let a = rt.alloc("a", 3 * MIB).unwrap();
    let b = rt.alloc("b", 3 * MIB).unwrap();
    let data: Vec<u8> = (0..3 * MIB).map(|i| (i * 7) as u8).collect();
    rt.write(a.id, 0, &data).unwrap();
    for _ in 0..3 {
        rt.launch("ka", 1000, &[acc(a.id, 3 * MIB, AccessMode::Read)]).unwrap();
        rt.launch("kb", 1000, &[acc(b.id, 3 * MIB, AccessMode::Write)]).unwrap();
    }
    let mut seen = vec![0; data.len()];
    rt.read(a.id, 0, &mut seen).unwrap();
    assert!(seen == data, "a survived being evicted by b");
    let stats = rt.synchronize().unwrap();
    assert_eq!((stats.live_regions, stats.live_bytes), (2, 6 * MIB));
    assert_eq!(stats.backend, BackendKind::Sim);
    assert!(stats.device_resident_bytes <= 4 * MIB);
    assert!(stats.backend_stats.kernels == 6);
}

/// The runtime stages the advisor's evictions where its backend has staging memory; the
/// bytes still round-trip, and host reads of staged data bring it back.
#[test]
fn bytes_round_trip_through_staged_evictions() {
    let sim = SimBackend::new(CostModel::h200(), 4 * MIB).with_staging(8 * MIB);
    let rt = Runtime::builder().backend(Box::new(sim)).policy(PolicyName::Advisor).build().unwrap();
    let regions: Vec<_> = (0..3).map(|i| rt.alloc(&format!("r{i}"), 3 * MIB).unwrap()).collect();
    let data: Vec<Vec<u8>> = (0..3u64).map(|k| (0..3 * MIB).map(|i| (i * 7 + k) as u8).collect()).collect();
    for (r, d) in regions.iter().zip(&data) {
        rt.write(r.id, 0, d).unwrap();
    }
    for _ in 0..3 {
        for r in &regions {
            rt.launch("rw", 1000, &[acc(r.id, 3 * MIB, AccessMode::ReadWrite)]).unwrap();
        }
    }
    for (r, d) in regions.iter().zip(&data) {
        let mut seen = vec![0; d.len()];
        rt.read(r.id, 0, &mut seen).unwrap();
        assert!(seen == *d, "{} lost its bytes", r.id);
    }
    let stats = rt.synchronize().unwrap();
    assert!(stats.backend_stats.staged_out_bytes > 0, "{:?}", stats.backend_stats);
    assert!(stats.backend_stats.peak_device_bytes <= 4 * MIB + 4 * MIB);
}

#[test]
fn misuse_is_an_error_value() {
    let rt = runtime(4 * MIB);
    let a = rt.alloc("a", MIB).unwrap();
    let e = rt.launch("k", 1, &[acc(a.id, 2 * MIB, AccessMode::Read)]).unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    assert!(rt.alloc("empty", 0).unwrap_err().to_string().contains("at least 1 byte"));
    rt.free(a.id).unwrap();
    let e = rt.free(a.id).unwrap_err();
    assert!(e.to_string().contains("never allocated or already freed"), "{e}");
    let e = rt.launch("k", 1, &[acc(a.id, 1, AccessMode::Read)]).unwrap_err();
    assert!(matches!(e, Error::UnknownRegion(_)), "{e}");
    let mut buf = [0u8; 4];
    assert!(rt.read(RegionId(999), 0, &mut buf).is_err());
    rt.synchronize().unwrap();
}

#[test]
fn the_history_records_every_access_in_order() {
    let rt = runtime(64 * MIB);
    let a = rt.alloc("a", MIB).unwrap();
    let b = rt.alloc("b", MIB).unwrap();
    rt.launch("k", 1, &[acc(a.id, MIB, AccessMode::Read), acc(b.id, MIB, AccessMode::Write)]).unwrap();
    rt.step().unwrap();
    rt.write(a.id, 0, &[1, 2, 3]).unwrap();
    let recent = rt.recent_accesses(10);
    assert_eq!(recent.len(), 3);
    assert_eq!((recent[0].range.region, recent[0].at), (a.id, 0));
    assert_eq!((recent[1].range.region, recent[1].at), (b.id, 0));
    assert_eq!((recent[2].by, recent[2].at), (Accessor::Host, 1));
}

/// Many host threads allocate, write, launch, read back and free at once. Afterwards (and at
/// synchronizations along the way) the registry, the history and the budget accounting agree
/// with what the threads did, and every thread read back exactly what it wrote.
#[test]
fn many_threads_keep_registry_history_and_budget_consistent() {
    const THREADS: u64 = 8;
    const ROUNDS: u64 = 40;
    let budget = 16 * MIB;
    let rt = runtime(budget);
    let accesses = AtomicU64::new(0);
    let operations = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (rt, accesses, operations) = (rt.clone(), &accesses, &operations);
            s.spawn(move || {
                let mut mine = Vec::new();
                for round in 0..ROUNDS {
                    let bytes = MIB / 2 + ((t * 131 + round * 17) % 5) * MIB / 2;
                    let r = rt.alloc(&format!("t{t}r{round}"), bytes).unwrap();
                    let fill = (t * 31 + round) as u8;
                    rt.write(r.id, 0, &vec![fill; bytes as usize]).unwrap();
                    mine.push((r.id, bytes, fill));
                    let kernel: Vec<RangeAccess> =
                        mine.iter().rev().take(2).map(|&(id, b, _)| acc(id, b, AccessMode::Read)).collect();
                    rt.launch("k", 5_000, &kernel).unwrap();
                    accesses.fetch_add(1 + kernel.len() as u64, Ordering::Relaxed);
                    operations.fetch_add(2, Ordering::Relaxed);
                    if round % 8 == 7 {
                        rt.step().unwrap();
                        let stats = rt.synchronize().unwrap();
                        // Two regions of at most 2.5 MiB per kernel may run over the budget.
                        assert!(stats.device_resident_bytes <= budget + 5 * MIB + 2 * MIB);
                    }
                    if mine.len() > 3 {
                        let (id, bytes, fill) = mine.remove(0);
                        let mut seen = vec![0; bytes as usize];
                        rt.read(id, 0, &mut seen).unwrap();
                        assert!(seen.iter().all(|&b| b == fill), "thread {t}: region {id} lost its bytes");
                        accesses.fetch_add(1, Ordering::Relaxed);
                        operations.fetch_add(1, Ordering::Relaxed);
                        rt.free(id).unwrap();
                    }
                }
                for (id, _, _) in mine {
                    rt.free(id).unwrap();
                }
            });
        }
    });
    let stats = rt.synchronize().unwrap();
    assert_eq!((stats.live_regions, stats.live_bytes), (0, 0), "every region freed");
    assert_eq!(stats.accesses_recorded, accesses.load(Ordering::Relaxed));
    assert_eq!(stats.operations, operations.load(Ordering::Relaxed));
    assert_eq!(stats.backend_stats.kernels, THREADS * ROUNDS);
    assert_eq!(stats.device_resident_bytes, 0, "nothing resident once all is freed");
    assert!(stats.backend_stats.peak_device_bytes <= budget + 5 * MIB + 2 * MIB);
}

#[test]
fn dropping_the_last_handle_stops_the_engine_cleanly() {
    let rt = runtime(8 * MIB);
    let a = rt.alloc("a", MIB).unwrap();
    rt.launch("k", 1, &[acc(a.id, MIB, AccessMode::Write)]).unwrap();
    let clone = rt.clone();
    drop(rt);
    clone.synchronize().unwrap();
    drop(clone); // joins the worker after the queued work
}

/// A training-loop-shaped program: weights written by the host, activations allocated and
/// freed each step, a scalar read back; `rt` records it where built to.
fn small_training_program(rt: &Runtime) {
    let weights: Vec<_> = (0..3).map(|l| rt.alloc(&format!("w{l}"), 4 * MIB).unwrap()).collect();
    for w in &weights {
        rt.write(w.id, 0, &vec![1u8; (4 * MIB) as usize]).unwrap();
    }
    let loss = rt.alloc("loss", 4096).unwrap();
    for _ in 0..3 {
        rt.step().unwrap();
        let mut acts = Vec::new();
        for (l, w) in weights.iter().enumerate() {
            let act = rt.alloc(&format!("act{l}"), 6 * MIB).unwrap();
            let mut acc_list =
                vec![acc(w.id, 4 * MIB, AccessMode::Read), acc(act.id, 6 * MIB, AccessMode::Write)];
            if let Some(prev) = acts.last() {
                acc_list.push(acc(*prev, 6 * MIB, AccessMode::Read));
            }
            rt.launch(&format!("forward{l}"), 20_000, &acc_list).unwrap();
            acts.push(act.id);
        }
        rt.launch(
            "loss",
            5_000,
            &[acc(*acts.last().unwrap(), 6 * MIB, AccessMode::Read), acc(loss.id, 4096, AccessMode::Write)],
        )
        .unwrap();
        let mut scalar = [0u8; 8];
        rt.read(loss.id, 0, &mut scalar).unwrap();
        for (l, w) in weights.iter().enumerate().rev() {
            rt.launch(
                &format!("backward{l}"),
                30_000,
                &[acc(acts[l], 6 * MIB, AccessMode::Read), acc(w.id, 4 * MIB, AccessMode::ReadWrite)],
            )
            .unwrap();
            rt.free(acts[l]).unwrap();
        }
    }
}

#[test]
fn a_recorded_program_replays_on_the_simulator_with_the_same_totals() {
    let dir = std::env::temp_dir().join(format!("unimem-rt-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("program.jsonl.gz");
    let budget = 20 * MIB;
    let sim = SimBackend::new(CostModel::h200(), budget);
    let rt = Runtime::builder()
        .backend(Box::new(sim))
        .policy(PolicyName::Advisor)
        .record_trace(&path)
        .build()
        .unwrap();
    small_training_program(&rt);
    let live = rt.synchronize().unwrap();
    drop(rt);

    let stats = crate::trace::TraceStats::compute(crate::trace::TraceReader::open(&path).unwrap()).unwrap();
    assert_eq!(stats.kernels, live.backend_stats.kernels, "every kernel of the run is in the trace");
    assert_eq!(stats.kernels, 3 * 7);
    let mut backend = SimBackend::new(CostModel::h200(), budget);
    let cost = CostModel::h200();
    let mut policy =
        crate::policy::make_policy(PolicyName::Advisor, budget, &crate::Config::default(), &cost);
    let report = crate::replay::run(
        crate::trace::TraceReader::open(&path).unwrap(),
        &mut backend,
        policy.as_mut(),
        &mut |_| {},
    )
    .unwrap();
    let b = &live.backend_stats;
    assert_eq!(report.kernels, b.kernels);
    assert_eq!((report.h2d_bytes, report.d2h_bytes), (b.h2d_bytes, b.d2h_bytes));
    assert_eq!(report.gpu_faults, b.gpu_faults);
    assert_eq!(report.time_ns, live.elapsed_ns, "the replay takes the program's simulated time");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_trace_that_cannot_be_written_is_a_clear_error_at_build() {
    let sim = SimBackend::new(CostModel::h200(), 4 * MIB);
    let e = Runtime::builder()
        .backend(Box::new(sim))
        .record_trace("/nonexistent-unimem-dir/t.jsonl")
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent-unimem-dir/t.jsonl"), "{e}");
}
