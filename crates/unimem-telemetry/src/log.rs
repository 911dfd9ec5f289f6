//! The JSON Lines event log: a header line naming the schema and version, then one record per
//! line: the regions as they are allocated and freed (so every event can be attributed by
//! name, also after a free) and the backend's events (the serialised [`MemEvent`]).

use std::io::Write;

use unimem_core::protocol::EventSink;
use unimem_core::seam::MemEvent;
use unimem_core::RegionId;

/// Schema name in the header.
pub const SCHEMA: &str = "unimem-telemetry";
/// Schema version in the header. Version 3 added `address` to region records and the
/// `released` event, version 4 the `thrashing`, `throttling` and `remote_map` events, version 5
/// the `relocated` event, version 6 the `end` record that closes a complete log, version 7 the
/// `page_work` event, version 8 `issued_ns` on kernel records; readers read versions 2 to 8
/// and reject others.
pub const SCHEMA_VERSION: u64 = 8;
/// The first version whose complete logs end with an `end` record.
pub const END_RECORD_VERSION: u64 = 6;
/// The oldest version readers accept (a subset of the current one).
pub const OLDEST_READABLE_VERSION: u64 = 2;

/// Writes events as JSON Lines. [`EventLog::finish`] (or closing it as a sink) writes the `end`
/// record, by which a reader tells a complete log from one cut short.
#[derive(Debug)]
pub struct EventLog<W: Write> {
    out: W,
    written: u64,
    ended: bool,
}

impl<W: Write> EventLog<W> {
    /// Starts a log on `out` with its header; `source` says what produced the events.
    pub fn new(mut out: W, source: &str) -> std::io::Result<Self> {
        let header = serde_json::json!({"schema": SCHEMA, "version": SCHEMA_VERSION, "source": source});
        writeln!(out, "{header}")?;
        Ok(Self { out, written: 0, ended: false })
    }

    /// Appends one event.
    pub fn write(&mut self, event: &MemEvent) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, event)?;
        self.out.write_all(b"\n")?;
        self.written += 1;
        Ok(())
    }

    /// Records a region's allocation (its name attributes its events) at `address`.
    pub fn write_region(
        &mut self,
        id: RegionId,
        bytes: u64,
        name: Option<&str>,
        address: u64,
    ) -> std::io::Result<()> {
        let name = name.map(str::to_string).unwrap_or_else(|| format!("region{}", id.0));
        let record = serde_json::json!({"kind": "region", "region": id.0, "bytes": bytes, "name": name, "address": address});
        writeln!(self.out, "{record}")
    }

    /// Records a region's free.
    pub fn write_freed(&mut self, id: RegionId) -> std::io::Result<()> {
        writeln!(self.out, "{}", serde_json::json!({"kind": "freed", "region": id.0}))
    }

    /// Events written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes the `end` record (once) and flushes.
    fn end(&mut self) -> std::io::Result<()> {
        if !self.ended {
            writeln!(self.out, "{}", serde_json::json!({"kind": "end", "events": self.written}))?;
            self.ended = true;
        }
        self.out.flush()
    }

    /// Ends the log and returns the writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.end()?;
        Ok(self.out)
    }
}

fn io(e: std::io::Error) -> unimem_core::Error {
    unimem_core::Error::io("telemetry log", e)
}

/// A replay writes its telemetry straight into the log.
impl<W: Write> EventSink for EventLog<W> {
    fn region(
        &mut self,
        id: RegionId,
        bytes: u64,
        name: Option<&str>,
        address: u64,
    ) -> unimem_core::Result<()> {
        self.write_region(id, bytes, name, address).map_err(io)
    }

    fn freed(&mut self, id: RegionId) -> unimem_core::Result<()> {
        self.write_freed(id).map_err(io)
    }

    fn events(&mut self, events: &[MemEvent]) -> unimem_core::Result<()> {
        events.iter().try_for_each(|e| self.write(e)).map_err(io)
    }

    fn close(&mut self) -> unimem_core::Result<()> {
        self.end().map_err(io)
    }
}
