//! Write-back ahead of eviction. The planner evicts when room runs short, which in a training
//! step's forward pass is where the step's new outputs outgrow the budget: the evictions come
//! together, and the copies out take the link's time just when the next outputs wait for the
//! room. The data they copy was written long before (the forward pass's first outputs, needed
//! again only in the backward pass), and the link out was idle meanwhile.
//!
//! So the advisor writes back, to the backend's staging memory, what it evicted before its
//! reuse last step (by step-stable identity) as soon as that data is written and its kernels
//! are past (no use for `horizon` kernels), the data staying on the device: when the planner
//! evicts it, the eviction copies nothing and its room is free once its kernels and the
//! write-back are done. At most as many bytes a step as the last step evicted are written
//! back, oldest write first, so a mistaken choice costs at most that much of the link's idle
//! time; data written again after its write-back is simply copied again by its eviction.
//! Without step markers, or on a backend that keeps no host copy of device data, nothing is
//! written back.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::*;

/// The write-back queue and its byte budget.
#[derive(Debug, Default)]
pub(super) struct WriteBacks {
    /// Units written by a kernel that were evicted before their reuse last time, with the
    /// kernel of the write, in write order (an entry is stale where `written` has a later one).
    queue: VecDeque<(Unit, u64)>,
    /// Queued units used too lately to be due, by the kernel from which they may be: (that
    /// kernel, the write's kernel, the unit). They never hold back the queue behind them.
    waiting: BinaryHeap<Reverse<(u64, u64, Unit)>>,
    /// Each queued unit's latest write.
    written: FxHashMap<Unit, u64>,
    /// Bytes written back in this step, and the most it may write back (what the last step
    /// evicted).
    this_step: u64,
    allowed: u64,
    /// Bytes the advisor evicted with a copy in this step.
    evicted_this_step: u64,
}

impl WriteBacks {
    /// A step begins: it may write back what the last one evicted.
    pub(super) fn on_step(&mut self) {
        self.allowed = std::mem::take(&mut self.evicted_this_step);
        self.this_step = 0;
    }

    /// The advisor evicted `bytes` with a copy.
    pub(super) fn on_evict(&mut self, bytes: u64) {
        self.evicted_this_step += bytes;
    }

    /// Kernel `at` writes `unit`.
    pub(super) fn on_write(&mut self, unit: Unit, at: u64) {
        self.written.insert(unit, at);
        self.queue.push_back((unit, at));
    }

    /// The queued units due for a write-back after kernel `now` within the step's bytes:
    /// resident (`resident` gives bytes and last use) and unused for `horizon` kernels, those
    /// that waited for that first, then the others in the order of their writes.
    fn due(&mut self, now: u64, horizon: u64, resident: &Residency) -> Vec<Unit> {
        let mut out = Vec::new();
        while let Some(&Reverse((from, at, unit))) = self.waiting.peek() {
            if from > now {
                break;
            }
            self.waiting.pop();
            if !self.take_if_due(unit, at, now, horizon, resident, &mut out) {
                break;
            }
        }
        while let Some(&(unit, at)) = self.queue.front() {
            self.queue.pop_front();
            if !self.take_if_due(unit, at, now, horizon, resident, &mut out) {
                break;
            }
        }
        out
    }

    /// Takes `unit` (written at kernel `at`) into `out` where it is due; a unit used too lately
    /// goes to `waiting`. False (the unit put back) where the step's bytes are spent.
    fn take_if_due(
        &mut self,
        unit: Unit,
        at: u64,
        now: u64,
        horizon: u64,
        resident: &Residency,
        out: &mut Vec<Unit>,
    ) -> bool {
        if self.written.get(&unit) != Some(&at) {
            return true; // written again since: a later entry stands for it
        }
        let Some((bytes, last_use)) = resident.get(&unit) else {
            self.written.remove(&unit); // off the device (evicted, or freed) before its turn
            return true;
        };
        if last_use + horizon > now {
            self.waiting.push(Reverse((last_use + horizon, at, unit)));
            return true;
        }
        if self.this_step + bytes > self.allowed {
            self.waiting.push(Reverse((now + 1, at, unit)));
            return false;
        }
        self.written.remove(&unit);
        self.this_step += bytes;
        out.push(unit);
        true
    }
}

impl Advisor {
    /// Writes back the queued units that are due (after the kernel's launch, so that it never
    /// waits for them).
    pub(super) fn write_back_due(&mut self, hints: &mut Hints<'_>) -> Result<()> {
        if !self.settings.write_back {
            return Ok(());
        }
        let units = self.write_backs.due(self.kernel, self.settings.horizon, &self.resident);
        if units.is_empty() {
            return Ok(());
        }
        if self.recording {
            for &u in &units {
                self.record_hint(crate::seam::HintKind::WriteBack, u, Reason::EvictedBeforeReuse);
            }
        }
        self.hints.written_back += self.units_bytes(units.iter());
        hints.write_back(&coalesce(&self.sizes, units))
    }
}
