//! # unimem-core
//!
//! The core of unimem, a unified-memory runtime for Rust programs on NVIDIA GPUs: managed
//! regions and their registry, the [`seam::MemoryBackend`] seam with its calibrated
//! simulator, the access history, configuration, the trace format and the replay engine.
//!
//! Data flow: an access (from a tensor launch or a trace) is recorded, a policy turns what it
//! knows into hints (prefetch, evict, advise, discard), and a backend executes them and reports
//! what happened. See `docs/architecture.md`.

#![warn(missing_docs)]

pub mod access;
pub mod backends;
pub mod bound;
pub mod budget_search;
pub mod config;
pub mod cost;
pub mod error;
mod ids;
pub(crate) mod mechanism;
pub mod op;
pub mod output_file;
pub mod policy;
pub mod protocol;
pub mod region;
pub mod replay;
pub mod runtime;
pub mod seam;
pub mod trace;
pub mod units;

pub use access::{Access, AccessHistory, AccessMode, Accessor, RangeAccess};
pub use backends::sim::SimBackend;
pub use cost::CostModel;
pub use seam::{
    Advice, BackendKind, ByteRange, KernelLaunch, Location, MemoryBackend, MemoryBackendExt, ProgramStream,
    Residency,
};

pub use config::{Budget, Config, LoadedConfig};
pub use error::{Error, Result};
pub use region::{Region, RegionId, Registry};
pub use runtime::{KernelData, Runtime, RuntimeBuilder, RuntimeStats, SinkFor, WeakRuntime};
