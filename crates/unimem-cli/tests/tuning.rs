//! Tuning on a program's trace, end to end: `unimem plan` finds the smallest budget within a
//! slowdown and draws its curve, the reports fit a terminal, and the telemetry's peak is the
//! replay's.

mod common;

use common::*;

fn json_lines(o: &std::process::Output) -> Vec<serde_json::Value> {
    assert!(o.status.success(), "{}", stderr(o));
    stdout(o).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// One replay's JSON report.
fn replay(trace: &str, budget: &str, policy: &str) -> serde_json::Value {
    let runs = json_lines(&unimem(&["replay", trace, "--budget", budget, "--policy", policy, "--json"]));
    runs.into_iter().next().unwrap()
}

fn meets(run: &serde_json::Value, max: f64) -> bool {
    run["time_ns"].as_f64().unwrap() <= max * run["compute_floor_ns"].as_f64().unwrap()
}

/// The check: the planned budget is no larger than the smallest 10%-step budget that
/// meets the limit (found here by replaying each step), and a replay at it meets the limit.
#[test]
fn plan_finds_a_budget_within_the_slowdown_no_larger_than_the_smallest_step() {
    let t = sample("resnet50-train.jsonl.gz");
    let max = 4.5;
    let plans = json_lines(&unimem(&["plan", &t, "--max-slowdown", "4.5", "--json"]));
    assert_eq!(plans.len(), 1);
    let plan = &plans[0];
    assert_eq!(plan["policy"], "advisor");
    assert_eq!(plan["met"], true);
    for key in ["budget_bytes", "time_ns", "compute_floor_ns", "bound_ns", "curve", "peak_live_bytes"] {
        assert!(plan.get(key).is_some(), "no {key} in {plan}");
    }
    let budget = plan["budget_bytes"].as_u64().unwrap();
    let smallest_step = (1..=10)
        .map(|tenth| replay(&t, &format!("{}%", tenth * 10), "advisor"))
        .find(|run| meets(run, max))
        .expect("the whole peak meets 4.5x");
    assert!(
        budget <= smallest_step["budget_bytes"].as_u64().unwrap(),
        "planned {budget}, a 10% step meets at {}",
        smallest_step["budget_bytes"]
    );
    let at = replay(&t, &budget.to_string(), "advisor");
    assert!(meets(&at, max), "a replay at the planned budget: {at}");
    assert_eq!(at["time_ns"], plan["time_ns"], "the plan reports the replay it made");
}

#[test]
fn plan_compares_policies_on_one_curve_and_draws_it() {
    let t = sample("transformer-decode.jsonl.gz");
    let d = tmp("plan-plot");
    let plot = d.join("curve.svg");
    let o = unimem(&[
        "plan",
        &t,
        "--max-slowdown",
        "3",
        "--policy",
        "advisor,none",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for want in ["advisor", "none", "x floor", "x bound", "yes, smallest"] {
        assert!(out.contains(want), "no `{want}` in:\n{out}");
    }
    assert!(out.lines().all(|l| l.chars().count() <= 100), "wider than 100 columns:\n{out}");
    let svg = std::fs::read_to_string(&plot).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the plot is well-formed XML");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    for want in [
        "budget (GiB of device memory)",
        "time over the compute floor (x)",
        "link-limit bound",
        "limit: 3x the floor",
    ] {
        assert!(texts.contains(&want), "no `{want}` in {texts:?}");
    }
    assert!(texts.iter().any(|t| t.starts_with("advisor (smallest within:")), "{texts:?}");
    assert!(texts.iter().any(|t| t.starts_with("none")), "{texts:?}");
    let lines = doc.descendants().filter(|n| n.has_tag_name("polyline")).count();
    assert!(lines >= 4, "limit, bound and two policies: {lines} polylines");
}

#[test]
fn plan_refuses_bad_limits_and_an_output_that_is_its_input() {
    let t = sample("transformer-decode.jsonl.gz");
    assert_clear_error(&unimem(&["plan", &t, "--max-slowdown", "0.5"]), &["--max-slowdown", "at least 1"]);
    assert_clear_error(&unimem(&["plan", &t, "--max-slowdown", "nan"]), &["--max-slowdown"]);
    let d = tmp("plan-input");
    let copy = d.join("t.jsonl.gz");
    std::fs::copy(&t, &copy).unwrap();
    let before = std::fs::read(&copy).unwrap();
    let c = copy.to_str().unwrap();
    assert_clear_error(&unimem(&["plan", c, "--max-slowdown", "2", "--plot", c]), &["destroy the input"]);
    assert_eq!(std::fs::read(&copy).unwrap(), before, "the trace is intact");
}

#[test]
fn demo_and_replay_fit_100_columns_and_wide_shows_every_column() {
    let t = sample("resnet50-train.jsonl.gz");
    for args in [vec!["demo"], vec!["replay", &t, "--budget", "50%", "--policy", "none,oracle,advisor"]] {
        let narrow = unimem(&args);
        assert!(narrow.status.success(), "{}", stderr(&narrow));
        let out = stdout(&narrow);
        let widest = out.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(widest <= 100, "{args:?}: {widest} columns:\n{out}");
        assert!(out.contains("x bound") && !out.contains("prefetch acc/cov/on-time"), "{out}");
        let wide = unimem(&[args.clone(), vec!["--wide"]].concat());
        let out = stdout(&wide);
        assert!(
            out.contains("prefetch acc/cov/on-time") && out.contains("remote"),
            "{args:?} --wide:\n{out}"
        );
    }
}

#[test]
fn help_lists_every_command() {
    let o = unimem(&["--help"]);
    let out = stdout(&o);
    for cmd in ["demo", "replay", "plan", "trace", "config", "probe", "telemetry"] {
        assert!(out.lines().any(|l| l.trim_start().starts_with(cmd)), "`{cmd}` not in --help:\n{out}");
    }
}

#[test]
fn generated_traces_describe_their_generator_field_by_field() {
    let d = tmp("gen-header");
    let path = d.join("g.jsonl");
    let o = unimem(&[
        "trace",
        "gen",
        "--pattern",
        "strided",
        "--events",
        "100",
        "--seed",
        "7",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&path).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let g = &header["generator"];
    assert_eq!(
        (g["pattern"].as_str(), g["events"].as_u64(), g["seed"].as_u64()),
        (Some("strided"), Some(100), Some(7))
    );
    assert!(!header["source"].as_str().unwrap().contains("SynthSpec"), "{header}");
}

/// The summary's peak resident bytes from a replay's log are the replay's own.
#[test]
fn the_telemetry_summary_peak_is_the_replays() {
    let t = sample("transformer-decode.jsonl.gz");
    let d = tmp("peak");
    let log = d.join("log.jsonl");
    let l = log.to_str().unwrap();
    for budget in ["25%", "50%", "100%"] {
        let runs = json_lines(&unimem(&[
            "replay",
            &t,
            "--budget",
            budget,
            "--policy",
            "advisor",
            "--telemetry",
            l,
            "--json",
        ]));
        let replayed = runs[0]["peak_resident_bytes"].as_f64().unwrap();
        let s: serde_json::Value =
            serde_json::from_str(&stdout(&unimem(&["telemetry", "summarize", l, "--json"]))).unwrap();
        let logged = s["totals"]["peak_resident_bytes"].as_f64().unwrap();
        assert!((logged - replayed).abs() <= 0.01 * replayed, "{budget}: log {logged}, replay {replayed}");
        let text = stdout(&unimem(&["telemetry", "summarize", l]));
        assert!(text.contains("peak resident"), "{text}");
        // The simulator says when its host issued each kernel.
        assert!(text.contains("host ahead of the device at issue: median"), "{text}");
        assert!(s["totals"]["host_lead"]["kernels"].as_u64() == runs[0]["kernels"].as_u64(), "{s}");
        assert!(text.lines().all(|l| l.chars().count() <= 100), "wider than 100 columns:\n{text}");
    }
}

/// Where the device arena's whole blocks outgrow the budget a placing policy counts in pages,
/// the emulated driver evicts on its own (ResNet at 25%); both placing policies follow it,
/// so that no kernel faults on data its policy believed resident.
#[test]
fn placing_policies_follow_the_drivers_evictions() {
    let t = sample("resnet50-train.jsonl.gz");
    for policy in ["oracle", "advisor"] {
        let run = replay(&t, "25%", policy);
        assert_eq!(run["memory"], "device", "{run}");
        assert!(run["placement"]["staged"].as_u64().unwrap() > 0, "{policy}: evictions at 25%");
        assert_eq!(run["gpu_faults"], 0, "{policy} at 25%: {run}");
    }
}
