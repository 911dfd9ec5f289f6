use super::*;
use crate::access::AccessMode;
use crate::trace::TraceWriter;
use proptest::prelude::*;

const HEADER: &str = r#"{"format": "unimem-trace", "version": 1, "source": "test"}"#;

fn read_all(text: &str) -> Result<Vec<TraceEvent>> {
    let bytes: &'static [u8] = Box::leak(text.as_bytes().to_vec().into_boxed_slice());
    TraceReader::from_bytes("t.jsonl", bytes)?.collect()
}

fn err_of(body: &str) -> String {
    read_all(&format!("{HEADER}\n{body}")).unwrap_err().to_string()
}

fn gz(text: &str) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap()
}

const GOOD: &str = r#"{"ev": "step", "index": 0}
{"ev": "alloc", "id": 1, "bytes": 4096, "name": "w"}
{"ev": "alloc", "id": 2, "bytes": 100}
{"ev": "kernel", "name": "k", "dur_ns": 5, "acc": [[1, 0, 4096, "r"], [2, 10, 90, "w"]]}
{"ev": "kernel", "name": "k2", "dur_ns": 6, "host_ns": 250000, "acc": []}
{"ev": "kernel", "name": "k3", "dur_ns": 7, "host_ns": null, "acc": []}

{"ev": "host", "name": "h", "acc": [[2, 0, 8, "rw"]]}
{"ev": "free", "id": 2}
"#;

#[test]
fn reads_a_valid_trace() {
    let events = read_all(&format!("{HEADER}\n{GOOD}")).unwrap();
    assert_eq!(events.len(), 8, "blank lines are skipped");
    assert_eq!(events[1], TraceEvent::Alloc { id: 1, bytes: 4096, name: Some("w".into()) });
    let TraceEvent::Kernel { acc, dur_ns: 5, host_ns: None, .. } = &events[3] else {
        panic!("{:?}", events[3])
    };
    assert_eq!(acc[1], TraceAccess { id: 2, offset: 10, len: 90, mode: AccessMode::Write });
    assert!(matches!(events[4], TraceEvent::Kernel { host_ns: Some(250_000), .. }), "{:?}", events[4]);
    assert!(matches!(events[5], TraceEvent::Kernel { host_ns: None, .. }), "null is absent: {:?}", events[5]);
}

#[test]
fn writer_round_trips_plain_and_gzip() {
    let events = read_all(&format!("{HEADER}\n{GOOD}")).unwrap();
    for gzip in [false, true] {
        let mut w = TraceWriter::new(Vec::new(), gzip, "mem", &TraceHeader::new("round trip")).unwrap();
        events.iter().for_each(|e| w.write(e).unwrap());
        let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
        assert_eq!(bytes[0] == 0x1f, gzip);
        let r = TraceReader::from_bytes("mem", bytes).unwrap();
        assert_eq!(r.header().source(), Some("round trip"));
        assert_eq!(r.collect::<Result<Vec<_>>>().unwrap(), events);
    }
}

#[test]
fn header_errors() {
    let e = read_all("").unwrap_err().to_string();
    assert!(e.contains("t.jsonl:0") && e.contains("empty trace"), "{e}");
    let e = read_all("{\"ev\": \"step\", \"index\": 0}\n").unwrap_err().to_string();
    assert!(e.contains(":1:") && e.contains("no `format`"), "{e}");
    let e = read_all("{\"format\": \"other\", \"version\": 1}\n").unwrap_err().to_string();
    assert!(e.contains("not a unimem trace"), "{e}");
    let e = read_all("{\"format\": \"unimem-trace\", \"version\": 2}\n").unwrap_err().to_string();
    assert!(e.contains("unsupported version 2"), "{e}");
    let e = read_all("hello\n").unwrap_err().to_string();
    assert!(e.contains("malformed header"), "{e}");
}

#[test]
fn event_errors_name_line_and_reason() {
    let cases = [
        (r#"{"ev": "launch"}"#, "unknown event `launch`; allowed: alloc, free, kernel, host, step"),
        (r#"{"id": 1}"#, "no `ev`"),
        (r#"{"ev": "alloc", "id": 1}"#, "missing field `bytes`"),
        (
            r#"{"ev": "alloc", "id": "x", "bytes": 4}"#,
            "`id` must be an integer from 0 to 2^64-1, not a string",
        ),
        (r#"{"ev": "alloc", "id": 1, "bytes": 0}"#, "must be > 0"),
        (r#"{"ev": "kernel", "name": "k", "acc": []}"#, "missing field `dur_ns`"),
        (
            r#"{"ev": "kernel", "name": "k", "dur_ns": 1, "acc": [[9, 0, 1, "r"]]}"#,
            "region 9 was never allocated",
        ),
        (
            r#"{"ev": "kernel", "name": "k", "dur_ns": 1, "acc": [[1, 0, 1]]}"#,
            "access 0 must be [id, offset, len, mode]",
        ),
        (r#"{"ev": "free", "id": 7}"#, "never allocated"),
        (r#"{"ev": "step"}"#, "missing field `index`"),
        ("{not json", "not a valid event"),
    ];
    for (line, want) in cases {
        let e = err_of(&format!("{line}\n"));
        assert!(e.starts_with("t.jsonl:2: "), "{e}");
        assert!(e.contains(want), "{line}: got {e}");
    }
}

#[test]
fn state_errors() {
    let base = "{\"ev\": \"alloc\", \"id\": 1, \"bytes\": 64}\n";
    let e = err_of(&format!("{base}{base}"));
    assert!(e.contains(":3:") && e.contains("already allocated at line 2"), "{e}");
    let e = err_of(&format!("{base}{{\"ev\": \"free\", \"id\": 1}}\n{{\"ev\": \"host\", \"name\": \"h\", \"acc\": [[1, 0, 8, \"r\"]]}}\n"));
    assert!(e.contains(":4:") && e.contains("region 1 was already freed"), "{e}");
    let e = err_of(&format!("{base}{{\"ev\": \"free\", \"id\": 1}}\n{{\"ev\": \"free\", \"id\": 1}}\n"));
    assert!(e.contains("already freed"), "{e}");
    let e = err_of(&format!(
        "{base}{{\"ev\": \"kernel\", \"name\": \"k\", \"dur_ns\": 1, \"acc\": [[1, 60, 5, \"r\"]]}}\n"
    ));
    assert!(e.contains("past the end of region 1 (64 bytes)"), "{e}");
    let e = err_of(&format!("{base}{{\"ev\": \"kernel\", \"name\": \"k\", \"dur_ns\": 1, \"acc\": [[1, 18446744073709551615, 5, \"r\"]]}}\n"));
    assert!(e.contains("past the end"), "offset overflow is caught: {e}");
    let e = err_of(&format!(
        "{base}{{\"ev\": \"kernel\", \"name\": \"k\", \"dur_ns\": 1, \"acc\": [[1, 0, 5, \"x\"]]}}\n"
    ));
    assert!(e.contains("unknown access mode `x`"), "{e}");
}

#[test]
fn a_bad_line_is_not_half_applied_and_reading_stops() {
    // The duplicate alloc is rejected before its state change: region 1 keeps its 64 bytes.
    let text = format!("{HEADER}\n{{\"ev\": \"alloc\", \"id\": 1, \"bytes\": 64}}\n{{\"ev\": \"alloc\", \"id\": 1, \"bytes\": 9999}}\n");
    let bytes: &'static [u8] = Box::leak(text.into_bytes().into_boxed_slice());
    let mut r = TraceReader::from_bytes("t", bytes).unwrap();
    assert!(r.next_event().unwrap().is_some());
    assert!(r.next_event().is_err());
    assert_eq!(r.regions.live[&1].bytes, 64);
    assert!(r.next_event().unwrap().is_none(), "fused after an error");
}

#[test]
fn freed_ids_are_remembered_compactly_and_never_reused() {
    let mut f = FreedIds::default();
    for id in [5, 3, 4, 10, 6] {
        f.insert(id);
    }
    assert_eq!(f.0.len(), 2, "3..7 and 10..11: {:?}", f.0);
    assert!(f.contains(3) && f.contains(6) && f.contains(10));
    assert!(!f.contains(2) && !f.contains(7) && !f.contains(11));
    let base = "{\"ev\": \"alloc\", \"id\": 1, \"bytes\": 64}\n";
    let e = err_of(&format!("{base}{{\"ev\": \"free\", \"id\": 1}}\n{base}"));
    assert!(e.contains(":4:") && e.contains("never reused"), "{e}");
}

#[test]
fn truncated_and_garbled_gzip_are_clear_errors() {
    let full = gz(&format!("{HEADER}\n{GOOD}"));
    let truncated: &'static [u8] = Box::leak(full[..full.len() - 12].to_vec().into_boxed_slice());
    let e =
        TraceReader::from_bytes("t.gz", truncated).and_then(|r| r.collect::<Result<Vec<_>>>()).unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
    let mut garbled = full.clone();
    for b in garbled.iter_mut().skip(20).step_by(7) {
        *b ^= 0x5a;
    }
    let garbled: &'static [u8] = Box::leak(garbled.into_boxed_slice());
    let e = TraceReader::from_bytes("t.gz", garbled).and_then(|r| r.collect::<Result<Vec<_>>>()).unwrap_err();
    assert!(e.to_string().starts_with("t.gz:"), "{e}");
}

#[test]
fn missing_file_is_an_error_naming_it() {
    let e = TraceReader::open(Path::new("/no/such/trace.jsonl.gz")).unwrap_err().to_string();
    assert!(e.contains("/no/such/trace.jsonl.gz"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No input makes the reader panic: arbitrary bytes, plain or behind a gzip magic.
    #[test]
    fn never_panics_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..600), gzip_magic in any::<bool>()) {
        let mut bytes = data;
        if gzip_magic { bytes.splice(0..0, [0x1f, 0x8b]); }
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        if let Ok(r) = TraceReader::from_bytes("fuzz", bytes) {
            for e in r { if e.is_err() { break; } }
        }
    }

    /// Valid traces with one line mutated (bytes flipped, cut, or duplicated) never panic and
    /// every error names the file and a line.
    #[test]
    fn never_panics_on_mutated_traces(line in 0usize..7, pos in 0usize..80, byte in any::<u8>(), cut in any::<bool>()) {
        let mut lines: Vec<String> = format!("{HEADER}\n{GOOD}").lines().map(str::to_string).collect();
        let l = &mut lines[line % 7];
        let mut b = l.clone().into_bytes();
        if !b.is_empty() {
            let p = pos % b.len();
            if cut { b.truncate(p) } else { b[p] = byte }
        }
        *l = String::from_utf8_lossy(&b).into_owned();
        let text = lines.join("\n");
        let bytes: &'static [u8] = Box::leak(text.into_bytes().into_boxed_slice());
        match TraceReader::from_bytes("m", bytes) {
            Err(e) => prop_assert!(e.to_string().starts_with("m:")),
            Ok(r) => for e in r {
                if let Err(e) = e { prop_assert!(e.to_string().starts_with("m:")); break; }
            },
        }
    }
}

#[test]
fn freed_ids_hold_the_largest_id() {
    let mut freed = FreedIds::default();
    freed.insert(u64::MAX);
    assert!(freed.contains(u64::MAX) && !freed.contains(u64::MAX - 1));
    freed.insert(u64::MAX - 1);
    freed.insert(0);
    freed.insert(2);
    freed.insert(1);
    assert_eq!(freed.ranges(), vec![(0, 2), (u64::MAX - 1, u64::MAX)], "neighbours merge");
    let e = err_of(&format!(
        "{{\"ev\": \"alloc\", \"id\": {m}, \"bytes\": 10}}\n{{\"ev\": \"free\", \"id\": {m}}}\n{{\"ev\": \"alloc\", \"id\": {m}, \"bytes\": 10}}\n",
        m = u64::MAX
    ));
    assert!(e.contains(":4:") && e.contains("ids are never reused"), "{e}");
}

#[test]
fn sizes_and_times_past_the_format_limits_are_rejected() {
    let e = err_of("{\"ev\": \"alloc\", \"id\": 1, \"bytes\": 1125899906842624}\n");
    assert!(e.contains(":2:") && e.contains("at most 2^48 bytes"), "1 PiB: {e}");
    let e = err_of(&format!("{{\"ev\": \"alloc\", \"id\": 1, \"bytes\": {}}}\n", u64::MAX));
    assert!(e.contains("at most 2^48 bytes"), "{e}");
    let max = MAX_REGION_BYTES;
    let ok = read_all(&format!("{HEADER}\n{{\"ev\": \"alloc\", \"id\": 1, \"bytes\": {max}}}\n"));
    assert!(ok.is_ok(), "2^48 bytes is allowed: {ok:?}");
    let allocs: String = (0..16384u64 + 1)
        .map(|id| format!("{{\"ev\": \"alloc\", \"id\": {id}, \"bytes\": {max}}}\n"))
        .collect();
    let e = err_of(&allocs);
    assert!(e.contains(":16386:") && e.contains("past 2^62 bytes"), "live bytes: {e}");
    let k = |ns: u64| format!("{{\"ev\": \"kernel\", \"name\": \"k\", \"dur_ns\": {ns}, \"acc\": []}}\n");
    let e = err_of(&format!("{}{}", k(1 << 63), k(1 << 63)));
    assert!(e.contains(":2:") && e.contains("past 2^62 ns"), "{e}");
    let e = err_of(&format!("{}{}", k(1 << 61), k((1 << 61) + 1)));
    assert!(e.contains(":3:") && e.contains("past 2^62 ns"), "{e}");
    assert!(read_all(&format!("{HEADER}\n{}{}", k(1 << 61), k(1 << 61))).is_ok(), "exactly 2^62 ns");
    let h = |ns: u64| {
        format!("{{\"ev\": \"kernel\", \"name\": \"k\", \"dur_ns\": 1, \"host_ns\": {ns}, \"acc\": []}}\n")
    };
    let e = err_of(&format!("{}{}", h(1 << 61), h((1 << 61) + 1)));
    assert!(e.contains(":3:") && e.contains("`host_ns`") && e.contains("host time past 2^62 ns"), "{e}");
}

#[test]
fn errors_speak_the_format_not_the_readers_types() {
    for (line, want) in [
        ("[1, 2]", "an event must be a JSON object"),
        ("5", "an event must be a JSON object"),
        ("{\"ev\": 3}", "`ev` must be a string, not an integer"),
        (
            "{\"ev\": \"alloc\", \"id\": -1, \"bytes\": 4}",
            "`id` must be an integer from 0 to 2^64-1, not a negative integer",
        ),
        (
            "{\"ev\": \"alloc\", \"id\": 1, \"bytes\": 1.5}",
            "`bytes` must be an integer from 0 to 2^64-1, not a fraction",
        ),
        ("{\"ev\": \"alloc\", \"id\": 18446744073709551616, \"bytes\": 4}", "not an integer past 2^64-1"),
        ("{\"ev\": \"kernel\", \"name\": \"k\", \"dur_ns\": 1, \"acc\": 7}", "`acc` must be a list"),
        (
            "{\"ev\": \"kernel\", \"name\": \"k\", \"dur_ns\": 1, \"host_ns\": \"2us\", \"acc\": []}",
            "`host_ns` must be an integer from 0 to 2^64-1, not a string",
        ),
        ("{\"ev\": \"kernel\", \"name\": \"k\", \"dur_ns\": 1, \"acc\": [[1, 0, 1, 5]]}", "access 0 must be"),
    ] {
        let e = err_of(&format!("{line}\n"));
        assert!(e.starts_with("t.jsonl:2: ") && e.contains(want), "{line}: {e}");
        assert!(!e.contains("RawEvent") && !e.contains("tuple"), "{line}: {e}");
    }
}

#[test]
fn a_byte_order_mark_before_the_header_is_skipped() {
    let events = read_all(&format!("\u{feff}{HEADER}\n{GOOD}")).unwrap();
    assert_eq!(events.len(), 8);
}

proptest! {
    /// Any event the writer encodes reads back as itself: names with quotes, backslashes,
    /// control characters and any Unicode; every mode; numbers up to the format's limits.
    #[test]
    fn written_events_read_back_as_themselves(
        name in "\\PC*|[\"\\\\\u{0}-\u{1f}]{0,8}",
        id in 1u64..1 << 40,
        bytes in 1u64..MAX_REGION_BYTES,
        dur in 0u64..MAX_TRACE_NS,
        host in proptest::option::of(0u64..MAX_TRACE_NS),
        mode in prop_oneof![Just(AccessMode::Read), Just(AccessMode::Write), Just(AccessMode::ReadWrite)],
    ) {
        let acc = vec![crate::trace::TraceAccess { id, offset: 0, len: bytes, mode }];
        let events = vec![
            TraceEvent::Alloc { id, bytes, name: Some(name.clone()) },
            TraceEvent::Kernel { name: name.as_str().into(), dur_ns: dur, host_ns: host, acc: acc.clone() },
            TraceEvent::Host { name: name.as_str().into(), acc },
            TraceEvent::Step { index: dur },
            TraceEvent::Free { id },
        ];
        let mut w = TraceWriter::new(Vec::new(), false, "mem", &TraceHeader::new("p")).unwrap();
        events.iter().for_each(|e| w.write(e).unwrap());
        let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
        let back = TraceReader::from_bytes("mem", bytes).unwrap().collect::<Result<Vec<_>>>().unwrap();
        prop_assert_eq!(back, events);
    }
}
