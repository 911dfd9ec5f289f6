//! `unimem probe`: the device's capabilities and measured unified-memory costs, written as a
//! calibration profile the simulator loads (`sim.profile`).

use std::path::PathBuf;

use unimem_core::backend::cuda::{probe, CudaDevice};
use unimem_core::units::parse_bytes;
use unimem_core::{Error, Result};

use crate::output::Table;

/// Arguments of `unimem probe`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Bytes per probe buffer (three are used; at most 8 GiB of managed memory in all).
    #[arg(long, default_value = "1GiB")]
    pub size: String,
    /// Write the calibration profile here (TOML).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &Args) -> Result<()> {
    let size = parse_bytes(&args.size).map_err(|e| Error::InvalidArgument(format!("--size: {e}")))?;
    let dev = CudaDevice::open(args.device)?;
    let report = probe::run(&dev, size)?;
    if args.json {
        println!("{}", serde_json::to_string(&report).expect("reports serialise"));
    } else {
        let c = &report.capabilities;
        println!(
            "{} (compute {}.{}), driver {}",
            c.name, c.compute_capability.0, c.compute_capability.1, c.driver_version
        );
        let mut caps = Table::new(vec!["capability", "value"]);
        for (k, v) in [
            ("managed memory", c.managed_memory),
            ("concurrent managed access", c.concurrent_managed_access),
            ("pageable memory access (HMM)", c.pageable_memory_access),
            ("cuMemPrefetchBatchAsync", c.prefetch_batch),
            ("cuMemDiscardBatchAsync", c.discard_batch),
            ("cuMemDiscardAndPrefetchBatchAsync", c.discard_and_prefetch_batch),
        ] {
            caps.row(vec![k.to_string(), v.to_string()]);
        }
        caps.row(vec![
            "device memory (free / total)".into(),
            format!("{} / {}", c.free_bytes, c.total_bytes),
        ]);
        println!("{}\n", caps.render());
        let mut t = Table::new(vec!["measurement", "value", "unit", "h200 profile", "ratio"]);
        for m in &report.measurements {
            let (p, r) = match m.profile_value {
                Some(p) => (format!("{p:.2}"), format!("{:.2}", m.value / p)),
                None => ("-".into(), "-".into()),
            };
            t.row(vec![m.name.to_string(), format!("{:.2}", m.value), m.unit.to_string(), p, r]);
        }
        println!("{} byte buffers\n{}", report.buffer_bytes, t.render());
    }
    if let Some(out) = &args.out {
        let text = format!(
            "# unimem calibration profile, written by `unimem probe` (buffers of {} bytes).\n{}",
            report.buffer_bytes,
            toml::to_string(&report.profile).map_err(|e| Error::InvalidArgument(e.to_string()))?
        );
        std::fs::write(out, text).map_err(|e| Error::io(out.display(), e))?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}
