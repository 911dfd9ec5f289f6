//! The JSON Lines event log: a header line naming the schema and version, then one event per
//! line (the serialised [`MemEvent`]).

use std::io::Write;

use unimem_core::backend::MemEvent;

/// Schema name in the header.
pub const SCHEMA: &str = "unimem-telemetry";
/// Schema version in the header; readers reject other versions.
pub const SCHEMA_VERSION: u64 = 1;

/// Writes events as JSON Lines.
#[derive(Debug)]
pub struct EventLog<W: Write> {
    out: W,
    written: u64,
}

impl<W: Write> EventLog<W> {
    /// Starts a log on `out` with its header; `source` says what produced the events.
    pub fn new(mut out: W, source: &str) -> std::io::Result<Self> {
        let header = serde_json::json!({"schema": SCHEMA, "version": SCHEMA_VERSION, "source": source});
        writeln!(out, "{header}")?;
        Ok(Self { out, written: 0 })
    }

    /// Appends one event.
    pub fn write(&mut self, event: &MemEvent) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, event)?;
        self.out.write_all(b"\n")?;
        self.written += 1;
        Ok(())
    }

    /// Events written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}
