//! Bad input never crashes the tool or destroys data: each case ends in a clear error (or the
//! documented warning) and leaves every input as it was.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

const HEADER: &str = "{\"format\":\"unimem-trace\",\"version\":1}\n";

fn trace(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    write(&path, format!("{HEADER}{body}").as_bytes());
    path.display().to_string()
}

/// `unimem ARGS` under a virtual-memory limit of `kib`, through the shell's `ulimit`.
fn unimem_limited(kib: u64, args: &[&str]) -> Output {
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let script = format!("ulimit -v {kib}; exec '{}' {}", common::exe().display(), quoted.join(" "));
    let sim = ("UNIMEM_BACKEND", "sim"); // the simulator's limits, also on a GPU machine
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .env_remove("UNIMEM_CONFIG")
        .env(sim.0, sim.1)
        .output()
        .expect("runs")
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    stdout(o).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

/// The files in `dir`, by name.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_region_past_the_address_space_is_refused_naming_the_limit() {
    let d = tmp("huge");
    let t = trace(
        &d,
        "h.jsonl",
        "{\"ev\":\"alloc\",\"id\":1,\"bytes\":1125899906842624}\n{\"ev\":\"kernel\",\"name\":\"k\",\"dur_ns\":10,\"acc\":[[1,0,4096,\"w\"]]}\n",
    );
    for cmd in [&["replay", t.as_str(), "--budget", "50%"][..], &["trace", "stats", t.as_str()]] {
        let o = unimem_limited(4_000_000, cmd);
        assert_clear_error(&o, &["h.jsonl:2:", "1.00 PiB", "at most 2^48 bytes"]);
    }
}

#[test]
fn a_region_past_the_simulated_machine_is_refused_naming_the_profile_keys() {
    let d = tmp("machine");
    let t = trace(
        &d,
        "m.jsonl",
        "{\"ev\":\"alloc\",\"id\":1,\"bytes\":17592186044416}\n{\"ev\":\"kernel\",\"name\":\"k\",\"dur_ns\":10,\"acc\":[[1,0,4096,\"w\"]]}\n",
    );
    let log = d.join("t.jsonl");
    let o = unimem_limited(
        4_000_000,
        &["replay", &t, "--budget", "50%", "--telemetry", &log.display().to_string()],
    );
    assert_clear_error(&o, &["m.jsonl:2:", "device_memory_bytes", "host_memory_bytes", "268.40 GiB"]);
    assert_eq!(files(&d), vec!["m.jsonl"], "a failed replay leaves no log, whole or half");
}

#[test]
fn replay_memory_follows_what_the_trace_touches_not_what_it_declares() {
    // 200 GiB declared, 8 KiB touched: the replay's peak RSS stays that of a small trace.
    let d = tmp("sparse");
    let t = trace(
        &d,
        "s.jsonl",
        "{\"ev\":\"alloc\",\"id\":1,\"bytes\":214748364800}\n{\"ev\":\"kernel\",\"name\":\"k\",\"dur_ns\":10,\"acc\":[[1,0,4096,\"w\"],[1,107374182400,4096,\"w\"]]}\n{\"ev\":\"kernel\",\"name\":\"k\",\"dur_ns\":10,\"acc\":[[1,0,4096,\"r\"]]}\n",
    );
    let o = unimem(&["replay", &t, "--budget", "1GiB", "--policy", "none,oracle,advisor", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for run in json_lines(&o) {
        let rss = run["peak_rss_bytes"].as_u64().unwrap();
        assert!(rss < 200 << 20, "{}: peak RSS {rss}", run["policy"]);
    }
}

#[test]
fn variables_of_other_programs_never_matter_and_bad_unimem_ones_are_named() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"\xff");
    let o = Command::new(common::exe()).args(["config", "show"]).env("FOO", bad).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = Command::new(common::exe()).args(["config", "show"]).env("UNIMEM_BUDGET", bad).output().unwrap();
    assert_clear_error(&o, &["UNIMEM_BUDGET", "not valid UTF-8"]);
}

#[test]
fn numeric_keys_out_of_range_are_errors_before_any_work() {
    let t = sample("transformer-decode.jsonl.gz");
    for value in ["9223372036854775807", "1000000000000"] {
        let o =
            unimem_env(&["replay", &t, "--policy", "oracle"], &[("UNIMEM_REPLAY_ORACLE_LOOKAHEAD", value)]);
        assert_clear_error(
            &o,
            &["replay.oracle_lookahead", "1 to 1048576", "UNIMEM_REPLAY_ORACLE_LOOKAHEAD"],
        );
    }
}

#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_kept() {
    let d = tmp("same");
    let t = d.join("c.jsonl.gz");
    std::fs::copy(sample("transformer-decode.jsonl.gz"), &t).unwrap();
    let before = std::fs::read(&t).unwrap();
    let ts = t.display().to_string();
    let link = d.join("link.gz");
    std::os::unix::fs::symlink(&t, &link).unwrap();
    let links = link.display().to_string();
    for args in [
        vec!["replay", ts.as_str(), "--budget", "50%", "--telemetry", ts.as_str()],
        vec!["replay", ts.as_str(), "--budget", "50%", "--telemetry", links.as_str()],
        vec!["replay", links.as_str(), "--budget", "50%", "--telemetry", ts.as_str()],
        vec!["telemetry", "export", "--chrome", ts.as_str(), ts.as_str()],
        vec!["telemetry", "plot", ts.as_str(), links.as_str()],
    ] {
        let o = unimem(&args);
        assert_clear_error(&o, &["would destroy the input"]);
        assert_eq!(std::fs::read(&t).unwrap(), before, "{args:?} changed the input");
    }
    // The config file and the profile are inputs too.
    let cfg = d.join("u.toml");
    write(&cfg, b"budget = \"50%\"\n");
    let cfgs = cfg.display().to_string();
    let o = unimem(&["--config", &cfgs, "replay", &ts, "--telemetry", &cfgs]);
    assert_clear_error(&o, &["would destroy the input"]);
    assert_eq!(std::fs::read(&cfg).unwrap(), b"budget = \"50%\"\n");
    let p = d.join("p.toml");
    std::fs::write(&p, unimem_core::cost::H200_PROFILE).unwrap();
    let ps = p.display().to_string();
    let o = unimem(&["probe", "--merge", &ps, "--out", &ps]);
    assert_clear_error(&o, &["would destroy the input"]);
    assert_eq!(std::fs::read_to_string(&p).unwrap(), unimem_core::cost::H200_PROFILE);
}

#[test]
fn outputs_appear_whole_under_their_name() {
    let d = tmp("whole");
    let log = d.join("t.jsonl");
    let logs = log.display().to_string();
    let o =
        unimem(&["replay", &sample("transformer-decode.jsonl.gz"), "--budget", "50%", "--telemetry", &logs]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(files(&d), vec!["t.jsonl"], "no temporary file stays beside it");
    let text = std::fs::read_to_string(&log).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["kind"], "end", "a complete log ends with its end record");
}

#[test]
fn a_freed_largest_id_is_never_allocated_again() {
    let d = tmp("maxid");
    let m = u64::MAX;
    let t = trace(
        &d,
        "f.jsonl",
        &format!("{{\"ev\":\"alloc\",\"id\":{m},\"bytes\":10}}\n{{\"ev\":\"free\",\"id\":{m}}}\n{{\"ev\":\"alloc\",\"id\":{m},\"bytes\":10}}\n"),
    );
    assert_clear_error(&unimem(&["trace", "stats", &t]), &["f.jsonl:4:", "ids are never reused"]);
}

#[test]
fn sums_never_wrap() {
    let d = tmp("sums");
    let k = "{\"ev\":\"kernel\",\"name\":\"k\",\"dur_ns\":9223372036854775808,\"acc\":[]}\n";
    let t = trace(&d, "k.jsonl", &format!("{k}{k}"));
    assert_clear_error(&unimem(&["trace", "stats", &t]), &["k.jsonl:2:", "past 2^62 ns"]);
    let a = |id: u64| format!("{{\"ev\":\"alloc\",\"id\":{id},\"bytes\":9223372036854775808}}\n");
    let t = trace(&d, "a.jsonl", &format!("{}{}", a(1), a(2)));
    assert_clear_error(&unimem(&["trace", "stats", &t]), &["a.jsonl:2:", "at most 2^48 bytes"]);
    let t = trace(&d, "m.jsonl", &format!("{{\"ev\":\"alloc\",\"id\":1,\"bytes\":{}}}\n", u64::MAX));
    assert_clear_error(&unimem(&["trace", "stats", &t]), &["m.jsonl:2:", "at most 2^48 bytes"]);
    // Regions that each fit, allocated and freed over and over: the total is counted exactly.
    let many: String = (0..70_000u64)
        .map(|id| format!("{{\"ev\":\"alloc\",\"id\":{id},\"bytes\":281474976710656}}\n{{\"ev\":\"free\",\"id\":{id}}}\n"))
        .collect();
    let t = trace(&d, "many.jsonl", &many);
    let o = unimem(&["trace", "stats", &t, "--json"]);
    assert_clear_error(&o, &["many.jsonl:", "allocated bytes add up past 2^64-1"]);
    let budget = "18446744073709551616";
    let o = unimem(&["replay", &sample("transformer-decode.jsonl.gz"), "--budget", budget]);
    assert_clear_error(&o, &["--budget", "too large"]);
    let o = unimem(&["replay", &sample("transformer-decode.jsonl.gz"), "--budget", "-5GiB"]);
    assert_clear_error(&o, &["--budget", "positive"]);
}

fn log_with(records: &[&str], end: bool) -> String {
    let mut text = String::from("{\"schema\":\"unimem-telemetry\",\"version\":6,\"source\":\"t\"}\n");
    for r in records {
        text += r;
        text += "\n";
    }
    if end {
        text += &format!("{{\"kind\":\"end\",\"events\":{}}}\n", records.len());
    }
    text
}

#[test]
fn bad_telemetry_logs_are_clear_errors() {
    let d = tmp("logs");
    let cases = [
        (
            "{\"kind\":\"migration\",\"region\":1,\"offset\":0,\"bytes\":4096,\"dir\":\"h2d\",\"cause\":\"fault\",\"start_ns\":10,\"end_ns\":5}",
            "before `start_ns`",
        ),
        (
            "{\"kind\":\"hint\",\"hint\":\"teleport\",\"region\":1,\"offset\":0,\"bytes\":4096,\"reason\":\"r\",\"kernel\":0}",
            "teleport",
        ),
        ("{\"kind\":\"region\",\"region\":1,\"bytes\":4096,\"name\":\"w\",\"address\":\"0x10\"}", "`address` must be an integer"),
        ("{\"kind\":\"region\",\"region\":1,\"bytes\":4096,\"name\":7}", "`name` must be a string"),
    ];
    for (i, (record, want)) in cases.iter().enumerate() {
        let path = d.join(format!("bad{i}.jsonl"));
        write(&path, log_with(&[record], true).as_bytes());
        let o = unimem(&["telemetry", "summarize", &path.display().to_string()]);
        assert_clear_error(&o, &[&format!("bad{i}.jsonl:2:"), want]);
    }
    // A trace given for a log says what it is.
    let o = unimem(&["telemetry", "summarize", &sample("transformer-decode.jsonl.gz")]);
    assert_clear_error(&o, &["is a unimem trace, not a telemetry log"]);
}

#[test]
fn a_telemetry_log_cut_short_is_reported_as_truncated() {
    let d = tmp("cut");
    let kernel = "{\"kind\":\"kernel\",\"name\":\"k\",\"start_ns\":0,\"end_ns\":10,\"stall_ns\":0}";
    let whole = d.join("whole.jsonl");
    write(&whole, log_with(&[kernel, kernel], true).as_bytes());
    let cut = d.join("cut.jsonl");
    write(&cut, log_with(&[kernel, kernel], false).as_bytes());
    let o = unimem(&["telemetry", "summarize", &whole.display().to_string(), "--json"]);
    assert!(o.status.success() && !stderr(&o).contains("truncated"), "{}", stderr(&o));
    assert_eq!(json_lines(&o)[0]["end"], "complete");
    let o = unimem(&["telemetry", "summarize", &cut.display().to_string(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning:") && stderr(&o).contains("truncated"), "{}", stderr(&o));
    assert_eq!(json_lines(&o)[0]["end"], "truncated");
    // Records after the end, or an end that counts other records, are errors.
    let appended = d.join("appended.jsonl");
    write(&appended, format!("{}{kernel}\n", log_with(&[kernel], true)).as_bytes());
    assert_clear_error(
        &unimem(&["telemetry", "summarize", &appended.display().to_string()]),
        &[":4:", "after the `end` record"],
    );
    let short = d.join("short.jsonl");
    write(
        &short,
        log_with(&[kernel], false)
            .replace(kernel, &format!("{kernel}\n{{\"kind\":\"end\",\"events\":3}}"))
            .as_bytes(),
    );
    assert_clear_error(
        &unimem(&["telemetry", "summarize", &short.display().to_string()]),
        &["counts 3 events"],
    );
}

#[test]
fn a_huge_telemetry_line_is_an_error_within_bounded_memory() {
    let d = tmp("longline");
    let path = d.join("long.jsonl");
    let mut text = log_with(&[], false).into_bytes();
    text.extend(std::iter::repeat_n(b'x', 100 << 20));
    write(&path, &text);
    let o = unimem_limited(600_000, &["telemetry", "summarize", &path.display().to_string()]);
    assert_clear_error(&o, &["long.jsonl:2:", "longer than"]);
}

#[test]
fn config_errors_name_their_keys_all_of_them() {
    let d = tmp("cfg");
    let cfg = d.join("u.toml");
    for (text, key) in [
        ("budget = { value = \"50%\" }\n", "budget"),
        ("[budget]\nvalue = \"50%\"\n", "budget"),
        ("[replay]\nrelocate = {}\n", "replay.relocate"),
        ("[sim]\nprofile = \"missing-profile.toml\"\n", "sim.profile"),
    ] {
        write(&cfg, text.as_bytes());
        let o = unimem(&["config", "check", &cfg.display().to_string()]);
        assert_clear_error(&o, &[&format!("config: {key}:")]);
        assert!(!stderr(&o).contains("<config>"), "{}", stderr(&o));
    }
    // A profile that exists but is no profile fails `config check` too.
    let bad = d.join("bad.toml");
    write(&bad, b"name = 3\n");
    write(&cfg, format!("[sim]\nprofile = \"{}\"\n", bad.display()).as_bytes());
    let o = unimem(&["config", "check", &cfg.display().to_string()]);
    assert_clear_error(&o, &["config: sim.profile:", "bad.toml"]);
    write(&cfg, b"colour = 1\nbudget = \"500%\"\n[log]\nlevel = \"loud\"\n");
    let o = unimem(&["config", "check", &cfg.display().to_string()]);
    assert_clear_error(&o, &["3 problems", "colour", "budget", "log.level"]);
    let o = unimem_env(&["config", "show"], &[("UNIMEM_CONFIG", "")]);
    assert_clear_error(&o, &["UNIMEM_CONFIG", "empty"]);
}

#[test]
fn a_trace_from_a_pipe_replays_as_from_a_file() {
    let t = sample("transformer-decode.jsonl.gz");
    let file = unimem(&["replay", &t, "--budget", "50%", "--policy", "advisor", "--json"]);
    assert!(file.status.success(), "{}", stderr(&file));
    let bin = common::exe().display().to_string();
    for input in ["-", "/dev/stdin"] {
        let script = format!("cat '{t}' | '{bin}' replay {input} --budget 50% --policy advisor --json");
        let o = Command::new("sh").arg("-c").arg(script).env("UNIMEM_BACKEND", "sim").output().unwrap();
        assert!(o.status.success(), "{input}: {}", stderr(&o));
        let (a, b) = (&json_lines(&file)[0], &json_lines(&o)[0]);
        assert_eq!(a["time_ns"], b["time_ns"], "{input}");
        assert_eq!(a["h2d_bytes"], b["h2d_bytes"], "{input}");
    }
}

#[test]
fn a_budget_below_one_kernels_data_is_raised_and_said() {
    let d = tmp("tiny");
    let mut body = String::new();
    for id in 1..=6 {
        body += &format!("{{\"ev\":\"alloc\",\"id\":{id},\"bytes\":2097152}}\n");
    }
    let all: Vec<String> = (1..=6).map(|id| format!("[{id},0,2097152,\"rw\"]")).collect();
    for step in 0..3 {
        body += &format!("{{\"ev\":\"step\",\"index\":{step}}}\n");
        for _ in 0..4 {
            body += &format!(
                "{{\"ev\":\"kernel\",\"name\":\"big\",\"dur_ns\":100000,\"acc\":[{}]}}\n",
                all.join(",")
            );
            body +=
                "{\"ev\":\"kernel\",\"name\":\"small\",\"dur_ns\":100000,\"acc\":[[1,0,2097152,\"r\"]]}\n";
        }
    }
    let t = trace(&d, "k.jsonl", &body);
    for budget in ["1", "2MiB", "6MiB"] {
        let o = unimem(&["replay", &t, "--budget", budget, "--policy", "none,oracle,advisor", "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains("warning:") && err.contains("`big` (line 9)") && err.contains("12.00 MiB"),
            "{err}"
        );
        let runs = json_lines(&o);
        let time = |i: usize| runs[i]["time_ns"].as_u64().unwrap();
        for run in &runs {
            assert_eq!(run["budget_bytes"], 12 << 20, "raised to the kernel's data");
            assert!(run["warnings"][0].as_str().unwrap().contains("`big`"));
        }
        assert!(time(2) <= time(0), "advisor {} against none {}", time(2), time(0));
        assert!(time(1) <= time(0), "oracle {} against none {}", time(1), time(0));
    }
    let o = unimem(&["replay", &t, "--budget", "1TiB", "--backend", "sim"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("more than the device's"), "{}", stderr(&o));
}

#[test]
fn each_policy_runs_once() {
    let o = unimem(&[
        "replay",
        &sample("transformer-decode.jsonl.gz"),
        "--policy",
        "none,none,advisor,none",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let policies: Vec<String> =
        json_lines(&o).iter().map(|r| r["policy"].as_str().unwrap().to_string()).collect();
    assert_eq!(policies, ["none", "advisor"]);
}

/// A budget smaller than one kernel's data is raised, with a warning naming the kernel, to what
/// holds it as the device arena does (whole blocks, and the chunk of its small region), so that
/// every policy's footprint stays within the budget it reports.
#[test]
fn a_budget_below_one_kernels_data_is_raised_to_what_holds_it() {
    let d = tmp("raised");
    let kernel = "{\"ev\":\"kernel\",\"name\":\"big\",\"dur_ns\":1000,\"acc\":[[1,0,1048576,\"rw\"],[1,4194304,1048576,\"rw\"],[2,0,4096,\"rw\"]]}\n";
    let t = trace(
        &d,
        "k.jsonl",
        &format!(
            "{{\"ev\":\"alloc\",\"id\":1,\"bytes\":5242880}}\n{{\"ev\":\"alloc\",\"id\":2,\"bytes\":4096}}\n{kernel}{kernel}"
        ),
    );
    let o = unimem(&["replay", &t, "--budget", "1MiB", "--policy", "none,oracle,advisor", "--json"]);
    assert!(stderr(&o).contains("kernel `big`") && stderr(&o).contains("touches at once"), "{}", stderr(&o));
    for run in json_lines(&o) {
        assert_eq!(run["budget_bytes"], 6 << 20, "two blocks and the small region's chunk: {run}");
        let (peak, budget) =
            (run["peak_footprint_bytes"].as_u64().unwrap(), run["budget_bytes"].as_u64().unwrap());
        assert!(peak <= budget, "{}: footprint {peak} over the budget {budget}", run["policy"]);
    }
}
