//! A fuzz harness through the trace reader and the simulator's replay together: valid traces
//! of random small programs, mutated (bytes flipped, lines cut, numbers pushed to the edges of
//! their ranges, gzip streams broken), are read and, where accepted, replayed with every
//! policy at two budgets. Every case must end in a value or a clear error (no panic), within a
//! time limit, and the reader must accept exactly what an independent reading of the trace
//! format (`reference_accepts`, below) accepts.
//!
//! `UNIMEM_FUZZ_CASES` sets the number of cases (300 by default, as CI runs it);
//! `UNIMEM_FUZZ_SEED` the first seed. Run long as
//! `UNIMEM_FUZZ_CASES=20000 cargo test --release -p unimem-core --test fuzz -- --nocapture`.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use proptest::prelude::RngExt;
use proptest::test_runner::{RngAlgorithm, TestRng};

use unimem_core::backends::sim::SimBackend;
use unimem_core::config::{Config, PolicyName};
use unimem_core::replay;
use unimem_core::trace::{
    TraceReader, TraceStats, MAX_LINE_BYTES, MAX_LIVE_BYTES, MAX_REGION_BYTES, MAX_TRACE_NS,
};
use unimem_core::CostModel;

/// A case taking longer than this (reading and six replays) counts as a hang.
const CASE_LIMIT: Duration = Duration::from_secs(20);

fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..].copy_from_slice(&(seed ^ 0x9e37_79b9_7f4a_7c15).to_le_bytes());
    TestRng::from_seed(RngAlgorithm::XorShift, &bytes)
}

/// A valid trace of a small random program: regions allocated (some up front, some per
/// step), kernels and host reads over them, steps, frees.
fn program(r: &mut TestRng) -> Vec<String> {
    let mut lines = vec![r#"{"format":"unimem-trace","version":1,"source":"fuzz"}"#.to_string()];
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut next_id = r.random_range(0..5u64);
    let sizes = [1u64, 100, 4096, 65536, 1 << 20, 3 << 20, 8 << 20];
    for _ in 0..r.random_range(1..6) {
        let bytes = sizes[r.random_range(0..sizes.len())];
        lines.push(format!(r#"{{"ev":"alloc","id":{next_id},"bytes":{bytes},"name":"w{next_id}"}}"#));
        live.push((next_id, bytes));
        next_id += r.random_range(1..3);
    }
    for step in 0..r.random_range(1..4u64) {
        lines.push(format!(r#"{{"ev":"step","index":{step}}}"#));
        for _ in 0..r.random_range(1..12) {
            match r.random_range(0..10) {
                0 if live.len() > 1 => {
                    let (id, _) = live.remove(r.random_range(0..live.len()));
                    lines.push(format!(r#"{{"ev":"free","id":{id}}}"#));
                }
                1 => {
                    let bytes = sizes[r.random_range(0..sizes.len())];
                    lines.push(format!(r#"{{"ev":"alloc","id":{next_id},"bytes":{bytes}}}"#));
                    live.push((next_id, bytes));
                    next_id += 1;
                }
                n => {
                    let mut acc = Vec::new();
                    for _ in 0..r.random_range(1..4) {
                        let (id, bytes) = live[r.random_range(0..live.len())];
                        let offset = r.random_range(0..bytes);
                        let len = r.random_range(0..=bytes - offset);
                        let mode = ["r", "w", "rw"][r.random_range(0..3)];
                        acc.push(format!(r#"[{id},{offset},{len},"{mode}"]"#));
                    }
                    let acc = acc.join(",");
                    if n == 2 {
                        lines.push(format!(r#"{{"ev":"host","name":"h","acc":[{acc}]}}"#));
                    } else {
                        let dur = r.random_range(1..200_000u64);
                        lines
                            .push(format!(r#"{{"ev":"kernel","name":"k{n}","dur_ns":{dur},"acc":[{acc}]}}"#));
                    }
                }
            }
        }
    }
    lines
}

/// Values at and around the edges of what the format allows.
fn edge_value(r: &mut TestRng) -> String {
    let edges = [
        "0".to_string(),
        "1".into(),
        "4095".into(),
        "4096".into(),
        "2097152".into(),
        (MAX_REGION_BYTES - 1).to_string(),
        MAX_REGION_BYTES.to_string(),
        (MAX_REGION_BYTES + 1).to_string(),
        "214748364800".into(),
        (MAX_TRACE_NS / 2).to_string(),
        MAX_TRACE_NS.to_string(),
        (1u64 << 63).to_string(),
        u64::MAX.to_string(),
        (u64::MAX - 1).to_string(),
        "18446744073709551616".into(),
        "-1".into(),
        "-0".into(),
        "1.5".into(),
        "1e3".into(),
        "1.0".into(),
        "null".into(),
        "true".into(),
        "\"7\"".into(),
        "[]".into(),
        "{}".into(),
    ];
    edges[r.random_range(0..edges.len())].clone()
}

/// One mutation of the trace's lines.
fn mutate(lines: &mut Vec<String>, r: &mut TestRng) {
    let i = r.random_range(0..lines.len());
    match r.random_range(0..12) {
        0 => {
            lines.remove(i);
        }
        1 => {
            let l = lines[i].clone();
            lines.insert(r.random_range(0..=lines.len()), l);
        }
        2 => {
            let j = r.random_range(0..lines.len());
            lines.swap(i, j);
        }
        3..=5 => {
            // A number in the line replaced by an edge value.
            let l = &lines[i];
            let digits: Vec<usize> = l
                .char_indices()
                .filter(|&(k, c)| c.is_ascii_digit() && (k == 0 || !l.as_bytes()[k - 1].is_ascii_digit()))
                .map(|(k, _)| k)
                .collect();
            if let Some(&at) = digits.get(r.random_range(0..digits.len().max(1))) {
                let end = l[at..].find(|c: char| !c.is_ascii_digit()).map_or(l.len(), |e| at + e);
                lines[i] = format!("{}{}{}", &l[..at], edge_value(r), &l[end..]);
            }
        }
        6 => {
            let words =
                ["\"alloc\"", "\"free\"", "\"kernel\"", "\"host\"", "\"step\"", "\"r\"", "\"w\"", "\"rw\""];
            let to = ["\"launch\"", "\"free\"", "\"alloc\"", "\"x\"", "\"R\"", "\"\"", "\"rw\"", "3"];
            let (from, into) = (words[r.random_range(0..words.len())], to[r.random_range(0..to.len())]);
            lines[i] = lines[i].replacen(from, into, 1);
        }
        7 => {
            // A field dropped.
            let fields =
                ["\"id\":", "\"bytes\":", "\"dur_ns\":", "\"acc\":", "\"name\":", "\"index\":", "\"ev\":"];
            let f = fields[r.random_range(0..fields.len())];
            lines[i] = lines[i].replacen(f, "\"zz\":", 1);
        }
        8 => {
            let l = &mut lines[i];
            if !l.is_empty() {
                let at = r.random_range(0..l.len());
                let mut bytes = std::mem::take(l).into_bytes();
                bytes[at] ^= 1 << r.random_range(0..8);
                *l = String::from_utf8_lossy(&bytes).into_owned();
            }
        }
        9 => {
            let l = &mut lines[i];
            let at = r.random_range(0..=l.len());
            let cut = (0..=at).rev().find(|&k| l.is_char_boundary(k)).unwrap_or(0);
            l.truncate(cut);
        }
        10 => lines.insert(i, ["", "   ", "\u{feff}", "\t\r"][r.random_range(0..4)].to_string()),
        _ => {
            // An access's range pushed past its region, or its id to another.
            lines[i] = lines[i].replacen("[", &format!("[{},", edge_value(r)), 1);
        }
    }
}

/// The trace format's rules, read directly from the specification (docs/trace-format.md) over
/// plain JSON values, written apart from the reader: whether a trace must be accepted.
fn reference_accepts(text: &[u8]) -> bool {
    let mut lines = text.split(|&b| b == b'\n');
    let blank = |l: &[u8]| l.iter().all(u8::is_ascii_whitespace);
    let Some(first) = lines.by_ref().find(|l| !blank(l)) else { return false };
    let first = first.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(first);
    let Ok(serde_json::Value::Object(header)) = serde_json::from_slice::<serde_json::Value>(first) else {
        return false;
    };
    if header.get("format").and_then(|v| v.as_str()) != Some("unimem-trace")
        || header.get("version").and_then(|v| v.as_u64()) != Some(1)
    {
        return false;
    }
    let mut live: HashMap<u64, u64> = HashMap::new();
    let mut ever: HashSet<u64> = HashSet::new();
    let (mut live_bytes, mut kernel_ns) = (0u128, 0u128);
    for line in lines {
        if line.len() as u64 > MAX_LINE_BYTES {
            return false;
        }
        if blank(line) {
            continue;
        }
        let Ok(serde_json::Value::Object(e)) = serde_json::from_slice::<serde_json::Value>(line) else {
            return false;
        };
        // A field that is null counts as absent.
        let field = |k: &str| e.get(k).filter(|v| !v.is_null());
        let uint = |k: &str| field(k).map(|v| v.as_u64());
        let text = |k: &str| field(k).map(|v| v.as_str());
        if [uint("id"), uint("bytes"), uint("dur_ns"), uint("index")].contains(&Some(None)) {
            return false; // present and not an unsigned integer
        }
        if text("name") == Some(None) || text("ev") == Some(None) {
            return false;
        }
        let accesses = || -> Option<Vec<(u64, u64, u64)>> {
            let list = field("acc")?.as_array()?;
            list.iter()
                .map(|a| {
                    let a = a.as_array().filter(|a| a.len() == 4)?;
                    let (id, off, len) = (a[0].as_u64()?, a[1].as_u64()?, a[2].as_u64()?);
                    matches!(a[3].as_str()?, "r" | "w" | "rw").then_some(())?;
                    let bytes = *live.get(&id)?;
                    (off as u128 + len as u128 <= bytes as u128).then_some((id, off, len))
                })
                .collect()
        };
        let ok = match text("ev").flatten() {
            Some("alloc") => match (uint("id").flatten(), uint("bytes").flatten()) {
                (Some(id), Some(bytes)) if bytes > 0 && bytes <= MAX_REGION_BYTES && !ever.contains(&id) => {
                    let pages = (bytes as u128).div_ceil(4096) * 4096;
                    live_bytes += pages;
                    live.insert(id, bytes);
                    ever.insert(id);
                    live_bytes <= MAX_LIVE_BYTES as u128
                }
                _ => false,
            },
            Some("free") => match uint("id").flatten().and_then(|id| live.remove(&id)) {
                Some(bytes) => {
                    live_bytes -= (bytes as u128).div_ceil(4096) * 4096;
                    true
                }
                None => false,
            },
            Some("kernel") => match (text("name").flatten(), uint("dur_ns").flatten(), accesses()) {
                (Some(_), Some(dur), Some(_)) => {
                    kernel_ns += dur as u128;
                    kernel_ns <= MAX_TRACE_NS as u128
                }
                _ => false,
            },
            Some("host") => text("name").flatten().is_some() && accesses().is_some(),
            Some("step") => uint("index").flatten().is_some(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// What one case came to.
#[derive(Debug, Default)]
struct Tally {
    cases: u64,
    accepted: u64,
    rejected: u64,
    replays: u64,
    replay_errors: u64,
    panics: u64,
    timeouts: u64,
    /// Accepted where the format rejects, or the other way round.
    disagreements: u64,
    unclear: u64,
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// One case: a mutated program as plain or gzip bytes; (the bytes, what the format says of them).
fn case(seed: u64) -> (Vec<u8>, bool) {
    let mut r = rng(seed);
    let mut lines = program(&mut r);
    for _ in 0..r.random_range(0..4) {
        mutate(&mut lines, &mut r);
    }
    let text = lines.join("\n").into_bytes();
    if !r.random_bool(0.2) {
        let accepts = reference_accepts(&text);
        return (text, accepts);
    }
    // Through gzip, and maybe with its stream broken: the format reads what decompresses whole.
    let mut bytes = gz(&text);
    if r.random_bool(0.5) {
        match r.random_range(0..3) {
            0 => bytes.truncate(r.random_range(0..bytes.len())),
            1 => {
                let at = r.random_range(0..bytes.len());
                bytes[at] ^= 1 << r.random_range(0..8);
            }
            _ => bytes.extend_from_slice(b"trailing garbage"),
        }
    }
    let mut plain = Vec::new();
    let whole = flate2::read::MultiGzDecoder::new(&bytes[..]).read_to_end(&mut plain).is_ok();
    let accepts = whole && reference_accepts(&plain);
    (bytes, accepts)
}

/// Reads and, where the reader accepts, replays one case; records what happened.
fn run_case(seed: u64, tally: &mut Tally) {
    let (bytes, format_accepts) = case(seed);
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    let start = Instant::now();
    let outcome = std::panic::catch_unwind(|| -> (bool, u64, u64, bool) {
        let stats = TraceReader::from_bytes("fuzz", bytes).and_then(TraceStats::compute);
        let Ok(stats) = stats else {
            let e = stats.unwrap_err().to_string();
            return (false, 0, 0, e.starts_with("fuzz:"));
        };
        let (mut replays, mut errors, mut clear) = (0, 0, true);
        let cost = CostModel::h200();
        for budget in [(stats.peak_live_page_bytes / 2).max(stats.largest_kernel.bytes).max(4096), 64 << 20] {
            for policy in PolicyName::ALL {
                let mut gpu = SimBackend::new(cost.clone(), budget).with_staging(budget);
                let mut p = unimem_core::policy::make_policy(
                    policy,
                    unimem_core::MemoryBackendExt::device_capacity(&gpu),
                    &Config::default(),
                    &cost,
                );
                let reader = TraceReader::from_bytes("fuzz", bytes).expect("read once already");
                replays += 1;
                match replay::run(reader, &mut gpu, p.as_mut(), &mut |_| {}) {
                    Ok(report) => {
                        assert!(report.time_ns >= report.compute_floor_ns, "{policy}: time below the floor")
                    }
                    Err(e) => {
                        errors += 1;
                        clear &= e.to_string().starts_with("fuzz:");
                    }
                }
            }
        }
        (true, replays, errors, clear)
    });
    tally.cases += 1;
    if start.elapsed() > CASE_LIMIT {
        tally.timeouts += 1;
        eprintln!("case {seed}: took {:?}", start.elapsed());
    }
    match outcome {
        Err(_) => {
            tally.panics += 1;
            eprintln!("case {seed}: panicked on:\n{}", String::from_utf8_lossy(bytes));
        }
        Ok((accepted, replays, errors, clear)) => {
            if accepted {
                tally.accepted += 1;
            } else {
                tally.rejected += 1;
            }
            tally.replays += replays;
            tally.replay_errors += errors;
            if !clear {
                tally.unclear += 1;
                eprintln!("case {seed}: an error that names no file and line");
            }
            if accepted != format_accepts {
                tally.disagreements += 1;
                eprintln!(
                    "case {seed}: the reader {} what the format {}:\n{}",
                    if accepted { "accepted" } else { "rejected" },
                    if format_accepts { "accepts" } else { "rejects" },
                    String::from_utf8_lossy(bytes)
                );
            }
        }
    }
}

#[test]
fn mutated_traces_read_and_replay_cleanly() {
    let cases: u64 = std::env::var("UNIMEM_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let first: u64 = std::env::var("UNIMEM_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    // Panics are counted, not printed one backtrace at a time.
    std::panic::set_hook(Box::new(|_| {}));
    let mut tally = Tally::default();
    for seed in first..first + cases {
        run_case(seed, &mut tally);
    }
    let _ = std::panic::take_hook();
    eprintln!("fuzz: {tally:?}");
    assert!(
        tally.accepted > cases / 10 && tally.rejected > cases / 10,
        "the cases cover both sides: {tally:?}"
    );
    assert_eq!((tally.panics, tally.timeouts, tally.disagreements, tally.unclear), (0, 0, 0, 0), "{tally:?}");
}
