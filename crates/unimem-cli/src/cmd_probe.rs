//! `unimem probe`: the device's capabilities and measured unified-memory costs, written as a
//! calibration profile the simulator loads (`sim.profile`).

use std::path::{Path, PathBuf};

use unimem_core::backends::cuda::{probe, CudaDevice};
use unimem_core::cost::CostModel;
use unimem_core::output_file::OutputFile;
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
    /// Measure only first-touch population on the device, under several conditions (writes no
    /// profile).
    #[arg(long, conflicts_with = "out")]
    pub population: bool,
    /// Measure only the ways of moving data at the link's rate: CUDA virtual memory
    /// management beside managed memory, copies each way and both at once (writes no profile).
    #[arg(long, conflicts_with_all = ["out", "population"])]
    pub transfers: bool,
    /// Needs no device: writes the field-by-field median of these calibration profiles (of one
    /// device, from several probes) to `--out`, and prints how far each figure spread.
    #[arg(long, num_args = 1.., value_name = "PROFILE", requires = "out", conflicts_with = "population")]
    pub merge: Vec<PathBuf>,
}

pub fn run(args: &Args) -> Result<()> {
    let size = parse_bytes(&args.size).map_err(|e| Error::InvalidArgument(format!("--size: {e}")))?;
    if !args.merge.is_empty() {
        return merge(&args.merge, args.out.as_deref().expect("clap requires --out"));
    }
    // A profile is written only whole, and never over a file the command reads.
    let out = args.out.as_deref().map(|p| OutputFile::create(p, &[])).transpose()?;
    let dev = CudaDevice::open(args.device)?;
    if args.population || args.transfers {
        let rows =
            if args.population { probe::population(&dev, size)? } else { probe::transfers(&dev, size)? };
        if args.json {
            println!("{}", serde_json::to_string(&rows).expect("reports serialise"));
        } else {
            println!("{}", measurements_table(&rows));
        }
        return Ok(());
    }
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
        println!("{} byte buffers\n{}", report.buffer_bytes, measurements_table(&report.measurements));
    }
    if let Some(out) = out {
        let header = format!(
            "unimem calibration profile, written by `unimem probe` (buffers of {} bytes).",
            report.buffer_bytes
        );
        write_profile(out, &header, &report.profile)?;
    }
    Ok(())
}

/// The probe's measurements beside the embedded profile's figures, where it has them.
fn measurements_table(measurements: &[probe::Measurement]) -> String {
    let mut t = Table::new(vec!["measurement", "value", "unit", "h200 profile", "ratio"]);
    for m in measurements {
        let (p, r) = match m.profile_value {
            Some(p) => (format!("{p:.2}"), format!("{:.2}", m.value / p)),
            None => ("-".into(), "-".into()),
        };
        t.row(vec![m.name.to_string(), format!("{:.2}", m.value), m.unit.to_string(), p, r]);
    }
    t.render()
}

fn write_profile(mut out: OutputFile, header: &str, profile: &CostModel) -> Result<()> {
    use std::io::Write;
    let body = toml::to_string(profile).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let path = out.path().to_path_buf();
    write!(out, "# {header}\n{body}").map_err(|e| Error::io(path.display(), e))?;
    out.commit()?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// `unimem probe --merge`: the median profile, and each numeric figure's spread over the inputs.
fn merge(paths: &[PathBuf], out: &Path) -> Result<()> {
    let inputs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let out = OutputFile::create(out, &inputs)?;
    let profiles = paths.iter().map(|p| CostModel::load(p)).collect::<Result<Vec<_>>>()?;
    let median = CostModel::median(&profiles)?;
    let table = |p: &CostModel| toml::Table::try_from(p).map_err(|e| Error::InvalidArgument(e.to_string()));
    let columns = profiles.iter().map(table).collect::<Result<Vec<_>>>()?;
    let mut t = Table::new(vec!["field", "lowest", "median", "highest", "highest / lowest"]);
    // A profile's numbers are floats or integers (flags and the name have no spread).
    let number = |v: &toml::Value| v.as_float().or(v.as_integer().map(|i| i as f64));
    for (key, value) in table(&median)? {
        let Some(m) = number(&value) else { continue };
        let (lo, hi) = columns
            .iter()
            .filter_map(|c| c.get(&key).and_then(number))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
        let spread = if lo > 0.0 { format!("{:.2}", hi / lo) } else { "-".into() };
        t.row(vec![key, format!("{lo:.4}"), format!("{m:.4}"), format!("{hi:.4}"), spread]);
    }
    println!("median of {} profiles\n{}", profiles.len(), t.render());
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    write_profile(
        out,
        &format!(
            "unimem calibration profile: the median of {}, by `unimem probe --merge`.",
            names.join(", ")
        ),
        &median,
    )
}
