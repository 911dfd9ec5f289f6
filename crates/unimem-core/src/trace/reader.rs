//! Streaming trace reader. It reads one line at a time (gzip or plain, detected by the magic
//! bytes), validates it completely before changing any state (so a bad line is never half
//! applied), and reports every problem with the file, the 1-based line number and the reason.
//! It never panics on any input and never buffers more than one line, bounded by
//! [`MAX_LINE_BYTES`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::Deserialize;

use super::event::{TraceAccess, TraceEvent, TraceHeader};
use super::gzip::Decompressed;
use crate::error::{Error, Result};
use crate::seam::page_round;

/// Longest line accepted (64 MiB): garbage without newlines must not exhaust memory.
pub const MAX_LINE_BYTES: u64 = 64 << 20;

/// Largest region a trace may declare: 2^48 bytes (256 TiB), the virtual address space a GPU
/// maps. Anything larger cannot be one allocation on any device.
pub const MAX_REGION_BYTES: u64 = 1 << 48;

/// Most kernel time a trace may add up to: 2^62 ns (about 146 years). Every sum of times a
/// replay forms stays far from `u64` overflow.
pub const MAX_TRACE_NS: u64 = 1 << 62;

/// Most bytes that may be live at once: 2^62. Sums of live bytes never overflow.
pub const MAX_LIVE_BYTES: u64 = 1 << 62;

/// Counts bytes read from the underlying (possibly compressed) source, for progress bars.
struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

#[derive(Debug, Clone, Copy)]
struct RegionState {
    bytes: u64,
    alloc_line: u64,
}

/// Ids of freed regions as disjoint ranges `first -> last` (both included, so that the range
/// ending at `u64::MAX` needs no end past it). Traces free ids mostly in allocation order, so
/// this stays a handful of ranges however long the trace: the reader's memory is bounded by the
/// live regions, not by the trace.
#[derive(Debug, Default)]
pub(super) struct FreedIds(BTreeMap<u64, u64>);

impl FreedIds {
    pub(super) fn contains(&self, id: u64) -> bool {
        self.0.range(..=id).next_back().is_some_and(|(_, &last)| id <= last)
    }

    pub(super) fn insert(&mut self, id: u64) {
        let (mut first, mut last) = (id, id);
        // Join the range that ends just before `id` (or already holds it) ...
        if let Some((&s, &l)) = self.0.range(..=id).next_back() {
            if l.checked_add(1).is_none_or(|next| next >= id) {
                first = s;
                last = last.max(l);
            }
        }
        // ... and the one that starts just after it.
        if let Some(next) = last.checked_add(1) {
            if let Some(l) = self.0.remove(&next) {
                last = l;
            }
        }
        self.0.insert(first, last);
    }

    /// The freed ids as `(first, last)` ranges, in order.
    #[cfg(test)]
    pub(super) fn ranges(&self) -> Vec<(u64, u64)> {
        self.0.iter().map(|(&f, &l)| (f, l)).collect()
    }
}

/// Interned event names: kernels repeat a few names millions of times, so each event shares one
/// allocation instead of making its own. Capped, so a trace of unique names cannot grow it.
#[derive(Debug, Default)]
struct Names(rustc_hash::FxHashSet<Arc<str>>);

impl Names {
    const MAX: usize = 4096;

    fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(n) = self.0.get(name) {
            return n.clone();
        }
        let n: Arc<str> = name.into();
        if self.0.len() < Self::MAX {
            self.0.insert(n.clone());
        }
        n
    }
}

/// What the reader knows of regions: the live ones, which ids were freed, and the sums the
/// format bounds (live bytes, kernel time).
#[derive(Debug, Default)]
struct Regions {
    live: FxHashMap<u64, RegionState>,
    freed: FreedIds,
    /// Bytes of the live regions, each rounded up to whole pages.
    live_page_bytes: u64,
    /// Sum of `dur_ns` so far.
    kernel_ns: u64,
    /// Sum of `host_ns` so far.
    host_ns: u64,
}

/// An access as written: `[id, offset, len, mode]`.
type RawAccess<'a> = (u64, u64, u64, Cow<'a, str>);

/// A line as parsed, before validation. Borrowed where the JSON allows it.
#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow)]
    ev: Option<Cow<'a, str>>,
    id: Option<u64>,
    bytes: Option<u64>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    dur_ns: Option<u64>,
    host_ns: Option<u64>,
    #[serde(borrow)]
    acc: Option<Vec<RawAccess<'a>>>,
    index: Option<u64>,
}

/// Reads a trace event by event. Use it as an iterator of `Result<TraceEvent>`; it stops after
/// the first error.
pub struct TraceReader {
    file: String,
    input: Box<dyn BufRead + Send>,
    line: u64,
    buf: Vec<u8>,
    header: TraceHeader,
    regions: Regions,
    names: Names,
    consumed: Arc<AtomicU64>,
    total_bytes: Option<u64>,
    done: bool,
}

impl std::fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader").field("file", &self.file).field("line", &self.line).finish()
    }
}

impl TraceReader {
    /// Opens a trace file, gzip-compressed or plain.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path.display(), e))?;
        let total = file.metadata().ok().map(|m| m.len());
        let mut reader = Self::from_read(&path.display().to_string(), file)?;
        reader.total_bytes = total;
        Ok(reader)
    }

    /// Reads a trace from any byte source; `name` appears in errors.
    pub fn from_read<R: Read + Send + 'static>(name: &str, source: R) -> Result<Self> {
        let consumed = Arc::new(AtomicU64::new(0));
        let raw = BufReader::with_capacity(1 << 16, Counting { inner: source, count: consumed.clone() });
        let input = Box::new(Decompressed::new(raw).map_err(|e| Error::io(name, e))?);
        let mut reader = Self {
            file: name.to_string(),
            input,
            line: 0,
            buf: Vec::with_capacity(4096),
            header: TraceHeader::default(),
            regions: Regions::default(),
            names: Names::default(),
            consumed,
            total_bytes: None,
            done: false,
        };
        reader.header = reader.read_header()?;
        Ok(reader)
    }

    /// The same reader, with the size of its source for progress reporting.
    pub fn with_total_bytes(mut self, total: Option<u64>) -> Self {
        self.total_bytes = total;
        self
    }

    /// Reads a trace held in memory (e.g. one bundled into the binary).
    pub fn from_bytes(name: &str, bytes: &'static [u8]) -> Result<Self> {
        Self::from_read(name, bytes)
    }

    /// The header.
    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// The file name used in errors.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The last line read (1-based).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// A counter of source bytes consumed so far (compressed bytes for gzip), and the total
    /// size if known: for progress reporting from another thread.
    pub fn progress(&self) -> (Arc<AtomicU64>, Option<u64>) {
        (self.consumed.clone(), self.total_bytes)
    }

    fn err(&self, line: u64, reason: impl Into<String>) -> Error {
        Error::Trace { file: self.file.clone(), line, reason: reason.into() }
    }

    /// Reads the next non-blank line into `self.buf`; false at the end of input.
    fn next_line(&mut self) -> Result<bool> {
        loop {
            self.buf.clear();
            let at = self.line + 1;
            let n =
                (&mut self.input).take(MAX_LINE_BYTES + 1).read_until(b'\n', &mut self.buf).map_err(|e| {
                    let reason = match e.kind() {
                        io::ErrorKind::UnexpectedEof => {
                            "gzip stream ends early: the file is truncated".to_string()
                        }
                        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => {
                            format!("gzip stream is corrupt: {e}")
                        }
                        _ => format!("read error: {e}"),
                    };
                    self.err(at, reason)
                })?;
            if n == 0 {
                return Ok(false);
            }
            self.line = at;
            if self.buf.len() as u64 > MAX_LINE_BYTES {
                return Err(self.err(at, format!("line is longer than {MAX_LINE_BYTES} bytes")));
            }
            if !self.buf.iter().all(u8::is_ascii_whitespace) {
                return Ok(true);
            }
        }
    }

    fn read_header(&mut self) -> Result<TraceHeader> {
        const EXPECTED: &str = r#"the first line must be {"format": "unimem-trace", "version": 1, ...}"#;
        if !self.next_line()? {
            return Err(self.err(0, format!("empty trace: {EXPECTED}")));
        }
        // A UTF-8 byte-order mark, as some editors write one, is not part of the header.
        if self.buf.starts_with(b"\xEF\xBB\xBF") {
            self.buf.drain(..3);
        }
        let line = self.line;
        let meta: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&self.buf).map_err(|e| {
                self.err(line, format!("missing or malformed header ({}); {EXPECTED}", short(&e)))
            })?;
        match meta.get("format").and_then(|v| v.as_str()) {
            Some("unimem-trace") => {}
            Some(other) => {
                return Err(self.err(line, format!("not a unimem trace: format is \"{other}\"; {EXPECTED}")))
            }
            None => return Err(self.err(line, format!("header has no `format`; {EXPECTED}"))),
        }
        match meta.get("version") {
            Some(v) if v.as_u64() == Some(1) => {}
            Some(v) => {
                return Err(self.err(line, format!("unsupported version {v}; this reader reads version 1")))
            }
            None => return Err(self.err(line, format!("header has no `version`; {EXPECTED}"))),
        }
        Ok(TraceHeader { meta })
    }

    /// The next event, `Ok(None)` at the end of the trace.
    pub fn next_event(&mut self) -> Result<Option<TraceEvent>> {
        if self.done {
            return Ok(None);
        }
        let result = self.read_event();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    fn read_event(&mut self) -> Result<Option<TraceEvent>> {
        if !self.next_line()? {
            return Ok(None);
        }
        let line = self.line;
        let raw: RawEvent<'_> = match serde_json::from_slice(&self.buf) {
            Ok(raw) => raw,
            Err(e) => return Err(self.err(line, format!("not a valid event: {}", explain(&self.buf, &e)))),
        };
        let event =
            validate(&raw, &self.regions, &mut self.names).map_err(|reason| self.err(line, reason))?;
        // Validated: now apply the state change (never half-applied).
        let regions = &mut self.regions;
        match &event {
            TraceEvent::Alloc { id, bytes, .. } => {
                regions.live.insert(*id, RegionState { bytes: *bytes, alloc_line: line });
                regions.live_page_bytes += page_round(*bytes);
            }
            TraceEvent::Free { id } => {
                if let Some(r) = regions.live.remove(id) {
                    regions.live_page_bytes -= page_round(r.bytes);
                }
                regions.freed.insert(*id);
            }
            TraceEvent::Kernel { dur_ns, host_ns, .. } => {
                regions.kernel_ns += dur_ns;
                regions.host_ns += host_ns.unwrap_or(0);
            }
            _ => {}
        }
        Ok(Some(event))
    }
}

impl Iterator for TraceReader {
    type Item = Result<TraceEvent>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_event().transpose()
    }
}

/// serde_json's message without its own " at line 1 column N" (we give the file line).
fn short(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    match msg.rfind(" at line ") {
        Some(i) => format!("{} (column {})", &msg[..i], e.column()),
        None => msg,
    }
}

/// Why a line that did not parse as an event is not one, in the format's terms: which field
/// has which wrong type, rather than serde's view of the reader's own types. Runs on the error
/// path only, so the line is parsed a second time as plain JSON.
fn explain(line: &[u8], e: &serde_json::Error) -> String {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else {
        return short(e);
    };
    let Some(object) = value.as_object() else {
        return format!(
            "an event must be a JSON object such as {{\"ev\": \"kernel\", ...}}, not {}",
            json_kind(&value)
        );
    };
    let field_type = |field: &str, ok: fn(&serde_json::Value) -> bool, want: &str| {
        object
            .get(field)
            .filter(|v| !ok(v))
            .map(|v| format!("`{field}` must be {want}, not {}", json_kind(v)))
    };
    const U64: &str = "an integer from 0 to 2^64-1";
    let problem = field_type("ev", serde_json::Value::is_string, "a string")
        .or_else(|| field_type("name", serde_json::Value::is_string, "a string"))
        .or_else(|| field_type("id", serde_json::Value::is_u64, U64))
        .or_else(|| field_type("bytes", serde_json::Value::is_u64, U64))
        .or_else(|| field_type("dur_ns", serde_json::Value::is_u64, U64))
        .or_else(|| field_type("host_ns", |v| v.is_u64() || v.is_null(), U64))
        .or_else(|| field_type("index", serde_json::Value::is_u64, U64))
        .or_else(|| field_type("acc", serde_json::Value::is_array, "a list of accesses [id, offset, len, mode]"))
        .or_else(|| {
            let acc = object.get("acc")?.as_array()?;
            acc.iter().enumerate().find_map(|(i, a)| {
                let ok = a.as_array().is_some_and(|a| {
                    a.len() == 4 && a[..3].iter().all(serde_json::Value::is_u64) && a[3].is_string()
                });
                (!ok).then(|| {
                    format!(
                        "access {i} must be [id, offset, len, mode] (three integers from 0 to 2^64-1 and a string), not {a}"
                    )
                })
            })
        });
    problem.unwrap_or_else(|| short(e))
}

/// A JSON value's kind, as an error names it.
fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "true or false",
        serde_json::Value::Number(n) if n.is_u64() => "an integer",
        serde_json::Value::Number(n) if n.is_i64() => "a negative integer",
        serde_json::Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
            "an integer past 2^64-1"
        }
        serde_json::Value::Number(_) => "a fraction",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

fn need<T: Copy>(v: Option<T>, ev: &str, field: &str) -> std::result::Result<T, String> {
    v.ok_or_else(|| format!("`{ev}` event is missing field `{field}`"))
}

fn validate(
    raw: &RawEvent<'_>,
    regions: &Regions,
    names: &mut Names,
) -> std::result::Result<TraceEvent, String> {
    let ev = raw.ev.as_deref().ok_or("event has no `ev` field")?;
    let live = |id: u64| -> std::result::Result<&RegionState, String> {
        match regions.live.get(&id) {
            Some(r) => Ok(r),
            None if regions.freed.contains(id) => Err(format!("region {id} was already freed")),
            None => Err(format!("region {id} was never allocated")),
        }
    };
    let accesses = |ev: &str| -> std::result::Result<Vec<TraceAccess>, String> {
        let acc = raw.acc.as_ref().ok_or_else(|| format!("`{ev}` event is missing field `acc`"))?;
        acc.iter()
            .enumerate()
            .map(|(i, (id, offset, len, mode))| {
                let r = live(*id).map_err(|e| format!("access {i}: {e}"))?;
                let end = offset.checked_add(*len);
                if end.is_none_or(|end| end > r.bytes) {
                    return Err(format!(
                        "access {i}: range {offset}+{len} is past the end of region {id} ({} bytes)",
                        r.bytes
                    ));
                }
                let mode = mode.parse().map_err(|e| format!("access {i}: {e}"))?;
                Ok(TraceAccess { id: *id, offset: *offset, len: *len, mode })
            })
            .collect()
    };
    let mut name = |ev: &str| -> std::result::Result<Arc<str>, String> {
        raw.name
            .as_deref()
            .map(|n| names.get(n))
            .ok_or_else(|| format!("`{ev}` event is missing field `name`"))
    };
    Ok(match ev {
        "alloc" => {
            let id = need(raw.id, ev, "id")?;
            let bytes = need(raw.bytes, ev, "bytes")?;
            if bytes == 0 {
                return Err(format!("region {id} has 0 bytes; `bytes` must be > 0"));
            }
            if bytes > MAX_REGION_BYTES {
                return Err(format!(
                    "region {id} has {bytes} bytes ({}); a region may have at most 2^48 bytes (256 TiB), \
                     the virtual address space a GPU maps",
                    crate::units::Bytes(bytes)
                ));
            }
            if regions.live_page_bytes + page_round(bytes) > MAX_LIVE_BYTES {
                return Err(format!(
                    "region {id} of {bytes} bytes takes the live regions past 2^62 bytes, the most a trace may \
                     hold at once"
                ));
            }
            if let Some(r) = regions.live.get(&id) {
                return Err(format!(
                    "region {id} was already allocated at line {}; ids are never reused",
                    r.alloc_line
                ));
            }
            if regions.freed.contains(id) {
                return Err(format!("region {id} was allocated and freed before; ids are never reused"));
            }
            TraceEvent::Alloc { id, bytes, name: raw.name.as_deref().map(str::to_string) }
        }
        "free" => {
            let id = need(raw.id, ev, "id")?;
            live(id).map_err(|e| format!("cannot free: {e}"))?;
            TraceEvent::Free { id }
        }
        "kernel" => {
            let dur_ns = need(raw.dur_ns, ev, "dur_ns")?;
            if dur_ns > MAX_TRACE_NS - regions.kernel_ns {
                return Err(format!(
                    "`dur_ns` {dur_ns} takes the trace's kernel time past 2^62 ns (146 years), the most a trace \
                     may add up to"
                ));
            }
            if let Some(host_ns) = raw.host_ns.filter(|&ns| ns > MAX_TRACE_NS - regions.host_ns) {
                return Err(format!(
                    "`host_ns` {host_ns} takes the trace's host time past 2^62 ns (146 years), the most a trace \
                     may add up to"
                ));
            }
            TraceEvent::Kernel { name: name(ev)?, dur_ns, host_ns: raw.host_ns, acc: accesses(ev)? }
        }
        "host" => TraceEvent::Host { name: name(ev)?, acc: accesses(ev)? },
        "step" => TraceEvent::Step { index: need(raw.index, ev, "index")? },
        other => return Err(format!("unknown event `{other}`; allowed: alloc, free, kernel, host, step")),
    })
}

#[cfg(test)]
mod tests;
