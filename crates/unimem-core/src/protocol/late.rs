//! Faults that arrive late. On a GPU the backend cannot see faults as they happen: CUPTI
//! delivers its records once the device has run the kernel and a buffer is flushed, often
//! many launches later. A policy that learns from faults needs to know which kernel each one
//! belonged to; [`LateFaults`] keeps the device interval of every kernel (from the backend's
//! `Kernel` events, which come in launch order) and gives each late event the kernel that was
//! running when it happened.

use std::collections::VecDeque;

use crate::seam::MemEvent;

/// Kernel intervals kept: late events older than this many kernels are dropped.
const KEPT_KERNELS: usize = 1 << 16;
/// Late events held while their kernel is not timed yet, at most.
const MAX_HELD: usize = 1 << 20;

/// Assigns late events to kernels. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct LateFaults {
    /// (start, end) of kernels on the event clock, in launch order.
    kernels: VecDeque<(u64, u64)>,
    /// Index (in program order) of `kernels[0]`.
    first: u64,
    /// Events after the last kernel timed so far: the next kernels' timings will say whose.
    held: Vec<(u64, MemEvent)>,
}

impl LateFaults {
    /// Notes the kernels among events the backend reported (in order).
    pub(crate) fn note(&mut self, events: &[MemEvent]) {
        for e in events {
            if let MemEvent::Kernel { start_ns, end_ns, .. } = *e {
                self.kernels.push_back((start_ns, end_ns));
                if self.kernels.len() > KEPT_KERNELS {
                    self.kernels.pop_front();
                    self.first += 1;
                }
            }
        }
    }

    /// Appends to `out` the device accesses among `late` and among the events held from
    /// earlier calls, each with its kernel, grouped by kernel in program order. An access
    /// belongs to the last kernel that started at or before it (a clock offset between the
    /// source and the backend then errs towards an earlier kernel, whose data is still needed
    /// by the later one); one after the last kernel timed so far is held for the next call.
    pub(crate) fn attribute(&mut self, late: Vec<MemEvent>, out: &mut Vec<(u64, Vec<MemEvent>)>) {
        let mut pending = std::mem::take(&mut self.held);
        // Only the device's accesses teach a policy about a kernel (not the host's faults,
        // evictions or prefetches).
        pending.extend(late.into_iter().filter_map(|e| e.device_access().map(|a| (a.3, e))));
        let mut found: Vec<(u64, MemEvent)> = Vec::new();
        for (t, e) in pending {
            let started = self.kernels.partition_point(|k| k.0 <= t);
            if started == 0 {
                continue; // before every kernel kept: nobody's to learn
            }
            let (_, end) = self.kernels[started - 1];
            if started == self.kernels.len() && t > end {
                if self.held.len() < MAX_HELD {
                    self.held.push((t, e));
                }
                continue;
            }
            found.push((self.first + started as u64 - 1, e));
        }
        found.sort_by_key(|f| f.0);
        for (kernel, e) in found {
            match out.last_mut() {
                Some(last) if last.0 == kernel => last.1.push(e),
                _ => out.push((kernel, vec![e])),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Accessor;
    use crate::region::RegionId;
    use crate::seam::{Direction, MigrationCause};

    fn kernel(start_ns: u64, end_ns: u64) -> MemEvent {
        MemEvent::Kernel { name: "k".into(), start_ns, end_ns, stall_ns: 0, issued_ns: None }
    }

    fn fault(region: u64, at_ns: u64) -> MemEvent {
        MemEvent::Fault { region: RegionId(region), offset: 0, bytes: 4096, by: Accessor::Device, at_ns }
    }

    #[test]
    fn late_accesses_go_to_the_kernel_running_then_or_wait_for_it() {
        let mut late = LateFaults::default();
        late.note(&[kernel(100, 200), kernel(250, 300)]);
        let cpu =
            MemEvent::Fault { region: RegionId(9), offset: 0, bytes: 0, by: Accessor::Host, at_ns: 150 };
        let prefetch = MemEvent::Migration {
            region: RegionId(9),
            offset: 0,
            bytes: 1,
            dir: Direction::H2D,
            cause: MigrationCause::Prefetch,
            start_ns: 150,
            end_ns: 160,
        };
        let mut out = Vec::new();
        late.attribute(
            vec![fault(1, 260), fault(2, 150), cpu, prefetch, fault(3, 50), fault(4, 400)],
            &mut out,
        );
        // Kernel 0 ran 100-200, kernel 1 from 250: the CPU fault, the prefetch and the fault
        // before any kernel teach nothing; the one at 400 waits for the next kernel's timing.
        assert_eq!(out, vec![(0, vec![fault(2, 150)]), (1, vec![fault(1, 260)])]);
        out.clear();
        late.note(&[kernel(380, 420)]);
        late.attribute(Vec::new(), &mut out);
        assert_eq!(out, vec![(2, vec![fault(4, 400)])]);
        // A fault in the gap between two kernels (clock offset) goes to the earlier one.
        out.clear();
        late.attribute(vec![fault(5, 220)], &mut out);
        assert_eq!(out, vec![(0, vec![fault(5, 220)])]);
    }

    #[test]
    fn old_kernels_are_forgotten_with_their_index_kept() {
        let mut late = LateFaults::default();
        let kernels: Vec<MemEvent> =
            (0..KEPT_KERNELS as u64 + 10).map(|i| kernel(i * 10, i * 10 + 5)).collect();
        late.note(&kernels);
        let mut out = Vec::new();
        late.attribute(vec![fault(1, 3), fault(2, (KEPT_KERNELS as u64 + 9) * 10 + 1)], &mut out);
        assert_eq!(out, vec![(KEPT_KERNELS as u64 + 9, vec![fault(2, (KEPT_KERNELS as u64 + 9) * 10 + 1)])]);
    }
}
