//! The two sample traces, recorded from PyTorch programs on an H200, built into the binary so
//! `unimem demo` runs from a fresh clone with no files and no GPU.

use unimem_core::trace::TraceReader;
use unimem_core::Result;

/// A trace bundled into the binary.
pub struct Bundled {
    /// File name, as in `traces/`.
    pub name: &'static str,
    /// What program it was recorded from.
    pub about: &'static str,
    bytes: &'static [u8],
}

impl Bundled {
    /// A fresh reader over the trace.
    pub fn reader(&self) -> Result<TraceReader> {
        TraceReader::from_bytes(self.name, self.bytes)
    }
}

/// The bundled traces.
pub const TRACES: [Bundled; 2] = [
    Bundled {
        name: "resnet50-train.jsonl.gz",
        about: "torchvision resnet50 training, batch 64, 3 steps",
        bytes: include_bytes!("../../../traces/resnet50-train.jsonl.gz"),
    },
    Bundled {
        name: "transformer-decode.jsonl.gz",
        about: "16-layer d2048 transformer decode, weights streamed",
        bytes: include_bytes!("../../../traces/transformer-decode.jsonl.gz"),
    },
];
