//! Per-region totals of faults and migrations, sorted by cost.

use std::collections::BTreeMap;

use unimem_core::backend::{Direction, MemEvent, MigrationCause};
use unimem_core::RegionId;

/// What happened to one region.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RegionSummary {
    /// Fault groups raised on it.
    pub faults: u64,
    /// Bytes moved to the device.
    pub h2d_bytes: u64,
    /// Bytes moved to the host.
    pub d2h_bytes: u64,
    /// Of `d2h_bytes`, moved by eviction.
    pub evicted_bytes: u64,
    /// Nanoseconds its transfers occupied the link.
    pub transfer_ns: u64,
}

/// Totals by region.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Region -> totals.
    pub regions: BTreeMap<RegionId, RegionSummary>,
}

impl Summary {
    /// Adds one event.
    pub fn add(&mut self, event: &MemEvent) {
        match *event {
            MemEvent::Fault { region, .. } => self.regions.entry(region).or_default().faults += 1,
            MemEvent::Migration { region, bytes, dir, cause, start_ns, end_ns, .. } => {
                let r = self.regions.entry(region).or_default();
                match dir {
                    Direction::H2D => r.h2d_bytes += bytes,
                    Direction::D2H => r.d2h_bytes += bytes,
                }
                if cause == MigrationCause::Eviction {
                    r.evicted_bytes += bytes;
                }
                r.transfer_ns += end_ns - start_ns;
            }
            _ => {}
        }
    }

    /// Regions by transfer time, most expensive first.
    pub fn by_cost(&self) -> Vec<(RegionId, RegionSummary)> {
        let mut v: Vec<_> = self.regions.iter().map(|(k, v)| (*k, *v)).collect();
        v.sort_by_key(|(id, r)| (std::cmp::Reverse(r.transfer_ns), *id));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventLog;
    use unimem_core::backend::sim::SimBackend;
    use unimem_core::{AccessMode, CostModel, KernelLaunch, MemoryBackend, RangeAccess};

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
        let mut summary = Summary::default();
        events.iter().for_each(|e| summary.add(e));
        let r1 = summary.regions[&RegionId(1)];
        let r2 = summary.regions[&RegionId(2)];
        assert_eq!(r2.h2d_bytes, 3 << 20, "region 2 faulted in whole");
        assert_eq!(r1.evicted_bytes, 2 << 20, "one 2 MiB block of region 1 made room");
        assert!(r1.faults >= 1 && r2.faults >= 1);
        assert!(r1.transfer_ns > r2.transfer_ns, "region 1 paid its faults and an eviction");
        assert_eq!(summary.by_cost()[0].0, RegionId(1), "the costlier region ranks first");

        let mut log = EventLog::new(Vec::new(), "test").unwrap();
        events.iter().for_each(|e| log.write(e).unwrap());
        assert_eq!(log.written(), events.len() as u64);
        let text = String::from_utf8(log.finish().unwrap()).unwrap();
        let mut lines = text.lines();
        let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!(
            (header["schema"].as_str(), header["version"].as_u64()),
            (Some("unimem-telemetry"), Some(1))
        );
        for line in lines {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(v["kind"].is_string(), "{line}");
        }
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
        let populated: u64 = events
            .iter()
            .filter_map(|e| match e {
                MemEvent::Populate { region: RegionId(3), bytes, .. } => Some(*bytes),
                _ => None,
            })
            .sum();
        assert_eq!(populated, 1 << 20);
        assert!(!events.iter().any(|e| matches!(e, MemEvent::Migration { .. })));
    }
}
