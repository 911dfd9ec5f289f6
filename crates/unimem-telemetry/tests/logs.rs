//! A simulator replay's log: read back, exported to a Chrome trace and an SVG that are checked
//! structurally, and bad logs rejected with the file, line and reason.

use std::sync::Arc;

use unimem_core::backends::sim::SimBackend;
use unimem_core::config::{Config, PolicyName};
use unimem_core::replay;
use unimem_core::seam::MemEvent;
use unimem_core::trace::{TraceAccess, TraceEvent, TraceHeader, TraceReader, TraceWriter};
use unimem_core::{AccessMode, CostModel};
use unimem_telemetry::{chrome_trace, svg, EventLog, Log, Summary};

/// A small program over a 8 MiB GPU: three 4 MiB regions read in turn, five times.
fn replay_log(policy: PolicyName) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), false, "mem", &TraceHeader::new("telemetry-test")).unwrap();
    for id in 1..=3u64 {
        w.write(&TraceEvent::Alloc { id, bytes: 4 << 20, name: Some(format!("t{id}")) }).unwrap();
    }
    for step in 0..5 {
        w.write(&TraceEvent::Step { index: step }).unwrap();
        for id in 1..=3u64 {
            let acc = vec![TraceAccess { id, offset: 0, len: 4 << 20, mode: AccessMode::Read }];
            w.write(&TraceEvent::Kernel { name: Arc::from("read"), dur_ns: 50_000, host_ns: None, acc })
                .unwrap();
        }
    }
    w.write(&TraceEvent::Free { id: 2 }).unwrap();
    let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
    let budget = 8 << 20;
    let mut gpu = SimBackend::new(CostModel::h200(), budget);
    let mut p = unimem_core::policy::make_policy(policy, budget, &Config::default(), &CostModel::h200());
    let mut log = EventLog::new(Vec::new(), "test replay").unwrap();
    replay::run_with_events(
        TraceReader::from_bytes("mem", bytes).unwrap(),
        &mut gpu,
        p.as_mut(),
        &mut |_| {},
        Some(&mut log),
    )
    .unwrap();
    log.finish().unwrap()
}

#[test]
fn replay_logs_attribute_events_to_named_regions() {
    let log = Log::parse(&replay_log(PolicyName::None)[..], "mem").unwrap();
    assert_eq!(log.source, "test replay");
    assert_eq!(log.name_of(unimem_core::RegionId(2)), "t2");
    assert!(log.regions[&unimem_core::RegionId(2)].freed, "attribution survives the free");
    let addresses: std::collections::BTreeSet<u64> = log.regions.values().filter_map(|r| r.address).collect();
    assert_eq!(addresses.len(), log.regions.len(), "every region has its own address in the log");
    let s = Summary::of(&log.events);
    // 12 MiB read five times through 8 MiB: every region is faulted in at least once, and what was
    // evicted comes back (thrashing).
    assert!(s.totals.gpu_faults >= 3 && s.totals.h2d_bytes >= 12 << 20, "{:?}", s.totals);
    assert!(s.regions.values().any(|r| r.refetched_bytes > 0 && r.evicted_bytes > 0));
    assert_eq!(s.totals.kernels, 15);
    // With the advisor, the same bytes arrive by prefetch instead of faults, and the log says
    // which hints it gave and how its forecasts scored.
    let advised = Summary::of(&Log::parse(&replay_log(PolicyName::Advisor)[..], "mem").unwrap().events);
    assert!(advised.totals.by_cause.iter().any(|(c, b)| c == "prefetch" && *b > 0), "{:?}", advised.totals);
    let prefetch_hints = advised.totals.hints.get("prefetch").copied().unwrap_or_default();
    assert!(prefetch_hints.0 > 0 && prefetch_hints.1 > 0, "{:?}", advised.totals.hints);
    assert!(advised.totals.forecast_hits > 0, "the second pass was forecast: {:?}", advised.totals);
}

/// A log kept compressed (`gzip t.jsonl`) reads as the plain one does.
#[test]
fn gzipped_logs_read_as_plain_ones() {
    use std::io::Write;
    let plain = replay_log(PolicyName::Advisor);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&plain).unwrap();
    let gz = gz.finish().unwrap();
    let (a, b) = (Log::parse(&plain[..], "plain").unwrap(), Log::parse(&gz[..], "gz").unwrap());
    assert!(!a.events.is_empty());
    assert_eq!((a.source, a.regions, a.events), (b.source, b.regions, b.events));
    let err = Log::parse(&gz[..gz.len() / 2], "cut.jsonl.gz").unwrap_err().to_string();
    assert!(err.starts_with("cut.jsonl.gz:"), "{err}");
}

#[test]
fn the_chrome_trace_is_well_formed() {
    let log = Log::parse(&replay_log(PolicyName::Advisor)[..], "mem").unwrap();
    let trace = chrome_trace(&log);
    let events = trace["traceEvents"].as_array().expect("traceEvents array");
    let mut kinds = std::collections::BTreeMap::new();
    for e in events {
        let ph = e["ph"].as_str().expect("every event has a phase");
        *kinds.entry(ph.to_string()).or_insert(0) += 1;
        assert!(e["pid"].is_u64(), "{e}");
        match ph {
            "X" => {
                assert!(e["ts"].as_f64().unwrap() >= 0.0 && e["dur"].as_f64().unwrap() >= 0.0, "{e}");
                assert!(e["name"].is_string() && e["tid"].is_u64(), "{e}");
            }
            "i" => assert!(e["ts"].is_f64() && e["s"] == "t", "{e}"),
            "C" => assert!(e["args"].is_object() && e["ts"].is_f64(), "{e}"),
            "M" => assert!(e["args"]["name"].is_string(), "{e}"),
            other => panic!("unexpected phase {other}"),
        }
    }
    for ph in ["X", "C", "M"] {
        assert!(kinds.contains_key(ph), "no `{ph}` events: {kinds:?}");
    }
    // Round trip through text, as a viewer would load it.
    let text = serde_json::to_string(&trace).unwrap();
    let back: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back["traceEvents"].as_array().unwrap().len(), events.len());
}

/// What the tests look at in an SVG document.
struct SvgParts {
    /// Every text element's text, trimmed.
    texts: Vec<String>,
    /// The points of each polyline.
    lines: Vec<Vec<(f64, f64)>>,
    width: f64,
    height: f64,
}

/// Parses an SVG document (an XML parser: the plot must be well-formed).
fn svg_parts(doc: &str) -> SvgParts {
    let xml = roxmltree::Document::parse(doc).expect("the plot is well-formed XML");
    let root = xml.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let size =
        |a: &str| root.attribute(a).and_then(|v| v.trim_end_matches("px").parse::<f64>().ok()).unwrap();
    let texts = root
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_string()))
        .collect();
    let lines = root
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .map(|n| {
            n.attribute("points")
                .unwrap()
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect();
    SvgParts { texts, lines, width: size("width"), height: size("height") }
}

#[test]
fn the_svg_plot_parses_with_axes_units_and_a_legend() {
    let doc = svg(&Log::parse(&replay_log(PolicyName::None)[..], "mem").unwrap()).unwrap();
    let SvgParts { texts, lines, width: w, height: h } = svg_parts(&doc);
    for want in
        ["time (ms)", "resident (MiB)", "moved (MiB)", "device-resident", "host to device", "device to host"]
    {
        assert!(texts.iter().any(|t| t == want), "no `{want}` in {texts:?}");
    }
    // 12 MiB read in turn through 8 MiB.
    assert!(texts.iter().any(|t| t == "device-resident bytes (peak 8.00 MiB)"), "{texts:?}");
    // The three series, plus the legend's samples and the axes' ticks.
    let long: Vec<_> = lines.iter().filter(|l| l.len() > 2).collect();
    assert!(long.len() >= 3, "{} polylines of more than two points", long.len());
    for (x, y) in lines.iter().flatten() {
        assert!((0.0..=w).contains(x) && (0.0..=h).contains(y), "({x}, {y}) outside {w}x{h}");
    }
}

/// The peak resident bytes the summary and the plot report from a log are the replay's own,
/// through frees, pooled reuse, staged evictions and restores (the sample ResNet-50 trace).
#[test]
fn the_logs_peak_resident_bytes_agree_with_the_replay() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces/resnet50-train.jsonl.gz");
    let open = || TraceReader::open(std::path::Path::new(path)).unwrap();
    let stats = unimem_core::trace::TraceStats::compute(open()).unwrap();
    let peak = stats.peak_live_page_bytes;
    for (policy, percent) in [(PolicyName::Advisor, 50), (PolicyName::None, 50), (PolicyName::Advisor, 100)] {
        let budget = peak * percent / 100;
        let mut gpu = SimBackend::new(CostModel::h200(), budget).with_staging(peak);
        let mut p = unimem_core::policy::make_policy(policy, budget, &Config::default(), &CostModel::h200());
        let mut log = EventLog::new(Vec::new(), "resnet").unwrap();
        let report =
            replay::run_with_events(open(), &mut gpu, p.as_mut(), &mut |_| {}, Some(&mut log)).unwrap();
        let log = Log::parse(&log.finish().unwrap()[..], "mem").unwrap();
        let summary = Summary::of_log(&log).totals.peak_resident_bytes;
        let want = report.peak_resident_bytes as f64;
        assert!(
            (summary as f64 - want).abs() <= 0.01 * want,
            "{policy} at {percent}%: the log's peak {summary} against the replay's {}",
            report.peak_resident_bytes
        );
        let texts = svg_parts(&svg(&log).unwrap()).texts;
        let caption = format!("device-resident bytes (peak {})", unimem_core::units::Bytes(summary));
        assert!(texts.contains(&caption), "{caption} not in {texts:?}");
    }
}

#[test]
fn bad_logs_are_clear_errors() {
    let good = String::from_utf8(replay_log(PolicyName::None)).unwrap();
    let err = |text: &str| Log::parse(text.as_bytes(), "bad.jsonl").unwrap_err().to_string();
    // Truncated in the middle of a record.
    let cut = &good[..good.len() - 10];
    let e = err(cut);
    assert!(e.starts_with("bad.jsonl:") && e.contains("truncated"), "{e}");
    // Wrong schema version, wrong schema.
    let e = err(&good.replacen("\"version\":8", "\"version\":9", 1));
    assert!(
        e.contains("bad.jsonl:1:") && e.contains("version 9") && e.contains("reads versions 2 to 8"),
        "{e}"
    );
    assert!(err(&good.replacen("unimem-telemetry", "other", 1)).contains("is not `unimem-telemetry`"));
    // Version 2 (no addresses, no releases), 3 (no driver thrashing events), 4 (no
    // relocations) and 5 (no end record) logs still read; they cannot say whether they are
    // complete. A version 6 log (no page work) reads, complete, and a version 7 one (no issue
    // times) too.
    assert!(good.contains("\"issued_ns\":"), "the simulator says when it issued kernels");
    let without_issue = |l: &str| match l.find(",\"issued_ns\":") {
        Some(at) => {
            let digits = l[at + 13..].find(|c: char| !c.is_ascii_digit()).expect("a closing brace");
            format!("{}{}", &l[..at], &l[at + 13 + digits..])
        }
        None => l.to_string(),
    };
    let v7: Vec<String> =
        good.replacen("\"version\":8", "\"version\":7", 1).lines().map(without_issue).collect();
    let v7 = Log::parse(v7.join("\n").as_bytes(), "v7.jsonl").unwrap();
    assert_eq!(v7.end, unimem_telemetry::LogEnd::Complete);
    assert!(v7.events.iter().all(|e| !matches!(e, MemEvent::Kernel { issued_ns: Some(_), .. })));
    assert!(v7.events.iter().any(|e| matches!(e, MemEvent::Kernel { .. })));
    let v6 = good.replacen("\"version\":8", "\"version\":6", 1);
    assert_eq!(Log::parse(v6.as_bytes(), "v6.jsonl").unwrap().end, unimem_telemetry::LogEnd::Complete);
    let unended = good.lines().filter(|l| !l.contains("\"kind\":\"end\"")).collect::<Vec<_>>().join("\n");
    for v in [2, 3, 4, 5] {
        let old = unended.replacen("\"version\":8", &format!("\"version\":{v}"), 1);
        let log = Log::parse(old.as_bytes(), "old.jsonl").unwrap_or_else(|e| panic!("version {v}: {e}"));
        assert_eq!(log.end, unimem_telemetry::LogEnd::Unmarked, "version {v}");
    }
    assert_eq!(Log::parse(good.as_bytes(), "good.jsonl").unwrap().end, unimem_telemetry::LogEnd::Complete);
    // Unknown event kind, with its line.
    let mut lines: Vec<&str> = good.lines().collect();
    lines.insert(3, r#"{"kind":"teleport","region":1}"#);
    let e = err(&lines.join("\n"));
    assert!(
        e.contains("bad.jsonl:4:") && e.contains("unknown event kind `teleport`") && e.contains("migration"),
        "{e}"
    );
    // A known kind with a bad field.
    let e = err(&good.replacen("\"dir\":\"h2d\"", "\"dir\":\"sideways\"", 1));
    assert!(e.contains("sideways"), "{e}");
    // Page work that ends before it starts, and of an unknown kind.
    let mut lines: Vec<&str> = good.lines().collect();
    lines.insert(3, r#"{"kind":"page_work","work":"populate","bytes":4096,"start_ns":20,"end_ns":10}"#);
    let e = err(&lines.join("\n"));
    assert!(e.contains("bad.jsonl:4:") && e.contains("before `start_ns`"), "{e}");
    lines[3] = r#"{"kind":"page_work","work":"teleport","bytes":4096,"start_ns":10,"end_ns":20}"#;
    let e = err(&lines.join("\n"));
    assert!(e.contains("bad.jsonl:4:") && e.contains("teleport"), "{e}");
    assert!(err("").contains("empty file"));
}

#[test]
fn driver_thrashing_throttling_and_remote_maps_read_summarise_and_export() {
    use unimem_core::seam::{MemEvent, RemoteMapCause};
    use unimem_core::{Accessor, RegionId};
    let r = RegionId(4);
    let events = vec![
        MemEvent::Thrashing { region: r, offset: 0, bytes: 2 << 20, by: Accessor::Device, at_ns: 1_000 },
        MemEvent::Throttling { region: r, offset: 0, by: Accessor::Host, start_ns: 1_500, end_ns: 4_000 },
        MemEvent::RemoteMap {
            region: r,
            offset: 0,
            bytes: 2 << 20,
            cause: RemoteMapCause::Thrashing,
            at_ns: 5_000,
        },
        MemEvent::RemoteMap {
            region: r,
            offset: 4096,
            bytes: 4096,
            cause: RemoteMapCause::Policy,
            at_ns: 6_000,
        },
    ];
    let mut log = EventLog::new(Vec::new(), "cupti").unwrap();
    log.write_region(r, 4 << 20, Some("kv"), 1 << 40).unwrap();
    events.iter().for_each(|e| log.write(e).unwrap());
    let text = String::from_utf8(log.finish().unwrap()).unwrap();
    assert!(text.contains(r#""kind":"remote_map""#) && text.contains(r#""cause":"thrashing""#), "{text}");
    let back = Log::parse(text.as_bytes(), "mem").unwrap();
    assert_eq!(back.events, events);
    let s = Summary::of(&back.events);
    let region = s.regions[&r];
    assert_eq!(
        (region.thrashing, region.throttled_ns, region.remote_mapped_bytes),
        (1, 2_500, (2 << 20) + 4096)
    );
    assert_eq!(s.totals.thrashing, 1);
    assert_eq!(s.totals.remote_mapped.get("thrashing"), Some(&(2 << 20)));
    assert_eq!(s.totals.remote_mapped.get("policy"), Some(&4096));
    let trace = chrome_trace(&back);
    let cats: Vec<&str> =
        trace["traceEvents"].as_array().unwrap().iter().filter_map(|e| e["cat"].as_str()).collect();
    assert_eq!(cats, ["thrashing", "throttling", "remote_map", "remote_map"]);
    let throttled =
        trace["traceEvents"].as_array().unwrap().iter().find(|e| e["cat"] == "throttling").unwrap();
    assert_eq!((throttled["ph"].as_str(), throttled["dur"].as_f64()), (Some("X"), Some(2.5)));
}

/// A GPU replay's log with relocations (the CUDA backend's `relocated` events) reads back,
/// summarises and exports (a reader without the kind refused the log on the H200).
#[test]
fn relocations_read_summarise_and_export() {
    use unimem_core::seam::MemEvent;
    use unimem_core::RegionId;
    let r = RegionId(7);
    let events =
        vec![MemEvent::Relocated { region: r, from: 1 << 40, to: (1 << 40) + (64 << 20), at_ns: 2_000 }];
    let mut log = EventLog::new(Vec::new(), "cuda").unwrap();
    log.write_region(r, 4 << 20, Some("act"), 1 << 40).unwrap();
    events.iter().for_each(|e| log.write(e).unwrap());
    let text = String::from_utf8(log.finish().unwrap()).unwrap();
    assert!(text.contains(r#""kind":"relocated""#), "{text}");
    let back = Log::parse(text.as_bytes(), "mem").unwrap();
    assert_eq!(back.events, events);
    assert_eq!(Summary::of(&back.events).totals.h2d_bytes, 0);
    assert!(chrome_trace(&back)["traceEvents"].is_array());
}

/// A `Write` the test keeps a handle on while the runtime's engine owns the log.
#[derive(Clone, Default)]
struct SharedBuf(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_running_program_writes_its_telemetry_too() {
    use unimem_core::{RangeAccess, Runtime};
    let buf = SharedBuf::default();
    let log = EventLog::new(buf.clone(), "test program").unwrap();
    let budget = 8 << 20;
    let rt = Runtime::builder()
        .backend(Box::new(SimBackend::new(CostModel::h200(), budget)))
        .policy(PolicyName::Advisor)
        .telemetry(Box::new(log))
        .build()
        .unwrap();
    let names = ["weights", "activations", "gradients"];
    let regions: Vec<_> = names.iter().map(|n| rt.alloc(n, 4 << 20).unwrap()).collect();
    for r in &regions {
        rt.write(r.id, 0, &vec![1u8; 4 << 20]).unwrap();
    }
    for _ in 0..4 {
        rt.step().unwrap();
        for r in &regions {
            let acc = [RangeAccess { region: r.id, offset: 0, len: 4 << 20, mode: AccessMode::Read }];
            rt.launch("read", 50_000, &acc).unwrap();
        }
    }
    rt.free(regions[1].id).unwrap();
    rt.synchronize().unwrap();
    drop(rt); // the engine closes the log
    let bytes = buf.0.lock().unwrap().clone();
    let log = Log::parse(&bytes[..], "program").unwrap();
    assert_eq!(log.source, "test program");
    for (r, name) in regions.iter().zip(names) {
        assert_eq!(log.name_of(r.id), name);
    }
    assert!(log.regions[&regions[1].id].freed);
    let s = Summary::of(&log.events);
    assert_eq!(s.totals.kernels, 12);
    // 12 MiB cycling through 8 MiB: everything moves, each region by name.
    assert!(s.regions.len() == 3 && s.regions.values().all(|r| r.h2d_bytes > 0), "{:?}", s.regions);
    let hints = s.totals.hints.values().map(|h| h.0).sum::<u64>();
    assert!(hints > 0, "the advisor's hints, with their reasons, are in the log");
}
