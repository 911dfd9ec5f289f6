//! Trace v1 events as typed values (`docs/trace-format.md`).

use std::sync::Arc;

use crate::access::AccessMode;

/// One access of a kernel or host event: `[id, offset, len, mode]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceAccess {
    /// Trace region id.
    pub id: u64,
    /// Byte offset inside the region.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// `r`, `w` or `rw`.
    pub mode: AccessMode,
}

/// One trace event (every line after the header).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TraceEvent {
    /// A region comes into existence.
    Alloc {
        /// Unique id, never reused in the file.
        id: u64,
        /// Size in bytes (> 0).
        bytes: u64,
        /// Optional name.
        name: Option<String>,
    },
    /// The region's contents are dead from here on.
    Free {
        /// The region.
        id: u64,
    },
    /// One kernel launch.
    Kernel {
        /// Kernel name (shared: the reader interns repeated names).
        name: Arc<str>,
        /// Measured GPU time with all data resident, in nanoseconds.
        dur_ns: u64,
        /// The program's own host time from issuing the kernel before this one to issuing
        /// this one, its calls to the runtime included, where it was measured (a trace a
        /// runtime recorded on a GPU); `None` for the first kernel and where unknown.
        host_ns: Option<u64>,
        /// What it touches.
        acc: Vec<TraceAccess>,
    },
    /// The CPU touches ranges.
    Host {
        /// What the host does.
        name: Arc<str>,
        /// What it touches.
        acc: Vec<TraceAccess>,
    },
    /// An iteration boundary.
    Step {
        /// Step index.
        index: u64,
    },
}

impl TraceEvent {
    /// The accesses of a kernel or host event (empty for the others).
    pub fn accesses(&self) -> &[TraceAccess] {
        match self {
            TraceEvent::Kernel { acc, .. } | TraceEvent::Host { acc, .. } => acc,
            _ => &[],
        }
    }
}

/// The header line: `format` and `version` plus any metadata, kept as written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TraceHeader {
    /// Every key of the header object, `format` and `version` included.
    pub meta: serde_json::Map<String, serde_json::Value>,
}

impl TraceHeader {
    /// A version-1 header with a `source` description.
    pub fn new(source: &str) -> Self {
        let mut meta = serde_json::Map::new();
        meta.insert("format".into(), "unimem-trace".into());
        meta.insert("version".into(), 1.into());
        meta.insert("source".into(), source.into());
        Self { meta }
    }

    /// The `source` metadata, if any.
    pub fn source(&self) -> Option<&str> {
        self.meta.get("source").and_then(|v| v.as_str())
    }
}
