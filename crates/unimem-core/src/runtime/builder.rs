//! [`RuntimeBuilder`]: the one way a runtime is put together.

use crate::config::{BackendChoice, Budget, Config, PolicyName};
use crate::error::{Error, Result};
use crate::protocol::EventSink;
use crate::seam::{DeviceId, MemoryBackend, MemoryBackendExt};

use super::Runtime;

/// Builds a [`Runtime`] (see [`Runtime::builder`]). Unset, everything comes from
/// [`Config::default`]: the backend `auto` (CUDA when present, else the simulator), the whole
/// device as the budget, the advisor, no telemetry.
///
/// ```
/// use unimem_core::{config::PolicyName, Budget, Runtime};
///
/// // A simulated H200 whose working set may use 64 MiB, planned by the advisor.
/// let rt = Runtime::builder().simulator().budget(Budget::Bytes(64 << 20)).policy(PolicyName::Advisor).build()?;
/// assert_eq!(rt.budget(), 64 << 20);
/// # Ok::<(), unimem_core::Error>(())
/// ```
#[must_use = "a builder does nothing until `build`"]
pub struct RuntimeBuilder {
    config: Config,
    policy: PolicyName,
    device: DeviceId,
    backend: Option<Box<dyn MemoryBackend>>,
    budget_set: bool,
    sink: Option<Sink>,
    record: Option<std::path::PathBuf>,
}

/// Makes a telemetry sink for the backend the builder opened (on a GPU, CUPTI's records need
/// the backend's clock).
pub type SinkFor = Box<dyn FnOnce(&dyn MemoryBackend) -> Result<Box<dyn EventSink + Send>>>;

enum Sink {
    Made(Box<dyn EventSink + Send>),
    For(SinkFor),
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        Self {
            config: Config::default(),
            policy: PolicyName::Advisor,
            device: DeviceId(0),
            backend: None,
            budget_set: false,
            sink: None,
            record: None,
        }
    }
}

impl RuntimeBuilder {
    /// Takes every setting from `config` (a loaded file: [`crate::LoadedConfig`]); the calls
    /// after this one override it.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Device bytes the working set may use: bytes, or a percent of the device.
    pub fn budget(mut self, budget: Budget) -> Self {
        self.config.budget = budget;
        self.budget_set = true;
        self
    }

    /// The policy that plans the hints (the advisor unless set).
    pub fn policy(mut self, policy: PolicyName) -> Self {
        self.policy = policy;
        self
    }

    /// Runs on the calibrated simulator (its device size from `sim.profile`, an H200 unless
    /// set).
    pub fn simulator(mut self) -> Self {
        self.config.backend = BackendChoice::Sim;
        self
    }

    /// Runs on the GPU `ordinal`; `build` fails if it cannot be opened.
    pub fn cuda(mut self, ordinal: u32) -> Self {
        self.config.backend = BackendChoice::Cuda;
        self.device = DeviceId(ordinal);
        self
    }

    /// Runs on a backend opened by the caller; its device capacity is the budget.
    pub fn backend(mut self, backend: Box<dyn MemoryBackend>) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Sends the program's telemetry to `sink` (the regions by name, the backend's events, the
    /// policy's hints with their reasons), as a replay does with `--telemetry`; the sink is
    /// closed when the last handle is dropped. The `unimem-telemetry` crate has the log
    /// (`EventLog`) and, on a GPU, `cupti::CuptiSink`.
    pub fn telemetry(mut self, sink: Box<dyn EventSink + Send>) -> Self {
        self.sink = Some(Sink::Made(sink));
        self
    }

    /// As [`RuntimeBuilder::telemetry`], the sink made by `make` once the backend is open
    /// (`unimem_telemetry::cupti::sink_for` needs it).
    pub fn telemetry_for(mut self, make: SinkFor) -> Self {
        self.sink = Some(Sink::For(make));
        self
    }

    /// Records the program's trace to `path` as it runs (trace v1; gzip when the name ends in
    /// `.gz`), as `trace.record` or `UNIMEM_TRACE_RECORD` ask of any runtime. The file is
    /// complete when the last handle is dropped; a second runtime of the process recording to
    /// the same path writes `NAME.2.EXT` beside it.
    pub fn record_trace(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.record = Some(path.into());
        self
    }

    /// The runtime, its backend opened (unless given) within the budget.
    pub fn build(self) -> Result<Runtime> {
        let RuntimeBuilder { config, policy, device, backend, budget_set, sink, record } = self;
        let record = match record.or_else(|| config.trace.record_path()) {
            Some(path) => Some(path),
            None => record_from_env()?,
        };
        // The cost model sets the advisor's smallest worthwhile prefetch.
        let cost = crate::backends::cost_model(&config)?;
        let backend = match backend {
            Some(_) if budget_set => {
                return Err(Error::config(
                    "budget",
                    "a backend given to the builder keeps its own capacity as the budget",
                    "the runtime builder",
                ))
            }
            Some(backend) => backend,
            None => {
                let capacity = config.budget.resolve(cost.device_memory_bytes);
                let staging = config.staging.resolve(capacity, None);
                let mut spec = crate::backends::BackendSpec::from_config(&config, capacity, staging, 0)?;
                spec.device = device;
                // A policy that stages its evictions has the program's outputs' room staged
                // too; with none the emulated driver makes it, as the driver alone would.
                spec.staged_room = policy != PolicyName::None;
                crate::backends::open(&spec)?
            }
        };
        let trace = match record {
            Some(path) => Some(recording(&path, backend.as_ref(), policy)?),
            None => None,
        };
        let sink = match sink {
            Some(Sink::Made(sink)) => Some(sink),
            Some(Sink::For(make)) => Some(make(backend.as_ref())?),
            None => None,
        };
        let policy = crate::policy::make_policy(policy, backend.device_capacity(), &config, &cost);
        Ok(Runtime::start(backend, policy, sink, trace))
    }
}

/// `UNIMEM_TRACE_RECORD`, read by every runtime (a configuration given to the builder may
/// have been loaded without the environment).
fn record_from_env() -> Result<Option<std::path::PathBuf>> {
    const VAR: &str = "UNIMEM_TRACE_RECORD";
    match std::env::var_os(VAR) {
        None => Ok(None),
        Some(v) => match v.into_string() {
            Ok(s) if s.trim().is_empty() => Ok(None),
            Ok(s) => Ok(Some(s.into())),
            Err(_) => Err(Error::config(
                VAR,
                "is not valid UTF-8; unimem variables take UTF-8 text",
                format!("env {VAR}"),
            )),
        },
    }
}

/// A recording of this program on `backend`: its header says what ran it.
fn recording(
    path: &std::path::Path,
    backend: &dyn MemoryBackend,
    policy: PolicyName,
) -> Result<crate::trace::TraceRecording> {
    use crate::trace::{KernelTimes, TraceHeader, TraceRecording};
    let program = std::env::args().next().unwrap_or_else(|| "a program".into());
    let mut header =
        TraceHeader::new(&format!("recorded by unimem {} from {program}", env!("CARGO_PKG_VERSION")));
    header.meta.insert("device".into(), backend.describe().into());
    header.meta.insert("budget_bytes".into(), backend.device_capacity().into());
    header.meta.insert("staging_bytes".into(), backend.staging_capacity().into());
    header.meta.insert("policy".into(), policy.as_str().into());
    let times = match backend.kind() {
        crate::seam::BackendKind::Sim => KernelTimes::Declared,
        _ => KernelTimes::Measured,
    };
    TraceRecording::create(path, &header, times)
}
