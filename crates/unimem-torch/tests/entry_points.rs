//! The C entry points PyTorch and the Python package call, on the simulator (its addresses
//! are not memory; nothing here dereferences them). One process holds one runtime, so the
//! tests take turns.

use std::ffi::{c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::Mutex;

use unimem_torch::*;

static TURN: Mutex<()> = Mutex::new(());

fn last_error() -> String {
    // SAFETY: the library returns a NUL-terminated string it owns.
    unsafe { CStr::from_ptr(unimem_last_error()) }.to_string_lossy().into_owned()
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn enable_sim(budget: &str, record: Option<&std::path::Path>) {
    enable_sim_with(budget, None, record)
}

fn enable_sim_with(budget: &str, policy: Option<&str>, record: Option<&std::path::Path>) {
    enable_sim_configured(budget, policy, None, record)
}

fn enable_sim_configured(
    budget: &str,
    policy: Option<&str>,
    config: Option<&std::path::Path>,
    record: Option<&std::path::Path>,
) {
    let budget = c(budget);
    let policy = policy.map(c);
    let config = config.map(|p| c(p.to_str().unwrap()));
    let record = record.map(|p| c(p.to_str().unwrap()));
    let sim = c("sim");
    // SAFETY: NUL-terminated strings or null.
    let rc = unsafe {
        unimem_enable(
            budget.as_ptr(),
            policy.as_ref().map_or(null(), |p| p.as_ptr()),
            config.as_ref().map_or(null(), |p| p.as_ptr()),
            record.as_ref().map_or(null(), |r| r.as_ptr()),
            sim.as_ptr(),
        )
    };
    assert_eq!(rc, 0, "{}", last_error());
}

fn stats() -> serde_json::Value {
    let p = unimem_stats();
    assert!(!p.is_null(), "{}", last_error());
    // SAFETY: as above.
    serde_json::from_str(unsafe { CStr::from_ptr(p) }.to_str().unwrap()).unwrap()
}

fn op(name: &str, ranges: &[(u64, u64, u8)], stream: *mut c_void) -> i32 {
    let name = c(name);
    let ptrs: Vec<u64> = ranges.iter().map(|r| r.0).collect();
    let lens: Vec<u64> = ranges.iter().map(|r| r.1).collect();
    let modes: Vec<u8> = ranges.iter().map(|r| r.2).collect();
    // SAFETY: three arrays of ranges.len() elements.
    unsafe {
        unimem_op_begin(name.as_ptr(), ptrs.as_ptr(), lens.as_ptr(), modes.as_ptr(), ranges.len(), stream)
    }
}

const MIB: isize = 1 << 20;

#[test]
fn a_training_step_through_the_entry_points_stays_within_the_budget_and_is_recorded() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("unimem-torch-ffi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("torch.jsonl");
    enable_sim("56MiB", Some(&trace));
    assert_eq!(unimem_enabled(), 1);
    let s = 0x5000 as *mut c_void;
    let weights = unimem_malloc(16 * MIB, 0, s) as u64;
    assert_ne!(weights, 0, "{}", last_error());
    let w = (weights, 16 << 20, UNIMEM_READ);
    for _ in 0..2 {
        // forward: two layers read the weights, each allocates its 32 MiB activation as it
        // runs (16 + 2 x 32 MiB do not fit 56 MiB: the first activation makes room)
        assert_eq!(op("aten::mm", &[w], s), 0, "{}", last_error());
        let a1 = unimem_malloc(32 * MIB, 0, s) as u64;
        assert_ne!(a1, 0);
        assert_eq!(unimem_op_end(s), 0);
        assert_eq!(op("aten::mm", &[w, (a1, 32 << 20, UNIMEM_READ)], s), 0);
        let a2 = unimem_malloc(32 * MIB, 0, s) as u64;
        assert_eq!(unimem_op_end(s), 0);
        // backward: reads each activation, updates the weights in place, frees it
        for a in [a2, a1] {
            let ranges = [(a, 32 << 20, UNIMEM_READ), (weights, 16 << 20, UNIMEM_READ_WRITE)];
            assert_eq!(op("aten::mm_backward", &ranges, s), 0, "{}", last_error());
            assert_eq!(unimem_op_end(s), 0);
            unimem_free(a as *mut c_void, 32 * MIB, 0, s);
        }
        assert_eq!(unimem_step(), 0);
    }
    let st = stats();
    assert_eq!(st["ops"], 8);
    assert_eq!(st["steps"], 2);
    assert_eq!(st["mallocs"], 5);
    assert_eq!(st["frees"], 4);
    assert_eq!(st["live_regions"], 1);
    assert_eq!(st["budget_bytes"], 56 << 20);
    let peak = st["peak_footprint_bytes"].as_u64().unwrap();
    assert!((48 << 20..=56 << 20).contains(&peak), "peak {peak}");
    // The outputs' room is staged out, as the advisor's own evictions are: the emulated
    // driver migrates nothing.
    assert!(st["staged_out_bytes"].as_u64().unwrap() > 0, "{st}");
    assert_eq!(st["evicted_bytes"], 0, "{st}");
    // Five allocations: the weights and the first step's activations new; of the second
    // step's, one from the pool, the other new (the other pooled buffer gave its pages back
    // to make room, pooled pages counting against the budget, and retired).
    assert_eq!(st["new_buffers"], 4, "{st}");
    assert!(st["op_host_ns"].as_f64().unwrap() > 0.0);
    // The advisor's hooks ran on the engine thread for every operation: their time is counted.
    assert!(st["policy_host_ns"].as_u64().unwrap() > 0, "{st}");
    // The engine's time on the program's calls is counted by kind, and covers the policy's.
    let engine = &st["engine_host_ns"];
    for call in ["program_launch", "program_alloc", "program_free", "program_finish", "step"] {
        assert!(engine[call].as_u64().unwrap() > 0, "{call}: {st}");
    }
    assert_eq!(engine["host_access"], 0, "{st}");
    // The simulator charges its calls whole: the parts a GPU times apart are there, at zero.
    let moves = st["runtime_move_host_ns"].as_object().unwrap();
    assert_eq!(moves.len(), 11, "{st}");
    assert_eq!(st["staging_pinned_bytes"], 0, "{st}");
    assert!(moves.values().all(|v| v == 0), "{st}");
    let busy: u64 = engine.as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert!(busy >= st["policy_host_ns"].as_u64().unwrap(), "{st}");
    assert_eq!(unimem_stop_recording(), 1, "{}", last_error());
    let text = std::fs::read_to_string(&trace).unwrap();
    let kernels: Vec<&str> = text.lines().filter(|l| l.contains("\"kernel\"")).collect();
    assert_eq!(kernels.len(), 8, "{text}");
    assert!(
        kernels[0].contains("aten::mm") && kernels[0].contains("\"w\""),
        "the activation is the forward's write: {}",
        kernels[0]
    );
    assert_eq!(unimem_stop_recording(), 0, "nothing is being recorded any more");
    assert_eq!(unimem_disable(), 0);
    assert_eq!(unimem_enabled(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_configured_telemetry_log_is_complete_once_closed() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("unimem-torch-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("torch.log.jsonl");
    let config = dir.join("unimem.toml");
    std::fs::write(&config, format!("[telemetry]\nlog = {:?}\n", log.to_str().unwrap())).unwrap();
    enable_sim_configured("56MiB", None, Some(&config), None);
    let s = 0x5000 as *mut c_void;
    let weights = unimem_malloc(16 * MIB, 0, s) as u64;
    assert_ne!(weights, 0, "{}", last_error());
    for _ in 0..3 {
        assert_eq!(op("aten::mm", &[(weights, 16 << 20, UNIMEM_READ)], s), 0, "{}", last_error());
        let out = unimem_malloc(48 * MIB, 0, s);
        assert_eq!(unimem_op_end(s), 0);
        unimem_free(out, 48 * MIB, 0, s);
        assert_eq!(unimem_step(), 0);
    }
    assert!(!log.exists(), "the log takes its name once complete");
    assert_eq!(unimem_close_telemetry(), 0, "{}", last_error());
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["schema"], "unimem-telemetry", "{text}");
    assert!(lines[0]["source"].as_str().unwrap().starts_with("PyTorch (unimem_torch, advisor)"), "{text}");
    let kinds = |k: &str| lines.iter().filter(|l| l["kind"] == k).count();
    assert_eq!(kinds("region"), 4, "the weights and three outputs: {text}");
    assert_eq!(kinds("kernel"), 3, "{text}");
    assert_eq!(lines.last().unwrap()["kind"], "end", "{text}");
    // Later work goes nowhere, and a second close changes nothing.
    assert_eq!(op("aten::mm", &[(weights, 16 << 20, UNIMEM_READ)], s), 0, "{}", last_error());
    assert_eq!(unimem_op_end(s), 0);
    assert_eq!(unimem_close_telemetry(), 0, "{}", last_error());
    assert_eq!(unimem_disable(), 0);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), text);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn with_no_policy_the_emulated_driver_makes_the_room_for_outputs() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    enable_sim_with("56MiB", Some("none"), None);
    let s = 0x5000 as *mut c_void;
    let weights = unimem_malloc(16 * MIB, 0, s) as u64;
    let mut input = (weights, 16 << 20, UNIMEM_READ);
    // Three 32 MiB activations, each read by the next layer: 16 + 3 x 32 MiB exceed 56 MiB.
    for _ in 0..3 {
        assert_eq!(op("aten::mm", &[(weights, 16 << 20, UNIMEM_READ), input], s), 0, "{}", last_error());
        let a = unimem_malloc(32 * MIB, 0, s) as u64;
        assert_ne!(a, 0, "{}", last_error());
        assert_eq!(unimem_op_end(s), 0);
        input = (a, 32 << 20, UNIMEM_READ);
    }
    let st = stats();
    assert!(st["evicted_bytes"].as_u64().unwrap() > 0, "the driver alone migrates: {st}");
    assert_eq!(st["staged_out_bytes"], 0, "{st}");
    assert!(st["peak_footprint_bytes"].as_u64().unwrap() <= 56 << 20, "{st}");
    assert_eq!(unimem_disable(), 0);
}

#[test]
fn bad_calls_are_errors_with_reasons_and_break_nothing() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let s = null_mut();
    assert!(unimem_malloc(MIB, 0, s).is_null());
    assert!(last_error().contains("not enabled"), "{}", last_error());
    assert_eq!(unimem_step(), -1);
    assert!(unimem_stats().is_null());

    let (budget, sim) = (c("half"), c("sim"));
    // SAFETY: NUL-terminated strings or null.
    assert_eq!(unsafe { unimem_enable(budget.as_ptr(), null(), null(), null(), sim.as_ptr()) }, -1);
    assert!(last_error().contains("budget"), "{}", last_error());
    let (policy, gpu) = (c("clairvoyant"), c("tpu"));
    // SAFETY: as above.
    assert_eq!(unsafe { unimem_enable(null(), policy.as_ptr(), null(), null(), sim.as_ptr()) }, -1);
    assert!(last_error().contains("policy"), "{}", last_error());
    // SAFETY: as above.
    assert_eq!(unsafe { unimem_enable(null(), null(), null(), null(), gpu.as_ptr()) }, -1);
    assert!(last_error().contains("tpu"), "{}", last_error());

    enable_sim("8MiB", None);
    // SAFETY: as above.
    assert_eq!(unsafe { unimem_enable(null(), null(), null(), null(), sim.as_ptr()) }, -1);
    assert!(last_error().contains("already enabled"), "{}", last_error());
    let a = unimem_malloc(MIB, 0, s) as u64;
    assert!(unimem_malloc(MIB, 1, s).is_null(), "device 1 is not this runtime's");
    assert!(last_error().contains("device 1"), "{}", last_error());
    assert!(unimem_malloc(0, 0, s).is_null(), "nothing to allocate");
    assert_eq!(op("bad", &[(a, 1 << 20, 7)], s), -1);
    assert!(last_error().contains("mode 7"), "{}", last_error());
    // SAFETY: n > 0 with null arrays is what is being refused.
    assert_eq!(unsafe { unimem_op_begin(null(), null(), null(), null(), 2, s) }, -1);
    assert!(last_error().contains("null"), "{}", last_error());
    // Ranges outside unimem's memory are left out and counted; the operator still runs.
    assert_eq!(op("host", &[(0x10, 64, UNIMEM_READ), (a, 1 << 20, UNIMEM_READ)], s), 0);
    assert_eq!(unimem_op_end(s), 0);
    unimem_free(0x10 as *mut c_void, 64, 0, s);
    assert!(last_error().contains("not an allocation"), "{}", last_error());
    unimem_free((a + 4096) as *mut c_void, 64, 0, s);
    assert!(last_error().contains("not an allocation"), "an interior pointer is not freed: {}", last_error());
    let st = stats();
    assert_eq!(st["foreign_ranges"], 1);
    assert_eq!(st["live_regions"], 1, "the bad frees freed nothing");
    unimem_free(a as *mut c_void, MIB, 0, s);
    assert_eq!(stats()["live_regions"], 0);
    assert_eq!(unimem_disable(), 0);
    assert_eq!(unimem_disable(), -1);
    unimem_free(a as *mut c_void, MIB, 0, s); // after disable: nothing left to free, no error
}
