//! The link-limit bound: how fast a program could run at a budget if the only cost of keeping
//! its working set within it were the bytes that must cross the link, at the pinned-copy rate,
//! with both directions and the compute fully overlapped.
//!
//! The bytes come from a clairvoyant schedule at region granularity: before each kernel its
//! regions are brought in, room being made by evicting the resident regions used farthest in
//! the future (Belady). An evicted region costs a copy out only if the device wrote it since it
//! came in and it is used again; clean data (its host copy still valid) and dead data (freed or
//! never used again) are dropped. A region whose first access is a write needs no copy in;
//! everything else that comes in is copied. A host access needs the device's newer data on
//! the host (a copy out), and a host write makes the device copy stale.
//!
//! bound = max(program floor, bytes in / rate, bytes out / rate), where the program floor is
//! the compute floor (the kernels back to back) or, for a program held to its own host time
//! between kernels ([`Program::held_to_host_time`]), the kernels issued no sooner than that
//! after each other. It is a yardstick, not a
//! proof of optimality: Belady minimises misses for equal sizes, not bytes for mixed sizes;
//! moving parts of regions can move less; and dependencies can keep a real schedule from
//! overlapping everything. The phase bound ([`phase`]) counts that last part: the traffic the
//! order of the uses puts in each stretch of the program.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use crate::op::Op;
use crate::region::RegionId;
use crate::trace::{ProgramFloor, TraceEvent};

/// No further use.
const NEVER: u32 = u32::MAX;

/// One kernel or host operation's use of a region.
#[derive(Debug, Clone, Copy)]
struct Use {
    region: u32,
    reads: bool,
    writes: bool,
}

/// The bytes one use reads and writes: of its accesses that read (write), the longest, as
/// `(offset, len)` (len 0: none). The phase bound counts these rather than whole regions, so
/// that it stays a lower bound where a program touches parts of its regions.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct UseSpans {
    read: (u64, u64),
    write: (u64, u64),
}

/// A step of the program as the bound sees it.
#[derive(Debug, Clone, Copy)]
enum Step {
    Free {
        region: u32,
    },
    /// A kernel: `uses[start..end]`, running `dur_ns`.
    Kernel {
        start: u32,
        end: u32,
        dur_ns: u64,
    },
    /// A host operation: `uses[start..end]`.
    Host {
        start: u32,
        end: u32,
    },
}

/// A program recorded for the bound: its steps and every use of every region, compactly (8
/// bytes a use, and 32 for what it reads and writes), built from its operations in order ([`Program::observe`]).
#[derive(Debug, Default)]
pub struct Program {
    steps: Vec<Step>,
    uses: Vec<Use>,
    /// Beside each use, what it reads and writes (for the phase bound).
    spans: Vec<UseSpans>,
    /// Region sizes, by dense index.
    bytes: Vec<u64>,
    /// Dense index of each live trace region.
    index: FxHashMap<RegionId, u32>,
    compute_floor_ns: u64,
    /// Kernels are issued no sooner than their recorded host time after the one before.
    held_to_host_time: bool,
    /// The program's host time before its next kernel ([`Program::observe_event`]).
    next_host_ns: u64,
    /// Its kernels with every byte resident, at its pace where held to it.
    pace: ProgramFloor,
    /// The phase bound's segments, worked out at the first bound asked for.
    phase: std::sync::OnceLock<phase::Segments>,
}

/// The bound at one budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct LinkBound {
    /// Bytes that must come to the device.
    pub h2d_bytes: u64,
    /// Bytes that must go back to the host.
    pub d2h_bytes: u64,
    /// The sum of kernel durations.
    pub compute_floor_ns: u64,
    /// The time with every byte resident: the compute floor, or for a program held to its
    /// host time between kernels, its kernels each issued no sooner than that after the one
    /// before and run in order (at least the compute floor and the program's host time).
    pub program_floor_ns: u64,
    /// max(program floor, bytes in / rate, bytes out / rate).
    pub bound_ns: u64,
    /// The phase bound ([`phase`]): the most that the order of the program's uses forces
    /// on the link at this budget, a segment of the program at a time (at least the program
    /// floor).
    pub phase_ns: u64,
}

impl Program {
    /// An empty program.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same program, its kernels held to the host time the trace recorded between them
    /// (`host_ns`), as a replay with `replay.program_host_time` holds them: its floor is then
    /// the program's own pace where that is slower than its kernels.
    pub fn held_to_host_time(mut self, on: bool) -> Self {
        self.held_to_host_time = on;
        self
    }

    /// Adds the next event of a trace: its operation, and for a kernel the program's host
    /// time before it where the program is held to it.
    pub fn observe_event(&mut self, event: &TraceEvent) {
        if let TraceEvent::Kernel { host_ns: Some(ns), .. } = event {
            if self.held_to_host_time {
                self.next_host_ns = *ns;
            }
        }
        self.observe(&Op::from(event.clone()));
    }

    /// Adds the next operation.
    pub fn observe(&mut self, op: &Op) {
        self.phase.take();
        match op {
            Op::Alloc { region, bytes, .. } => {
                let dense = self.bytes.len() as u32;
                self.bytes.push(*bytes);
                self.index.insert(*region, dense);
            }
            Op::Free { region } => {
                if let Some(dense) = self.index.remove(region) {
                    self.steps.push(Step::Free { region: dense });
                }
            }
            Op::Kernel { accesses, .. } | Op::Host { accesses, .. } => {
                let start = self.uses.len() as u32;
                for a in accesses {
                    let Some(&region) = self.index.get(&a.region) else { continue };
                    let (reads, writes) = (a.mode.reads(), a.mode.writes());
                    let span = (a.offset, a.len);
                    let longer = |old: &mut (u64, u64), on: bool| {
                        if on && span.1 > old.1 {
                            *old = span;
                        }
                    };
                    // One use per region per operation.
                    match self.uses[start as usize..].iter().position(|u| u.region == region) {
                        Some(i) => {
                            let (u, s) =
                                (&mut self.uses[start as usize + i], &mut self.spans[start as usize + i]);
                            (u.reads, u.writes) = (u.reads | reads, u.writes | writes);
                            longer(&mut s.read, reads);
                            longer(&mut s.write, writes);
                        }
                        None => {
                            self.uses.push(Use { region, reads, writes });
                            let mut s = UseSpans::default();
                            longer(&mut s.read, reads);
                            longer(&mut s.write, writes);
                            self.spans.push(s);
                        }
                    }
                }
                let end = self.uses.len() as u32;
                if let Op::Kernel { dur_ns, .. } = op {
                    self.compute_floor_ns = self.compute_floor_ns.saturating_add(*dur_ns);
                    self.pace.kernel(std::mem::take(&mut self.next_host_ns), *dur_ns);
                    self.steps.push(Step::Kernel { start, end, dur_ns: *dur_ns });
                } else {
                    self.steps.push(Step::Host { start, end });
                }
            }
            _ => {}
        }
    }

    /// The bound at `budget` device bytes, each direction of the link carrying `rate_gbps`.
    pub fn bound(&self, budget: u64, rate_gbps: f64) -> LinkBound {
        let (h2d_bytes, d2h_bytes) = self.traffic(budget);
        let ns = |bytes: u64| (bytes as f64 / rate_gbps).ceil() as u64;
        let floor = self.pace.ns();
        let phase = self.phase.get_or_init(|| phase::Segments::of(self)).bound_ns(budget, rate_gbps);
        LinkBound {
            h2d_bytes,
            d2h_bytes,
            compute_floor_ns: self.compute_floor_ns,
            program_floor_ns: floor,
            bound_ns: floor.max(ns(h2d_bytes)).max(ns(d2h_bytes)),
            phase_ns: phase.max(floor),
        }
    }

    /// Bytes in and out of the clairvoyant schedule (see the module documentation).
    pub(crate) fn traffic(&self, budget: u64) -> (u64, u64) {
        let n = self.bytes.len();
        // Each region's uses, in order, as positions into `self.uses`.
        let mut at: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (i, u) in self.uses.iter().enumerate() {
            at[u.region as usize].push(i as u32);
        }
        let mut next = vec![0usize; n]; // cursor into `at`
        let next_use = |next: &[usize], r: usize| at[r].get(next[r]).copied().unwrap_or(NEVER);
        let mut state = vec![Region::default(); n];
        // Resident regions by next use (the farthest last).
        let mut resident: BTreeSet<(u32, u32)> = BTreeSet::new();
        let (mut used, mut h2d, mut d2h) = (0u64, 0u64, 0u64);
        for step in &self.steps {
            match *step {
                Step::Free { region } => {
                    let r = region as usize;
                    if state[r].resident {
                        resident.remove(&(next_use(&next, r), region));
                        used -= self.bytes[r];
                    }
                    state[r] = Region::default();
                }
                Step::Host { start, end } => {
                    for u in &self.uses[start as usize..end as usize] {
                        let r = u.region as usize;
                        let key = (next_use(&next, r), u.region);
                        if state[r].resident && state[r].dirty {
                            d2h += self.bytes[r];
                            state[r].dirty = false;
                        }
                        state[r].touched = true;
                        next[r] += 1;
                        if state[r].resident {
                            resident.remove(&key);
                            if u.writes {
                                state[r].resident = false;
                                used -= self.bytes[r];
                            } else {
                                resident.insert((next_use(&next, r), u.region));
                            }
                        }
                    }
                }
                Step::Kernel { start, end, .. } => {
                    let uses = &self.uses[start as usize..end as usize];
                    // Room first, for what is not resident: the kernel's own regions have the
                    // nearest next use (this kernel) and are never evicted for each other.
                    let need: u64 = uses
                        .iter()
                        .filter(|u| !state[u.region as usize].resident)
                        .map(|u| self.bytes[u.region as usize])
                        .sum();
                    while used + need > budget {
                        // Every resident region is next used at this kernel or later; those
                        // used by this kernel (positions start..end) stay.
                        let Some(&(when, victim)) = resident.last() else { break };
                        if when < end {
                            break;
                        }
                        resident.pop_last();
                        let v = victim as usize;
                        if state[v].dirty && when != NEVER {
                            d2h += self.bytes[v];
                        }
                        state[v].resident = false;
                        state[v].dirty = false;
                        used -= self.bytes[v];
                    }
                    for u in uses {
                        let r = u.region as usize;
                        let key = (next_use(&next, r), u.region);
                        if state[r].resident {
                            resident.remove(&key);
                        } else {
                            // A first access that only writes finds no data to copy in.
                            if state[r].touched || u.reads {
                                h2d += self.bytes[r];
                            }
                            state[r].resident = true;
                            used += self.bytes[r];
                        }
                        state[r].touched = true;
                        state[r].dirty |= u.writes;
                        next[r] += 1;
                        resident.insert((next_use(&next, r), u.region));
                    }
                }
            }
        }
        (h2d, d2h)
    }

    /// The sum of the kernels' durations.
    pub fn compute_floor_ns(&self) -> u64 {
        self.compute_floor_ns
    }
}

/// A region's state in the schedule.
#[derive(Debug, Clone, Copy, Default)]
struct Region {
    resident: bool,
    /// The device wrote it since it came in: its host copy is stale.
    dirty: bool,
    /// Accessed before (a first access that only writes needs no copy in).
    touched: bool,
}

pub mod phase;
#[cfg(test)]
mod tests;
