//! Trace inputs: a file, or a stream (`-` for standard input, a pipe, `/dev/stdin`). A replay
//! reads its trace twice (a first pass sizes the budget and checks the whole trace before any
//! replay starts), which a stream cannot give, so a stream is first copied, as it is, to a
//! temporary file that is removed when the input is dropped.

use std::path::{Path, PathBuf};

use unimem_core::trace::TraceReader;
use unimem_core::{Error, Result};

/// A trace to read, as many times as needed.
pub struct TraceInput {
    /// The name errors and reports give it.
    name: String,
    /// The file the reader opens.
    path: PathBuf,
    /// The copy of a stream, removed on drop.
    spooled: bool,
}

impl TraceInput {
    /// `path` as given: `-` is standard input; a pipe or device is copied first.
    pub fn open(path: &Path) -> Result<Self> {
        if path == Path::new("-") {
            return Self::spool("<stdin>", &mut std::io::stdin().lock());
        }
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path.display(), e))?;
        if meta.is_file() {
            return Ok(Self { name: path.display().to_string(), path: path.to_path_buf(), spooled: false });
        }
        if meta.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "{} is a directory, not a trace file",
                path.display()
            )));
        }
        let mut stream = std::fs::File::open(path).map_err(|e| Error::io(path.display(), e))?;
        Self::spool(&path.display().to_string(), &mut stream)
    }

    fn spool(name: &str, stream: &mut dyn std::io::Read) -> Result<Self> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "unimem-input-{}-{}.trace",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let input = Self { name: name.to_string(), path, spooled: true };
        let mut copy = std::fs::File::create(&input.path).map_err(|e| Error::io(input.path.display(), e))?;
        std::io::copy(stream, &mut copy).map_err(|e| Error::io(format!("copying {name}"), e))?;
        Ok(input)
    }

    /// A fresh reader over the trace.
    pub fn reader(&self) -> Result<TraceReader> {
        let file = std::fs::File::open(&self.path).map_err(|e| Error::io(&self.name, e))?;
        let total = file.metadata().ok().map(|m| m.len());
        Ok(TraceReader::from_read(&self.name, file)?.with_total_bytes(total))
    }

    /// The file the trace is read from: an output must never be this file.
    pub fn file(&self) -> &Path {
        &self.path
    }

    /// The trace's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TraceInput {
    fn drop(&mut self) {
        if self.spooled {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
