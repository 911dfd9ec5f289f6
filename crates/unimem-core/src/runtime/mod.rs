//! The runtime an application uses: regions allocated, kernels launched and host accesses made
//! from any number of threads, each access recorded and fed to the advisor, which plans hints
//! within the budget and executes them on the backend.
//!
//! [`Runtime`] is `Send + Sync` and cheap to clone. Calls validate on the caller's thread
//! against the [`Registry`] (so misuse is an immediate error value) and record the access in
//! the [`AccessHistory`]; the work itself goes to the engine (`runtime/engine.rs`): one worker
//! thread, fed by a crossbeam channel, that owns the backend and the policy. A single worker keeps the
//! backend's order of operations the program's order, as one CUDA stream would, while the
//! advisor's own transfers run on the backend's copy streams (side streams on CUDA, the
//! simulated link on the simulator) and kernels wait for data in flight instead of faulting.

mod builder;
mod engine;
mod program;

pub use builder::{RuntimeBuilder, SinkFor};
pub use engine::EngineTime;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::{bounded, Sender};

use crate::access::{Access, AccessHistory, Accessor, RangeAccess};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::policy::Policy;
use crate::region::{Region, RegionId, Registry};
use crate::seam::{BackendKind, BackendStats, MemoryBackend, MemoryBackendExt};
use engine::{Command, Engine};

/// How long a thread waiting on the runtime's channels spins before it sleeps: the engine
/// for its next command, a caller for its reply. A program that calls the runtime for every
/// operator (PyTorch through its allocator) makes a round trip each time; waking a sleeping
/// thread costs more than the work in it.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Receives from `rx`, spinning for [`SPIN`] before sleeping.
fn recv_soon<T>(rx: &crossbeam_channel::Receiver<T>) -> std::result::Result<T, crossbeam_channel::RecvError> {
    let t0 = std::time::Instant::now();
    for round in 0u32.. {
        match rx.try_recv() {
            Ok(v) => return Ok(v),
            Err(crossbeam_channel::TryRecvError::Disconnected) => return Err(crossbeam_channel::RecvError),
            // The clock is read every 64 rounds: reading it is most of a round's cost.
            Err(crossbeam_channel::TryRecvError::Empty) if round % 64 == 63 && t0.elapsed() >= SPIN => break,
            Err(crossbeam_channel::TryRecvError::Empty) => std::hint::spin_loop(),
        }
    }
    rx.recv()
}

/// Accesses the runtime's history keeps (older ones are dropped; the predictors have learned
/// from them already).
const HISTORY: usize = 1 << 16;

/// Counters of a runtime, consistent at the moment of a [`Runtime::synchronize`].
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeStats {
    /// Live regions.
    pub live_regions: usize,
    /// Bytes of live regions.
    pub live_bytes: u64,
    /// Accesses recorded since the start.
    pub accesses_recorded: u64,
    /// Kernel launches and host accesses since the start.
    pub operations: u64,
    /// Device bytes the working set may use.
    pub budget_bytes: u64,
    /// Device-resident bytes of managed data now.
    pub device_resident_bytes: u64,
    /// Backend clock after synchronizing (virtual on the simulator).
    pub elapsed_ns: u64,
    /// Which backend runs the work.
    pub backend: BackendKind,
    /// The backend's counters.
    pub backend_stats: BackendStats,
    /// Host time the engine thread spent in the policy's hooks (planning, learning and the
    /// hints' calls, which `backend_stats.host` also counts by kind), ns. A program waiting
    /// on the runtime waits for it too.
    pub policy_host_ns: u64,
    /// Wall time the engine thread spent on commands, by kind (up to the synchronize).
    pub engine_ns: EngineTime,
}

struct Shared {
    registry: Registry,
    history: Mutex<AccessHistory>,
    operations: AtomicU64,
    tx: Sender<Command>,
    engine: Mutex<Option<Engine>>,
    budget: u64,
    backend: BackendKind,
}

/// The unimem runtime. See the module documentation.
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

/// A handle that does not keep the runtime alive (tensors hold one, so that dropping the
/// runtime ends it, and using a tensor afterwards is a clear error).
#[derive(Clone, Debug)]
pub struct WeakRuntime {
    shared: std::sync::Weak<Shared>,
}

impl WeakRuntime {
    /// The runtime, if it still exists.
    pub fn upgrade(&self) -> Option<Runtime> {
        self.shared.upgrade().map(|shared| Runtime { shared })
    }

    /// The runtime, or [`Error::Stopped`] naming `what` was being done.
    pub fn get(&self, what: &str) -> Result<Runtime> {
        self.upgrade().ok_or_else(|| Error::Stopped(format!("{what}: the runtime was dropped")))
    }
}

/// The bytes a host-executed kernel sees and writes (see [`Runtime::launch_cpu`]): one buffer
/// per declared access, in declaration order, holding the range's current bytes; buffers of
/// writing accesses are stored back when the body returns.
#[derive(Debug)]
pub struct KernelData {
    buffers: Vec<Vec<u8>>,
    modes: Vec<crate::AccessMode>,
}

impl KernelData {
    /// The bytes of access `i`.
    pub fn bytes(&self, i: usize) -> &[u8] {
        &self.buffers[i]
    }

    /// The bytes of access `i`, to modify; `None` if the access does not write.
    pub fn bytes_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        if self.modes[i].writes() {
            Some(&mut self.buffers[i])
        } else {
            None
        }
    }

    /// Number of accesses.
    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    /// True when the kernel declared no access.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("backend", &self.shared.backend)
            .field("budget", &self.shared.budget)
            .field("live_regions", &self.shared.registry.len())
            .finish()
    }
}

impl Runtime {
    /// A builder: the backend, budget, policy and telemetry of a new runtime.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// A runtime as `config` asks: its backend (`auto`: CUDA when present, else the simulator),
    /// its budget (a percent is of the device) and the advisor.
    pub fn from_config(config: &Config) -> Result<Self> {
        Self::builder().config(config.clone()).build()
    }

    /// Starts the engine: `policy` plans for `backend`, within its capacity.
    fn start(
        backend: Box<dyn MemoryBackend>,
        policy: Box<dyn Policy>,
        sink: Option<Box<dyn crate::protocol::EventSink + Send>>,
        trace: Option<crate::trace::TraceRecording>,
    ) -> Self {
        let budget = backend.device_capacity();
        let kind = backend.kind();
        let (tx, rx) = bounded(1024);
        let engine = Engine::spawn(backend, policy, sink, trace, rx);
        Self {
            shared: Arc::new(Shared {
                registry: Registry::new(),
                history: Mutex::new(AccessHistory::with_capacity(HISTORY)),
                operations: AtomicU64::new(0),
                tx,
                engine: Mutex::new(Some(engine)),
                budget,
                backend: kind,
            }),
        }
    }

    /// Which backend runs the work.
    pub fn backend(&self) -> BackendKind {
        self.shared.backend
    }

    /// Device bytes the working set may use.
    pub fn budget(&self) -> u64 {
        self.shared.budget
    }

    /// The registry of live regions (for lookups by id or address).
    pub fn registry(&self) -> &Registry {
        &self.shared.registry
    }

    fn send(&self, command: Command, what: &str) -> Result<()> {
        self.shared.tx.send(command).map_err(|_| Error::Stopped(what.to_string()))
    }

    /// Allocates a managed region of `bytes` bytes called `name`.
    pub fn alloc(&self, name: &str, bytes: u64) -> Result<Region> {
        if bytes == 0 {
            return Err(Error::Allocation { bytes, reason: "regions must be at least 1 byte".into() });
        }
        let id = self.shared.registry.next_id();
        let (reply, rx) = bounded(1);
        self.send(Command::Alloc { id, bytes, name: name.into(), reply }, "allocating")?;
        let addr = recv_soon(&rx).map_err(|_| Error::Stopped("allocating".into()))??;
        let name: Arc<str> = if name.is_empty() { format!("region{id}").into() } else { name.into() };
        let region = Region { id, addr, bytes, name };
        self.shared.registry.insert(region.clone())?;
        Ok(region)
    }

    /// Frees a region: its contents are dead. Work already issued on it completes first.
    pub fn free(&self, id: RegionId) -> Result<()> {
        self.shared.registry.remove(id)?;
        self.send(Command::Free { id }, "freeing")
    }

    fn check_and_record(&self, accesses: &[RangeAccess], by: Accessor) -> Result<()> {
        for a in accesses {
            self.shared.registry.get(a.region)?.check_range(a.offset, a.len)?;
        }
        let at = self.shared.operations.fetch_add(1, Ordering::Relaxed);
        let mut history = self.shared.history.lock().unwrap_or_else(|e| e.into_inner());
        for &range in accesses {
            history.record(Access { range, by, at });
        }
        Ok(())
    }

    /// Launches a kernel of `dur_ns` (its time with all data resident) that touches
    /// `accesses`. Asynchronous: errors of the backend surface at the next
    /// [`Runtime::synchronize`].
    pub fn launch(&self, name: &str, dur_ns: u64, accesses: &[RangeAccess]) -> Result<()> {
        self.check_and_record(accesses, Accessor::Device)?;
        let issued = Instant::now();
        self.send(Command::Launch { name: name.into(), dur_ns, acc: accesses.to_vec(), issued }, "launching")
    }

    /// Runs a kernel on the host, as the simulator's stand-in for a GPU kernel: it is declared,
    /// placed and timed exactly as [`Runtime::launch`] does, then `body` computes on the bytes
    /// of its ranges as the kernel sees them, and what it writes is stored back. Waits for the
    /// kernel (the body needs its inputs).
    pub fn launch_cpu<R>(
        &self,
        name: &str,
        dur_ns: u64,
        accesses: &[RangeAccess],
        body: impl FnOnce(&mut KernelData) -> R,
    ) -> Result<R> {
        self.check_and_record(accesses, Accessor::Device)?;
        let (reply, rx) = bounded(1);
        let acc = accesses.to_vec();
        let issued = Instant::now();
        self.send(Command::CpuKernel { name: name.into(), dur_ns, acc, issued, reply }, "launching")?;
        let buffers = recv_soon(&rx).map_err(|_| Error::Stopped("launching".into()))??;
        let mut data = KernelData { buffers, modes: accesses.iter().map(|a| a.mode).collect() };
        let out = body(&mut data);
        let stores: Vec<(RangeAccess, Vec<u8>)> = accesses
            .iter()
            .zip(data.buffers)
            .filter(|(a, _)| a.mode.writes())
            .map(|(a, b)| (*a, b))
            .collect();
        if !stores.is_empty() {
            let (reply, rx) = bounded(1);
            self.send(Command::KernelStore { stores, reply }, "storing a kernel's results")?;
            recv_soon(&rx).map_err(|_| Error::Stopped("storing a kernel's results".into()))??;
        }
        Ok(out)
    }

    /// Launches a real GPU kernel (CUDA backend only) that touches `accesses`: recorded and
    /// planned like any launch; once the backend has placed the data, `job` enqueues the kernel
    /// on the stream it is given, with the device address of each access. Returns when the
    /// kernel is enqueued, not when it is done.
    pub fn launch_native(
        &self,
        name: &str,
        accesses: &[RangeAccess],
        job: impl FnOnce(&crate::seam::NativeLaunch<'_>) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        self.check_and_record(accesses, Accessor::Device)?;
        let (reply, rx) = bounded(1);
        let (acc, job, issued) = (accesses.to_vec(), Box::new(job), Instant::now());
        let command = Command::Native { name: name.into(), acc, job, issued, reply };
        self.send(command, "launching")?;
        recv_soon(&rx).map_err(|_| Error::Stopped("launching".into()))?
    }

    /// True when both handles are the same runtime.
    pub fn same_as(&self, other: &Runtime) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// A handle that does not keep the runtime alive.
    pub fn downgrade(&self) -> WeakRuntime {
        WeakRuntime { shared: Arc::downgrade(&self.shared) }
    }

    /// Marks a step boundary of the program (an iteration of a training loop): the advisor
    /// aligns its periodic predictions to steps.
    pub fn step(&self) -> Result<()> {
        self.send(Command::Step, "marking a step")
    }

    /// The host writes `data` at `offset` of region `id` (after the device is done with it).
    pub fn write(&self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        let range =
            RangeAccess { region: id, offset, len: data.len() as u64, mode: crate::AccessMode::Write };
        self.check_and_record(&[range], Accessor::Host)?;
        let (reply, rx) = bounded(1);
        self.send(Command::HostWrite { range, data: data.to_vec(), reply }, "writing")?;
        recv_soon(&rx).map_err(|_| Error::Stopped("writing".into()))?
    }

    /// The host reads `buf.len()` bytes at `offset` of region `id` (after the device is done
    /// with them).
    pub fn read(&self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let range = RangeAccess { region: id, offset, len: buf.len() as u64, mode: crate::AccessMode::Read };
        self.check_and_record(&[range], Accessor::Host)?;
        let (reply, rx) = bounded(1);
        self.send(Command::HostRead { range, reply }, "reading")?;
        let data = recv_soon(&rx).map_err(|_| Error::Stopped("reading".into()))??;
        buf.copy_from_slice(&data);
        Ok(())
    }

    /// Ends the program's trace (see [`RuntimeBuilder::record_trace`]) once the work issued
    /// so far is done: the file is complete, and named, when this returns. `None`: nothing
    /// was being recorded. The runtime goes on without recording.
    pub fn stop_recording(&self) -> Result<Option<std::path::PathBuf>> {
        let (reply, rx) = bounded(1);
        self.send(Command::StopRecording { reply }, "ending the trace")?;
        recv_soon(&rx).map_err(|_| Error::Stopped("ending the trace".into()))?
    }

    /// Completes the telemetry log (see [`RuntimeBuilder::telemetry`]) once the work issued
    /// so far is done: what the sink holds is written and it is closed. Events after this go
    /// nowhere. Without a sink, nothing happens.
    pub fn close_telemetry(&self) -> Result<()> {
        let (reply, rx) = bounded(1);
        self.send(Command::CloseTelemetry { reply }, "closing the telemetry log")?;
        recv_soon(&rx).map_err(|_| Error::Stopped("closing the telemetry log".into()))?
    }

    /// Waits for all work issued so far; returns the runtime's counters, or the first error
    /// the backend met since the last call.
    pub fn synchronize(&self) -> Result<RuntimeStats> {
        let (reply, rx) = bounded(1);
        self.send(Command::Sync { reply }, "synchronizing")?;
        let snapshot = recv_soon(&rx).map_err(|_| Error::Stopped("synchronizing".into()))??;
        let history = self.shared.history.lock().unwrap_or_else(|e| e.into_inner());
        Ok(RuntimeStats {
            live_regions: self.shared.registry.len(),
            live_bytes: self.shared.registry.live_bytes(),
            accesses_recorded: history.total_recorded(),
            operations: self.shared.operations.load(Ordering::Relaxed),
            budget_bytes: self.shared.budget,
            device_resident_bytes: snapshot.device_resident_bytes,
            elapsed_ns: snapshot.clock_ns,
            backend: self.shared.backend,
            backend_stats: snapshot.stats,
            policy_host_ns: snapshot.policy_ns,
            engine_ns: snapshot.engine,
        })
    }

    /// The most recent accesses, oldest first (at most the history's capacity).
    pub fn recent_accesses(&self, n: usize) -> Vec<Access> {
        let history = self.shared.history.lock().unwrap_or_else(|e| e.into_inner());
        let skip = history.len().saturating_sub(n);
        history.iter().skip(skip).copied().collect()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last handle is gone: stop the worker after the work already queued.
        let _ = self.tx.send(Command::Shutdown);
        if let Some(engine) = self.engine.lock().unwrap_or_else(|e| e.into_inner()).take() {
            engine.join();
        }
    }
}

#[cfg(test)]
mod tests;
