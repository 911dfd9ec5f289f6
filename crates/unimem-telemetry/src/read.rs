//! Reading a telemetry log back, with errors that name the file, the line and what is wrong.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use unimem_core::seam::MemEvent;
use unimem_core::trace::Decompressed;
use unimem_core::RegionId;

use crate::log::{END_RECORD_VERSION, OLDEST_READABLE_VERSION, SCHEMA, SCHEMA_VERSION};

/// A log that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {reason}")]
pub struct LogError {
    /// The file.
    pub file: String,
    /// 1-based line (0: the file as a whole).
    pub line: u64,
    /// What is wrong and what is allowed.
    pub reason: String,
}

/// A region as the log names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionInfo {
    /// Name (the tensor's or trace's name, or `regionN`).
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Whether the log saw it freed.
    pub freed: bool,
    /// The address of its first byte (schema version 3 on).
    pub address: Option<u64>,
}

/// A region's free, placed among the events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreedAt {
    /// The region.
    pub region: RegionId,
    /// Events the log held before the free.
    pub after_events: usize,
}

/// Whether a log was written to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LogEnd {
    /// It ends with its `end` record.
    Complete,
    /// Its schema has an `end` record and this log lacks it: the writer stopped early (killed,
    /// or the disk filled), so totals cover only what it holds.
    #[default]
    Truncated,
    /// Written before logs had an `end` record (schema version below 6): cannot tell.
    Unmarked,
}

/// A whole log in memory.
#[derive(Debug, Clone, Default)]
pub struct Log {
    /// What produced the events (the header's `source`).
    pub source: String,
    /// Regions by id, freed ones included (attribution after a free).
    pub regions: BTreeMap<RegionId, RegionInfo>,
    /// The events, in log order.
    pub events: Vec<MemEvent>,
    /// Where in the events each region was freed, in log order.
    pub frees: Vec<FreedAt>,
    /// Whether the log is complete.
    pub end: LogEnd,
    /// The sums the reader bounds (bytes and times over all events), so that no total a
    /// summary, an export or a plot forms can overflow.
    sums: Sums,
}

/// Running sums over a log's events.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    bytes: u64,
    ns: u64,
}

/// Most bytes, and most nanoseconds, a log's events may add up to: 2^63.
pub const MAX_LOG_SUM: u64 = 1 << 63;

/// Record kinds of the schema, for error messages.
const KINDS: &str =
    "region, freed, fault, migration, populate, drop, released, relocated, thrashing, throttling, remote_map, \
     page_work, kernel, hint, forecast, end";

/// Longest record line accepted: a longer one is an error, not a memory exhaustion.
pub const MAX_RECORD_BYTES: u64 = unimem_core::trace::MAX_LINE_BYTES;

/// Lines of a log, each at most [`MAX_RECORD_BYTES`], numbered from 1.
struct Lines<R> {
    input: R,
    line: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    /// The next line, without its newline, and its number; `None` at the end.
    fn next(&mut self, err: &dyn Fn(u64, String) -> LogError) -> Result<Option<(u64, &str)>, LogError> {
        self.buf.clear();
        let at = self.line + 1;
        let n = (&mut self.input)
            .take(MAX_RECORD_BYTES + 1)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| err(at, format!("read error: {e}")))?;
        if n == 0 {
            return Ok(None);
        }
        self.line = at;
        if self.buf.len() as u64 > MAX_RECORD_BYTES {
            return Err(err(
                at,
                format!("line is longer than {MAX_RECORD_BYTES} bytes: not a telemetry record"),
            ));
        }
        let text = std::str::from_utf8(&self.buf).map_err(|e| err(at, format!("not UTF-8 text: {e}")))?;
        Ok(Some((at, text.trim_end_matches(['\n', '\r']))))
    }
}

impl Log {
    /// Reads a log file, plain or gzip-compressed (as `gzip` leaves a kept log).
    pub fn read(path: &Path) -> Result<Self, LogError> {
        let file = path.display().to_string();
        let f = std::fs::File::open(path).map_err(|e| LogError {
            file: file.clone(),
            line: 0,
            reason: e.to_string(),
        })?;
        Self::parse(f, &file)
    }

    /// Reads a log from `input`, plain or gzip-compressed (told by its first bytes); `origin`
    /// names it in errors. Every record is checked: an unknown kind, a missing or mistyped
    /// field, an interval that ends before it starts, and anything after the `end` record are
    /// errors naming the line.
    pub fn parse(input: impl Read, origin: &str) -> Result<Self, LogError> {
        let err = |line: u64, reason: String| LogError { file: origin.to_string(), line, reason };
        let input = Decompressed::new(BufReader::new(input)).map_err(|e| err(0, e.to_string()))?;
        let mut lines = Lines { input, line: 0, buf: Vec::new() };
        let Some((_, header)) = lines.next(&err)? else {
            return Err(err(0, "empty file: expected a telemetry log header".into()));
        };
        let h: serde_json::Value =
            serde_json::from_str(header).map_err(|e| err(1, format!("header is not JSON: {e}")))?;
        if h.get("format").and_then(|f| f.as_str()) == Some("unimem-trace") {
            return Err(err(1, "this is a unimem trace, not a telemetry log: read it with `unimem trace stats`, replay it with `unimem replay --telemetry LOG` to get a log".into()));
        }
        if h["schema"] != SCHEMA {
            return Err(err(
                1,
                format!("schema {} is not `{SCHEMA}`: not a unimem telemetry log", h["schema"]),
            ));
        }
        let version =
            h["version"].as_u64().filter(|v| (OLDEST_READABLE_VERSION..=SCHEMA_VERSION).contains(v));
        let Some(version) = version else {
            return Err(err(
                1,
                format!(
                    "version {} is not supported; this unimem reads versions {OLDEST_READABLE_VERSION} to {SCHEMA_VERSION}",
                    h["version"]
                ),
            ));
        };
        let source = match h.get("source") {
            None => String::new(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => return Err(err(1, format!("header `source` must be a string, not {other}"))),
        };
        let mut log = Log { source, ..Log::default() };
        log.end = if version >= END_RECORD_VERSION { LogEnd::Truncated } else { LogEnd::Unmarked };
        while let Some((n, line)) = lines.next(&err)? {
            if line.trim().is_empty() {
                continue;
            }
            if log.end == LogEnd::Complete {
                return Err(err(
                    n,
                    "a record after the `end` record: the log was appended to after it ended".into(),
                ));
            }
            let v: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| err(n, format!("not a JSON record (truncated?): {e}")))?;
            record(&v, &mut log).map_err(|reason| err(n, reason))?;
        }
        Ok(log)
    }
    /// The name of a region (`regionN` if the log never named it).
    pub fn name_of(&self, id: RegionId) -> String {
        self.regions.get(&id).map(|r| r.name.clone()).unwrap_or_else(|| format!("region{}", id.0))
    }
}

/// Applies one record to `log`, or says what is wrong with it.
fn record(v: &serde_json::Value, log: &mut Log) -> Result<(), String> {
    let u64_field = |field: &str| -> Result<u64, String> {
        v.get(field)
            .ok_or_else(|| format!("missing `{field}`"))?
            .as_u64()
            .ok_or_else(|| format!("`{field}` must be an integer from 0 to 2^64-1, not {}", v[field]))
    };
    match v["kind"].as_str() {
        Some("region") => {
            let id = RegionId(u64_field("region")?);
            let bytes = u64_field("bytes")?;
            let name = match v.get("name") {
                None => String::new(),
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(other) => return Err(format!("`name` must be a string, not {other}")),
            };
            let address = match v.get("address") {
                None => None,
                Some(_) => Some(u64_field("address")?),
            };
            log.regions.insert(id, RegionInfo { name, bytes, freed: false, address });
        }
        Some("freed") => {
            let id = RegionId(u64_field("region")?);
            if let Some(r) = log.regions.get_mut(&id) {
                r.freed = true;
            }
            log.frees.push(FreedAt { region: id, after_events: log.events.len() });
        }
        Some("end") => {
            let events = u64_field("events")?;
            if events != log.events.len() as u64 {
                return Err(format!(
                    "the `end` record counts {events} events but the log holds {}: records are missing",
                    log.events.len()
                ));
            }
            log.end = LogEnd::Complete;
        }
        Some(
            "fault" | "migration" | "populate" | "drop" | "released" | "relocated" | "thrashing"
            | "throttling" | "remote_map" | "page_work" | "kernel" | "hint" | "forecast",
        ) => {
            let e: MemEvent = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
            let (bytes, ns) = sizes(&e)?;
            let sums =
                Sums { bytes: log.sums.bytes.saturating_add(bytes), ns: log.sums.ns.saturating_add(ns) };
            if sums.bytes > MAX_LOG_SUM || sums.ns > MAX_LOG_SUM {
                return Err("the log's bytes or times add up past 2^63: not a log of a real run".into());
            }
            log.sums = sums;
            log.events.push(e);
        }
        Some(other) => return Err(format!("unknown event kind `{other}`; allowed: {KINDS}")),
        None => return Err(format!("record has no `kind`; allowed: {KINDS}")),
    }
    Ok(())
}

/// The bytes an event counts and the time it spans (a stall included), checked: an interval
/// must not end before it starts.
fn sizes(e: &MemEvent) -> Result<(u64, u64), String> {
    let span = |start_ns: u64, end_ns: u64| {
        end_ns
            .checked_sub(start_ns)
            .ok_or_else(|| format!("`end_ns` {end_ns} is before `start_ns` {start_ns}"))
    };
    Ok(match *e {
        MemEvent::Migration { bytes, start_ns, end_ns, .. } => (bytes, span(start_ns, end_ns)?),
        MemEvent::Throttling { start_ns, end_ns, .. } => (0, span(start_ns, end_ns)?),
        MemEvent::PageWork { bytes, start_ns, end_ns, .. } => (bytes, span(start_ns, end_ns)?),
        MemEvent::Kernel { start_ns, end_ns, stall_ns, .. } => {
            (0, span(start_ns, end_ns)?.saturating_add(stall_ns))
        }
        MemEvent::Fault { bytes, .. }
        | MemEvent::Populate { bytes, .. }
        | MemEvent::Drop { bytes, .. }
        | MemEvent::Hint { bytes, .. }
        | MemEvent::Thrashing { bytes, .. }
        | MemEvent::RemoteMap { bytes, .. } => (bytes, 0),
        MemEvent::Forecast { hits, misses, false_alarms, .. } => {
            (hits.saturating_add(misses).saturating_add(false_alarms), 0)
        }
        MemEvent::Released { .. } | MemEvent::Relocated { .. } => (0, 0),
    })
}
