//! The replay engine: plays a trace through a policy on a backend, streaming (memory is bounded
//! by the policy's lookahead window, never by the trace), and reports time against the compute
//! floor.

mod report;

use std::collections::VecDeque;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::time::Instant;

pub use crate::policy::Learning;
pub use report::{PlacementBytes, PrefetchMetrics, ReplayReport, StepReport};

/// The driver's fault unit (64 KiB), for counting faults avoided.
const FAULT_UNIT_BYTES: u64 = 64 << 10;

use crate::access::RangeAccess;
use crate::seam::{ByteRange, KernelLaunch, MemoryBackend, MemoryBackendExt, WorkMark};

use crate::error::{Error, Result};
use crate::op::Op;
use crate::policy::Policy;
use crate::protocol::{self, EventSink};
use crate::region::RegionId;
use crate::trace::TraceReader;

/// How often (in events) the progress callback is called.
pub const PROGRESS_EVERY: u64 = 1 << 16;

/// Events per batch handed from the parsing thread to the replay thread.
const BATCH: usize = 4096;
/// Batches in flight between the threads: bounds the memory of the pipeline.
const BATCHES_IN_FLIGHT: usize = 4;

/// Events parsed (and validated) on a thread of their own, so that parsing and simulating use
/// two cores; the bounded channel keeps memory flat however long the trace.
struct Parsed {
    rx: crossbeam_channel::Receiver<Result<Vec<ParsedOp>>>,
    batch: std::vec::IntoIter<ParsedOp>,
}

/// One event as the replay runs it.
struct ParsedOp {
    /// Its line in the trace file.
    line: u64,
    op: Op,
    /// A kernel's recorded host time ([`crate::trace::TraceEvent::Kernel`]).
    host_ns: Option<u64>,
}

impl Parsed {
    fn spawn<'s>(scope: &'s std::thread::Scope<'s, '_>, mut reader: TraceReader) -> Result<Self> {
        let (tx, rx) = crossbeam_channel::bounded(BATCHES_IN_FLIGHT);
        let parser = std::thread::Builder::new().name("unimem-parse".into());
        let spawned = parser.spawn_scoped(scope, move || loop {
            let mut batch = Vec::with_capacity(BATCH);
            let outcome = loop {
                match reader.next_event() {
                    Ok(Some(event)) => {
                        let host_ns = match event {
                            crate::trace::TraceEvent::Kernel { host_ns, .. } => host_ns,
                            _ => None,
                        };
                        batch.push(ParsedOp { line: reader.line(), op: Op::from(event), host_ns });
                        if batch.len() == BATCH {
                            break Ok(false);
                        }
                    }
                    Ok(None) => break Ok(true),
                    Err(e) => break Err(e),
                }
            };
            let (done, sent) = match outcome {
                Ok(done) => (done, tx.send(Ok(batch))),
                Err(e) => (true, tx.send(Err(e))),
            };
            // A failed send means the replay stopped early: nobody wants more events.
            if done || sent.is_err() {
                return;
            }
        });
        spawned.map_err(|e| crate::Error::io("starting the trace parser thread", e))?;
        Ok(Self { rx, batch: Vec::new().into_iter() })
    }

    /// The next operation.
    fn next_op(&mut self) -> Result<Option<ParsedOp>> {
        loop {
            if let Some(event) = self.batch.next() {
                return Ok(Some(event));
            }
            match self.rx.recv() {
                Ok(batch) => self.batch = batch?.into_iter(),
                Err(_) => return Ok(None),
            }
        }
    }
}

/// Finds the regions whose first access reads them: they hold data from before the trace
/// (weights, inputs) and start on the host (trace-v1 semantics). It looks at events as they are
/// read, before any policy acts on them, so a policy never sees such a region without its data.
struct PreExisting<'a> {
    /// Every such region of the trace, when a first pass found them ([`Options::pre_existing`]):
    /// each is put on the host as it is allocated, before the kernels around its first use are
    /// queued (on a GPU, touching pages from the host waits for the device).
    known: Option<&'a HashSet<u64>>,
    /// Regions read (allocated in the window) that no event has touched yet: id -> bytes.
    untouched: HashMap<u64, u64>,
    /// Regions known to start on the host whose `alloc` has not run yet.
    pending: HashMap<u64, u64>,
    /// Regions whose `alloc` has run.
    allocated: HashSet<u64>,
}

impl<'a> PreExisting<'a> {
    fn new(known: Option<&'a HashSet<u64>>) -> Self {
        Self {
            known,
            untouched: HashMap::default(),
            pending: HashMap::default(),
            allocated: HashSet::default(),
        }
    }

    /// An operation entered the window.
    fn on_read(&mut self, op: &Op, backend: &mut dyn MemoryBackend) -> Result<()> {
        if self.known.is_some() {
            return Ok(());
        }
        if let Op::Alloc { region, bytes, .. } = op {
            self.untouched.insert(region.0, *bytes);
        }
        for a in op.accesses() {
            let id = a.region.0;
            let Some(bytes) = self.untouched.remove(&id) else {
                continue;
            };
            if a.mode.reads() {
                if self.allocated.contains(&id) {
                    backend.preload_host(ByteRange::whole(a.region, bytes))?;
                } else {
                    self.pending.insert(id, bytes);
                }
            }
        }
        Ok(())
    }

    /// Region `id` of `bytes` was allocated.
    fn on_alloc(&mut self, id: u64, bytes: u64, backend: &mut dyn MemoryBackend) -> Result<()> {
        if let Some(known) = self.known {
            if known.contains(&id) {
                backend.preload_host(ByteRange::whole(RegionId(id), bytes))?;
            }
            return Ok(());
        }
        self.allocated.insert(id);
        if let Some(bytes) = self.pending.remove(&id) {
            backend.preload_host(ByteRange::whole(RegionId(id), bytes))?;
        }
        Ok(())
    }

    /// A region was freed.
    fn on_free(&mut self, id: u64) {
        self.allocated.remove(&id);
        self.untouched.remove(&id);
    }
}

/// Replays `reader` through `policy` on `backend`. Trace region ids become [`RegionId`]s as
/// they are (they are unique in a trace). `progress` is called every [`PROGRESS_EVERY`] events
/// with the number of events done.
pub fn run(
    reader: TraceReader,
    backend: &mut dyn MemoryBackend,
    policy: &mut dyn Policy,
    progress: &mut dyn FnMut(u64),
) -> Result<ReplayReport> {
    run_with(reader, backend, policy, progress, Options::default())
}

/// [`run`], sending the backend's events (recording turned on) and the regions to `sink`.
pub fn run_with_events(
    reader: TraceReader,
    backend: &mut dyn MemoryBackend,
    policy: &mut dyn Policy,
    progress: &mut dyn FnMut(u64),
    sink: Option<&mut dyn EventSink>,
) -> Result<ReplayReport> {
    run_with(reader, backend, policy, progress, Options { sink, ..Options::default() })
}

/// How a replay runs, besides its trace, backend and policy.
pub struct Options<'a> {
    /// Where the telemetry goes (the backend records its events while there is one).
    pub sink: Option<&'a mut dyn EventSink>,
    /// With `n > 0`, the policy does not see the accesses to regions whose trace id is a
    /// multiple of `n`, while the backend still performs them: a program that did not declare
    /// everything it touches. The policy can only learn those from faults.
    pub undeclared_every: u64,
    /// The regions whose first access reads them (data from before the trace, which starts on
    /// the host), from a first pass over the trace ([`crate::trace::TraceStats::pre_existing`]).
    /// Without it the replay finds them as their first access enters the policy's window, and
    /// puts them on the host then: on a GPU that waits for the kernels queued before.
    pub pre_existing: Option<&'a HashSet<u64>>,
    /// Each kernel is issued no sooner than its recorded host time (`host_ns`) after the one
    /// before, as the program issued them (`replay.program_host_time`; on by default). Traces
    /// without host times replay the same either way.
    pub program_host_time: bool,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Self { sink: None, undeclared_every: 0, pre_existing: None, program_host_time: true }
    }
}

/// The event as the policy sees it: without the accesses the program did not declare (`None`
/// when it declared them all).
fn declared_part(op: &Op, every: u64) -> Option<Op> {
    let hidden = |a: &RangeAccess| every > 0 && a.region.0 % every == 0;
    if !op.accesses().iter().any(hidden) {
        return None;
    }
    let keep = |acc: &[RangeAccess]| acc.iter().filter(|a| !hidden(a)).cloned().collect();
    Some(match op {
        Op::Kernel { name, dur_ns, accesses } => {
            Op::Kernel { name: name.clone(), dur_ns: *dur_ns, accesses: keep(accesses) }
        }
        Op::Host { name, accesses } => Op::Host { name: name.clone(), accesses: keep(accesses) },
        other => other.clone(),
    })
}

/// [`run`] with [`Options`].
pub fn run_with(
    reader: TraceReader,
    backend: &mut dyn MemoryBackend,
    policy: &mut dyn Policy,
    progress: &mut dyn FnMut(u64),
    options: Options<'_>,
) -> Result<ReplayReport> {
    let file = reader.file().to_string();
    std::thread::scope(move |scope| {
        let events = Parsed::spawn(scope, reader)?;
        replay_events(events, file, backend, policy, progress, options)
    })
}

/// An operation read ahead of the one running, with the part of it the policy sees where
/// that differs.
struct Ahead {
    index: u64,
    line: u64,
    op: Op,
    seen: Option<Op>,
    host_ns: Option<u64>,
}

/// Where a step began: its index, the backend's mark of the work before it (timed once the
/// replay is done: waiting for it here would drain the device's queue at every step) and the
/// compute floor at its start.
struct StepMark {
    index: u64,
    start: WorkMark,
    floor_ns: u64,
}

/// A step's start, timed.
struct StepStart {
    index: u64,
    start_ns: u64,
    floor_ns: u64,
}

/// What running the operations has added up.
#[derive(Default)]
struct Totals {
    /// Sum of kernel durations: the time with every byte already on the device.
    floor_ns: u64,
    /// Sum of the kernels' recorded host times the replay held them to.
    program_host_ns: u64,
    kernels: u64,
    marks: Vec<StepMark>,
}

impl Totals {
    /// Runs one operation on the backend.
    fn apply(
        &mut self,
        op: &Op,
        backend: &mut dyn MemoryBackend,
        sink: Option<&mut (dyn EventSink + '_)>,
        pre: &mut PreExisting<'_>,
    ) -> Result<()> {
        match op {
            Op::Alloc { region, bytes, name } => {
                let address = backend.allocate(*region, *bytes)?;
                if let Some(sink) = sink {
                    sink.region(*region, *bytes, name.as_deref(), address)?;
                }
                pre.on_alloc(region.0, *bytes, backend)?;
            }
            Op::Free { region } => {
                pre.on_free(region.0);
                backend.free(*region)?;
                if let Some(sink) = sink {
                    sink.freed(*region)?;
                }
            }
            Op::Kernel { name, dur_ns, accesses } => {
                backend.launch(&KernelLaunch { name, dur_ns: *dur_ns, accesses })?;
                self.floor_ns += dur_ns;
                self.kernels += 1;
            }
            Op::Host { accesses, .. } => backend.touch_on_host(accesses)?,
            Op::Step { index } => self.marks.push(StepMark {
                index: *index,
                start: backend.mark_work()?,
                floor_ns: self.floor_ns,
            }),
        }
        Ok(())
    }

    /// Time and compute floor of each step, ending at `end_ns` (the backend's work is done).
    /// Work before the first step marker (or with no markers at all) forms a step of its own.
    fn steps(&self, end_ns: u64, backend: &mut dyn MemoryBackend) -> Result<Vec<StepReport>> {
        let mut starts = self
            .marks
            .iter()
            .map(|m| {
                Ok(StepStart {
                    index: m.index,
                    start_ns: backend.work_mark_ns(m.start)?,
                    floor_ns: m.floor_ns,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if starts.first().is_none_or(|m| m.start_ns > 0 || m.floor_ns > 0) {
            let first = starts.first().map(|m| m.index.saturating_sub(1)).unwrap_or(0);
            starts.insert(0, StepStart { index: first, start_ns: 0, floor_ns: 0 });
        }
        let end = StepStart { index: 0, start_ns: end_ns, floor_ns: self.floor_ns };
        Ok(starts
            .iter()
            .zip(starts.iter().skip(1).chain(std::iter::once(&end)))
            .map(|(m, next)| StepReport {
                index: m.index,
                time_ns: next.start_ns - m.start_ns,
                compute_floor_ns: next.floor_ns - m.floor_ns,
            })
            .filter(|s| s.time_ns > 0 || s.compute_floor_ns > 0)
            .collect())
    }
}

fn replay_events(
    mut reader: Parsed,
    file: String,
    backend: &mut dyn MemoryBackend,
    policy: &mut dyn Policy,
    progress: &mut dyn FnMut(u64),
    options: Options<'_>,
) -> Result<ReplayReport> {
    let wall = Instant::now();
    let Options { mut sink, undeclared_every, pre_existing, program_host_time } = options;
    let mut protocol = protocol::Protocol::new(policy, backend, sink.is_some());
    let lookahead = policy.lookahead();
    let mut window: VecDeque<Ahead> = VecDeque::with_capacity(lookahead + 1);
    let mut read = 0u64;
    let mut exhausted = false;
    let mut pre = PreExisting::new(pre_existing);
    let mut totals = Totals::default();

    loop {
        // The policy sees `lookahead` operations ahead of the one running.
        while !exhausted && window.len() <= lookahead {
            match reader.next_op()? {
                Some(ParsedOp { line, op, host_ns }) => {
                    pre.on_read(&op, backend).map_err(|e| Error::at(&file, line, e))?;
                    let seen = declared_part(&op, undeclared_every);
                    policy.on_future(read, seen.as_ref().unwrap_or(&op));
                    window.push_back(Ahead { index: read, line, op, seen, host_ns });
                    read += 1;
                }
                None => exhausted = true,
            }
        }
        let Some(Ahead { index, line, op, seen, host_ns }) = window.pop_front() else {
            break;
        };
        // The program issues the kernel once its own host time has passed, and the policy's
        // work for it comes after, as the runtime's did when it was recorded.
        if program_host_time && matches!(op, Op::Kernel { .. }) {
            let host_ns = host_ns.unwrap_or(0);
            backend.program_host_time(host_ns);
            totals.program_host_ns += host_ns;
        }
        let seen = seen.as_ref().unwrap_or(&op);
        let ran = protocol.run(index, seen, policy, backend, |backend| {
            totals.apply(&op, backend, sink.as_deref_mut(), &mut pre)
        });
        ran.map_err(|e| Error::at(&file, line, e))?;
        match sink.as_deref_mut() {
            Some(sink) => protocol.hand_to_sink(sink, policy)?,
            None => protocol.events.clear(),
        }
        if (index + 1) % PROGRESS_EVERY == 0 {
            progress(index + 1);
        }
    }
    let end = backend.synchronize()?;
    let steps = totals.steps(end, backend)?;
    if let Some(sink) = sink {
        backend.drain_events(&mut protocol.events);
        sink.events(&protocol.events)?;
    }
    progress(read);

    let stats = backend.stats();
    let (compute_floor_ns, kernels) = (totals.floor_ns, totals.kernels);
    Ok(ReplayReport {
        trace: file,
        backend: backend.kind(),
        backend_detail: backend.describe().to_string(),
        memory: None,
        policy: policy.name().to_string(),
        budget_bytes: backend.device_capacity(),
        time_ns: end,
        compute_floor_ns,
        program_host_ns: totals.program_host_ns,
        h2d_bytes: stats.h2d_bytes,
        d2h_bytes: stats.d2h_bytes,
        gpu_faults: stats.gpu_faults,
        cpu_faults: stats.cpu_faults,
        peak_resident_bytes: stats.peak_device_bytes,
        peak_footprint_bytes: stats.peak_footprint_bytes,
        prefetch_h2d_bytes: stats.prefetch_h2d_bytes,
        prefetch_d2h_bytes: stats.prefetch_d2h_bytes,
        evicted_bytes: stats.evicted_bytes,
        discarded_bytes: stats.discarded_bytes,
        stall_ns: stats.stall_ns,
        prefetch: PrefetchMetrics::from_stats(&stats, FAULT_UNIT_BYTES),
        placement: PlacementBytes::from_stats(&stats),
        events: read,
        kernels,
        steps,
        wall_ns: wall.elapsed().as_nanos() as u64,
        policy_ns: protocol.policy_ns,
        backend_host: stats.host,
        learning: policy.learning(),
        bound: None,
    })
}

#[cfg(test)]
mod host_time_tests;
#[cfg(test)]
mod integrity_tests;
#[cfg(test)]
mod tests;
