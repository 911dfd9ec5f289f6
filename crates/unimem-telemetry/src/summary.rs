//! Per-region totals of faults and migrations, sorted by cost, and log-wide totals in the
//! spirit of nvprof's unified-memory summary.

use std::collections::BTreeMap;

use unimem_core::seam::{Direction, Location, MemEvent, MigrationCause};
use unimem_core::{Accessor, RegionId};

/// What happened to one region.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RegionSummary {
    /// Fault groups raised on it (GPU and CPU).
    pub faults: u64,
    /// Bytes moved to the device.
    pub h2d_bytes: u64,
    /// Bytes moved to the host.
    pub d2h_bytes: u64,
    /// Of `d2h_bytes`, moved by eviction.
    pub evicted_bytes: u64,
    /// Bytes moved to the device again after the region had been moved out.
    pub refetched_bytes: u64,
    /// Thrashing the driver reported on it (events; CUPTI only).
    pub thrashing: u64,
    /// Time the driver held back faults on it because it thrashed (CUPTI only).
    pub throttled_ns: u64,
    /// Bytes the driver mapped remotely instead of moving (CUPTI only).
    pub remote_mapped_bytes: u64,
    /// Time kernels waited for its fault-driven migrations.
    pub stall_ns: u64,
    /// Nanoseconds its transfers occupied the link.
    pub transfer_ns: u64,
}

/// The driver's page-table work of one kind over a log ([`MemEvent::PageWork`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PageWorkTotals {
    /// Pieces of work (calls the backend queued).
    pub count: u64,
    /// Bytes of pages.
    pub bytes: u64,
    /// Device time they took, summed.
    pub ns: u64,
    /// Of that time, the part while a copy was on the link.
    pub beside_copies_ns: u64,
}

/// Totals over a log.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Totals {
    /// GPU fault groups.
    pub gpu_faults: u64,
    /// CPU faults.
    pub cpu_faults: u64,
    /// Bytes to the device.
    pub h2d_bytes: u64,
    /// Bytes to the host.
    pub d2h_bytes: u64,
    /// Bytes by cause of migration (`fault`, `prefetch`, `eviction`, `coherence`), largest first.
    pub by_cause: Vec<(String, u64)>,
    /// Bytes populated on the device without a transfer.
    pub populated_device_bytes: u64,
    /// Bytes dropped without a transfer.
    pub dropped_bytes: u64,
    /// Thrashing the driver reported (events).
    pub thrashing: u64,
    /// Time the driver held back faults on thrashing pages.
    pub throttled_ns: u64,
    /// Bytes the driver mapped remotely, by cause (`thrashing`, `policy`, ...).
    pub remote_mapped: BTreeMap<String, u64>,
    /// The most live bytes on the device at once ([`crate::resident_series`]); set by
    /// [`Summary::of_log`], which has the frees.
    pub peak_resident_bytes: u64,
    /// The driver's page-table work the backend timed, by kind (`populate`, `repopulate`,
    /// `discard`; a GPU backend times it, the simulator models it).
    pub page_work: BTreeMap<String, PageWorkTotals>,
    /// Kernels and the time they stalled.
    pub kernels: u64,
    /// Sum of kernel stalls.
    pub kernel_stall_ns: u64,
    /// How busy the link was each way, and both at once.
    pub link: LinkUse,
    /// Of the kernels' stalls, the time no copy was on the link (no migration of bytes either
    /// way): those kernels waited for something else, the host issuing their data, the
    /// driver's own work (populations, repopulations) or events.
    pub stall_link_idle_ns: u64,
    /// Time the device had no kernel to run between one kernel's end and the next one's start
    /// (its slice begins when the compute stream reaches it): the host had not issued it yet,
    /// planning or launching, or the stream waited ahead of it (in the device arena, for the
    /// work holding chunks lent to outputs prefetched for it). Kernels in log order, as each
    /// backend reports them.
    pub device_idle_ns: u64,
    /// How far ahead of the device the host issued its kernels, where the log says when it
    /// issued each ([`MemEvent::Kernel`]'s `issued_ns`).
    pub host_lead: Option<HostLead>,
    /// The advisor's hints by kind (`prefetch`, `evict`, ...): count and bytes.
    pub hints: BTreeMap<String, (u64, u64)>,
    /// The advisor's forecasts, scored against what each kernel used: regions forecast and used,
    /// used but not forecast, forecast but not used.
    pub forecast_hits: u64,
    /// Used but not forecast.
    pub forecast_misses: u64,
    /// Forecast but not used.
    pub forecast_false_alarms: u64,
}

/// How far ahead of the device the host issued kernels: for each kernel, the kernels issued
/// before it that had not ended yet (the device's queue it joined), and the time from its
/// issue to its start. A lead near zero means the device waited on the host, and that data a
/// kernel's plan sends out or brings in starts moving only as the device reaches it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HostLead {
    /// Kernels with an issue time.
    pub kernels: u64,
    /// Median of the kernels queued ahead at each issue.
    pub median_kernels: u64,
    /// 10th percentile of them.
    pub p10_kernels: u64,
    /// Median time from a kernel's issue to its start on the device.
    pub median_ns: u64,
    /// 10th percentile of it.
    pub p10_ns: u64,
}

/// The link's use over a log: a direction is busy while at least one copy of bytes that way
/// is in flight (copies on several streams at once count once), so `bytes / busy_ns` is the
/// rate the link gave the copies while it had any, comparable to the probe's pinned-copy rate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkUse {
    /// To the device.
    pub h2d: LinkDirection,
    /// To the host.
    pub d2h: LinkDirection,
    /// Time both directions were busy at once.
    pub both_busy_ns: u64,
    /// Of the kernels' stalls, the time a copy to the device was in flight: kernels waiting
    /// on the in-link (or on work behind it), where more rate or earlier copies would help.
    pub stall_h2d_busy_ns: u64,
}

/// One direction of the link over a log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkDirection {
    /// Bytes copied.
    pub bytes: u64,
    /// Time at least one copy was in flight.
    pub busy_ns: u64,
}

impl LinkDirection {
    /// Bytes per second while busy (`None` where the direction never was).
    pub fn rate(&self) -> Option<f64> {
        (self.busy_ns > 0).then(|| self.bytes as f64 * 1e9 / self.busy_ns as f64)
    }
}

/// A kernel's issue, start and end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Issued {
    issued_ns: u64,
    start_ns: u64,
    end_ns: u64,
}

impl HostLead {
    /// The lead over kernels in issue order (`None` for none).
    fn of(kernels: &[Issued]) -> Option<Self> {
        if kernels.is_empty() {
            return None;
        }
        // Ends made monotone (one compute stream ends kernels in order): a kernel is still
        // queued at an issue while it, or one before it, has not ended.
        let mut ends = Vec::with_capacity(kernels.len());
        let mut latest = 0;
        let (mut queued, mut ns) = (Vec::new(), Vec::new());
        for (i, k) in kernels.iter().enumerate() {
            let done = ends.partition_point(|&e| e <= k.issued_ns);
            queued.push((i - done) as u64);
            ns.push(k.start_ns.saturating_sub(k.issued_ns));
            latest = k.end_ns.max(latest);
            ends.push(latest);
        }
        let pick = |v: &mut Vec<u64>, q: usize| {
            v.sort_unstable();
            v[(v.len() - 1) * q / 100]
        };
        Some(HostLead {
            kernels: kernels.len() as u64,
            median_kernels: pick(&mut queued, 50),
            p10_kernels: pick(&mut queued, 10),
            median_ns: pick(&mut ns, 50),
            p10_ns: pick(&mut ns, 10),
        })
    }
}

/// Totals by region and over the log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Region -> totals.
    pub regions: BTreeMap<RegionId, RegionSummary>,
    /// Log-wide totals.
    pub totals: Totals,
    causes: BTreeMap<&'static str, u64>,
    last_kernel_end: Option<u64>,
    /// Kernels' stalls, and copies on the link by direction (to the device, to the host), as
    /// intervals (start, end) in ns.
    stalls: Vec<(u64, u64)>,
    h2d: Vec<(u64, u64)>,
    d2h: Vec<(u64, u64)>,
    /// Page work by kind, as intervals (start, end).
    page_work: BTreeMap<&'static str, Vec<(u64, u64)>>,
    /// Kernels with an issue time, in log order.
    issued: Vec<Issued>,
}

/// The union of `intervals`, sorted and merged.
fn union(mut intervals: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    intervals.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
    for (s, e) in intervals {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Time a list of disjoint intervals covers.
fn covered(intervals: &[(u64, u64)]) -> u64 {
    intervals.iter().map(|(a, b)| b - a).sum()
}

/// Time two sorted, merged interval lists share.
fn shared(a: &[(u64, u64)], b: &[(u64, u64)]) -> u64 {
    let (mut i, mut j, mut total) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        total += a[i].1.min(b[j].1).saturating_sub(a[i].0.max(b[j].0));
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}

impl Summary {
    /// Summarises a log: its events, and its resident bytes over time.
    pub fn of_log(log: &crate::Log) -> Self {
        let mut s = Self::of(&log.events);
        s.totals.peak_resident_bytes = crate::peak_resident_bytes(&crate::resident_series(log));
        s
    }

    /// Summarises `events`.
    pub fn of(events: &[MemEvent]) -> Self {
        let mut s = Summary::default();
        events.iter().for_each(|e| s.add(e));
        // Causes ranked once, from the running totals.
        let mut by: Vec<(String, u64)> = s.causes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        by.sort_by_key(|(k, v)| (std::cmp::Reverse(*v), k.clone()));
        s.totals.by_cause = by;
        let stalls = union(std::mem::take(&mut s.stalls));
        let (h2d, d2h) = (union(std::mem::take(&mut s.h2d)), union(std::mem::take(&mut s.d2h)));
        let copies = union(h2d.iter().chain(&d2h).copied().collect());
        s.totals.stall_link_idle_ns = covered(&stalls) - shared(&stalls, &copies);
        let link = &mut s.totals.link;
        link.h2d.busy_ns = covered(&h2d);
        link.d2h.busy_ns = covered(&d2h);
        link.both_busy_ns = shared(&h2d, &d2h);
        link.stall_h2d_busy_ns = shared(&stalls, &h2d);
        for (kind, spans) in std::mem::take(&mut s.page_work) {
            let t = s.totals.page_work.entry(kind.to_string()).or_default();
            t.beside_copies_ns = shared(&union(spans), &copies);
        }
        s.totals.host_lead = HostLead::of(&std::mem::take(&mut s.issued));
        s
    }

    fn add(&mut self, event: &MemEvent) {
        match *event {
            MemEvent::Fault { region, by, .. } => {
                self.regions.entry(region).or_default().faults += 1;
                match by {
                    Accessor::Device => self.totals.gpu_faults += 1,
                    Accessor::Host => self.totals.cpu_faults += 1,
                }
            }
            MemEvent::Migration { region, bytes, dir, cause, start_ns, end_ns, .. } => {
                let r = self.regions.entry(region).or_default();
                match dir {
                    Direction::H2D => {
                        if r.d2h_bytes > 0 {
                            r.refetched_bytes += bytes;
                        }
                        r.h2d_bytes += bytes;
                        self.totals.h2d_bytes += bytes;
                    }
                    Direction::D2H => {
                        r.d2h_bytes += bytes;
                        self.totals.d2h_bytes += bytes;
                    }
                }
                if cause == MigrationCause::Eviction {
                    r.evicted_bytes += bytes;
                }
                if cause == MigrationCause::Fault {
                    r.stall_ns += end_ns - start_ns;
                }
                r.transfer_ns += end_ns - start_ns;
                if bytes > 0 {
                    match dir {
                        Direction::H2D => {
                            self.totals.link.h2d.bytes += bytes;
                            self.h2d.push((start_ns, end_ns));
                        }
                        Direction::D2H => {
                            self.totals.link.d2h.bytes += bytes;
                            self.d2h.push((start_ns, end_ns));
                        }
                    }
                }
                *self.causes.entry(cause.name()).or_default() += bytes;
            }
            MemEvent::Populate { bytes, on: Location::DEVICE, .. } => {
                self.totals.populated_device_bytes += bytes
            }
            MemEvent::Populate { .. } | MemEvent::Released { .. } | MemEvent::Relocated { .. } => {}
            MemEvent::Drop { bytes, .. } => self.totals.dropped_bytes += bytes,
            MemEvent::Thrashing { region, .. } => {
                self.regions.entry(region).or_default().thrashing += 1;
                self.totals.thrashing += 1;
            }
            MemEvent::Throttling { region, start_ns, end_ns, .. } => {
                let ns = end_ns.saturating_sub(start_ns);
                self.regions.entry(region).or_default().throttled_ns += ns;
                self.totals.throttled_ns += ns;
            }
            MemEvent::RemoteMap { region, bytes, cause, .. } => {
                self.regions.entry(region).or_default().remote_mapped_bytes += bytes;
                *self.totals.remote_mapped.entry(cause.name().to_string()).or_default() += bytes;
            }
            MemEvent::Kernel { stall_ns, start_ns, end_ns, issued_ns, .. } => {
                if let Some(issued_ns) = issued_ns {
                    self.issued.push(Issued { issued_ns, start_ns, end_ns });
                }
                self.totals.kernels += 1;
                self.totals.kernel_stall_ns += stall_ns;
                if stall_ns > 0 {
                    self.stalls.push((start_ns, start_ns + stall_ns));
                }
                if let Some(last) = self.last_kernel_end {
                    self.totals.device_idle_ns += start_ns.saturating_sub(last);
                }
                self.last_kernel_end = Some(self.last_kernel_end.map_or(end_ns, |l| l.max(end_ns)));
            }
            MemEvent::PageWork { work, bytes, start_ns, end_ns } => {
                let kind: &'static str = work.name();
                let t = self.totals.page_work.entry(kind.to_string()).or_default();
                t.count += 1;
                t.bytes += bytes;
                t.ns += end_ns.saturating_sub(start_ns);
                self.page_work.entry(kind).or_default().push((start_ns, end_ns));
            }
            MemEvent::Hint { ref hint, bytes, .. } => {
                let h = self.totals.hints.entry(hint.to_string()).or_default();
                h.0 += 1;
                h.1 += bytes;
            }
            MemEvent::Forecast { hits, misses, false_alarms, .. } => {
                self.totals.forecast_hits += hits;
                self.totals.forecast_misses += misses;
                self.totals.forecast_false_alarms += false_alarms;
            }
        }
    }

    /// Regions by the time their transfers took plus the time the driver throttled their
    /// faults, most expensive first.
    pub fn by_cost(&self) -> Vec<(RegionId, RegionSummary)> {
        let mut v: Vec<_> = self.regions.iter().map(|(k, v)| (*k, *v)).collect();
        v.sort_by_key(|(id, r)| (std::cmp::Reverse(r.transfer_ns + r.throttled_ns), *id));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventLog, Log};
    use unimem_core::backends::sim::SimBackend;
    use unimem_core::{AccessMode, CostModel, KernelLaunch, MemoryBackend, MemoryBackendExt, RangeAccess};

    #[test]
    fn device_idle_is_the_gaps_between_kernels() {
        let k = |start_ns, end_ns| MemEvent::Kernel {
            name: "k".into(),
            start_ns,
            end_ns,
            stall_ns: 0,
            issued_ns: None,
        };
        // Back to back, then 30 ns with nothing queued, then 5 more.
        let s = Summary::of(&[k(0, 100), k(100, 150), k(180, 200), k(205, 300)]);
        assert_eq!((s.totals.kernels, s.totals.device_idle_ns), (4, 35));
        assert_eq!(Summary::of(&[k(10, 20)]).totals.device_idle_ns, 0, "one kernel has no gap");
    }

    #[test]
    fn the_host_lead_is_the_queue_each_kernel_joined_and_its_wait_to_start() {
        let k = |issued_ns, start_ns, end_ns| MemEvent::Kernel {
            name: "k".into(),
            start_ns,
            end_ns,
            stall_ns: 0,
            issued_ns: Some(issued_ns),
        };
        // Issued at 0, 10, 20, 30 and 400; each runs 100 ns once the one before ends. At 30,
        // the first has not ended: three queued ahead. The last finds the device idle.
        let s =
            Summary::of(&[k(0, 0, 100), k(10, 100, 200), k(20, 200, 300), k(30, 300, 350), k(400, 400, 500)]);
        let lead = s.totals.host_lead.expect("issue times");
        assert_eq!(lead.kernels, 5);
        // Queued ahead: 0, 1, 2, 3, 0; waits to start: 0, 90, 180, 270, 0.
        assert_eq!((lead.median_kernels, lead.p10_kernels), (1, 0));
        assert_eq!((lead.median_ns, lead.p10_ns), (90, 0));
        let plain =
            MemEvent::Kernel { name: "k".into(), start_ns: 0, end_ns: 1, stall_ns: 0, issued_ns: None };
        assert_eq!(Summary::of(&[plain]).totals.host_lead, None, "no issue times, no lead");
    }

    #[test]
    fn stalls_with_no_copy_on_the_link_are_counted_apart() {
        let k = |start_ns, stall_ns| MemEvent::Kernel {
            name: "k".into(),
            start_ns,
            end_ns: start_ns + stall_ns + 10,
            stall_ns,
            issued_ns: None,
        };
        let copy = |start_ns, end_ns, bytes| MemEvent::Migration {
            region: RegionId(1),
            offset: 0,
            bytes,
            dir: Direction::H2D,
            cause: MigrationCause::Prefetch,
            start_ns,
            end_ns,
        };
        // Stalls 0-100 and 200-300; copies 50-120 and 150-250 (overlapping ones merge), and a
        // population (no bytes) over 250-300, which is not a copy.
        let s = Summary::of(&[
            k(0, 100),
            copy(50, 120, 4096),
            copy(150, 220, 4096),
            copy(180, 250, 4096),
            k(200, 100),
            copy(250, 300, 0),
        ]);
        assert_eq!(s.totals.kernel_stall_ns, 200);
        assert_eq!(s.totals.stall_link_idle_ns, 50 + 50, "0-50 and 250-300 had no copy");
        assert_eq!(Summary::of(&[k(0, 0)]).totals.stall_link_idle_ns, 0, "no stall, nothing idle");
    }

    #[test]
    fn the_link_is_busy_each_way_while_any_copy_that_way_is_in_flight() {
        let copy = |dir, start_ns, end_ns, bytes| MemEvent::Migration {
            region: RegionId(1),
            offset: 0,
            bytes,
            dir,
            cause: MigrationCause::Prefetch,
            start_ns,
            end_ns,
        };
        let stall =
            MemEvent::Kernel { name: "k".into(), start_ns: 0, end_ns: 200, stall_ns: 150, issued_ns: None };
        // In: 0-100 and 50-150 on two streams (busy 150, not 200), 1,000 + 2,000 bytes; a
        // population (no bytes) over 300-400 is no copy. Out: 120-220, 500 bytes.
        let s = Summary::of(&[
            copy(Direction::H2D, 0, 100, 1000),
            copy(Direction::H2D, 50, 150, 2000),
            copy(Direction::H2D, 300, 400, 0),
            copy(Direction::D2H, 120, 220, 500),
            stall,
        ]);
        let l = s.totals.link;
        assert_eq!((l.h2d.bytes, l.h2d.busy_ns), (3000, 150));
        assert_eq!((l.d2h.bytes, l.d2h.busy_ns), (500, 100));
        assert_eq!(l.both_busy_ns, 30, "120-150");
        assert_eq!(l.stall_h2d_busy_ns, 150, "the stall 0-150 lies under the copies in");
        assert_eq!(l.h2d.rate(), Some(3000.0 * 1e9 / 150.0));
        assert_eq!(Summary::of(&[]).totals.link.d2h.rate(), None, "never busy, no rate");
    }

    #[test]
    fn page_work_is_totalled_by_kind_with_its_time_beside_copies() {
        use unimem_core::seam::PageWork;
        let work = |work, bytes, start_ns, end_ns| MemEvent::PageWork { work, bytes, start_ns, end_ns };
        let copy = |start_ns, end_ns| MemEvent::Migration {
            region: RegionId(1),
            offset: 0,
            bytes: 4096,
            dir: Direction::D2H,
            cause: MigrationCause::Staging,
            start_ns,
            end_ns,
        };
        // A copy over 100-200; populations over 50-150 and 300-400; a discard over 190-210.
        let s = Summary::of(&[
            copy(100, 200),
            work(PageWork::Populate, 1000, 50, 150),
            work(PageWork::Discard, 500, 190, 210),
            work(PageWork::Populate, 3000, 300, 400),
        ]);
        let p = s.totals.page_work["populate"];
        assert_eq!((p.count, p.bytes, p.ns, p.beside_copies_ns), (2, 4000, 200, 50));
        let d = s.totals.page_work["discard"];
        assert_eq!((d.count, d.bytes, d.ns, d.beside_copies_ns), (1, 500, 20, 10));
        assert!(!s.totals.page_work.contains_key("repopulate"));
    }

    /// The simulator reports the page work it models: a new region's population, and the
    /// repopulation of staged pages before their copy in, each with its device time.
    #[test]
    fn simulator_page_work_is_reported() {
        let mut gpu = SimBackend::new(CostModel::h200(), 64 << 20).with_staging(64 << 20);
        gpu.record_events(true);
        let id = RegionId(1);
        gpu.allocate(id, 8 << 20).unwrap();
        let whole = unimem_core::ByteRange::whole(id, 8 << 20);
        gpu.prefetch(&[whole], unimem_core::Location::DEVICE).unwrap();
        let acc = [RangeAccess { region: id, offset: 0, len: 8 << 20, mode: AccessMode::Write }];
        gpu.launch(&KernelLaunch { name: "write", dur_ns: 1000, accesses: &acc }).unwrap();
        gpu.stage_out(&[whole]).unwrap();
        gpu.synchronize().unwrap();
        gpu.prefetch(&[whole], unimem_core::Location::DEVICE).unwrap();
        gpu.synchronize().unwrap();
        let mut events = Vec::new();
        gpu.drain_events(&mut events);
        let t = Summary::of(&events).totals;
        let (pop, repop) = (t.page_work["populate"], t.page_work["repopulate"]);
        assert_eq!((pop.count, pop.bytes), (1, 8 << 20), "{t:?}");
        assert_eq!((repop.count, repop.bytes), (1, 8 << 20), "{t:?}");
        assert!(pop.ns > 0 && repop.ns > 0, "{t:?}");
    }

    #[test]
    fn simulator_events_summarise_and_log() {
        let mut gpu = SimBackend::new(CostModel::h200(), 4 << 20);
        gpu.record_events(true);
        for id in [1, 2] {
            gpu.allocate(RegionId(id), 3 << 20).unwrap();
            gpu.preload_host(unimem_core::ByteRange::whole(RegionId(id), 3 << 20)).unwrap();
            let acc = [RangeAccess { region: RegionId(id), offset: 0, len: 3 << 20, mode: AccessMode::Read }];
            gpu.launch(&KernelLaunch { name: "read", dur_ns: 1000, accesses: &acc }).unwrap();
        }
        let mut events = Vec::new();
        gpu.drain_events(&mut events);
        let summary = Summary::of(&events);
        let r1 = summary.regions[&RegionId(1)];
        let r2 = summary.regions[&RegionId(2)];
        assert_eq!(r2.h2d_bytes, 3 << 20, "region 2 faulted in whole");
        assert_eq!(r1.evicted_bytes, 2 << 20, "one 2 MiB block of region 1 made room");
        assert!(r1.faults >= 1 && r2.faults >= 1);
        assert!(r1.transfer_ns > r2.transfer_ns, "region 1 paid its faults and an eviction");
        assert_eq!(summary.by_cost()[0].0, RegionId(1), "the costlier region ranks first");
        assert_eq!(summary.totals.kernels, 2);
        assert_eq!(summary.totals.by_cause[0].0, "fault");

        let mut log = EventLog::new(Vec::new(), "test").unwrap();
        log.write_region(RegionId(1), 3 << 20, Some("weights"), 1 << 40).unwrap();
        events.iter().for_each(|e| log.write(e).unwrap());
        log.write_freed(RegionId(1)).unwrap();
        assert_eq!(log.written(), events.len() as u64);
        let bytes = log.finish().unwrap();
        let back = Log::parse(&bytes[..], "mem").unwrap();
        assert_eq!(back.events, events, "the log reads back as written");
        assert_eq!(back.name_of(RegionId(1)), "weights");
        assert!(back.regions[&RegionId(1)].freed);
        assert_eq!(back.name_of(RegionId(2)), "region2");
    }

    #[test]
    fn first_touch_on_the_device_is_a_populate_not_a_migration() {
        let mut gpu = SimBackend::new(CostModel::h200(), 4 << 20);
        gpu.record_events(true);
        gpu.allocate(RegionId(3), 1 << 20).unwrap();
        let acc = [RangeAccess { region: RegionId(3), offset: 0, len: 1 << 20, mode: AccessMode::Write }];
        gpu.launch(&KernelLaunch { name: "write", dur_ns: 1000, accesses: &acc }).unwrap();
        let mut events = Vec::new();
        gpu.drain_events(&mut events);
        let s = Summary::of(&events);
        assert_eq!(s.totals.populated_device_bytes, 1 << 20);
        assert!(!events.iter().any(|e| matches!(e, MemEvent::Migration { .. })));
    }
}
