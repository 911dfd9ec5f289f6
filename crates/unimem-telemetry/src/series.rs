//! Device-resident bytes and cumulative link traffic over a log, the one series the plot, the
//! Chrome export and the summary all use.
//!
//! Residency is kept per region as byte ranges on the device, so that every way data leaves
//! the device takes it off: a migration or a staged copy to the host, a drop (discard, a
//! read-mostly duplicate collapsed), the region's free. Ranges make the account idempotent:
//! data prefetched twice, or dropped after it was copied out, is counted once.
//!
//! Order and time: changes apply in log order, which is each region's own order (a backend
//! logs an operation's events as it issues them; sorting by the times on the events would
//! put a queued copy-out after the repopulation that followed it). Each change is placed at
//! the latest time any event before it carried (a transfer's start, a kernel's start, a
//! fault), so the series' times never go back.

use std::collections::{BTreeMap, HashMap};

use unimem_core::seam::{Direction, Location, MemEvent};
use unimem_core::RegionId;

use crate::read::Log;

/// One point of the series: the state from `t_ns` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct SeriesPoint {
    /// When.
    pub t_ns: u64,
    /// Bytes of live data on the device.
    pub resident_bytes: u64,
    /// Bytes moved to the device so far.
    pub h2d_bytes: u64,
    /// Bytes moved to the host so far.
    pub d2h_bytes: u64,
}

/// A region's device-resident bytes as disjoint ranges `start -> end`.
#[derive(Debug, Default)]
struct Ranges {
    ranges: BTreeMap<u64, u64>,
}

impl Ranges {
    /// Adds `[start, end)`; returns the bytes newly covered.
    fn insert(&mut self, start: u64, end: u64) -> u64 {
        if start >= end {
            return 0;
        }
        let removed = self.remove(start, end);
        let (mut s, mut e) = (start, end);
        // Merge with a neighbour that touches it.
        if let Some((&ps, &pe)) = self.ranges.range(..=s).next_back() {
            if pe == s {
                self.ranges.remove(&ps);
                s = ps;
            }
        }
        if let Some(&ne) = self.ranges.get(&e) {
            self.ranges.remove(&e);
            e = ne;
        }
        self.ranges.insert(s, e);
        (end - start) - removed
    }

    /// Removes `[start, end)`; returns the bytes that were covered.
    fn remove(&mut self, start: u64, end: u64) -> u64 {
        if start >= end {
            return 0;
        }
        let mut covered = 0;
        // The range that begins before `start` and reaches into it.
        if let Some((&ps, &pe)) = self.ranges.range(..start).next_back() {
            if pe > start {
                self.ranges.insert(ps, start);
                if pe > end {
                    self.ranges.insert(end, pe);
                }
                covered += pe.min(end) - start;
            }
        }
        let inside: Vec<(u64, u64)> = self.ranges.range(start..end).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in inside {
            self.ranges.remove(&s);
            if e > end {
                self.ranges.insert(end, e);
            }
            covered += e.min(end) - s;
        }
        covered
    }

    fn total(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }
}

/// The series of `log`, one point per change, in time order (the first at 0 with nothing).
pub fn resident_series(log: &Log) -> Vec<SeriesPoint> {
    let mut on_device: HashMap<RegionId, Ranges> = HashMap::new();
    let mut frees = log.frees.iter().peekable();
    let mut point = SeriesPoint::default();
    let mut out = vec![point];
    let mut apply = |point: &mut SeriesPoint, change: Change| {
        let resident = &mut point.resident_bytes;
        match change {
            Change::Moved { region, start, end, dir: Direction::H2D } => {
                *resident += on_device.entry(region).or_default().insert(start, end);
                point.h2d_bytes = point.h2d_bytes.saturating_add(end - start);
            }
            Change::Moved { region, start, end, dir: Direction::D2H } => {
                *resident -= on_device.get_mut(&region).map_or(0, |r| r.remove(start, end));
                point.d2h_bytes = point.d2h_bytes.saturating_add(end - start);
            }
            Change::Device { region, start, end, on: true } => {
                *resident += on_device.entry(region).or_default().insert(start, end)
            }
            Change::Device { region, start, end, on: false } => {
                *resident -= on_device.get_mut(&region).map_or(0, |r| r.remove(start, end))
            }
            Change::Free(region) => *resident -= on_device.remove(&region).map_or(0, |r| r.total()),
        }
    };
    let push = |out: &mut Vec<SeriesPoint>, point: SeriesPoint| match out.last_mut() {
        Some(last) if last.t_ns == point.t_ns => *last = point,
        _ => out.push(point),
    };
    for (i, e) in log.events.iter().enumerate() {
        while let Some(f) = frees.next_if(|f| f.after_events <= i) {
            apply(&mut point, Change::Free(f.region));
            push(&mut out, point);
        }
        let at = |start: u64, len: u64| (start, start.saturating_add(len));
        let change = match *e {
            MemEvent::Kernel { start_ns: t, .. }
            | MemEvent::Fault { at_ns: t, .. }
            | MemEvent::Thrashing { at_ns: t, .. }
            | MemEvent::RemoteMap { at_ns: t, .. } => {
                point.t_ns = point.t_ns.max(t);
                continue;
            }
            MemEvent::Migration { region, offset, bytes, dir, start_ns, .. } => {
                point.t_ns = point.t_ns.max(start_ns);
                let (start, end) = at(offset, bytes);
                Change::Moved { region, start, end, dir }
            }
            MemEvent::Populate { region, offset, bytes, on: Location::DEVICE } => {
                let (start, end) = at(offset, bytes);
                Change::Device { region, start, end, on: true }
            }
            MemEvent::Drop { region, offset, bytes, from: Location::DEVICE } => {
                let (start, end) = at(offset, bytes);
                Change::Device { region, start, end, on: false }
            }
            _ => continue,
        };
        apply(&mut point, change);
        push(&mut out, point);
    }
    for f in frees {
        apply(&mut point, Change::Free(f.region));
        push(&mut out, point);
    }
    out
}

/// The most device-resident bytes at once.
pub fn peak_resident_bytes(series: &[SeriesPoint]) -> u64 {
    series.iter().map(|p| p.resident_bytes).max().unwrap_or(0)
}

enum Change {
    Moved { region: RegionId, start: u64, end: u64, dir: Direction },
    Device { region: RegionId, start: u64, end: u64, on: bool },
    Free(RegionId),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The ranges agree with a byte map under any sequence of inserts and removes.
        #[test]
        fn ranges_count_every_byte_once(ops in proptest::collection::vec((any::<bool>(), 0u64..64, 0u64..64), 0..64)) {
            let mut r = Ranges::default();
            let mut bytes = [false; 128];
            for (add, a, len) in ops {
                let (s, e) = (a, a + len);
                let before = bytes[s as usize..e as usize].iter().filter(|b| **b).count() as u64;
                if add {
                    prop_assert_eq!(r.insert(s, e), len - before);
                    bytes[s as usize..e as usize].iter_mut().for_each(|b| *b = true);
                } else {
                    prop_assert_eq!(r.remove(s, e), before);
                    bytes[s as usize..e as usize].iter_mut().for_each(|b| *b = false);
                }
                prop_assert_eq!(r.total(), bytes.iter().filter(|b| **b).count() as u64);
                // Disjoint and not touching.
                let v: Vec<_> = r.ranges.iter().collect();
                for w in v.windows(2) {
                    prop_assert!(w[0].1 < w[1].0);
                }
            }
        }
    }
}
