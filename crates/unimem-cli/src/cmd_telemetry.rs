//! `unimem telemetry`: reports on telemetry logs (written by `unimem replay --telemetry LOG`).

use std::path::PathBuf;

use unimem_core::output_file::OutputFile;
use unimem_core::units::{Bytes, Nanos};
use unimem_core::{Error, Result};
use unimem_telemetry::{chrome_trace, svg, Log, LogEnd, Summary};

use crate::output;

/// `unimem telemetry` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Per-region table of faults, bytes moved, stalls and thrashing, most expensive first,
    /// with log-wide totals and the top causes.
    Summarize {
        /// The telemetry log.
        log: PathBuf,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// Regions shown in the table (all in JSON).
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// Show the table however wide its region names make it (by default it fits 100
        /// columns, and long names wrap).
        #[arg(long)]
        wide: bool,
    },
    /// Export to a Chrome trace (open in Perfetto or chrome://tracing).
    Export {
        /// Write a Chrome trace / Perfetto JSON file.
        #[arg(long)]
        chrome: bool,
        /// The telemetry log.
        log: PathBuf,
        /// The output file.
        out: PathBuf,
    },
    /// Plot device-resident bytes and link traffic over time as SVG.
    Plot {
        /// The telemetry log.
        log: PathBuf,
        /// The output SVG file.
        out: PathBuf,
    },
}

fn read(path: &std::path::Path) -> Result<Log> {
    Log::read(path).map_err(|e| Error::Trace { file: e.file, line: e.line, reason: e.reason })
}

pub fn run(cmd: &Command) -> Result<()> {
    match cmd {
        Command::Summarize { log: path, json, top, wide } => {
            let log = read(path)?;
            if log.end == LogEnd::Truncated {
                eprintln!(
                    "warning: {} has no end record: the log is truncated (its writer stopped early), and the totals cover only what it holds",
                    path.display()
                );
            }
            let s = Summary::of_log(&log);
            if *json {
                let regions: Vec<serde_json::Value> = s
                    .by_cost()
                    .into_iter()
                    .map(|(id, r)| serde_json::json!({"region": id.0, "name": log.name_of(id), "summary": r}))
                    .collect();
                let out = serde_json::json!({"source": log.source, "end": log.end, "totals": s.totals, "regions": regions});
                println!("{out}");
                return Ok(());
            }
            let t = &s.totals;
            for line in textwrap::wrap(&log.source, usize::from(output::MAX_WIDTH)) {
                println!("{line}");
            }
            println!(
                "GPU faults {}, CPU faults {}; H2D {}, D2H {}; peak resident {}",
                t.gpu_faults,
                t.cpu_faults,
                Bytes(t.h2d_bytes),
                Bytes(t.d2h_bytes),
                Bytes(t.peak_resident_bytes),
            );
            println!(
                "populated on the device {}; dropped {}; {} kernels stalled {} in all",
                Bytes(t.populated_device_bytes),
                Bytes(t.dropped_bytes),
                t.kernels,
                Nanos(t.kernel_stall_ns)
            );
            println!("of those stalls, with no copy on the link: {}", Nanos(t.stall_link_idle_ns));
            println!(
                "of those stalls, with a copy to the device in flight: {}",
                Nanos(t.link.stall_h2d_busy_ns)
            );
            for (name, d) in [("to the device", &t.link.h2d), ("to the host", &t.link.d2h)] {
                if let Some(rate) = d.rate() {
                    println!("link {name}: busy {}, {:.1} GB/s while busy", Nanos(d.busy_ns), rate / 1e9);
                }
            }
            println!("link busy both ways at once: {}", Nanos(t.link.both_busy_ns));
            println!("device idle between kernels (none issued yet): {}", Nanos(t.device_idle_ns));
            if let Some(l) = &t.host_lead {
                println!(
                    "host ahead of the device at issue: median {} kernels ({}), 10th percentile {} ({})",
                    l.median_kernels,
                    Nanos(l.median_ns),
                    l.p10_kernels,
                    Nanos(l.p10_ns)
                );
            }
            if !t.page_work.is_empty() {
                println!("the driver's page work on the device:");
                for (kind, w) in &t.page_work {
                    // Work that took no time (the simulator's profile may make it free) has
                    // no rate to show.
                    let rate = match w.ns {
                        0 => String::new(),
                        ns => format!(" ({:.1} GB/s)", w.bytes as f64 / ns as f64),
                    };
                    println!(
                        "  {kind} {} in {}{rate}, {} of it beside copies on the link",
                        Bytes(w.bytes),
                        Nanos(w.ns),
                        Nanos(w.beside_copies_ns)
                    );
                }
            }
            let causes: Vec<String> = t.by_cause.iter().map(|(c, b)| format!("{c} {}", Bytes(*b))).collect();
            println!(
                "bytes moved by cause: {}",
                if causes.is_empty() { "none".into() } else { causes.join(", ") }
            );
            if !t.hints.is_empty() {
                let hints: Vec<String> =
                    t.hints.iter().map(|(h, (n, b))| format!("{h} {n} ({})", Bytes(*b))).collect();
                println!("advisor hints: {}", hints.join(", "));
                println!(
                    "advisor forecasts: {} regions forecast and used, {} used unforecast, {} forecast unused",
                    t.forecast_hits, t.forecast_misses, t.forecast_false_alarms
                );
            }
            // The driver's own thrashing reports (CUPTI only): shown where the log has any.
            let driver_thrashing = t.thrashing > 0 || t.throttled_ns > 0 || !t.remote_mapped.is_empty();
            if driver_thrashing {
                let mapped: Vec<String> =
                    t.remote_mapped.iter().map(|(c, b)| format!("{c} {}", Bytes(*b))).collect();
                println!(
                    "driver: {} thrashing reports, faults throttled {}, mapped remotely: {}",
                    t.thrashing,
                    Nanos(t.throttled_ns),
                    if mapped.is_empty() { "nothing".to_string() } else { mapped.join(", ") }
                );
            }
            println!();
            let mut columns = vec![
                "region",
                "name",
                "faults",
                "H2D",
                "D2H",
                "evicted",
                "refetched",
                "fault stall",
                "link time",
            ];
            if driver_thrashing {
                columns.extend(["thrashing", "throttled", "mapped remotely"]);
            }
            let mut table = output::Table::new(columns).text(&["name"]);
            let ranked = s.by_cost();
            for (id, r) in ranked.iter().take(*top) {
                let mut row = vec![
                    id.0.to_string(),
                    log.name_of(*id),
                    r.faults.to_string(),
                    Bytes(r.h2d_bytes).to_string(),
                    Bytes(r.d2h_bytes).to_string(),
                    Bytes(r.evicted_bytes).to_string(),
                    Bytes(r.refetched_bytes).to_string(),
                    Nanos(r.stall_ns).to_string(),
                    Nanos(r.transfer_ns).to_string(),
                ];
                if driver_thrashing {
                    row.extend([
                        r.thrashing.to_string(),
                        Nanos(r.throttled_ns).to_string(),
                        Bytes(r.remote_mapped_bytes).to_string(),
                    ]);
                }
                table.row(row);
            }
            println!("{}", table.render_with(*wide));
            if ranked.len() > *top {
                println!("({} more regions; --top N or --json for all)", ranked.len() - top);
            }
            if !*wide {
                println!("(--wide for whole region names)");
            }
            Ok(())
        }
        Command::Export { chrome, log, out } => {
            if !chrome {
                return Err(Error::InvalidArgument("export: name a format; allowed: --chrome".into()));
            }
            let file = OutputFile::create(out, &[log])?;
            let trace = chrome_trace(&read(log)?);
            let text = serde_json::to_string(&trace).map_err(|e| Error::InvalidArgument(e.to_string()))?;
            output::write_whole(file, text.as_bytes())
        }
        Command::Plot { log, out } => {
            let file = OutputFile::create(out, &[log])?;
            let plot = svg(&read(log)?)
                .map_err(|e| Error::InvalidArgument(format!("drawing {}: {e}", out.display())))?;
            output::write_whole(file, plot.as_bytes())
        }
    }
}
