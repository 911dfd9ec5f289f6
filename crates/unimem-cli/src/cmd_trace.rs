//! `unimem trace stats|gen`.

use std::path::PathBuf;

use unimem_core::trace::synth::{Pattern, Synth, SynthSpec};
use unimem_core::trace::{TraceHeader, TraceReader, TraceStats, TraceWriter};
use unimem_core::units::{parse_bytes, Bytes, Nanos};
use unimem_core::{Error, Result};

use crate::output::Table;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Regions, peak live bytes, kernels, compute floor and reuse of a trace.
    Stats {
        /// Trace file.
        trace: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Generate a synthetic trace (streamed to disk; gzip if OUT ends in .gz).
    Gen {
        /// streaming, strided, alternating, graph or random.
        #[arg(long, default_value = "streaming")]
        pattern: String,
        /// Number of events.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Persistent regions (chunks, for strided).
        #[arg(long, default_value_t = 64)]
        regions: u64,
        /// Bytes per region, e.g. 4MiB.
        #[arg(long, default_value = "4MiB")]
        region_bytes: String,
        /// GPU time per kernel in nanoseconds.
        #[arg(long, default_value_t = 100_000)]
        kernel_ns: u64,
        /// Kernels per step.
        #[arg(long, default_value_t = 64)]
        kernels_per_step: u64,
        /// Random seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Every N-th kernel updates its input in place (read-write); 0: read-only inputs.
        #[arg(long, default_value_t = 0)]
        write_every: u64,
        /// Output file.
        out: PathBuf,
    },
}

pub fn run(cmd: &Command) -> Result<()> {
    match cmd {
        Command::Stats { trace, json } => {
            let s = TraceStats::compute(TraceReader::open(trace)?)?;
            if *json {
                println!("{}", serde_json::to_string(&s).expect("stats serialise"));
                return Ok(());
            }
            let mut t = Table::new(vec!["statistic", "value"]);
            let rows: Vec<(&str, String)> = vec![
                ("events", s.events.to_string()),
                ("regions", s.regions.to_string()),
                ("allocated", Bytes(s.allocated_bytes).to_string()),
                ("peak live", Bytes(s.peak_live_bytes).to_string()),
                ("peak live (pages)", Bytes(s.peak_live_page_bytes).to_string()),
                // What the device arena holds: whole 2 MiB blocks, and the regions under 2 MiB
                // it packs and keeps on the device (`memory = "auto"` weighs them).
                ("peak live (arena blocks)", Bytes(s.peak_live_block_bytes).to_string()),
                ("peak live under 2 MiB (packed)", Bytes(s.peak_live_packed_bytes).to_string()),
                ("device arena's chunks for them", Bytes(s.slab_bytes).to_string()),
                ("kernels", s.kernels.to_string()),
                ("host events", s.host_events.to_string()),
                ("steps", s.steps.to_string()),
                ("compute floor", Nanos(s.compute_floor_ns).to_string()),
                ("program host time", Nanos(s.program_host_ns).to_string()),
                // The kernels at the program's pace with every byte resident: above the compute
                // floor where the host was slower than its kernels.
                ("program floor (at its host's pace)", Nanos(s.program_floor_ns).to_string()),
                ("bytes read", Bytes(s.bytes_read).to_string()),
                ("bytes written", Bytes(s.bytes_written).to_string()),
                ("largest kernel", Bytes(s.max_kernel_bytes).to_string()),
                ("smallest budget (one kernel's data)", Bytes(s.smallest_budget()).to_string()),
                ("accessed regions", s.accessed_regions.to_string()),
                ("accesses per region", format!("{:.2}", s.accesses_per_region)),
                ("reuse factor", format!("{:.2}", s.reuse_factor)),
            ];
            rows.into_iter().for_each(|(k, v)| t.row(vec![k.to_string(), v]));
            println!("{}", t.render());
            Ok(())
        }
        Command::Gen {
            pattern,
            events,
            regions,
            region_bytes,
            kernel_ns,
            kernels_per_step,
            seed,
            write_every,
            out,
        } => {
            let pattern: Pattern =
                pattern.parse().map_err(|e| Error::InvalidArgument(format!("--pattern: {e}")))?;
            let region_bytes = parse_bytes(region_bytes)
                .map_err(|e| Error::InvalidArgument(format!("--region-bytes: {e}")))?;
            if region_bytes == 0 || *regions == 0 {
                return Err(Error::InvalidArgument("--regions and --region-bytes must be > 0".into()));
            }
            let spec = SynthSpec {
                pattern,
                events: *events,
                regions: *regions,
                region_bytes,
                kernel_ns: *kernel_ns,
                kernels_per_step: *kernels_per_step,
                seed: *seed,
                write_every: *write_every,
            };
            let mut header = TraceHeader::new(&format!("unimem trace gen --pattern {pattern}"));
            // The generator's settings, one field each, so the trace says how to make it again.
            header.meta.insert(
                "generator".into(),
                serde_json::json!({
                    "pattern": spec.pattern.to_string(),
                    "events": spec.events,
                    "regions": spec.regions,
                    "region_bytes": spec.region_bytes,
                    "kernel_ns": spec.kernel_ns,
                    "kernels_per_step": spec.kernels_per_step,
                    "seed": spec.seed,
                    "write_every": spec.write_every,
                }),
            );
            let mut w = TraceWriter::create(out, &[], &header)?;
            for event in Synth::new(spec) {
                w.write(&event)?;
            }
            w.commit()?;
            eprintln!("wrote {events} {pattern} events to {}", out.display());
            Ok(())
        }
    }
}
