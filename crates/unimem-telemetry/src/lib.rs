//! # unimem-telemetry
//!
//! Page-fault and migration telemetry, attributed to named regions: the log format
//! ([`EventLog`], read back by [`Log`]), per-region and log-wide summaries ([`Summary`]), a
//! Chrome trace / Perfetto export ([`chrome_trace`]), an SVG plot ([`svg`]) and a `tracing`
//! sink ([`TracingSink`]); on a GPU, CUPTI's unified-memory counters ([`cupti`]). Events come
//! from a backend ([`unimem_core::seam::MemEvent`]; the simulator reports every fault and
//! migration); a replay writes them through [`unimem_core::protocol::EventSink`].

#![warn(missing_docs)]

mod chrome;
pub mod cupti;
mod log;
mod log_file;
mod plot;
mod read;
mod series;
mod summary;
mod trace_sink;

pub use chrome::chrome_trace;
pub use log::{EventLog, END_RECORD_VERSION, OLDEST_READABLE_VERSION, SCHEMA, SCHEMA_VERSION};
pub use log_file::log_file_sink;
pub use plot::{draw_legend, svg};
pub use read::{FreedAt, Log, LogEnd, LogError, RegionInfo, MAX_LOG_SUM, MAX_RECORD_BYTES};
pub use series::{peak_resident_bytes, resident_series, SeriesPoint};
pub use summary::{LinkDirection, LinkUse, RegionSummary, Summary, Totals};
pub use trace_sink::TracingSink;
