//! Whole-trace statistics in one streaming pass: sizes, compute floor, reuse.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use serde::Serialize;

use super::{TraceEvent, TraceReader};
use crate::backend::page_round;
use crate::error::Result;

/// A set of region ids (trace ids).
pub type RegionIds = HashSet<u64>;

/// Serialises a set as its size.
fn count<S: serde::Serializer>(set: &RegionIds, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_u64(set.len() as u64)
}

/// What a trace contains.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TraceStats {
    /// Events after the header.
    pub events: u64,
    /// Regions allocated.
    pub regions: u64,
    /// Bytes allocated over the whole trace.
    pub allocated_bytes: u64,
    /// Most bytes live at once.
    pub peak_live_bytes: u64,
    /// Most bytes live at once, each region rounded up to 4 KiB pages: what a device holding
    /// the whole working set needs, and what percent budgets of a replay refer to.
    pub peak_live_page_bytes: u64,
    /// Kernel launches.
    pub kernels: u64,
    /// Host events.
    pub host_events: u64,
    /// Step markers.
    pub steps: u64,
    /// Sum of kernel `dur_ns`: the time with all data resident.
    pub compute_floor_ns: u64,
    /// Bytes read by kernels and the host (sum of access lengths with r or rw).
    pub bytes_read: u64,
    /// Bytes written (sum of access lengths with w or rw).
    pub bytes_written: u64,
    /// Largest sum of access lengths of one kernel: the smallest budget that avoids faulting
    /// inside a kernel.
    pub max_kernel_bytes: u64,
    /// Regions that some event accesses.
    pub accessed_regions: u64,
    /// Accesses per accessed region, on average.
    pub accesses_per_region: f64,
    /// Bytes accessed over the sizes of the regions accessed: how many times, on average, each
    /// byte is touched. High reuse is what keeping data resident pays for.
    pub reuse_factor: f64,
    /// Regions whose first access reads them: they hold data from before the trace, which
    /// starts on the host (`spec/trace-v1.md`). Their ids, for a replay to put that data on
    /// the host as they are allocated; reports give their number (`pre_existing_regions`).
    #[serde(rename = "pre_existing_regions", serialize_with = "count")]
    pub pre_existing: RegionIds,
}

impl TraceStats {
    /// Reads the whole trace once.
    pub fn compute(reader: TraceReader) -> Result<Self> {
        let mut s = TraceStats::default();
        let (mut live, mut live_pages) = (0u64, 0u64);
        // Live regions only (size, touched yet?): memory stays bounded by what is live.
        let mut regions: HashMap<u64, (u64, bool)> = HashMap::default();
        let mut accessed_region_bytes = 0u64;
        let mut accesses = 0u64;
        for event in reader {
            let event = event?;
            s.events += 1;
            match &event {
                TraceEvent::Alloc { id, bytes, .. } => {
                    s.regions += 1;
                    s.allocated_bytes += bytes;
                    live += bytes;
                    live_pages += page_round(*bytes);
                    s.peak_live_bytes = s.peak_live_bytes.max(live);
                    s.peak_live_page_bytes = s.peak_live_page_bytes.max(live_pages);
                    regions.insert(*id, (*bytes, false));
                }
                TraceEvent::Free { id } => {
                    let bytes = regions.remove(id).map(|(b, _)| b).unwrap_or(0);
                    live -= bytes;
                    live_pages -= page_round(bytes);
                }
                TraceEvent::Kernel { dur_ns, acc, .. } => {
                    s.kernels += 1;
                    s.compute_floor_ns += dur_ns;
                    s.max_kernel_bytes = s.max_kernel_bytes.max(acc.iter().map(|a| a.len).sum());
                }
                TraceEvent::Host { .. } => s.host_events += 1,
                TraceEvent::Step { .. } => s.steps += 1,
            }
            for a in event.accesses() {
                accesses += 1;
                if a.mode.reads() {
                    s.bytes_read += a.len;
                }
                if a.mode.writes() {
                    s.bytes_written += a.len;
                }
                if let Some((bytes, touched)) = regions.get_mut(&a.id) {
                    if !*touched {
                        *touched = true;
                        s.accessed_regions += 1;
                        accessed_region_bytes += *bytes;
                        if a.mode.reads() {
                            s.pre_existing.insert(a.id);
                        }
                    }
                }
            }
        }
        s.accesses_per_region =
            if s.accessed_regions == 0 { 0.0 } else { accesses as f64 / s.accessed_regions as f64 };
        let accessed: u64 = s.bytes_read.max(s.bytes_written);
        s.reuse_factor =
            if accessed_region_bytes == 0 { 0.0 } else { accessed as f64 / accessed_region_bytes as f64 };
        Ok(s)
    }
}
