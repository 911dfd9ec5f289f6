//! The unimem trace format, version 1 (`docs/trace-format.md`): a streaming, validating reader,
//! a writer, the recording of a running program, whole-trace statistics and a generator of synthetic access patterns.

mod event;
mod gzip;
mod reader;
mod record;
mod stats;
pub mod synth;
mod writer;

pub use event::{TraceAccess, TraceEvent, TraceHeader};
pub use gzip::Decompressed;
pub use reader::{TraceReader, MAX_LINE_BYTES, MAX_LIVE_BYTES, MAX_REGION_BYTES, MAX_TRACE_NS};
pub use record::{KernelTimes, TraceRecording};
pub use stats::{footprint_bytes, KernelFootprint, ProgramFloor, RegionIds, TraceStats};
pub use writer::TraceWriter;
