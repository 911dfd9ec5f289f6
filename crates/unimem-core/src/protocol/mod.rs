//! The protocol every operation runs under, in a trace replay and in the runtime's engine: the
//! policy's `before`, the events of its hints kept apart, the operation, the operation's own
//! events handed to the policy (feedback), the policy's `after`. One implementation, so that a
//! program and a replay of its trace see the same policy behaviour.

use std::time::Instant;

mod late;

use late::LateFaults;

use crate::error::Result;
use crate::op::Op;
use crate::policy::{Hints, Policy};
use crate::region::RegionId;
use crate::seam::{ByteRange, MemEvent, MemoryBackend, MemoryBackendExt};
use crate::RangeAccess;

/// Kernels between two looks at the sink's late events (and at a step boundary): CUPTI's
/// forced flush costs the host, and the policy learns an access for the next step anyway.
const LATE_EVERY: u64 = 64;

/// Where a replay's (or a running program's) telemetry goes: the regions as they come and go
/// (for attribution, also after a free) and the backend's events as they happen.
pub trait EventSink {
    /// A region was allocated at `address` (the backend's address of its first byte).
    fn region(&mut self, id: RegionId, bytes: u64, name: Option<&str>, address: u64) -> Result<()>;
    /// A region was freed.
    fn freed(&mut self, id: RegionId) -> Result<()>;
    /// Events the backend reported since the last call.
    fn events(&mut self, events: &[crate::seam::MemEvent]) -> Result<()>;
    /// The work is over and the backend synchronised: write what is still held, flush.
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
    /// Appends to `out` the events a source delivered since the last call that the backend
    /// could not report as they happened (CUPTI's records of a GPU's faults and migrations),
    /// attributed to regions, in any order; the sink writes them to its log as well. The replay
    /// and the runtime feed the faults among them to a policy that learns from faults. None by
    /// default.
    fn late(&mut self, _out: &mut Vec<crate::seam::MemEvent>) -> Result<()> {
        Ok(())
    }
}

/// A sink that writes nothing: for a source whose events are wanted elsewhere (CUPTI's faults
/// for a policy, without a log), or a log already closed.
pub struct NullSink;

impl EventSink for NullSink {
    fn region(&mut self, _: RegionId, _: u64, _: Option<&str>, _: u64) -> Result<()> {
        Ok(())
    }
    fn freed(&mut self, _: RegionId) -> Result<()> {
        Ok(())
    }
    fn events(&mut self, _: &[crate::seam::MemEvent]) -> Result<()> {
        Ok(())
    }
}

/// Runs operations between a policy's hooks; keeps their events for a sink when asked.
pub(crate) struct Protocol {
    /// The policy learns from the backend's events of each operation.
    feedback: bool,
    /// The policy learns from faults the backend cannot report and the sink delivers late
    /// (a GPU's, through CUPTI): which kernel each belonged to.
    late: Option<LateFaults>,
    /// Kernels run since the last look at the late events; a step boundary makes it due.
    since_late: u64,
    /// Events are kept for a sink.
    keep: bool,
    /// Events kept for the sink, in order: those of the hints given before each operation, its
    /// own, then those of the hints given after it (all of them, for a kernel with its data in
    /// place). The caller takes them (and clears the vector).
    pub(crate) events: Vec<MemEvent>,
    /// The current operation's events, for the policy to learn from.
    observed: Vec<MemEvent>,
    /// Host time spent in the policy's hooks (`before`, `observe`, `after`): on a GPU it sits
    /// between launches.
    pub(crate) policy_ns: u64,
    /// Of it, work not yet reported to the backend (`MemoryBackend::host_work`).
    unreported_ns: u64,
}

impl Protocol {
    /// Turns on the recording the run needs: the backend's events where the policy learns from
    /// them or `keep_events` (a sink) wants them, the policy's own where a sink wants them.
    pub(crate) fn new(policy: &mut dyn Policy, backend: &mut dyn MemoryBackend, keep_events: bool) -> Self {
        let feedback = policy.wants_feedback() && backend.records_faults();
        // Without the backend's faults, a sink may still deliver them late; its events carry
        // the kernels' device times that say whose they were.
        let late =
            (policy.wants_feedback() && !backend.records_faults() && keep_events).then(LateFaults::default);
        if keep_events || feedback {
            backend.record_events(true);
        }
        if keep_events {
            policy.record_events(true);
        }
        Self {
            feedback,
            late,
            since_late: 0,
            keep: keep_events,
            events: Vec::new(),
            observed: Vec::new(),
            policy_ns: 0,
            unreported_ns: 0,
        }
    }

    /// Hands the events kept so far to `sink` (and clears them); every [`LATE_EVERY`] kernels
    /// and at each step, hands the policy the faults the sink delivered late, by kernel.
    pub(crate) fn hand_to_sink(&mut self, sink: &mut dyn EventSink, policy: &mut dyn Policy) -> Result<()> {
        if let Some(late) = self.late.as_mut() {
            late.note(&self.events);
        }
        let written = sink.events(&self.events);
        self.events.clear();
        written?;
        let Some(late) = self.late.as_mut() else { return Ok(()) };
        if self.since_late < LATE_EVERY {
            return Ok(());
        }
        self.since_late = 0;
        let mut got = Vec::new();
        sink.late(&mut got)?;
        let mut by_kernel = Vec::new();
        late.attribute(got, &mut by_kernel);
        let t0 = Instant::now();
        for (kernel, events) in &by_kernel {
            policy.observe_late(*kernel, events);
        }
        let ns = t0.elapsed().as_nanos() as u64;
        // No backend at hand here: the next hook reports this work with its own.
        self.policy_ns += ns;
        self.unreported_ns += ns;
        Ok(())
    }

    /// Counts a policy hook begun at `t0` and tells the backend of the host work it was.
    fn policy_done(&mut self, t0: Instant, backend: &mut dyn MemoryBackend) {
        let ns = t0.elapsed().as_nanos() as u64;
        self.policy_ns += ns;
        backend.host_work(ns + std::mem::take(&mut self.unreported_ns));
    }

    /// Runs `execute` (operation `op`, numbered `index`, on the backend) between the policy's
    /// hooks.
    pub(crate) fn run<T>(
        &mut self,
        index: u64,
        op: &Op,
        policy: &mut dyn Policy,
        backend: &mut dyn MemoryBackend,
        execute: impl FnOnce(&mut dyn MemoryBackend) -> Result<T>,
    ) -> Result<T> {
        self.run_then(index, op, policy, backend, execute, None::<fn()>)
    }

    /// [`Protocol::run`], for an operation someone waits on when `issued` is given (a
    /// program's thread, which enqueues the kernel itself once its data is placed): `issued`
    /// is called as soon as the operation is issued (`execute` succeeded), before the policy's
    /// hints for later operations ([`Hints::prefetch_ahead`] and the other `*_ahead` hints)
    /// and its `after`, so that the caller goes on while those are given. Without a caller
    /// they come before the operation, as any hint of `before` does. A kernel whose data is
    /// all in place ([`in_place`]) runs before the policy's `before`, with or without a caller
    /// (a policy that gives no hints is not asked: both orders are the same for it).
    pub(crate) fn run_then<T>(
        &mut self,
        index: u64,
        op: &Op,
        policy: &mut dyn Policy,
        backend: &mut dyn MemoryBackend,
        execute: impl FnOnce(&mut dyn MemoryBackend) -> Result<T>,
        issued: Option<impl FnOnce()>,
    ) -> Result<T> {
        match op {
            Op::Kernel { .. } => self.since_late += 1,
            Op::Step { .. } => self.since_late = LATE_EVERY,
            _ => {}
        }
        // A kernel whose data is all in place needs nothing of `before`: it runs (and its caller
        // goes on) first, and the policy plans and gives its hints, every one of them then for
        // later kernels, while the device works on it.
        let first = match op {
            Op::Kernel { accesses, .. } => policy.gives_hints() && in_place(accesses, backend)?,
            _ => false,
        };
        let mut ahead = Vec::new();
        if !first {
            let t0 = Instant::now();
            let mut hints = if issued.is_some() { Hints::deferring(backend) } else { Hints::new(backend) };
            policy.before(index, op, &mut hints)?;
            ahead = hints.take_ahead();
            self.policy_done(t0, backend);
        }
        self.set_aside_earlier_events(policy, backend);
        let out = execute(backend)?;
        if let Some(issued) = issued {
            issued();
        }
        let t0 = Instant::now();
        // The operation's own events, before the hints given after it add theirs.
        if self.feedback {
            backend.drain_events(&mut self.observed);
        } else if first && self.keep {
            backend.drain_events(&mut self.events);
        }
        if first {
            policy.before(index, op, &mut Hints::new(backend))?;
        }
        for hint in ahead {
            hint.issue(backend)?;
        }
        self.learn_and_after(t0, index, op, policy, backend)?;
        Ok(out)
    }

    /// Sets the events so far apart from the operation's own, which the policy learns from:
    /// kept for the sink where one wants them, dropped otherwise. What the policy's hints (and
    /// data prepared ahead) did is not the operation's: a prefetch populating a region the
    /// kernel does not use is not the kernel touching it.
    fn set_aside_earlier_events(&mut self, policy: &mut dyn Policy, backend: &mut dyn MemoryBackend) {
        if !(self.feedback || self.keep) {
            return;
        }
        if self.keep {
            policy.drain_events(&mut self.events);
        }
        backend.drain_events(&mut self.events);
        if !self.keep {
            self.events.clear();
        }
    }

    /// The policy's learning from the operation's events and its `after` (host work begun at
    /// `t0`), then the events kept for the sink in their order.
    fn learn_and_after(
        &mut self,
        t0: Instant,
        index: u64,
        op: &Op,
        policy: &mut dyn Policy,
        backend: &mut dyn MemoryBackend,
    ) -> Result<()> {
        if self.feedback {
            policy.observe(&self.observed);
        }
        policy.after(index, op, &mut Hints::new(backend))?;
        self.policy_done(t0, backend);
        if self.keep {
            // The operation's own events, then the policy's hints given after it.
            self.events.append(&mut self.observed);
            policy.drain_events(&mut self.events);
            backend.drain_events(&mut self.events);
        }
        self.observed.clear();
        Ok(())
    }
}

/// Whether a kernel's data is all where it runs: every byte it touches on the device, and
/// none it writes duplicated read-mostly (those duplicates must collapse before it runs).
/// Data not populated yet is not in place: the room for it is the policy's to make.
fn in_place(accesses: &[RangeAccess], backend: &dyn MemoryBackend) -> Result<bool> {
    for a in accesses.iter().filter(|a| a.len > 0) {
        let r = backend.residency(ByteRange { region: a.region, offset: a.offset, len: a.len })?;
        let ready = if a.mode.writes() { r.device } else { r.on_device() };
        if ready < a.len {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::sim::{CostModel, SimBackend};
    use crate::seam::{Advice, ByteRange, DeviceId, KernelLaunch, Location, MemoryBackendExt};
    use crate::{AccessMode, RangeAccess};

    const MIB: u64 = 1 << 20;

    /// Before each kernel, prefetches region 2 for a later kernel; `says_hints`: what it answers
    /// to [`Policy::gives_hints`].
    struct Ahead {
        says_hints: bool,
    }

    impl Policy for Ahead {
        fn name(&self) -> &'static str {
            "ahead"
        }
        fn gives_hints(&self) -> bool {
            self.says_hints
        }
        fn before(&mut self, _: u64, op: &Op, hints: &mut Hints<'_>) -> Result<()> {
            if let Op::Kernel { .. } = op {
                hints.prefetch_ahead(&[ByteRange { region: RegionId(2), offset: 0, len: 4 * MIB }])?;
            }
            Ok(())
        }
    }

    /// Where, among the events of one kernel on region 1 run by `run`, the kernel's event and
    /// region 2's prefetch come.
    fn order(
        says_hints: bool,
        run: impl FnOnce(&mut Protocol, &Op, &mut Ahead, &mut SimBackend) -> bool,
    ) -> (usize, usize, bool) {
        let mut backend = SimBackend::new(CostModel::h200(), 64 * MIB);
        for id in [1, 2] {
            backend.allocate(RegionId(id), 4 * MIB).unwrap();
            backend.write(RegionId(id), 0, &vec![1; (4 * MIB) as usize]).unwrap();
        }
        let mut policy = Ahead { says_hints };
        let mut protocol = Protocol::new(&mut policy, &mut backend, true);
        let acc = vec![RangeAccess { region: RegionId(1), offset: 0, len: 4 * MIB, mode: AccessMode::Read }];
        let op = Op::Kernel { name: "k".into(), dur_ns: 1000, accesses: acc };
        let issued = run(&mut protocol, &op, &mut policy, &mut backend);
        let events = &protocol.events;
        let kernel = events.iter().position(|e| matches!(e, MemEvent::Kernel { .. })).expect("kernel ran");
        let prefetch = events
            .iter()
            .position(|e| matches!(e, MemEvent::Migration { region: RegionId(2), .. }))
            .expect("region 2 came in");
        (kernel, prefetch, issued)
    }

    fn launch(op: &Op) -> impl FnOnce(&mut dyn MemoryBackend) -> Result<()> + '_ {
        move |b| {
            let Op::Kernel { name, dur_ns, accesses } = op else { unreachable!() };
            b.launch(&KernelLaunch { name, dur_ns: *dur_ns, accesses })
        }
    }

    #[test]
    fn prefetches_ahead_come_after_an_awaited_operation_is_issued_and_before_one_replayed() {
        // Replayed: every hint of `before` precedes the kernel.
        let (kernel, prefetch, _) = order(true, |p, op, policy, b| {
            p.run(0, op, policy, b, launch(op)).unwrap();
            false
        });
        assert!(prefetch < kernel, "prefetch at {prefetch}, kernel at {kernel}");
        // Awaited: the caller hears of the kernel first, then the prefetch is issued.
        let (kernel, prefetch, issued) = order(true, |p, op, policy, b| {
            let mut told = false;
            p.run_then(0, op, policy, b, launch(op), Some(|| told = true)).unwrap();
            told
        });
        assert!(issued, "the caller was told");
        assert!(kernel < prefetch, "prefetch at {prefetch}, kernel at {kernel}");
    }

    #[test]
    fn a_kernel_with_its_data_in_place_runs_before_the_policy_plans() {
        // Only a policy that gives hints is asked; one that says it gives none keeps the usual
        // order (the same for it: its `before` does nothing).
        for says_hints in [true, false] {
            let (kernel, prefetch, _) = order(says_hints, |p, op, policy, b| {
                b.prefetch(
                    &[ByteRange { region: RegionId(1), offset: 0, len: 4 * MIB }],
                    Location::Device(DeviceId(0)),
                )
                .unwrap();
                p.run(0, op, policy, b, launch(op)).unwrap();
                false
            });
            assert_eq!(kernel < prefetch, says_hints, "prefetch at {prefetch}, kernel at {kernel}");
        }
    }

    fn access(region: u64, mode: AccessMode) -> RangeAccess {
        RangeAccess { region: RegionId(region), offset: 0, len: 4 * MIB, mode }
    }

    #[test]
    fn data_is_in_place_only_where_all_of_it_is_on_the_device_and_no_write_meets_a_duplicate() {
        let mut b = SimBackend::new(CostModel::h200(), 64 * MIB);
        let whole = |id| ByteRange { region: RegionId(id), offset: 0, len: 4 * MIB };
        for id in 1..=4 {
            b.allocate(RegionId(id), 4 * MIB).unwrap();
        }
        // 1: on the device; 2: on the host; 3: duplicated read-mostly; 4: never touched.
        b.write(RegionId(1), 0, &vec![1; (4 * MIB) as usize]).unwrap();
        b.prefetch(&[whole(1)], Location::Device(DeviceId(0))).unwrap();
        b.write(RegionId(2), 0, &vec![2; (4 * MIB) as usize]).unwrap();
        b.write(RegionId(3), 0, &vec![3; (4 * MIB) as usize]).unwrap();
        b.advise(whole(3), Advice::SetReadMostly).unwrap();
        b.prefetch(&[whole(3)], Location::Device(DeviceId(0))).unwrap();
        assert_eq!(b.residency(whole(3)).unwrap().duplicated, 4 * MIB);

        let read = |id| access(id, AccessMode::Read);
        assert!(in_place(&[read(1), read(3)], &b).unwrap());
        assert!(in_place(&[access(1, AccessMode::ReadWrite)], &b).unwrap());
        assert!(!in_place(&[read(1), read(2)], &b).unwrap(), "a host byte");
        assert!(!in_place(&[access(3, AccessMode::Write)], &b).unwrap(), "a write to duplicates");
        assert!(!in_place(&[access(4, AccessMode::Write)], &b).unwrap(), "an output to make room for");
        // An empty access needs nothing.
        assert!(in_place(&[RangeAccess { len: 0, ..read(2) }], &b).unwrap());
    }
}
