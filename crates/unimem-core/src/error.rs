//! The one error type of unimem-core. Every variant says what failed and where (key, file,
//! line), and what would have been allowed, so a user can fix the input without reading code.

use std::path::PathBuf;

use crate::ids::RegionId;

/// Result alias used throughout unimem-core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in unimem-core.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is missing, mistyped or out of range.
    #[error("config: {key}: {reason} (from {source_desc})")]
    Config {
        /// Dotted key path, e.g. `budget` or `sim.profile`.
        key: String,
        /// What is wrong and what is allowed.
        reason: String,
        /// Where the value came from: a file, an environment variable or the defaults.
        source_desc: String,
    },

    /// A config or profile file could not be read or parsed as TOML.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong (I/O or TOML syntax, with its line and column).
        reason: String,
    },

    /// A trace is malformed; names the file, the 1-based line and the reason.
    #[error("{file}:{line}: {reason}")]
    Trace {
        /// The trace file (or `<memory>` for in-memory traces).
        file: String,
        /// 1-based line number; 0 when the problem is not tied to a line (e.g. an empty file).
        line: u64,
        /// What is wrong and what is allowed.
        reason: String,
    },

    /// A region id that the registry or backend does not know (never allocated, or freed).
    #[error("unknown region {0}: never allocated or already freed")]
    UnknownRegion(RegionId),

    /// A byte range that does not lie inside its region.
    #[error("range {offset}+{len} is outside region {region} of {size} bytes")]
    OutOfRange {
        /// The region.
        region: RegionId,
        /// Start of the range in bytes.
        offset: u64,
        /// Length of the range in bytes.
        len: u64,
        /// The region's size in bytes.
        size: u64,
    },

    /// An allocation was refused (size 0, or larger than the device allows).
    #[error("allocation of {bytes} bytes refused: {reason}")]
    Allocation {
        /// Requested size.
        bytes: u64,
        /// Why, and which setting would allow it.
        reason: String,
    },

    /// The requested backend is not available in this build or on this machine.
    #[error("backend `{backend}` is unavailable: {reason}")]
    BackendUnavailable {
        /// The backend asked for.
        backend: String,
        /// Why it is unavailable and what to use instead.
        reason: String,
    },

    /// A CUDA driver or NVRTC call failed.
    #[error("CUDA: {call} failed: {detail}")]
    Cuda {
        /// The call, e.g. `cuMemPrefetchAsync`.
        call: String,
        /// The driver's error, with what was being done.
        detail: String,
        /// The driver's own error value where there is one (`cudarc::driver::DriverError`
        /// for driver calls: downcast it for the `CUresult`).
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    /// Invalid argument to an API call (documented precondition violated).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The runtime's engine is gone (the runtime was dropped, or its worker stopped after an
    /// error); names what was being done.
    #[error("the unimem runtime has stopped: {0}")]
    Stopped(String),

    /// An operation of a trace failed: the line of the event, and why.
    #[error("{file}:{line}: {source}")]
    At {
        /// The trace file.
        file: String,
        /// The 1-based line of the event.
        line: u64,
        /// What went wrong.
        #[source]
        source: Box<Error>,
    },

    /// Several problems found at once (every bad key of a configuration), one per line.
    #[error("{} problems:\n{}", .0.len(), .0.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Several(Vec<Error>),

    /// An I/O error with the path or stream it concerns.
    #[error("{what}: {source}")]
    Io {
        /// The file or stream.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Builds a [`Error::Cuda`] error without a typed source.
    pub fn cuda(call: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Cuda { call: call.into(), detail: detail.into(), source: None }
    }

    /// Builds a [`Error::Config`] error.
    pub fn config(key: impl Into<String>, reason: impl Into<String>, source_desc: impl Into<String>) -> Self {
        Error::Config { key: key.into(), reason: reason.into(), source_desc: source_desc.into() }
    }

    /// `source` as the failure of the event at `file:line` (an error that names its own line
    /// already stays as it is).
    pub fn at(file: &str, line: u64, source: Error) -> Self {
        match source {
            Error::Trace { .. } | Error::At { .. } => source,
            source => Error::At { file: file.to_string(), line, source: Box::new(source) },
        }
    }

    /// `Ok` for no problems, the problem itself for one, [`Error::Several`] for more.
    pub fn from_problems(mut problems: Vec<Error>) -> Result<()> {
        match problems.len() {
            0 => Ok(()),
            1 => Err(problems.remove(0)),
            _ => Err(Error::Several(problems)),
        }
    }

    /// Builds an [`Error::Io`] error for `what` (usually a path).
    pub fn io(what: impl std::fmt::Display, source: std::io::Error) -> Self {
        Error::Io { what: what.to_string(), source }
    }
}
