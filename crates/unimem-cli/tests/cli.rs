//! The `unimem` binary end to end: the main jobs work, and every kind of bad input gives a
//! clear error (non-zero exit, a message naming the problem) and never a panic.

mod common;

use std::path::Path;

use common::*;

#[test]
fn demo_runs_with_no_arguments() {
    let o = unimem(&["demo"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for want in
        ["resnet50-train.jsonl.gz", "transformer-decode.jsonl.gz", "none", "oracle", "100%", "50%", "x floor"]
    {
        assert!(out.contains(want), "demo output lacks {want}:\n{out}");
    }
}

#[test]
fn replay_json_has_the_documented_keys() {
    let o = unimem(&[
        "replay",
        &sample("transformer-decode.jsonl.gz"),
        "--budget",
        "50%",
        "--policy",
        "none,oracle",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let runs: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(runs.len(), 2);
    for (run, policy) in runs.iter().zip(["none", "oracle"]) {
        for key in [
            "trace",
            "backend",
            "policy",
            "budget_bytes",
            "time_ns",
            "compute_floor_ns",
            "h2d_bytes",
            "d2h_bytes",
            "gpu_faults",
            "peak_resident_bytes",
            "peak_footprint_bytes",
            "steps",
            "over_floor",
            "program_floor_ns",
            "bound_ns",
            "bound_h2d_bytes",
            "bound_d2h_bytes",
            "over_bound",
            "policy_ns",
            "learning",
        ] {
            assert!(run.get(key).is_some(), "missing {key} in {run}");
        }
        assert_eq!(run["policy"], policy);
        assert_eq!(run["backend"], "sim");
        // The bound lies between the floor and every policy's time; a trace without the
        // program's host times has its compute floor as its program floor.
        let (bound, floor) = (run["bound_ns"].as_u64().unwrap(), run["compute_floor_ns"].as_u64().unwrap());
        assert!(floor <= bound && bound <= run["time_ns"].as_u64().unwrap(), "{run}");
        assert_eq!(run["program_floor_ns"].as_u64(), Some(floor));
        let x = run["over_bound"].as_f64().unwrap();
        assert!((x - run["time_ns"].as_f64().unwrap() / bound as f64).abs() < 1e-9);
        assert!(run["peak_resident_bytes"].as_u64() <= run["budget_bytes"].as_u64());
        assert!(run["peak_resident_bytes"].as_u64() <= run["peak_footprint_bytes"].as_u64());
        let host = &run["backend_host_ns"];
        assert!(host["launch"].as_u64().unwrap() > 0, "every kernel is launched: {host}");
        let prefetch = host["prefetch_to_device"].as_u64().unwrap();
        assert_eq!(prefetch > 0, policy == "oracle", "only the oracle prefetches: {host}");
    }
    assert!(runs[1]["time_ns"].as_u64() < runs[0]["time_ns"].as_u64(), "oracle beats none");
}

/// A program whose host issued its kernels more slowly than they ran: its replay is held to
/// that pace, and so are its floor and bounds; with `replay.program_host_time` off, neither.
#[test]
fn a_host_bound_programs_bound_is_its_own_pace() {
    let d = tmp("paced");
    let path = d.join("paced.jsonl");
    let mut text = String::from("{\"format\":\"unimem-trace\",\"version\":1,\"source\":\"test\"}\n");
    text += "{\"ev\":\"alloc\",\"id\":1,\"bytes\":4194304}\n";
    for i in 0..10 {
        let host = if i == 0 { String::new() } else { ",\"host_ns\":3000000".into() };
        text += &format!(
            "{{\"ev\":\"kernel\",\"name\":\"k\",\"dur_ns\":1000000{host},\"acc\":[[1,0,4194304,\"rw\"]]}}\n"
        );
    }
    write(&path, text.as_bytes());
    let run = |env: &[(&str, &str)]| -> serde_json::Value {
        let o = unimem_env(&["replay", path.to_str().unwrap(), "--policy", "oracle", "--json"], env);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str(stdout(&o).trim()).unwrap()
    };
    let held = run(&[]);
    let n = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap();
    // Issued 3 ms apart: the last starts at 27 ms and ends at 28.
    assert_eq!((n(&held, "compute_floor_ns"), n(&held, "program_floor_ns")), (10_000_000, 28_000_000));
    assert_eq!(n(&held, "bound_ns"), 28_000_000, "{held}");
    assert!(n(&held, "time_ns") >= 28_000_000, "{held}");
    let free = run(&[("UNIMEM_REPLAY_PROGRAM_HOST_TIME", "false")]);
    assert_eq!((n(&free, "program_floor_ns"), n(&free, "bound_ns")), (10_000_000, 10_000_000), "{free}");
}

#[test]
fn trace_gen_then_stats_and_replay() {
    let d = tmp("gen");
    let path = d.join("t.jsonl.gz");
    let o = unimem(&[
        "trace",
        "gen",
        "--pattern",
        "graph",
        "--events",
        "5000",
        "--regions",
        "16",
        "--region-bytes",
        "1MiB",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = unimem(&["trace", "stats", path.to_str().unwrap(), "--json"]);
    let stats: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(stats["events"], 5000);
    assert!(stats["regions"].as_u64().unwrap() > 16, "data regions plus outputs");
    // The table shows what the device arena holds, as the JSON does.
    let o = unimem(&["trace", "stats", path.to_str().unwrap()]);
    let table = stdout(&o);
    assert!(stats["peak_live_block_bytes"].as_u64().unwrap() >= stats["peak_live_bytes"].as_u64().unwrap());
    assert!(
        table.contains("peak live (arena blocks)") && table.contains("peak live under 2 MiB (packed)"),
        "{table}"
    );
    let o = unimem(&["replay", path.to_str().unwrap(), "--budget", "4MiB", "--policy", "none"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("none"));
}

#[test]
fn bad_traces_are_clear_errors() {
    let d = tmp("bad");
    let good = std::fs::read(sample("transformer-decode.jsonl.gz")).unwrap();
    let cases: Vec<(&str, Vec<u8>, Vec<&str>)> = vec![
        ("truncated.jsonl.gz", good[..good.len() / 2].to_vec(), vec!["truncated.jsonl.gz:", "truncated"]),
        ("garbled.jsonl.gz", {
            let mut g = good.clone();
            g.iter_mut().skip(100).step_by(5).for_each(|b| *b ^= 0xa5);
            g
        }, vec!["garbled.jsonl.gz:"]),
        ("header.jsonl", b"{\"format\": \"perf\", \"version\": 1}\n".to_vec(), vec!["header.jsonl:1:", "not a unimem trace"]),
        ("event.jsonl", b"{\"format\": \"unimem-trace\", \"version\": 1}\n{\"ev\": \"launch\"}\n".to_vec(), vec!["event.jsonl:2:", "unknown event `launch`"]),
        ("freed.jsonl", b"{\"format\": \"unimem-trace\", \"version\": 1}\n{\"ev\": \"alloc\", \"id\": 1, \"bytes\": 8}\n{\"ev\": \"free\", \"id\": 1}\n{\"ev\": \"kernel\", \"name\": \"k\", \"dur_ns\": 1, \"acc\": [[1, 0, 8, \"r\"]]}\n".to_vec(), vec!["freed.jsonl:4:", "already freed"]),
        ("range.jsonl", b"{\"format\": \"unimem-trace\", \"version\": 1}\n{\"ev\": \"alloc\", \"id\": 1, \"bytes\": 8}\n{\"ev\": \"kernel\", \"name\": \"k\", \"dur_ns\": 1, \"acc\": [[1, 4, 8, \"r\"]]}\n".to_vec(), vec!["range.jsonl:3:", "past the end"]),
        ("dup.jsonl", b"{\"format\": \"unimem-trace\", \"version\": 1}\n{\"ev\": \"alloc\", \"id\": 1, \"bytes\": 8}\n{\"ev\": \"alloc\", \"id\": 1, \"bytes\": 8}\n".to_vec(), vec!["dup.jsonl:3:", "already allocated"]),
    ];
    for (name, bytes, words) in cases {
        let path = d.join(name);
        write(&path, &bytes);
        for args in [vec!["replay", path.to_str().unwrap()], vec!["trace", "stats", path.to_str().unwrap()]] {
            assert_clear_error(&unimem(&args), &words);
        }
    }
    assert_clear_error(&unimem(&["replay", "/no/such/trace.jsonl"]), &["/no/such/trace.jsonl"]);
}

#[test]
fn bad_budgets_policies_and_backends_are_clear_errors() {
    let t = sample("transformer-decode.jsonl.gz");
    assert_clear_error(&unimem(&["replay", &t, "--budget", "0"]), &["--budget", "0 bytes"]);
    assert_clear_error(&unimem(&["replay", &t, "--budget", "150%"]), &["--budget", "(0, 100]"]);
    assert_clear_error(&unimem(&["replay", &t, "--budget", "0%"]), &["(0, 100]"]);
    assert_clear_error(
        &unimem(&["replay", &t, "--policy", "fastest"]),
        &["--policy", "fastest", "none, oracle"],
    );
    assert_clear_error(&unimem(&["replay", &t, "--backend", "tpu"]), &["--backend", "auto, sim, cuda"]);
    if !Path::new("/dev/nvidiactl").exists() {
        // Without a GPU, asking for one is an error (on a GPU machine the replay runs).
        assert_clear_error(&unimem(&["replay", &t, "--backend", "cuda"]), &["cuda", "unavailable"]);
    }
    assert_clear_error(
        &unimem(&["trace", "gen", "--pattern", "zigzag", "/tmp/x.jsonl"]),
        &["zigzag", "streaming"],
    );
}

#[test]
fn probe_without_a_gpu_is_a_clear_error() {
    if Path::new("/dev/nvidiactl").exists() {
        return; // a GPU machine: the probe would run (crates/unimem-core/tests/gpu.rs covers it)
    }
    assert_clear_error(&unimem(&["probe"]), &["cuda", "no CUDA device"]);
    assert_clear_error(&unimem(&["probe", "--population"]), &["cuda", "no CUDA device"]);
    // The population rows alone write no profile: asking for one is a usage error.
    let d = tmp("population");
    let never = d.join("never.toml");
    let o = unimem(&["probe", "--population", "--out", never.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--out") && !never.exists(), "{}", stderr(&o));
}

#[test]
fn undeclared_accesses_are_learned_from_faults() {
    let run = |learn: &str| -> (u64, u64) {
        let o = unimem_env(
            &[
                "replay",
                &sample("resnet50-train.jsonl.gz"),
                "--budget",
                "50%",
                "--policy",
                "advisor",
                "--undeclared",
                "2",
                "--json",
            ],
            &[("UNIMEM_ADVISOR_LEARN_FROM_FAULTS", learn)],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let run: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        (run["time_ns"].as_u64().unwrap(), run["learning"]["learned_bytes"].as_u64().unwrap())
    };
    let ((blind, learned_blind), (learning, learned)) = (run("false"), run("true"));
    assert!(learning < blind, "learning {learning} ns against blind {blind} ns");
    // The report says what was learned (on the simulator faults come at once: no late ones).
    assert_eq!(learned_blind, 0);
    assert!(learned > 0);
    // A usage error from the argument parser (exit code 2), naming the flag and the value.
    let o = unimem(&["replay", &sample("resnet50-train.jsonl.gz"), "--undeclared", "two"]);
    assert!(!o.status.success() && !stderr(&o).contains("panicked"));
    assert!(stderr(&o).contains("'two'") && stderr(&o).contains("--undeclared"), "{}", stderr(&o));
}

#[test]
fn a_probe_written_profile_drives_the_simulator() {
    let profile = common::repo("crates/unimem-core/profiles/h200-probe-2026-11-30.toml");
    let o = unimem_env(
        &["replay", &sample("transformer-decode.jsonl.gz"), "--budget", "50%", "--policy", "none", "--json"],
        &[("UNIMEM_SIM_PROFILE", profile.to_str().unwrap())],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let run: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert!(run["backend_detail"].as_str().unwrap().contains("unimem probe"), "{run}");
}

#[test]
fn probes_merge_into_their_median_without_a_gpu() {
    let d = tmp("merge");
    let h200 = std::fs::read_to_string(common::repo("crates/unimem-core/profiles/h200.toml")).unwrap();
    let paths: Vec<String> = [("a", "5000"), ("b", "9000"), ("c", "6500")]
        .iter()
        .map(|(name, populate)| {
            let p = d.join(format!("{name}.toml"));
            let text = h200
                .replace("gpu_populate_latency_ns = 6060", &format!("gpu_populate_latency_ns = {populate}"));
            assert_ne!(text, h200, "the embedded profile names gpu_populate_latency_ns");
            write(&p, text.as_bytes());
            p.display().to_string()
        })
        .collect();
    let out = d.join("median.toml");
    let mut args = vec!["probe", "--merge"];
    args.extend(paths.iter().map(String::as_str));
    args.extend(["--out", out.to_str().unwrap()]);
    let o = unimem(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    // The spread table names the field, lowest, median and highest.
    let line = stdout(&o).lines().find(|l| l.starts_with("gpu_populate_latency_ns")).unwrap().to_string();
    assert!(line.contains("5000") && line.contains("6500") && line.contains("9000"), "{line}");
    let merged = std::fs::read_to_string(&out).unwrap();
    assert!(merged.contains("gpu_populate_latency_ns = 6500"), "{merged}");
    // The median drives the simulator like any profile.
    let o = unimem_env(
        &["replay", &sample("transformer-decode.jsonl.gz"), "--budget", "50%", "--policy", "none", "--json"],
        &[("UNIMEM_SIM_PROFILE", out.to_str().unwrap())],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("median of 3 profiles"), "{}", stdout(&o));
    // Without --out: a usage error from the argument parser (exit code 2) naming the flag.
    let o = unimem(&["probe", "--merge", &paths[0]]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--out") && !stderr(&o).contains("panicked"), "{}", stderr(&o));
    // With a profile that is not one: a clear error naming the file, nothing written.
    let bad = d.join("bad.toml");
    write(&bad, b"gpu_fault_rate_gbps = 4.41\n");
    let lost = d.join("lost.toml");
    assert_clear_error(
        &unimem(&["probe", "--merge", &paths[0], bad.to_str().unwrap(), "--out", lost.to_str().unwrap()]),
        &["bad.toml", "missing field"],
    );
    assert!(!lost.exists());
}

#[test]
fn config_show_check_and_errors() {
    let d = tmp("cfg");
    let good = d.join("good.toml");
    write(&good, b"budget = \"8GiB\"\n[replay]\npolicies = [\"oracle\"]\n");
    let o = unimem(&["config", "check", good.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o =
        unimem_env(&["--config", good.to_str().unwrap(), "config", "show"], &[("UNIMEM_LOG_LEVEL", "info")]);
    let out = stdout(&o);
    assert!(out.contains("budget = \"8GiB\"") && out.contains("good.toml"), "{out}");
    assert!(out.contains("env UNIMEM_LOG_LEVEL"), "{out}");

    let bad_key = d.join("bad_key.toml");
    write(&bad_key, b"[replay]\npolicy = [\"none\"]\n");
    assert_clear_error(
        &unimem(&["config", "check", bad_key.to_str().unwrap()]),
        &["replay.policy", "policies", "bad_key.toml"],
    );
    let bad_value = d.join("bad_value.toml");
    write(&bad_value, b"budget = \"120%\"\n");
    assert_clear_error(&unimem(&["config", "check", bad_value.to_str().unwrap()]), &["budget", "(0, 100]"]);
    let zero = d.join("zero.toml");
    write(&zero, b"budget = 0\n");
    assert_clear_error(&unimem(&["config", "check", zero.to_str().unwrap()]), &["budget", "0 bytes"]);
    assert_clear_error(
        &unimem_env(&["config", "show"], &[("UNIMEM_BUDGET", "lots")]),
        &["budget", "UNIMEM_BUDGET"],
    );
    // The replay honours the config file's policies.
    let o = unimem(&[
        "--config",
        good.to_str().unwrap(),
        "replay",
        &sample("transformer-decode.jsonl.gz"),
        "--json",
    ]);
    assert_eq!(stdout(&o).lines().count(), 1, "only the oracle: {}", stderr(&o));
}

#[test]
fn telemetry_logs_are_written_summarised_exported_and_plotted() {
    let d = tmp("telemetry");
    let log = d.join("t.jsonl");
    let o = unimem(&[
        "replay",
        &sample("transformer-decode.jsonl.gz"),
        "--budget",
        "50%",
        "--policy",
        "none",
        "--telemetry",
        log.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = unimem(&["telemetry", "summarize", log.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["totals"]["gpu_faults"].as_u64().unwrap() > 0, "{v}");
    assert!(v["regions"][0]["name"].is_string() && v["regions"][0]["summary"]["h2d_bytes"].is_u64());
    // Every byte moved in crossed the link, which was busy while it did.
    let link = &v["totals"]["link"];
    assert_eq!(link["h2d"]["bytes"], v["totals"]["h2d_bytes"], "{link}");
    assert!(link["h2d"]["busy_ns"].as_u64().unwrap() > 0, "{link}");
    let o = unimem(&["telemetry", "summarize", log.to_str().unwrap()]);
    assert!(stdout(&o).contains("bytes moved by cause: fault"), "{}", stdout(&o));
    assert!(stdout(&o).contains("link to the device: busy"), "{}", stdout(&o));
    let chrome = d.join("t.chrome.json");
    let o = unimem(&["telemetry", "export", "--chrome", log.to_str().unwrap(), chrome.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&chrome).unwrap()).unwrap();
    assert!(trace["traceEvents"].as_array().unwrap().len() > 100);
    let plot = d.join("t.svg");
    let o = unimem(&["telemetry", "plot", log.to_str().unwrap(), plot.to_str().unwrap()]);
    assert!(o.status.success() && std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));
    // A log with the driver's thrashing reports (as CUPTI gives them) gets their columns.
    let driver = d.join("driver.jsonl");
    write_lines(
        &driver,
        &[
            r#"{"schema":"unimem-telemetry","version":4,"source":"cupti"}"#,
            r#"{"kind":"region","region":1,"bytes":4194304,"name":"kv","address":1099511627776}"#,
            r#"{"kind":"thrashing","region":1,"offset":0,"bytes":65536,"by":"cpu","at_ns":10}"#,
            r#"{"kind":"throttling","region":1,"offset":0,"by":"gpu","start_ns":20,"end_ns":3000020}"#,
            r#"{"kind":"remote_map","region":1,"offset":0,"bytes":4096,"cause":"thrashing","at_ns":40}"#,
        ],
    );
    let o = unimem(&["telemetry", "summarize", driver.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(
            "driver: 1 thrashing reports, faults throttled 3.00 ms, mapped remotely: thrashing 4.00 KiB"
        ) && out.contains("mapped remotely")
            && out.lines().any(|l| l.contains("kv") && l.contains("3.00 ms")),
        "{out}"
    );
    // Page work that took no time (a profile can make it free) is shown without a rate.
    let free = d.join("free.jsonl");
    write_lines(
        &free,
        &[
            r#"{"schema":"unimem-telemetry","version":8,"source":"sim"}"#,
            r#"{"kind":"page_work","work":"repopulate","bytes":1048576,"start_ns":5,"end_ns":5}"#,
            r#"{"kind":"page_work","work":"populate","bytes":1000000,"start_ns":0,"end_ns":1000000}"#,
        ],
    );
    let o = unimem(&["telemetry", "summarize", free.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line =
        |work: &str| out.lines().find(|l| l.trim_start().starts_with(work)).unwrap_or_default().to_string();
    assert!(line("repopulate").contains("in 0 ns, ") && !line("repopulate").contains("GB/s"), "{out}");
    assert!(line("populate 976").contains("(1.0 GB/s)"), "{out}");
    // A long region name wraps in the default width; `--wide` shows it whole, left-aligned.
    let named = d.join("named.jsonl");
    write_lines(
        &named,
        &[
            r#"{"schema":"unimem-telemetry","version":8,"source":"sim"}"#,
            r#"{"kind":"region","region":7,"bytes":2097152,"name":"aten.embedding_dense_backward.default","address":1099511627776}"#,
            r#"{"kind":"migration","region":7,"offset":0,"bytes":2097152,"dir":"h2d","cause":"prefetch","start_ns":0,"end_ns":40000}"#,
        ],
    );
    let name = "aten.embedding_dense_backward.default";
    let o = unimem(&["telemetry", "summarize", named.to_str().unwrap()]);
    assert!(
        o.status.success() && !stdout(&o).contains(name) && stdout(&o).contains("--wide"),
        "{}",
        stdout(&o)
    );
    let o = unimem(&["telemetry", "summarize", named.to_str().unwrap(), "--wide"]);
    assert!(
        stdout(&o).lines().any(|l| l.starts_with("7") && l.contains(&format!(" {name} "))),
        "{}",
        stdout(&o)
    );
    // A bad log: a clear error with the file and line, no panic.
    let bad = d.join("bad.jsonl");
    write(&bad, b"{\"schema\":\"unimem-telemetry\",\"version\":1}\n");
    let o = unimem(&["telemetry", "summarize", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("bad.jsonl:1") && stderr(&o).contains("version 1"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
}

/// With `replay.arena_whole_blocks`, a placing policy in the device arena counts what the arena
/// holds (whole blocks, the small regions' chunks apart), so it makes all the room itself: the
/// emulated driver evicts nothing, where a plan for the trace's average share of whole blocks
/// leaves it some at 25% (ResNet: 80-150 MB on the simulator).
#[test]
fn arena_plans_in_whole_blocks_leave_the_driver_nothing_to_evict() {
    let args = [
        "replay",
        &sample("resnet50-train.jsonl.gz"),
        "--budget",
        "25%",
        "--policy",
        "oracle,advisor",
        "--json",
    ];
    let runs = |whole: &str| -> Vec<serde_json::Value> {
        let o = unimem_env(&args, &[("UNIMEM_REPLAY_ARENA_WHOLE_BLOCKS", whole)]);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    for run in runs("true") {
        assert_eq!(run["memory"], "device", "{run}");
        assert_eq!(run["evicted_bytes"], 0, "{run}");
        assert!(run["peak_footprint_bytes"].as_u64() <= run["budget_bytes"].as_u64(), "{run}");
    }
    let shared: u64 = runs("false").iter().map(|r| r["evicted_bytes"].as_u64().unwrap()).sum();
    assert!(shared > 0, "the share leaves the driver room to make: this test would show nothing");
}
