//! Mutated telemetry logs (fields pushed to the edges of their ranges, records cut, bytes
//! flipped, lines repeated) read back: each ends in a log or an error naming the file and line,
//! never a panic, and every log read is summarised, exported and plotted without one.
//! `UNIMEM_FUZZ_CASES` sets the number of cases (300 by default).

use std::sync::Arc;

use proptest::prelude::RngExt;
use proptest::test_runner::{RngAlgorithm, TestRng};

use unimem_core::access::AccessMode;
use unimem_core::backends::sim::SimBackend;
use unimem_core::config::{Config, PolicyName};
use unimem_core::trace::{TraceAccess, TraceEvent, TraceHeader, TraceReader, TraceWriter};
use unimem_core::{replay, CostModel};
use unimem_telemetry::{chrome_trace, svg, EventLog, Log, Summary};

/// A log of an advisor replay that thrashes a little: every kind of record the simulator writes.
fn base_log() -> Vec<String> {
    let mut w = TraceWriter::new(Vec::new(), false, "mem", &TraceHeader::new("fuzz")).unwrap();
    for id in 1..=4u64 {
        w.write(&TraceEvent::Alloc { id, bytes: 3 << 20, name: Some(format!("t{id}")) }).unwrap();
    }
    for step in 0..3 {
        w.write(&TraceEvent::Step { index: step }).unwrap();
        for id in 1..=4u64 {
            let mode = if id % 2 == 0 { AccessMode::ReadWrite } else { AccessMode::Read };
            let acc = vec![TraceAccess { id, offset: 0, len: 3 << 20, mode }];
            w.write(&TraceEvent::Kernel { name: Arc::from("k"), dur_ns: 40_000, host_ns: None, acc })
                .unwrap();
        }
    }
    w.write(&TraceEvent::Free { id: 4 }).unwrap();
    let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
    let mut log = EventLog::new(Vec::new(), "fuzz").unwrap();
    let budget = 8 << 20;
    let mut gpu = SimBackend::new(CostModel::h200(), budget);
    let mut p =
        unimem_core::policy::make_policy(PolicyName::Advisor, budget, &Config::default(), &CostModel::h200());
    let reader = TraceReader::from_bytes("mem", bytes).unwrap();
    replay::run_with_events(reader, &mut gpu, p.as_mut(), &mut |_| {}, Some(&mut log)).unwrap();
    String::from_utf8(log.finish().unwrap()).unwrap().lines().map(str::to_string).collect()
}

fn mutate(lines: &mut Vec<String>, r: &mut TestRng) {
    const EDGES: [&str; 12] = [
        "0",
        "1",
        "18446744073709551615",
        "18446744073709551616",
        "9223372036854775808",
        "-1",
        "1.5",
        "null",
        "\"x\"",
        "[]",
        "{}",
        "true",
    ];
    let i = r.random_range(0..lines.len());
    match r.random_range(0..6) {
        0 => {
            lines.remove(i);
        }
        1 => {
            let l = lines[i].clone();
            lines.insert(r.random_range(0..=lines.len()), l);
        }
        2 => {
            // A value after a key replaced by an edge value.
            let l = &lines[i];
            let colons: Vec<usize> = l.match_indices("\":").map(|(k, _)| k + 2).collect();
            if let Some(&at) = colons.get(r.random_range(0..colons.len().max(1))) {
                let end = l[at..].find([',', '}']).map_or(l.len(), |e| at + e);
                lines[i] = format!("{}{}{}", &l[..at], EDGES[r.random_range(0..EDGES.len())], &l[end..]);
            }
        }
        3 => {
            let l = &mut lines[i];
            let cut = r.random_range(0..=l.len());
            let cut = (0..=cut).rev().find(|&k| l.is_char_boundary(k)).unwrap_or(0);
            l.truncate(cut);
        }
        4 => {
            let mut bytes = std::mem::take(&mut lines[i]).into_bytes();
            if !bytes.is_empty() {
                let at = r.random_range(0..bytes.len());
                bytes[at] ^= 1 << r.random_range(0..8);
            }
            lines[i] = String::from_utf8_lossy(&bytes).into_owned();
        }
        _ => {
            let kinds = ["\"migration\"", "\"kernel\"", "\"fault\"", "\"hint\"", "\"end\"", "\"region\""];
            let l = &lines[i];
            lines[i] =
                l.replacen("\"kind\":\"", &format!("\"kind\":{},\"was\":\"", kinds[r.random_range(0..6)]), 1);
        }
    }
}

#[test]
fn mutated_logs_read_back_cleanly() {
    let cases: u64 = std::env::var("UNIMEM_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let base = base_log();
    std::panic::set_hook(Box::new(|_| {}));
    let (mut read, mut refused, mut panics) = (0u64, 0u64, Vec::new());
    for seed in 0..cases {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        let mut r = TestRng::from_seed(RngAlgorithm::XorShift, &bytes);
        let mut lines = base.clone();
        // Half the cases lose their end record, as a log cut short does: their counts no
        // longer need to agree, so more mutated logs are read and summarised.
        if r.random_bool(0.5) {
            lines.pop();
        }
        for _ in 0..r.random_range(1..4) {
            mutate(&mut lines, &mut r);
        }
        let text = lines.join("\n");
        let outcome = std::panic::catch_unwind(|| match Log::parse(text.as_bytes(), "fuzz.jsonl") {
            Ok(log) => {
                let s = Summary::of(&log.events);
                let _ = (s.by_cost(), chrome_trace(&log), svg(&log));
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        });
        match outcome {
            Ok(Ok(())) => read += 1,
            Ok(Err(e)) => {
                assert!(e.starts_with("fuzz.jsonl:"), "case {seed}: {e}");
                refused += 1;
            }
            Err(_) => panics.push(seed),
        }
    }
    let _ = std::panic::take_hook();
    eprintln!("fuzz logs: {cases} cases, {read} read, {refused} refused, {} panics", panics.len());
    assert!(panics.is_empty(), "cases that panicked: {panics:?}");
    assert!(read > 0 && refused > 0, "both sides covered: {read} read, {refused} refused");
}
