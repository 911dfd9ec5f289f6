//! The engine: one worker thread that owns the backend and the policy and executes the
//! runtime's commands in order. Before each operation the policy plans (prefetch, evict,
//! duplicate, remote, discard) and issues its hints on the backend; the backend puts transfers
//! on its copy streams, so that a kernel waits for data in flight rather than faulting on it.
//! A backend error on asynchronous work is kept and returned by the next synchronize.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use crate::access::RangeAccess;
use crate::error::{Error, Result};
use crate::op::Op;
use crate::protocol::Protocol;
use crate::region::RegionId;
use crate::seam::{
    BackendStats, KernelLaunch, MemoryBackend, MemoryBackendExt, NativeLaunch, ProgramStream, ProgramStreams,
};
use crate::trace::{KernelTimes, TraceRecording};
use crate::{policy::Policy, protocol::EventSink};

/// What the backend looked like at a synchronize.
pub(super) struct Snapshot {
    pub clock_ns: u64,
    pub device_resident_bytes: u64,
    pub stats: BackendStats,
    pub policy_ns: u64,
    pub engine: EngineTime,
}

/// Wall time the engine thread spent executing commands, ns by kind of command: its whole
/// work for each (the policy, the backend's calls timed or not, bookkeeping), so that a
/// program waiting on it sees where its waits go. Waiting for the next command is not in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineTime {
    /// Kernels the program enqueues itself ([`super::Runtime::launch_on`]).
    pub program_launch: u64,
    /// Their ends ([`super::Runtime::finish_on`]).
    pub program_finish: u64,
    /// Allocations for the program's streams.
    pub program_alloc: u64,
    /// Frees after the program's work.
    pub program_free: u64,
    /// The runtime's own kernels (launched, on the CPU or native).
    pub launch: u64,
    /// Allocations and frees of the runtime's own calls.
    pub alloc_free: u64,
    /// Host reads and writes.
    pub host_access: u64,
    /// Step marks.
    pub step: u64,
    /// Synchronisations, trace and telemetry ends.
    pub sync: u64,
}

/// Which counter of [`EngineTime`] a command's time goes to.
type Slot = fn(&mut EngineTime) -> &mut u64;

impl Command {
    /// The counter of [`EngineTime`] this command's time goes to (none for shutting down).
    fn slot(&self) -> Option<Slot> {
        Some(match self {
            Command::ProgramLaunch { .. } => |t| &mut t.program_launch,
            Command::ProgramFinish { .. } => |t| &mut t.program_finish,
            Command::ProgramAlloc { .. } => |t| &mut t.program_alloc,
            Command::ProgramFree { .. } => |t| &mut t.program_free,
            Command::Launch { .. } | Command::CpuKernel { .. } | Command::Native { .. } => |t| &mut t.launch,
            Command::KernelStore { .. } | Command::HostWrite { .. } | Command::HostRead { .. } => {
                |t| &mut t.host_access
            }
            Command::Alloc { .. } | Command::Free { .. } => |t| &mut t.alloc_free,
            Command::Step => |t| &mut t.step,
            Command::StopRecording { .. } | Command::CloseTelemetry { .. } | Command::Sync { .. } => {
                |t| &mut t.sync
            }
            Command::Shutdown => return None,
        })
    }
}

/// Enqueues a native kernel, given the stream and the device address of each access.
pub(super) type NativeJob = Box<dyn FnOnce(&NativeLaunch<'_>) -> Result<()> + Send>;

/// Work for the engine.
pub(super) enum Command {
    Alloc {
        id: RegionId,
        bytes: u64,
        name: Arc<str>,
        reply: Sender<Result<u64>>,
    },
    Free {
        id: RegionId,
    },
    Launch {
        name: Arc<str>,
        dur_ns: u64,
        acc: Vec<RangeAccess>,
        /// When the program issued it (each kernel command carries it: the trace's host time).
        issued: Instant,
    },
    HostWrite {
        range: RangeAccess,
        data: Vec<u8>,
        reply: Sender<Result<()>>,
    },
    HostRead {
        range: RangeAccess,
        reply: Sender<Result<Vec<u8>>>,
    },
    /// A kernel the host executes: launched (timed, placed) like any other, then the bytes
    /// of its ranges as it sees them are sent back.
    CpuKernel {
        name: Arc<str>,
        dur_ns: u64,
        acc: Vec<RangeAccess>,
        issued: Instant,
        reply: Sender<Result<Vec<Vec<u8>>>>,
    },
    /// A real GPU kernel: `job` enqueues it once the backend has placed its data.
    Native {
        name: Arc<str>,
        acc: Vec<RangeAccess>,
        job: NativeJob,
        issued: Instant,
        reply: Sender<Result<()>>,
    },
    /// A kernel the program enqueues itself on `stream`, once its data is placed.
    ProgramLaunch {
        name: Arc<str>,
        acc: Vec<RangeAccess>,
        stream: ProgramStream,
        issued: Instant,
        reply: Sender<Result<()>>,
    },
    /// An allocation for the program's `stream`; `written`: by the latest kernel, still
    /// running (an output it allocates).
    ProgramAlloc {
        id: RegionId,
        bytes: u64,
        name: Arc<str>,
        stream: ProgramStream,
        written: bool,
        reply: Sender<Result<u64>>,
    },
    /// A free after the work the program enqueued on `stream`.
    ProgramFree {
        id: RegionId,
        stream: ProgramStream,
    },
    /// The latest program kernel is complete on `stream`.
    ProgramFinish {
        stream: ProgramStream,
    },
    /// The bytes a host-executed kernel wrote.
    KernelStore {
        stores: Vec<(RangeAccess, Vec<u8>)>,
        reply: Sender<Result<()>>,
    },
    Step,
    /// Ends the trace being recorded: its file, if there was one.
    StopRecording {
        reply: Sender<Result<Option<std::path::PathBuf>>>,
    },
    /// Writes what the telemetry log holds and closes it (once the work issued so far is
    /// done); later events go nowhere.
    CloseTelemetry {
        reply: Sender<Result<()>>,
    },
    Sync {
        reply: Sender<Result<Snapshot>>,
    },
    Shutdown,
}

/// The worker thread.
pub(super) struct Engine {
    handle: JoinHandle<()>,
}

impl Engine {
    pub(super) fn spawn(
        mut backend: Box<dyn MemoryBackend>,
        mut policy: Box<dyn Policy>,
        sink: Option<Box<dyn EventSink + Send>>,
        trace: Option<TraceRecording>,
        rx: Receiver<Command>,
    ) -> Self {
        let protocol = Protocol::new(policy.as_mut(), backend.as_mut(), sink.is_some());
        // Measured kernel times come with the backend's kernel events.
        let timed = trace.as_ref().is_some_and(|t| t.times() == KernelTimes::Measured);
        if timed {
            backend.record_events(true);
        }
        let mut worker = Worker {
            backend,
            policy,
            sink,
            trace,
            timed,
            scratch: Vec::new(),
            protocol,
            index: 0,
            step: 0,
            failure: None,
            open: None,
            last_issue: None,
            busy: EngineTime::default(),
        };
        let handle = std::thread::Builder::new()
            .name("unimem-engine".into())
            .spawn(move || worker.run(rx))
            .expect("spawning the engine thread");
        Self { handle }
    }

    pub(super) fn join(self) {
        let _ = self.handle.join();
    }
}

struct Worker {
    backend: Box<dyn MemoryBackend>,
    policy: Box<dyn Policy>,
    /// Where the telemetry goes, if anywhere.
    sink: Option<Box<dyn EventSink + Send>>,
    /// The program's trace, if recorded.
    trace: Option<TraceRecording>,
    /// The trace takes the kernels' measured times from the backend's events.
    timed: bool,
    /// The backend's events without a sink (for the kernel times).
    scratch: Vec<crate::seam::MemEvent>,
    /// Each operation runs between the policy's hooks, as in a replay; its events wait there
    /// for the sink.
    protocol: Protocol,
    /// Event index, as in a trace.
    index: u64,
    step: u64,
    /// The first error met by asynchronous work since the last synchronize.
    failure: Option<Error>,
    /// The program's kernel still being enqueued (see [`OpenKernel`]).
    open: Option<OpenKernel>,
    /// When the program issued its latest kernel (for the trace's host times).
    last_issue: Option<Instant>,
    /// The time spent on commands so far.
    busy: EngineTime,
}

/// An output at least this large is populated on the device ahead of its kernel
/// ([`crate::seam::ProgramStreams::populate`]); a smaller one is left to the kernel's faults.
/// One 2 MiB block: the prefetch call costs about what faulting 12 of its 64 KiB units would
/// (70 us against 6 us each on the H200 profile), so below a block it hardly pays.
const POPULATE_MIN_BYTES: u64 = 2 << 20;

/// A program's kernel between its launch and its finish: the stream it runs on, the data it
/// declared, the outputs it allocates as it runs (its writes, accounted once it is finished,
/// where they were not populated ahead), and, when a trace is
/// recorded, the kernel held back from it until then (its outputs recorded after their
/// allocations).
struct OpenKernel {
    stream: ProgramStream,
    /// The accesses it declared: room for its outputs is never made out of them, since no
    /// mark covers the kernel until it is finished.
    inputs: Vec<RangeAccess>,
    outputs: Vec<RangeAccess>,
    held: Option<Op>,
    /// Its host time for the trace ([`crate::trace::TraceEvent::Kernel`]).
    host_ns: Option<u64>,
}

impl Worker {
    fn run(&mut self, rx: Receiver<Command>) {
        while let Ok(command) = super::recv_soon(&rx) {
            let (began, slot) = (Instant::now(), command.slot());
            let within_program_kernel = matches!(
                command,
                Command::ProgramAlloc { .. } | Command::ProgramFree { .. } | Command::ProgramFinish { .. }
            );
            if !within_program_kernel {
                let r = self.close_program_kernel(None);
                self.keep(r);
            }
            match command {
                Command::Alloc { id, bytes, name, reply } => {
                    let op = Op::Alloc { region: id, bytes, name: Some(name.clone()) };
                    let r = self.around(&op, |b| b.allocate(id, bytes)).and_then(|address| {
                        match self.sink.as_mut() {
                            Some(sink) => sink.region(id, bytes, Some(&name), address).map(|()| address),
                            None => Ok(address),
                        }
                    });
                    let _ = reply.send(r);
                }
                Command::Free { id } => {
                    let r = self
                        .around(&Op::Free { region: id }, |b| b.free(id))
                        .and_then(|()| self.sink.as_mut().map_or(Ok(()), |sink| sink.freed(id)));
                    self.keep(r);
                }
                Command::Launch { name, dur_ns, acc, issued } => {
                    let op = Op::Kernel { name: name.clone(), dur_ns, accesses: acc.clone() };
                    let host_ns = self.host_interval(issued);
                    let r = self.around_issued(&op, host_ns, |b| {
                        b.launch(&KernelLaunch { name: &name, dur_ns, accesses: &acc })
                    });
                    self.keep(r);
                }
                Command::CpuKernel { name, dur_ns, acc, issued, reply } => {
                    let op = Op::Kernel { name: name.clone(), dur_ns, accesses: acc.clone() };
                    let host_ns = self.host_interval(issued);
                    let r = self.around_issued(&op, host_ns, |b| {
                        b.launch(&KernelLaunch { name: &name, dur_ns, accesses: &acc })?;
                        acc.iter()
                            .map(|a| {
                                let mut buf = vec![0; a.len as usize];
                                b.kernel_view(a.region, a.offset, &mut buf).map(|()| buf)
                            })
                            .collect()
                    });
                    let _ = reply.send(r);
                }
                Command::Native { name, acc, job, issued, reply } => {
                    let op = Op::Kernel { name: name.clone(), dur_ns: 0, accesses: acc.clone() };
                    let mut job = Some(job);
                    let host_ns = self.host_interval(issued);
                    let r = self.around_issued(&op, host_ns, |b| {
                        let kind = b.kind();
                        let native = b.native().ok_or_else(|| Error::BackendUnavailable {
                            backend: kind.to_string(),
                            reason: "native GPU kernels need the CUDA backend; on the simulator launch on the CPU path"
                                .into(),
                        })?;
                        native.launch_native(
                            &KernelLaunch { name: &name, dur_ns: 0, accesses: &acc },
                            &mut |launch| job.take().map_or(Ok(()), |job| job(launch)),
                        )
                    });
                    let _ = reply.send(r);
                }
                Command::ProgramLaunch { name, acc, stream, issued, reply } => {
                    let op = Op::Kernel { name: name.clone(), dur_ns: 0, accesses: acc.clone() };
                    let host_ns = self.host_interval(issued);
                    // The program goes on once its stream waits for the data: the policy's
                    // prefetches for later kernels and its learning come after the reply.
                    let mut reply = Some(reply);
                    let r = self.around_open(
                        &op,
                        stream,
                        host_ns,
                        |b| {
                            let kernel = KernelLaunch { name: &name, dur_ns: 0, accesses: &acc };
                            program_streams(b)?.launch_on(&kernel, stream)
                        },
                        || {
                            if let Some(reply) = reply.take() {
                                let _ = reply.send(Ok(()));
                            }
                        },
                    );
                    match reply {
                        Some(reply) => {
                            let _ = reply.send(r);
                        }
                        None => self.keep(r),
                    }
                }
                Command::ProgramAlloc { id, bytes, name, stream, written, reply } => {
                    let r = self.program_alloc(id, bytes, &name, stream, written);
                    let _ = reply.send(r);
                }
                Command::ProgramFree { id, stream } => {
                    let r = self.program_free(id, stream);
                    self.keep(r);
                }
                Command::ProgramFinish { stream } => {
                    let r = self.close_program_kernel(Some(stream));
                    self.keep(r);
                }
                Command::KernelStore { stores, reply } => {
                    let r = stores
                        .iter()
                        .try_for_each(|(a, data)| self.backend.kernel_store(a.region, a.offset, data));
                    let _ = reply.send(r);
                }
                Command::HostWrite { range, data, reply } => {
                    let op = Op::Host { name: "host write".into(), accesses: vec![range] };
                    let _ = reply.send(self.around(&op, |b| b.write(range.region, range.offset, &data)));
                }
                Command::HostRead { range, reply } => {
                    let op = Op::Host { name: "host read".into(), accesses: vec![range] };
                    let mut buf = vec![0; range.len as usize];
                    let r = self.around(&op, |b| b.read(range.region, range.offset, &mut buf));
                    let _ = reply.send(r.map(|()| buf));
                }
                Command::Step => {
                    let op = Op::Step { index: self.step };
                    self.step += 1;
                    let r = self.around(&op, |_| Ok(()));
                    self.keep(r);
                }
                Command::StopRecording { reply } => {
                    let _ = reply.send(self.stop_recording());
                }
                Command::CloseTelemetry { reply } => {
                    let _ = reply.send(self.close_telemetry());
                }
                Command::Sync { reply } => {
                    let r = match self.failure.take() {
                        Some(e) => Err(e),
                        None => self.backend.synchronize().map(|clock_ns| Snapshot {
                            clock_ns,
                            device_resident_bytes: self.backend.device_resident_bytes(),
                            stats: self.backend.stats(),
                            policy_ns: self.protocol.policy_ns,
                            engine: self.busy,
                        }),
                    };
                    let _ = reply.send(r);
                }
                Command::Shutdown => break,
            }
            // After the command (and, for an allocation, its region record): its events.
            if self.sink.is_some() || self.timed {
                let r = self.drain();
                self.keep(r);
            }
            if let Some(slot) = slot {
                *slot(&mut self.busy) += began.elapsed().as_nanos() as u64;
            }
        }
        let r = self.close_program_kernel(None);
        self.keep(r);
        let _ = self.backend.synchronize();
        if let Err(e) = self.drain().and_then(|()| self.sink.as_mut().map_or(Ok(()), |sink| sink.close())) {
            tracing::warn!(error = %e, "writing the runtime's telemetry failed");
        }
        if let Err(e) = self.finish_trace() {
            tracing::error!(error = %e, "recording the program's trace failed");
        }
    }

    /// Ends the trace with every kernel's time (the device reaches them first).
    fn stop_recording(&mut self) -> Result<Option<std::path::PathBuf>> {
        if self.trace.is_none() {
            return Ok(None);
        }
        self.backend.synchronize()?;
        self.drain()?;
        self.finish_trace()
    }

    /// Closes the sink once the device has reached the work issued so far. A sink that takes
    /// no more events stands in for it, so that the operations run as they did.
    fn close_telemetry(&mut self) -> Result<()> {
        if self.sink.is_none() {
            return Ok(());
        }
        self.backend.synchronize()?;
        self.drain()?;
        let mut sink = self.sink.replace(Box::new(crate::protocol::NullSink)).expect("checked");
        sink.close()
    }

    /// Writes what the trace holds and closes it.
    fn finish_trace(&mut self) -> Result<Option<std::path::PathBuf>> {
        let Some(trace) = self.trace.take() else { return Ok(None) };
        let kernels = trace.kernels();
        let path = trace.finish()?;
        tracing::info!(kernels, path = %path.display(), "recorded the program's trace");
        if self.timed {
            self.timed = false;
            self.backend.record_events(self.sink.is_some());
        }
        Ok(Some(path))
    }

    /// Hands the operations' events, and whatever the policy and the backend recorded since,
    /// to the sink, the kernels' measured times to the trace.
    fn drain(&mut self) -> Result<()> {
        let Some(sink) = self.sink.as_mut() else {
            if self.timed {
                self.backend.drain_events(&mut self.scratch);
                let timed = Self::kernel_times(self.trace.as_mut(), &self.scratch);
                self.scratch.clear();
                return timed;
            }
            return Ok(());
        };
        self.policy.drain_events(&mut self.protocol.events);
        self.backend.drain_events(&mut self.protocol.events);
        if self.timed {
            Self::kernel_times(self.trace.as_mut(), &self.protocol.events)?;
        }
        self.protocol.hand_to_sink(sink.as_mut(), self.policy.as_mut())
    }

    /// Gives the trace the device time of each kernel among `events` (a GPU times them in
    /// launch order).
    fn kernel_times(trace: Option<&mut TraceRecording>, events: &[crate::seam::MemEvent]) -> Result<()> {
        let Some(trace) = trace else { return Ok(()) };
        for e in events {
            if let crate::seam::MemEvent::Kernel { start_ns, end_ns, .. } = *e {
                trace.kernel_time(end_ns.saturating_sub(start_ns))?;
            }
        }
        Ok(())
    }

    /// Runs one operation between the policy's `before` and `after`, as a replay does, and
    /// records it in the trace once it ran.
    fn around<T>(&mut self, op: &Op, execute: impl FnOnce(&mut dyn MemoryBackend) -> Result<T>) -> Result<T> {
        self.around_issued(op, None, execute)
    }

    /// [`Self::around`] for a kernel the program issued `host_ns` after the one before it.
    fn around_issued<T>(
        &mut self,
        op: &Op,
        host_ns: Option<u64>,
        execute: impl FnOnce(&mut dyn MemoryBackend) -> Result<T>,
    ) -> Result<T> {
        let out = self.run_op(op, execute, None::<fn()>)?;
        self.record(op, host_ns);
        Ok(out)
    }

    /// The program's host time from issuing its previous kernel to `issued`, where the trace
    /// measures kernel times: there the device's clock and the host's are both real, and a
    /// replay can hold the program's kernels to the pace it issued them at. On the simulator
    /// the program's host and the simulated device share no clock, so none is recorded.
    fn host_interval(&mut self, issued: Instant) -> Option<u64> {
        if !self.timed {
            return None;
        }
        let previous = self.last_issue.replace(issued)?;
        Some(issued.saturating_duration_since(previous).as_nanos() as u64)
    }

    /// Runs one operation between the policy's `before` and `after`, with the next index;
    /// `issued`, if given, is told once it is issued ([`Protocol::run_then`]).
    fn run_op<T>(
        &mut self,
        op: &Op,
        execute: impl FnOnce(&mut dyn MemoryBackend) -> Result<T>,
        issued: Option<impl FnOnce()>,
    ) -> Result<T> {
        let index = self.index;
        self.index += 1;
        self.protocol.run_then(index, op, self.policy.as_mut(), self.backend.as_mut(), execute, issued)
    }

    /// Records an operation that ran in the trace, if one is recorded.
    fn record(&mut self, op: &Op, host_ns: Option<u64>) {
        if let Some(trace) = self.trace.as_mut() {
            if let Err(e) = trace.op(op, host_ns) {
                // The program goes on; its trace is incomplete, so it is not kept.
                tracing::error!(error = %e, path = %trace.path().display(), "recording the program's trace failed; recording stops");
                self.trace = None;
            }
        }
    }

    /// [`Self::around`] for a program's kernel, which stays open until it is finished.
    /// `issued` is called once the kernel is placed and the program's stream waits for it.
    fn around_open(
        &mut self,
        op: &Op,
        stream: ProgramStream,
        host_ns: Option<u64>,
        execute: impl FnOnce(&mut dyn MemoryBackend) -> Result<()>,
        issued: impl FnOnce(),
    ) -> Result<()> {
        let mut launched = false;
        let notify = || {
            launched = true;
            issued();
        };
        let r = self.run_op(op, execute, Some(notify));
        // Once issued the program enqueues the kernel, whatever failed in the policy's work
        // after it (that error comes with the next synchronize).
        if launched {
            let held = self.trace.is_some().then(|| op.clone());
            let inputs = match op {
                Op::Kernel { accesses, .. } => accesses.clone(),
                _ => Vec::new(),
            };
            self.open = Some(OpenKernel { stream, inputs, outputs: Vec::new(), held, host_ns });
        }
        r
    }

    /// The open program kernel is finished on `stream` (or, if the program moved on without
    /// saying so, on its own): the backend follows it, its outputs are accounted, the trace
    /// gets it.
    fn close_program_kernel(&mut self, stream: Option<ProgramStream>) -> Result<()> {
        let Some(open) = self.open.take() else {
            // Nothing open: a finish with no launch before it orders nothing.
            return Ok(());
        };
        let streams = program_streams(self.backend.as_mut())?;
        let r = streams.finish(stream.unwrap_or(open.stream)).and_then(|()| {
            if open.outputs.is_empty() {
                Ok(())
            } else {
                streams.wrote(&open.outputs)
            }
        });
        if let Some(op) = open.held {
            self.record(&op, open.host_ns);
        }
        r
    }

    /// An allocation for the program's stream, which waits for its buffer (it may be one the
    /// program freed, with work still queued on it); `written` by the open kernel.
    fn program_alloc(
        &mut self,
        id: RegionId,
        bytes: u64,
        name: &Arc<str>,
        stream: ProgramStream,
        written: bool,
    ) -> Result<u64> {
        let op = Op::Alloc { region: id, bytes, name: Some(name.clone()) };
        let address = self.around(&op, |b| b.allocate(id, bytes))?;
        if let Some(sink) = self.sink.as_mut() {
            sink.region(id, bytes, Some(name), address)?;
        }
        let streams = program_streams(self.backend.as_mut())?;
        let write = RangeAccess { region: id, offset: 0, len: bytes, mode: crate::AccessMode::Write };
        if let Some(open) = self.open.as_ref().filter(|_| written && bytes >= POPULATE_MIN_BYTES) {
            let keep: Vec<RangeAccess> = open.inputs.iter().chain(&open.outputs).copied().collect();
            streams.populate(&[write], &keep)?;
        }
        streams.lead(stream)?;
        if let Some(open) = self.open.as_mut().filter(|_| written) {
            open.outputs.push(write);
            if let Some(Op::Kernel { accesses, .. }) = open.held.as_mut() {
                accesses.push(write);
            }
        }
        Ok(address)
    }

    /// A free after the program's work on `stream`. A region the open kernel allocated and
    /// frees as it runs (a workspace) was seen by no other operation: it is neither accounted
    /// nor recorded as the kernel's write.
    fn program_free(&mut self, id: RegionId, stream: ProgramStream) -> Result<()> {
        program_streams(self.backend.as_mut())?.follow(stream)?;
        let mut close = false;
        if let Some(open) = self.open.as_mut() {
            let before = open.outputs.len();
            open.outputs.retain(|a| a.region != id);
            let output = open.outputs.len() < before;
            if let Some(Op::Kernel { accesses, .. }) = open.held.as_mut() {
                if output {
                    accesses.retain(|a| a.region != id);
                }
                // Freed as an input of the open kernel: the kernel comes first in the trace.
                close = accesses.iter().any(|a| a.region == id);
            }
        }
        if close {
            self.close_program_kernel(Some(stream))?;
        }
        self.around(&Op::Free { region: id }, |b| b.free(id))?;
        self.sink.as_mut().map_or(Ok(()), |sink| sink.freed(id))
    }

    fn keep(&mut self, r: Result<()>) {
        if let Err(e) = r {
            tracing::warn!(error = %e, "asynchronous runtime work failed");
            self.failure.get_or_insert(e);
        }
    }
}

/// The backend's ordering with the program's streams, or why there is none.
fn program_streams(b: &mut dyn MemoryBackend) -> Result<&mut dyn ProgramStreams> {
    let kind = b.kind();
    b.program_streams().ok_or_else(|| Error::BackendUnavailable {
        backend: kind.to_string(),
        reason: "this backend cannot order its work with the program's own streams".into(),
    })
}
