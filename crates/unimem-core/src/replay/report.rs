//! What a replay reports.

use crate::bound::LinkBound;
use crate::policy::Learning;
use serde::Serialize;

use crate::seam::{BackendKind, HostTime};

/// Time and floor of one step (between `step` markers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StepReport {
    /// The step's index (from its marker).
    pub index: u64,
    /// Time the step took on the backend clock.
    pub time_ns: u64,
    /// Sum of its kernels' `dur_ns`.
    pub compute_floor_ns: u64,
}

/// How well prefetching worked. Ratios are 0 when there was nothing to measure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PrefetchMetrics {
    /// Accuracy: of the bytes prefetches brought to the device, the share a kernel used
    /// before they left.
    pub accuracy: f64,
    /// Coverage: of the bytes kernels needed from elsewhere (prefetched and used, or migrated
    /// by faults), the share that arrived by prefetch.
    pub coverage: f64,
    /// Timeliness: of the prefetched bytes used, the share already on the device when their
    /// kernel was ready to run (the rest made it wait).
    pub timeliness: f64,
    /// Fault units (64 KiB on the H200) served by a timely prefetch instead of a fault.
    pub faults_avoided: u64,
    /// Bytes prefetches brought to the device.
    pub arrived_bytes: u64,
    /// Of those, bytes used.
    pub used_bytes: u64,
}

impl PrefetchMetrics {
    /// Metrics from backend counters and the fault unit size.
    pub fn from_stats(s: &crate::seam::BackendStats, fault_unit_bytes: u64) -> Self {
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        Self {
            accuracy: ratio(s.prefetch_used_bytes, s.prefetch_arrived_bytes),
            coverage: ratio(s.prefetch_used_bytes, s.prefetch_used_bytes + s.gpu_fault_bytes),
            timeliness: ratio(s.prefetch_timely_bytes, s.prefetch_used_bytes),
            faults_avoided: s.prefetch_timely_bytes / fault_unit_bytes.max(1),
            arrived_bytes: s.prefetch_arrived_bytes,
            used_bytes: s.prefetch_used_bytes,
        }
    }
}

/// Bytes by placement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PlacementBytes {
    /// Migrated to the device (by prefetch or fault), duplicates excluded.
    pub migrated: u64,
    /// Copied to the device as read-mostly duplicates (the host copy stayed valid).
    pub duplicated: u64,
    /// Read or written by kernels in place in host memory (remote mapping).
    pub remote: u64,
    /// Dropped without a copy (dead data).
    pub discarded: u64,
    /// Evicted by a copy into the pinned staging buffers instead of a migration.
    pub staged: u64,
    /// Of those, evicted without a copy: the staging copy was still valid.
    pub staged_clean: u64,
    /// Written back to the staging memory ahead of their eviction, staying on the device.
    pub written_back: u64,
}

impl PlacementBytes {
    /// Placement bytes from backend counters.
    pub fn from_stats(s: &crate::seam::BackendStats) -> Self {
        Self {
            migrated: s.h2d_bytes.saturating_sub(s.duplicated_bytes + s.staged_in_bytes),
            duplicated: s.duplicated_bytes,
            remote: s.remote_bytes,
            discarded: s.discarded_bytes,
            staged: s.staged_out_bytes,
            staged_clean: s.staged_clean_bytes,
            written_back: s.written_back_bytes,
        }
    }
}

/// The outcome of one replay. Serialised as one JSON object by `unimem replay --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    /// The trace file.
    pub trace: String,
    /// Which backend ran it.
    pub backend: BackendKind,
    /// The backend in words (device or calibration profile).
    pub backend_detail: String,
    /// Where the backend kept regions, where its caller knows (`unimem replay`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<crate::config::MemoryKind>,
    /// The policy.
    pub policy: String,
    /// Device bytes the working set could use.
    pub budget_bytes: u64,
    /// Time to run the trace, transfers included.
    pub time_ns: u64,
    /// Sum of kernel times: the time with all data resident.
    pub compute_floor_ns: u64,
    /// Sum of the program's host times between its kernels that the replay held the kernels
    /// to (a trace a runtime recorded on a GPU carries them; 0 for one without, or with
    /// `replay.program_host_time` off). A replay of a program whose host issued its kernels
    /// more slowly than they ran takes at least this long.
    pub program_host_ns: u64,
    /// Bytes moved host -> device.
    pub h2d_bytes: u64,
    /// Bytes moved device -> host.
    pub d2h_bytes: u64,
    /// GPU fault groups.
    pub gpu_faults: u64,
    /// CPU page faults.
    pub cpu_faults: u64,
    /// Most device-resident bytes at once.
    pub peak_resident_bytes: u64,
    /// Most device memory held at once: resident data plus the pages of freed buffers kept
    /// for reuse and pages taken over for restores to come (see
    /// [`BackendStats::peak_footprint_bytes`](crate::seam::BackendStats::peak_footprint_bytes)).
    pub peak_footprint_bytes: u64,
    /// Of `h2d_bytes`, moved by prefetch.
    pub prefetch_h2d_bytes: u64,
    /// Of `d2h_bytes`, moved by prefetch (planned eviction).
    pub prefetch_d2h_bytes: u64,
    /// Of `d2h_bytes`, evicted by the driver under capacity pressure.
    pub evicted_bytes: u64,
    /// Bytes dropped by discard.
    pub discarded_bytes: u64,
    /// Time kernels stalled on faults and data in flight.
    pub stall_ns: u64,
    /// How well prefetching worked.
    pub prefetch: PrefetchMetrics,
    /// Bytes by where they were placed.
    pub placement: PlacementBytes,
    /// Trace events replayed.
    pub events: u64,
    /// Kernels replayed.
    pub kernels: u64,
    /// Per-step times.
    pub steps: Vec<StepReport>,
    /// Host wall-clock time the replay took (simulation cost, not simulated time).
    pub wall_ns: u64,
    /// Host time the policy took (planning, learning, issuing hints): on a GPU it sits
    /// between kernel launches, so it is on the critical path when the device waits.
    pub policy_ns: u64,
    /// Host time the backend's calls held the replaying thread, by kind of call (measured on
    /// a GPU, simulated on the simulator). The prefetch, discard, advise and stage-out calls
    /// are the policy's and count in `policy_ns` too.
    #[serde(rename = "backend_host_ns")]
    pub backend_host: HostTime,
    /// What the policy learned from faults on accesses it was not told of (zero for policies
    /// that do not learn).
    pub learning: Learning,
    /// The link-limit bound at this budget ([`crate::bound`]), where the caller worked it out
    /// (it needs the whole trace: `unimem replay` reads it once before replaying).
    #[serde(skip)]
    pub bound: Option<LinkBound>,
}

impl ReplayReport {
    /// Time over the link-limit bound, where it is known.
    pub fn over_bound(&self) -> Option<f64> {
        self.bound.filter(|b| b.bound_ns > 0).map(|b| self.time_ns as f64 / b.bound_ns as f64)
    }

    /// Time over the phase bound ([`crate::bound::LinkBound::phase_ns`]), where it is known.
    pub fn over_phase_bound(&self) -> Option<f64> {
        self.bound.filter(|b| b.phase_ns > 0).map(|b| self.time_ns as f64 / b.phase_ns as f64)
    }

    /// Time over the compute floor (1.0 = as fast as with everything resident).
    pub fn over_floor(&self) -> f64 {
        if self.compute_floor_ns == 0 {
            return 1.0;
        }
        self.time_ns as f64 / self.compute_floor_ns as f64
    }

    /// Replay throughput: events per second of host time.
    pub fn events_per_sec(&self) -> f64 {
        self.events as f64 / (self.wall_ns.max(1) as f64 / 1e9)
    }
}
