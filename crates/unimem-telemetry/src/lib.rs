//! # unimem-telemetry
//!
//! Page-fault and migration telemetry, attributed to regions. This crate starts with the log
//! format and its per-region summary over the events a backend reports
//! ([`unimem_core::backend::MemEvent`]); the CUPTI source, sinks and reports arrive with their
//! own issue.

#![warn(missing_docs)]

mod log;
mod summary;

pub use log::{EventLog, SCHEMA, SCHEMA_VERSION};
pub use summary::{RegionSummary, Summary};
