//! Trace writer: JSON Lines, gzip-compressed when the path ends in `.gz`.

use std::io::{BufWriter, Write};
use std::path::Path;

use serde::Serialize;

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
}

#[derive(Serialize)]
struct RawOut<'a> {
    ev: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    acc: Option<Vec<(u64, u64, u64, &'static str)>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<u64>,
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
        let mut w = Self { sink, what: what.to_string() };
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
        let acc = |acc: &[super::TraceAccess]| {
            Some(acc.iter().map(|a| (a.id, a.offset, a.len, a.mode.as_str())).collect())
        };
        let none = RawOut { ev: "", id: None, bytes: None, name: None, dur_ns: None, acc: None, index: None };
        let raw = match event {
            TraceEvent::Alloc { id, bytes, name } => {
                RawOut { ev: "alloc", id: Some(*id), bytes: Some(*bytes), name: name.as_deref(), ..none }
            }
            TraceEvent::Free { id } => RawOut { ev: "free", id: Some(*id), ..none },
            TraceEvent::Kernel { name, dur_ns, acc: a } => {
                RawOut { ev: "kernel", name: Some(name), dur_ns: Some(*dur_ns), acc: acc(a), ..none }
            }
            TraceEvent::Host { name, acc: a } => RawOut { ev: "host", name: Some(name), acc: acc(a), ..none },
            TraceEvent::Step { index } => RawOut { ev: "step", index: Some(*index), ..none },
        };
        let line = serde_json::to_vec(&raw).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        self.write_line(&line)
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
