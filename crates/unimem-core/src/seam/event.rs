//! What a backend reports: every fault and migration as an event, plus running counters.

use crate::access::Accessor;
use crate::region::RegionId;

/// Direction of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Host to device.
    H2D,
    /// Device to host.
    D2H,
}

/// Why bytes moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum MigrationCause {
    /// A GPU or CPU page fault pulled the data.
    Fault,
    /// An explicit prefetch.
    Prefetch,
    /// The driver evicted data to make room on the device.
    Eviction,
    /// A write collapsed read-mostly duplicates.
    Coherence,
    /// A copy through the runtime's pinned staging buffers (a staged eviction, or its
    /// restore), not a unified-memory migration.
    Staging,
}

impl MigrationCause {
    /// The name the telemetry log gives it.
    pub fn name(self) -> &'static str {
        match self {
            MigrationCause::Fault => "fault",
            MigrationCause::Prefetch => "prefetch",
            MigrationCause::Eviction => "eviction",
            MigrationCause::Coherence => "coherence",
            MigrationCause::Staging => "staging",
        }
    }
}

/// Why the driver mapped pages remotely instead of moving them (CUPTI's remote-map causes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RemoteMapCause {
    /// To keep the processors' views coherent.
    Coherence,
    /// The pages thrashed, so they stay where they are and are mapped.
    Thrashing,
    /// A placement the program asked for (preferred location, accessed-by).
    Policy,
    /// The destination had no memory to spare.
    OutOfMemory,
    /// The pages were being evicted.
    Eviction,
    /// The source gave no cause.
    Unknown,
}

impl RemoteMapCause {
    /// The name the telemetry log gives it.
    pub fn name(self) -> &'static str {
        match self {
            RemoteMapCause::Coherence => "coherence",
            RemoteMapCause::Thrashing => "thrashing",
            RemoteMapCause::Policy => "policy",
            RemoteMapCause::OutOfMemory => "out_of_memory",
            RemoteMapCause::Eviction => "eviction",
            RemoteMapCause::Unknown => "unknown",
        }
    }
}

/// The driver's page-table work a backend times (see [`MemEvent::PageWork`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum PageWork {
    /// A prefetch to the device of pages that hold no data on it: fresh pages populated (a new
    /// region's, or a new output's), or host pages migrated.
    Populate,
    /// Discarded pages of staged blocks brought back before their data is copied in.
    Repopulate,
    /// The pages of staged-out (or dead) data dropped.
    Discard,
}

impl PageWork {
    /// The name the telemetry log gives it.
    pub fn name(self) -> &'static str {
        match self {
            PageWork::Populate => "populate",
            PageWork::Repopulate => "repopulate",
            PageWork::Discard => "discard",
        }
    }
}

/// What a hint asked the backend for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum HintKind {
    /// Read-mostly unset before a write (duplicates collapsed).
    Collapse,
    /// Dead data dropped without a copy.
    Discard,
    /// Live data moved (or staged) off the device.
    Evict,
    /// Data mapped host-preferred and accessed by the device.
    Remote,
    /// Data marked read-mostly.
    Duplicate,
    /// Data moved to the device ahead of its use.
    Prefetch,
    /// Data written back to the staging memory ahead of its eviction, staying on the device.
    WriteBack,
}

impl HintKind {
    /// The name logs and reports use.
    pub fn as_str(self) -> &'static str {
        match self {
            HintKind::Collapse => "collapse",
            HintKind::Discard => "discard",
            HintKind::Evict => "evict",
            HintKind::Remote => "remote",
            HintKind::Duplicate => "duplicate",
            HintKind::Prefetch => "prefetch",
            HintKind::WriteBack => "write_back",
        }
    }
}

impl std::fmt::Display for HintKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing that happened in the memory system, with its time on the backend clock.
/// Exhaustive on purpose: every consumer (the telemetry log, its reports) handles every
/// event, and a new one is a new log schema version.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum MemEvent {
    /// A processor touched pages that were not valid on its side.
    Fault {
        /// The region.
        region: RegionId,
        /// Offset of the first faulting byte.
        offset: u64,
        /// Bytes covered by the fault group.
        bytes: u64,
        /// GPU or CPU.
        by: Accessor,
        /// When it was raised.
        at_ns: u64,
    },
    /// Bytes moved between host and device.
    Migration {
        /// The region.
        region: RegionId,
        /// Offset of the first byte moved.
        offset: u64,
        /// Bytes moved.
        bytes: u64,
        /// Direction.
        dir: Direction,
        /// Why.
        cause: MigrationCause,
        /// Start of the transfer.
        start_ns: u64,
        /// End of the transfer.
        end_ns: u64,
    },
    /// Pages first touched on a side, without any transfer (fresh or discarded data).
    Populate {
        /// The region.
        region: RegionId,
        /// Offset.
        offset: u64,
        /// Bytes.
        bytes: u64,
        /// Side populated.
        on: crate::seam::Location,
    },
    /// Pages dropped without transfer (discard, or a read-mostly duplicate dropped).
    Drop {
        /// The region.
        region: RegionId,
        /// Offset.
        offset: u64,
        /// Bytes.
        bytes: u64,
        /// Side the copy was dropped from.
        from: crate::seam::Location,
    },
    /// A hint the advisor issued, with the reason it was chosen.
    Hint {
        /// What it asked for.
        hint: HintKind,
        /// The region.
        region: RegionId,
        /// Offset.
        offset: u64,
        /// Bytes.
        bytes: u64,
        /// Why (the planner's `Reason`).
        reason: String,
        /// Index of the kernel it was planned for (program order).
        kernel: u64,
    },
    /// How the advisor's forecast for a kernel compared with what the kernel used.
    Forecast {
        /// Index of the kernel (program order).
        kernel: u64,
        /// Regions forecast and used.
        hits: u64,
        /// Regions used but not forecast.
        misses: u64,
        /// Regions forecast but not used.
        false_alarms: u64,
    },
    /// The device finished the work issued before a region's free (a GPU backend reports
    /// it, since its host runs ahead of the device): from `at_ns` on, the region's addresses
    /// belong to whichever region gets them next (a pool reuses them).
    Released {
        /// The region.
        region: RegionId,
        /// When the last work issued before the free completed.
        at_ns: u64,
    },
    /// A region whose data was all staged came back into another buffer (a GPU backend's
    /// restore into pooled device memory): from `at_ns` on, its data is at `to`, and `from`
    /// belongs to whichever region the pool gives it to next.
    Relocated {
        /// The region.
        region: RegionId,
        /// Its address before.
        from: u64,
        /// Its address now.
        to: u64,
        /// When the host issued the move (the region's earlier work at `from` was done before
        /// its data was staged out).
        at_ns: u64,
    },
    /// The driver found pages moving back and forth between the processors (CUPTI's thrashing
    /// counter; the simulator does not report it).
    Thrashing {
        /// The region.
        region: RegionId,
        /// Offset of the first page concerned.
        offset: u64,
        /// Bytes concerned.
        bytes: u64,
        /// The processor whose accesses thrash (CUPTI flags thrashing in the CPU; otherwise the
        /// GPU).
        by: Accessor,
        /// When it was detected.
        at_ns: u64,
    },
    /// The driver held back a processor's faults on pages that thrash (CUPTI's throttling
    /// counter).
    Throttling {
        /// The region.
        region: RegionId,
        /// Offset of the first page concerned.
        offset: u64,
        /// The processor held back (CPU where CUPTI flags it, otherwise the GPU).
        by: Accessor,
        /// Start of the throttling.
        start_ns: u64,
        /// End of the throttling.
        end_ns: u64,
    },
    /// The driver mapped pages for remote access instead of moving them (CUPTI's remote-map
    /// counter).
    RemoteMap {
        /// The region.
        region: RegionId,
        /// Offset of the first page mapped.
        offset: u64,
        /// Bytes mapped.
        bytes: u64,
        /// Why.
        cause: RemoteMapCause,
        /// When.
        at_ns: u64,
    },
    /// The driver's page-table work on the device, as the backend queued it: no bytes cross
    /// the link, but on the H200 it runs far slower beside other such work (a population
    /// beside a stage-out's discards at a fifteenth of its rate alone), and the data it is for
    /// waits for it.
    PageWork {
        /// What it was.
        work: PageWork,
        /// Bytes of the pages.
        bytes: u64,
        /// When the device began it.
        start_ns: u64,
        /// When it was done.
        end_ns: u64,
    },
    /// A kernel ran.
    Kernel {
        /// Kernel name.
        name: String,
        /// Start on the compute stream.
        start_ns: u64,
        /// End, faults included.
        end_ns: u64,
        /// Time stalled on faults and on data in flight.
        stall_ns: u64,
        /// When the host issued it, on the same clock: `start_ns - issued_ns` is how far ahead
        /// of the device the host was. Absent where the backend does not know it (and in logs
        /// of schema version 7 and before).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        issued_ns: Option<u64>,
    },
}

impl MemEvent {
    /// `(region, offset, bytes, time)` of an event that says the GPU touched data that was not
    /// on the device: a GPU fault, or a migration to the device it caused. Population has no
    /// time here and CUPTI does not report it without GPU fault records.
    pub fn device_access(&self) -> Option<(RegionId, u64, u64, u64)> {
        match *self {
            MemEvent::Fault { region, offset, bytes, by: Accessor::Device, at_ns } => {
                Some((region, offset, bytes, at_ns))
            }
            MemEvent::Migration {
                region,
                offset,
                bytes,
                dir: Direction::H2D,
                cause: MigrationCause::Fault,
                start_ns,
                ..
            } => Some((region, offset, bytes, start_ns)),
            _ => None,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Accessor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "gpu" => Ok(Accessor::Device),
            "cpu" => Ok(Accessor::Host),
            other => Err(serde::de::Error::custom(format!("unknown accessor `{other}`; allowed: gpu, cpu"))),
        }
    }
}

impl serde::Serialize for Accessor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            Accessor::Device => "gpu",
            Accessor::Host => "cpu",
        })
    }
}

/// Kinds of backend call whose host time is accounted ([`HostTime`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostOp {
    /// Kernel launches, with the waits a backend puts before them and the room it makes for
    /// their data.
    Launch,
    /// Prefetches to the device.
    PrefetchToDevice,
    /// Prefetches to the host.
    PrefetchToHost,
    /// Discards.
    Discard,
    /// Memory advice.
    Advise,
    /// New managed allocations and buffers taken from the pool.
    Allocate,
    /// Host accesses (with the synchronisation before them).
    HostAccess,
    /// Stage-outs.
    StageOut,
}

/// Host time a backend's calls held the calling thread, by kind of call, in nanoseconds:
/// measured on a GPU, simulated on the simulator. On a GPU the host issues work
/// asynchronously, so this time is on the critical path whenever the device waits for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HostTime {
    /// See [`HostOp::Launch`].
    pub launch: u64,
    /// See [`HostOp::PrefetchToDevice`].
    pub prefetch_to_device: u64,
    /// See [`HostOp::PrefetchToHost`].
    pub prefetch_to_host: u64,
    /// See [`HostOp::Discard`].
    pub discard: u64,
    /// See [`HostOp::Advise`].
    pub advise: u64,
    /// See [`HostOp::Allocate`].
    pub allocate: u64,
    /// See [`HostOp::HostAccess`].
    pub host_access: u64,
    /// See [`HostOp::StageOut`].
    pub stage_out: u64,
}

impl HostOp {
    /// The kind of a prefetch `to` there.
    pub fn prefetch(to: crate::seam::Location) -> Self {
        match to {
            crate::seam::Location::Device(_) => HostOp::PrefetchToDevice,
            crate::seam::Location::Host => HostOp::PrefetchToHost,
        }
    }
}

impl HostTime {
    /// Adds `ns` to the counter of `op`.
    pub fn add(&mut self, op: HostOp, ns: u64) {
        *match op {
            HostOp::Launch => &mut self.launch,
            HostOp::PrefetchToDevice => &mut self.prefetch_to_device,
            HostOp::PrefetchToHost => &mut self.prefetch_to_host,
            HostOp::Discard => &mut self.discard,
            HostOp::Advise => &mut self.advise,
            HostOp::Allocate => &mut self.allocate,
            HostOp::HostAccess => &mut self.host_access,
            HostOp::StageOut => &mut self.stage_out,
        } += ns;
    }

    /// The counters with their names, in the order of [`HostOp`].
    pub fn parts(&self) -> [(&'static str, u64); 8] {
        [
            ("launch", self.launch),
            ("prefetch to device", self.prefetch_to_device),
            ("prefetch to host", self.prefetch_to_host),
            ("discard", self.discard),
            ("advise", self.advise),
            ("allocate", self.allocate),
            ("host access", self.host_access),
            ("stage out", self.stage_out),
        ]
    }

    /// Host time of the calls a policy makes (prefetch, discard, advise, stage out): the part
    /// of a replay's policy time that is not the policy's own work.
    pub fn hints(&self) -> u64 {
        self.prefetch_to_device + self.prefetch_to_host + self.discard + self.advise + self.stage_out
    }
}

/// Running counters of a backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BackendStats {
    /// Bytes moved host -> device, for any cause.
    pub h2d_bytes: u64,
    /// Bytes moved device -> host, for any cause.
    pub d2h_bytes: u64,
    /// GPU fault groups (one per contiguous run of faulting 64 KiB units in a kernel).
    pub gpu_faults: u64,
    /// GPU-faulted bytes that were migrated host -> device.
    pub gpu_fault_bytes: u64,
    /// CPU page faults (4 KiB pages migrated back to the host on a CPU touch).
    pub cpu_faults: u64,
    /// Bytes moved host -> device by prefetch.
    pub prefetch_h2d_bytes: u64,
    /// Bytes moved device -> host by prefetch (planned eviction).
    pub prefetch_d2h_bytes: u64,
    /// Bytes the driver evicted device -> host on its own to make room.
    pub evicted_bytes: u64,
    /// Bytes the driver took off the device on its own to make room, copied back or not
    /// (read-mostly duplicates are dropped): a policy's residency account is stale when this
    /// moves.
    pub driver_dropped_bytes: u64,
    /// Bytes copied device -> pinned staging buffers (staged evictions).
    pub staged_out_bytes: u64,
    /// Bytes copied back from the staging buffers (to the device, or to the host on a host
    /// access).
    pub staged_in_bytes: u64,
    /// Of the staged-out bytes, those evicted without a copy: their staging copy was still
    /// valid (restored and not written since).
    pub staged_clean_bytes: u64,
    /// Bytes written back device -> staging memory ahead of their eviction, the data staying
    /// on the device ([`crate::seam::Destination::HostCopy`]).
    pub written_back_bytes: u64,
    /// Bytes dropped by discard.
    pub discarded_bytes: u64,
    /// Bytes a prefetch to the device brought (moved or populated there).
    pub prefetch_arrived_bytes: u64,
    /// Of those, bytes a kernel then used (before they left the device).
    pub prefetch_used_bytes: u64,
    /// Of the used bytes, those already on the device when the kernel was ready to run.
    pub prefetch_timely_bytes: u64,
    /// Bytes that crossed to the device as read-mostly duplicates (by prefetch or fault).
    pub duplicated_bytes: u64,
    /// Bytes a kernel read or wrote remotely (host-resident, mapped).
    pub remote_bytes: u64,
    /// Prefetch calls made (a batch counts as one call per range).
    pub prefetch_ranges: u64,
    /// Kernels launched.
    pub kernels: u64,
    /// Nanoseconds kernels stalled on faults or waited for data in flight.
    pub stall_ns: u64,
    /// Device-resident bytes of managed data now.
    pub device_bytes: u64,
    /// Highest device-resident bytes seen.
    pub peak_device_bytes: u64,
    /// Highest device memory the backend held at once: resident data, plus the pages of freed
    /// buffers kept for reuse and pages taken over for restores still to come. What a GPU of
    /// the budget's size would have to hold; `peak_device_bytes` counts the data alone.
    pub peak_footprint_bytes: u64,
    /// Managed buffers allocated anew because none of the size was pooled (on a GPU each is
    /// a `cuMemAllocManaged`); regions in blocks (the device arena, virtual memory) take none.
    pub new_buffers: u64,
    /// Host time the backend's calls held the calling thread.
    pub host: HostTime,
    /// Of it, the parts of moving data that a GPU backend times apart.
    pub move_parts: MoveHostTime,
    /// Pinned staging memory held now (it grows on demand and is kept until the backend
    /// closes). Counted by the CUDA backend's managed memory; zero where a backend has no
    /// staging pool (the simulator models its staging without pinning any, and the blocks'
    /// host memory is their placement, not staging).
    pub staging_pinned_bytes: u64,
}

/// Host time inside the calls that move data, by part, ns: which driver calls an eviction or a
/// restore costs the host (`HostTime` counts each call whole). Measured by the CUDA backend's
/// managed memory; zero where a backend does not time them apart (the simulator charges each
/// call whole, from its profile).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MoveHostTime {
    /// Issuing the discards of staged evictions whose copies are done.
    pub discards: u64,
    /// Making room for data coming in (inside the calls that needed it).
    pub room: u64,
    /// Taking staging slots for evictions (giving up clean copies where none is free).
    pub slots: u64,
    /// Pinning more staging memory where no slot was free (`cuMemHostAlloc`, 64 MiB at a
    /// time, while staging grows to what the program keeps off the device).
    pub pinning: u64,
    /// Ordering evictions' copies after the kernels that used the data.
    pub order: u64,
    /// Swapping regions out whole into pooled buffers.
    pub swaps: u64,
    /// Enqueueing evictions' copies out.
    pub copies_out: u64,
    /// Holding an idle stream ahead of a prefetch call with a short kernel (asking whether it
    /// is idle included), so that the driver defers the call's page work rather than doing it
    /// inside the call.
    pub holds: u64,
    /// Populating fresh pages and prefetching host-resident data on the device.
    pub populate: u64,
    /// Repopulating the discarded pages of staged data coming back.
    pub repopulate: u64,
    /// Enqueueing restores' copies in.
    pub copies_in: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names reports use are the log's own.
    #[test]
    fn cause_names_are_the_serialized_ones() {
        use MigrationCause as M;
        for c in [M::Fault, M::Prefetch, M::Eviction, M::Coherence, M::Staging] {
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{}\"", c.name()));
        }
        for w in [PageWork::Populate, PageWork::Repopulate, PageWork::Discard] {
            assert_eq!(serde_json::to_string(&w).unwrap(), format!("\"{}\"", w.name()));
        }
        use RemoteMapCause as R;
        for c in [R::Coherence, R::Thrashing, R::Policy, R::OutOfMemory, R::Eviction, R::Unknown] {
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{}\"", c.name()));
        }
    }
}
