//! A telemetry log written to a file by a running program ([`log_file_sink`]): the log goes to
//! an [`OutputFile`], which takes the file's name only once the sink is closed complete; on a
//! GPU with `telemetry.cupti` on, CUPTI's records join it.

use std::io::BufWriter;
use std::path::PathBuf;

use unimem_core::config::TelemetryConfig;
use unimem_core::output_file::OutputFile;
use unimem_core::protocol::EventSink;
use unimem_core::seam::MemEvent;
use unimem_core::{MemoryBackend, RegionId, Result};

use crate::EventLog;

/// The sink for `backend`'s telemetry log, written to `out`, `source` naming the program in
/// its header. The file takes its name when the sink is closed; until then, and if it never
/// is, whatever the path held stays.
pub fn log_file_sink(
    out: OutputFile,
    source: &str,
    backend: &dyn MemoryBackend,
    settings: &TelemetryConfig,
) -> Result<Box<dyn EventSink + Send>> {
    let path = out.path().to_path_buf();
    let log = EventLog::new(BufWriter::new(out.handle()?), source)
        .map_err(|e| unimem_core::Error::io(path.display(), e))?;
    let inner = crate::cupti::sink_for(log, backend, settings)?;
    Ok(Box::new(LogFile { inner, out: Some(out), path }))
}

/// A sink whose file is committed once it is closed.
struct LogFile {
    inner: Box<dyn EventSink + Send>,
    out: Option<OutputFile>,
    path: PathBuf,
}

impl EventSink for LogFile {
    fn region(&mut self, id: RegionId, bytes: u64, name: Option<&str>, address: u64) -> Result<()> {
        self.inner.region(id, bytes, name, address)
    }

    fn freed(&mut self, id: RegionId) -> Result<()> {
        self.inner.freed(id)
    }

    fn events(&mut self, events: &[MemEvent]) -> Result<()> {
        self.inner.events(events)
    }

    fn close(&mut self) -> Result<()> {
        // Its errors name the file.
        let path = &self.path;
        self.inner
            .close()
            .map_err(|e| unimem_core::Error::io(path.display(), std::io::Error::other(e.to_string())))?;
        match self.out.take() {
            Some(out) => out.commit(),
            None => Ok(()),
        }
    }

    fn late(&mut self, out: &mut Vec<MemEvent>) -> Result<()> {
        self.inner.late(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use unimem_core::backends::sim::SimBackend;
    use unimem_core::CostModel;

    #[test]
    fn the_log_takes_its_name_only_once_closed() {
        let dir = std::env::temp_dir().join(format!("unimem-log-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        std::fs::write(&path, "before").unwrap();
        let backend = SimBackend::new(CostModel::h200(), 64 << 20);
        let out = OutputFile::create(&path, &[]).unwrap();
        let mut sink = log_file_sink(out, "test", &backend, &TelemetryConfig::default()).unwrap();
        sink.region(RegionId(1), 4096, Some("x"), 0).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "before", "an unfinished log replaces nothing");
        sink.close().unwrap();
        let log = crate::Log::read(&path).unwrap();
        assert_eq!(log.regions.len(), 1);
        assert_eq!(log.end, crate::LogEnd::Complete);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
