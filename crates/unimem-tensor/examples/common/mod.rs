//! What the examples share: the backend their arguments choose, and their telemetry.
//!
//! Arguments: `cuda` runs on the GPU (the budget emulated there), else the simulator;
//! `--telemetry PREFIX` writes each run's log to `PREFIX.POLICY.jsonl` (read it with
//! `unimem telemetry summarize`), from CUPTI on the GPU.

use unimem_core::backends::cuda::CudaBackend;
use unimem_core::config::{Config, PolicyName};
use unimem_core::protocol::EventSink;
use unimem_core::MemoryBackendExt;
use unimem_core::{CostModel, Error, MemoryBackend, Runtime, SimBackend};
use unimem_telemetry::EventLog;

/// Whether `cuda` is among the arguments.
pub fn on_gpu() -> bool {
    std::env::args().skip(1).any(|a| a == "cuda")
}

/// The value after `--telemetry`, if given.
fn telemetry_prefix() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == "--telemetry").and_then(|i| args.get(i + 1).cloned())
}

/// A runtime planning with `policy` on a GPU of `budget` bytes, writing its telemetry where
/// the arguments say.
pub fn runtime(budget: u64, policy: PolicyName) -> unimem_core::Result<Runtime> {
    let backend: Box<dyn MemoryBackend> = if on_gpu() {
        Box::new(CudaBackend::open(0, budget, false)?)
    } else {
        Box::new(SimBackend::new(CostModel::h200(), budget))
    };
    let sink: Option<Box<dyn EventSink + Send>> = match telemetry_prefix() {
        None => None,
        Some(prefix) => {
            let path = format!("{prefix}.{policy}.jsonl");
            let file = std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
            let source =
                format!("{} ({policy}, {})", std::env::args().next().unwrap_or_default(), backend.describe());
            let log =
                EventLog::new(std::io::BufWriter::new(file), &source).map_err(|e| Error::io(&path, e))?;
            Some(unimem_telemetry::cupti::sink_for(log, backend.as_ref(), &Config::default().telemetry)?)
        }
    };
    let builder = Runtime::builder().backend(backend).policy(policy);
    match sink {
        Some(sink) => builder.telemetry(sink).build(),
        None => builder.build(),
    }
}
