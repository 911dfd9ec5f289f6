//! What a replay reports.

use serde::Serialize;

use crate::backend::BackendKind;

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

/// The outcome of one replay. Serialised as one JSON object by `unimem replay --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    /// The trace file.
    pub trace: String,
    /// Which backend ran it.
    pub backend: BackendKind,
    /// The backend in words (device or calibration profile).
    pub backend_detail: String,
    /// The policy.
    pub policy: String,
    /// Device bytes the working set could use.
    pub budget_bytes: u64,
    /// Time to run the trace, transfers included.
    pub time_ns: u64,
    /// Sum of kernel times: the time with all data resident.
    pub compute_floor_ns: u64,
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
    /// Trace events replayed.
    pub events: u64,
    /// Kernels replayed.
    pub kernels: u64,
    /// Per-step times.
    pub steps: Vec<StepReport>,
    /// Host wall-clock time the replay took (simulation cost, not simulated time).
    pub wall_ns: u64,
}

impl ReplayReport {
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
