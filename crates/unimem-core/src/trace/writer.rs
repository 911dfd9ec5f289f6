//! Trace writer: JSON Lines, gzip-compressed when the path ends in `.gz`.

use std::io::{BufWriter, Write};
use std::path::Path;

use super::event::{TraceEvent, TraceHeader};
use crate::error::{Error, Result};
use crate::output_file::OutputFile;

enum Sink<W: Write> {
    Plain(BufWriter<W>),
    Gz(flate2::write::GzEncoder<BufWriter<W>>),
}

/// Writes a trace event by event.
pub struct TraceWriter<W: Write = OutputFile> {
    sink: Sink<W>,
    what: String,
    /// The line being encoded (kept: one allocation for the whole trace).
    line: Vec<u8>,
}

impl TraceWriter<OutputFile> {
    /// Starts writing a trace to `path` (gzip if it ends in `.gz`) with its header; refused
    /// where `path` is one of `inputs`. The file appears under its name at [`Self::commit`].
    pub fn create(path: &Path, inputs: &[&Path], header: &TraceHeader) -> Result<Self> {
        let file = OutputFile::create(path, inputs)?;
        let gz = path.extension().is_some_and(|e| e == "gz");
        Self::new(file, gz, &path.display().to_string(), header)
    }

    /// Finishes the trace and renames it into place.
    pub fn commit(self) -> Result<()> {
        self.finish()?.commit()
    }
}

impl<W: Write> TraceWriter<W> {
    /// Wraps any writer; `gz` compresses; `what` names it in errors.
    pub fn new(out: W, gz: bool, what: &str, header: &TraceHeader) -> Result<Self> {
        let buf = BufWriter::with_capacity(1 << 16, out);
        let sink = if gz {
            Sink::Gz(flate2::write::GzEncoder::new(buf, flate2::Compression::fast()))
        } else {
            Sink::Plain(buf)
        };
        let mut w = Self { sink, what: what.to_string(), line: Vec::with_capacity(256) };
        let line = serde_json::to_string(&header.meta).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        w.write_line(line.as_bytes())?;
        Ok(w)
    }

    fn out(&mut self) -> &mut dyn Write {
        match &mut self.sink {
            Sink::Plain(w) => w,
            Sink::Gz(w) => w,
        }
    }

    fn write_line(&mut self, bytes: &[u8]) -> Result<()> {
        let r = self.out().write_all(bytes).and_then(|_| self.out().write_all(b"\n"));
        r.map_err(|e| Error::io(&self.what, e))
    }

    /// Appends one event.
    pub fn write(&mut self, event: &TraceEvent) -> Result<()> {
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        encode(event, &mut line);
        let r = self.write_line(&line);
        self.line = line;
        r
    }

    /// Flushes (and finishes the gzip stream); returns the inner writer.
    pub fn finish(self) -> Result<W> {
        let what = self.what;
        let buf = match self.sink {
            Sink::Plain(w) => w,
            Sink::Gz(w) => w.finish().map_err(|e| Error::io(&what, e))?,
        };
        buf.into_inner().map_err(|e| Error::io(&what, e.into_error()))
    }
}

/// One event as its JSON line (without the newline), fields in the order of the spec. Written
/// by hand: it is on the path of every recorded operation, and serde's derive built a vector of
/// tuples for each event's accesses.
fn encode(event: &TraceEvent, out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    let string = |out: &mut Vec<u8>, s: &str| serde_json::to_writer(&mut *out, s).expect("a string encodes");
    let acc = |out: &mut Vec<u8>, acc: &[super::TraceAccess]| {
        out.extend_from_slice(b",\"acc\":[");
        for (i, a) in acc.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(out, "{sep}[{},{},{},\"{}\"]", a.id, a.offset, a.len, a.mode.as_str());
        }
        out.push(b']');
    };
    match event {
        TraceEvent::Alloc { id, bytes, name } => {
            let _ = write!(out, "{{\"ev\":\"alloc\",\"id\":{id},\"bytes\":{bytes}");
            if let Some(name) = name {
                out.extend_from_slice(b",\"name\":");
                string(out, name);
            }
        }
        TraceEvent::Free { id } => {
            let _ = write!(out, "{{\"ev\":\"free\",\"id\":{id}");
        }
        TraceEvent::Kernel { name, dur_ns, host_ns, acc: a } => {
            out.extend_from_slice(b"{\"ev\":\"kernel\",\"name\":");
            string(out, name);
            let _ = write!(out, ",\"dur_ns\":{dur_ns}");
            if let Some(host_ns) = host_ns {
                let _ = write!(out, ",\"host_ns\":{host_ns}");
            }
            acc(out, a);
        }
        TraceEvent::Host { name, acc: a } => {
            out.extend_from_slice(b"{\"ev\":\"host\",\"name\":");
            string(out, name);
            acc(out, a);
        }
        TraceEvent::Step { index } => {
            let _ = write!(out, "{{\"ev\":\"step\",\"index\":{index}");
        }
    }
    out.push(b'}');
}
