//! `unimem replay --backend cuda --telemetry` on a real GPU (`--features gpu-tests`): a log with
//! CUPTI has the driver's fault-driven migrations; with `telemetry.cupti = false` it has the
//! runtime's own kernels, stalls and staged copies, and nothing from the driver.
#![cfg(feature = "gpu-tests")]

use std::path::PathBuf;
use std::process::Command;

/// The `unimem` binary: cargo's, or the one packed beside this test (the device machine has
/// no cargo; `pack.sh` puts both in `.gpu/bin`).
fn unimem() -> Command {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_unimem"));
    let exe = if built.exists() {
        built
    } else {
        std::env::current_exe().unwrap().parent().unwrap().join("unimem")
    };
    let mut cmd = Command::new(exe);
    cmd.env_remove("UNIMEM_CONFIG");
    cmd
}

/// A sample trace: from the repository, found from the crate or from the working directory.
fn trace(name: &str) -> String {
    let in_repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces").join(name);
    if in_repo.exists() {
        in_repo.display().to_string()
    } else {
        format!("traces/{name}")
    }
}

/// Replays resnet50-train at 50% with `policy` and a log, `cupti` on or off; returns the log's
/// header source and its `summarize --json`.
fn replay_log(policy: &str, cupti: bool) -> (String, serde_json::Value) {
    let log = std::env::temp_dir()
        .join(format!("unimem-gpu-telemetry-{policy}-{cupti}-{}.jsonl", std::process::id()));
    let o = unimem()
        .args(["replay", &trace("resnet50-train.jsonl.gz"), "--backend", "cuda", "--budget", "50%"])
        .args(["--policy", policy, "--telemetry", log.to_str().unwrap()])
        .env("UNIMEM_TELEMETRY_CUPTI", cupti.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&log).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let o = unimem().args(["telemetry", "summarize", "--json", log.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_file(&log);
    (header["source"].as_str().unwrap().to_string(), serde_json::from_slice(&o.stdout).unwrap())
}

fn bytes_by_cause(summary: &serde_json::Value, cause: &str) -> u64 {
    summary["totals"]["by_cause"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c[0] == cause)
        .map_or(0, |c| c[1].as_u64().unwrap())
}

#[test]
fn a_gpu_log_with_and_without_cupti() {
    // Without CUPTI: the advisor's kernels, their stalls and its staged copies, no driver records.
    let (source, s) = replay_log("advisor", false);
    assert!(source.contains("without CUPTI"), "{source}");
    let t = &s["totals"];
    assert_eq!(t["kernels"], 1392, "{t}");
    assert!(t["kernel_stall_ns"].as_u64().unwrap() > 0, "{t}");
    assert!(bytes_by_cause(&s, "staging") > 1 << 30, "staged copies logged: {t}");
    assert_eq!(bytes_by_cause(&s, "fault") + bytes_by_cause(&s, "prefetch"), 0, "no driver records: {t}");
    assert_eq!(t["cpu_faults"], 0);
    // With CUPTI: the driver alone moves the data by faults, and the log has them by region.
    let (source, s) = replay_log("none", true);
    assert!(source.contains("CUPTI without GPU fault records"), "{source}");
    let fault = bytes_by_cause(&s, "fault");
    assert!(fault > 4 << 30, "fault-driven bytes from CUPTI: {}", s["totals"]);
    assert!(s["regions"][0]["summary"]["h2d_bytes"].as_u64().unwrap() > 0);
    eprintln!(
        "telemetry on a GPU: without CUPTI {} kernels; with CUPTI {fault} fault-driven bytes",
        t["kernels"]
    );
}
