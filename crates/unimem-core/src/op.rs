//! Operations: what a program does, as the policies and the protocol see it. A replayed trace
//! (converted at the edge, [`Op::from`] a [`crate::trace::TraceEvent`]) and a running program
//! (the runtime's engine) produce the same operations, so a policy never depends on where they
//! came from.

use std::sync::Arc;

use crate::access::RangeAccess;
use crate::region::RegionId;
use crate::trace::{TraceAccess, TraceEvent};

/// One operation of a program.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// A region comes into existence.
    Alloc {
        /// The region.
        region: RegionId,
        /// Its size in bytes.
        bytes: u64,
        /// Its name, if the program gave one.
        name: Option<Arc<str>>,
    },
    /// The region's contents are dead from here on.
    Free {
        /// The region.
        region: RegionId,
    },
    /// A kernel launch.
    Kernel {
        /// Kernel name.
        name: Arc<str>,
        /// GPU time with all its data resident, in nanoseconds.
        dur_ns: u64,
        /// What it reads and writes.
        accesses: Vec<RangeAccess>,
    },
    /// The CPU touches ranges (after the device is done with them).
    Host {
        /// What the host does.
        name: Arc<str>,
        /// What it touches.
        accesses: Vec<RangeAccess>,
    },
    /// An iteration boundary of the program.
    Step {
        /// Step index.
        index: u64,
    },
}

impl Op {
    /// The accesses of a kernel or host operation (empty for the others).
    pub fn accesses(&self) -> &[RangeAccess] {
        match self {
            Op::Kernel { accesses, .. } | Op::Host { accesses, .. } => accesses,
            _ => &[],
        }
    }
}

fn range(a: &TraceAccess) -> RangeAccess {
    RangeAccess { region: RegionId(a.id), offset: a.offset, len: a.len, mode: a.mode }
}

impl From<TraceEvent> for Op {
    fn from(event: TraceEvent) -> Self {
        match event {
            TraceEvent::Alloc { id, bytes, name } => {
                Op::Alloc { region: RegionId(id), bytes, name: name.map(Arc::from) }
            }
            TraceEvent::Free { id } => Op::Free { region: RegionId(id) },
            TraceEvent::Kernel { name, dur_ns, acc, .. } => {
                Op::Kernel { name, dur_ns, accesses: acc.iter().map(range).collect() }
            }
            TraceEvent::Host { name, acc } => Op::Host { name, accesses: acc.iter().map(range).collect() },
            TraceEvent::Step { index } => Op::Step { index },
        }
    }
}
