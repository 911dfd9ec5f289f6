//! `unimem replay`: play a trace through policies and report.

use std::path::{Path, PathBuf};
use unimem_core::MemoryBackendExt;

use unimem_core::config::{BackendChoice, MemoryKind, PolicyName};
use unimem_core::output_file::OutputFile;
use unimem_core::replay::{self, ReplayReport};
use unimem_core::trace::{TraceReader, TraceStats};
use unimem_core::units::Bytes;
use unimem_core::{backends, policy, protocol};
use unimem_core::{Budget, Config, Error, Result};

use crate::input::TraceInput;
use crate::output;

/// Arguments of `unimem replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trace file (`.jsonl` or `.jsonl.gz`); `-` reads standard input.
    pub trace: PathBuf,
    /// Device budget: bytes (`8GiB`) or a percent of the trace's peak live bytes (`50%`).
    /// Default: the config's `budget`.
    #[arg(long, allow_hyphen_values = true)]
    pub budget: Option<String>,
    /// Comma-separated policies: none, oracle, advisor. Default: the config's `replay.policies`.
    #[arg(long, value_delimiter = ',')]
    pub policy: Option<Vec<String>>,
    /// Backend: auto, sim or cuda. Default: the config's `backend`.
    #[arg(long)]
    pub backend: Option<String>,
    /// Print one JSON object per run instead of a table (and no progress bar).
    #[arg(long)]
    pub json: bool,
    /// Write the backend's fault and migration events to this telemetry log (JSON Lines; with
    /// several policies, one log each, named LOG.POLICY.jsonl). Read it with `unimem telemetry`.
    #[arg(long, value_name = "LOG")]
    pub telemetry: Option<PathBuf>,
    /// Hide from the policy the accesses to every region whose trace id is a multiple of N, as
    /// if the program had not declared them (the backend still performs them). Shows what the
    /// advisor learns from faults (`advisor.learn_from_faults`).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub undeclared: u64,
    /// Show every column (peak resident bytes, prefetch quality, placements), however wide.
    #[arg(long)]
    pub wide: bool,
}

/// Resolves a budget against a trace: a percent refers to its peak live (page-rounded) bytes.
pub fn resolve_budget(budget: Budget, stats: &TraceStats) -> u64 {
    budget.resolve(stats.peak_live_page_bytes)
}

/// What a replay needs to know of its trace before it runs: the budget, the trace's peak live
/// (page-rounded) bytes, and the regions holding data from before the trace.
#[derive(Debug, Clone, Copy)]
pub struct Sizes<'a> {
    /// Device bytes the working set may use.
    pub budget: u64,
    /// The trace's peak live bytes: past the budget, what staging may have to hold at once.
    pub peak: u64,
    /// Regions whose first access reads them (they start on the host).
    pub pre_existing: &'a unimem_core::trace::RegionIds,
    /// The trace's peak live bytes over what the device arena holds for them (whole 2 MiB
    /// blocks): with `memory = "device"`, policies plan for this share of the budget, so that
    /// they, not the emulated driver, make the room the blocks' rounding takes.
    pub block_share: f64,
    /// The trace's peak live bytes in regions under 2 MiB as the device arena packs them.
    pub packed: u64,
    /// The device arena's chunks for those regions, which stay on the device.
    pub slab: u64,
}

/// A trace's peak live bytes over the device arena's bytes for them (1 for an empty trace).
pub fn block_share(stats: &TraceStats) -> f64 {
    if stats.peak_live_block_bytes == 0 {
        return 1.0;
    }
    (stats.peak_live_page_bytes as f64 / stats.peak_live_block_bytes as f64).min(1.0)
}

impl Sizes<'_> {
    /// The capacity a policy plans for on a device arena of `capacity` bytes, in the share of
    /// whole blocks the data fills, less the room of the slab's chunks its regions do not fill
    /// at their peak: the policy counts the small regions' own bytes as any data's, but not
    /// the rest of their chunks, which stay on the device.
    pub fn planning(&self, capacity: u64) -> u64 {
        let slack = self.slab.saturating_sub(self.packed);
        (capacity.saturating_sub(slack) as f64 * self.block_share) as u64
    }

    /// The same with `replay.arena_whole_blocks`: less the slab's chunks at their peak, which
    /// hold the regions under 2 MiB and stay on the device. The policy counts those regions as
    /// nothing and larger ones in whole blocks, as the arena holds them
    /// ([`unimem_core::policy::Policy::hold_whole_blocks`]), so no share is needed.
    pub fn planning_whole_blocks(&self, capacity: u64) -> u64 {
        capacity.saturating_sub(self.slab)
    }
}

impl<'a> Sizes<'a> {
    /// A budget against a trace's statistics: at least what its largest kernel needs at once.
    /// No GPU smaller than that runs the kernel without evicting the kernel's own data while it
    /// runs, which neither backend emulates (each lets a kernel's data exceed the budget): a
    /// smaller budget is raised to it, and the returned warning says so, naming the kernel.
    pub fn of(budget: Budget, stats: &'a TraceStats) -> (Self, Option<String>) {
        let asked = resolve_budget(budget, stats);
        let k = &stats.largest_kernel;
        let least = stats.smallest_budget();
        let (budget_bytes, warning) = if asked < least {
            let warning = format!(
                "budget {budget} ({}) is smaller than the {} that kernel `{}` (line {}) touches at once: \
                 replaying at {}, the smallest budget that holds every kernel's data (in the device \
                 arena's whole blocks, with its chunks of small regions)",
                Bytes(asked),
                Bytes(k.bytes),
                k.name,
                k.line,
                Bytes(least)
            );
            (least, Some(warning))
        } else {
            (asked, None)
        };
        let sizes = Self {
            budget: budget_bytes,
            peak: stats.peak_live_page_bytes,
            pre_existing: &stats.pre_existing,
            block_share: block_share(stats),
            packed: stats.peak_live_packed_bytes,
            slab: stats.slab_bytes,
        };
        (sizes, warning)
    }
}

/// Replays one trace (opened fresh by `open`) with one policy, writing its telemetry log to
/// `telemetry` (which appears under its name once the replay is done).
pub fn replay_one(
    open: &dyn Fn() -> Result<TraceReader>,
    sizes: Sizes<'_>,
    policy: PolicyName,
    config: &Config,
    show_progress: bool,
    telemetry: Option<OutputFile>,
    undeclared_every: u64,
) -> Result<ReplayReport> {
    let budget_bytes = sizes.budget;
    // Staging memory is pinned before the timed work: the slots of what can be off the device
    // at once, and of the clean copies kept of what was restored.
    let staging = config.staging.resolve(budget_bytes, Some(sizes.peak));
    let pin_now = staging.min(sizes.peak);
    // A replay finds data by region, never by an address it kept: restores may relocate, and
    // `memory = "auto"` is the device arena for a placing policy.
    let spec = backends::BackendSpec::for_replay(
        config,
        policy,
        sizes.packed,
        undeclared_every > 0,
        budget_bytes,
        staging,
        pin_now,
    )?;
    let mut backend = backends::open(&spec)?;
    // The device arena holds regions in whole blocks: the policy plans for the bytes that fit.
    let whole_blocks = spec.memory == MemoryKind::Device && config.replay.arena_whole_blocks;
    let planning = match spec.memory {
        MemoryKind::Device if whole_blocks => sizes.planning_whole_blocks(backend.device_capacity()),
        MemoryKind::Device => sizes.planning(backend.device_capacity()),
        MemoryKind::Managed | MemoryKind::Vmm => backend.device_capacity(),
    };
    let mut policy_impl = policy::make_replay_policy(policy, planning, config, &spec.cost);
    if whole_blocks {
        policy_impl.hold_whole_blocks(sizes.slab);
    }
    let reader = open()?;
    let (consumed, total) = reader.progress();
    tracing::info!(trace = reader.file(), %policy, budget_bytes, backend = %backend.describe(), "replay starts");
    let progress = output::Progress::start(consumed, total, !show_progress, policy.as_str());
    // On a GPU the faults and migrations come from CUPTI, attributed as they are read (for a
    // policy learning from faults) and when the replay is over. With accesses hidden from the
    // policy, a GPU replay collects them for the policy even without a log: the backend cannot
    // see faults.
    let logged = telemetry.is_some();
    let mut sink = match telemetry {
        Some(out) => {
            let mut source = format!("unimem replay {} ({policy}, {})", reader.file(), backend.describe());
            if backend.event_clock_origin().is_some() {
                source += match (config.telemetry.cupti, config.telemetry.gpu_fault_records) {
                    (false, _) => {
                        "; without CUPTI (telemetry.cupti = false): kernels, staged copies and hints only"
                    }
                    (true, true) => "; CUPTI with GPU fault records",
                    (true, false) => "; CUPTI without GPU fault records (telemetry.gpu_fault_records)",
                };
            }
            Some(unimem_telemetry::log_file_sink(out, &source, backend.as_ref(), &config.telemetry)?)
        }
        None if undeclared_every > 0 && policy_impl.wants_feedback() && !backend.records_faults() => {
            // The policy learns from CUPTI's faults whatever the log would have collected.
            let settings = unimem_core::config::TelemetryConfig { cupti: true, ..config.telemetry.clone() };
            Some(unimem_telemetry::cupti::sink_for(protocol::NullSink, backend.as_ref(), &settings)?)
        }
        None => None,
    };
    let options = replay::Options {
        sink: sink.as_deref_mut().map(|s| s as &mut dyn protocol::EventSink),
        undeclared_every,
        pre_existing: Some(sizes.pre_existing),
        program_host_time: config.replay.program_host_time,
    };
    let report = replay::run_with(reader, backend.as_mut(), policy_impl.as_mut(), &mut |_| {}, options);
    drop(progress);
    let mut report = report?;
    report.memory = Some(spec.memory);
    // Closing the log writes what it holds and gives the file its name.
    if let Some(mut sink) = sink.filter(|_| logged) {
        sink.close()?;
    }
    tracing::info!(time_ns = report.time_ns, events = report.events, wall_ns = report.wall_ns, "replay done");
    Ok(report)
}

/// The policies `--policy` names (comma-separated), each once in the order given, or
/// `default`.
pub fn policies(names: Option<&[String]>, default: &[PolicyName]) -> Result<Vec<PolicyName>> {
    let mut policies: Vec<PolicyName> = match names {
        Some(names) => names
            .iter()
            .map(|n| n.parse().map_err(|e| Error::InvalidArgument(format!("--policy: {e}"))))
            .collect::<Result<_>>()?,
        None => default.to_vec(),
    };
    let mut seen = Vec::new();
    policies.retain(|p| {
        !seen.contains(p) && {
            seen.push(*p);
            true
        }
    });
    Ok(policies)
}

pub fn run(args: &Args, config_file: Option<&std::path::Path>) -> Result<()> {
    let loaded = crate::load_config(config_file)?;
    let mut config = loaded.config;
    if let Some(b) = &args.backend {
        config.backend = match b.as_str() {
            "auto" => BackendChoice::Auto,
            "sim" => BackendChoice::Sim,
            "cuda" => BackendChoice::Cuda,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "--backend `{other}`: allowed values are auto, sim, cuda"
                )))
            }
        };
    }
    let budget = match &args.budget {
        Some(text) => Budget::parse(text).map_err(|e| Error::InvalidArgument(format!("--budget: {e}")))?,
        None => config.budget,
    };
    let policies = policies(args.policy.as_deref(), &config.replay.policies)?;
    let input = TraceInput::open(&args.trace)?;
    // Outputs are refused up front where they are one of the inputs (the trace, the config
    // file, the calibration profile): nothing is replayed, and nothing is lost.
    let profile = std::path::PathBuf::from(&config.sim.profile);
    let mut inputs = vec![input.file(), args.trace.as_path()];
    inputs.extend(loaded.file.as_deref());
    if !config.sim.profile.is_empty() {
        inputs.push(&profile);
    }
    let several = policies.len() > 1;
    let logs = policies
        .iter()
        .map(|policy| match &args.telemetry {
            Some(p) if several => {
                OutputFile::create(&p.with_extension(format!("{policy}.jsonl")), &inputs).map(Some)
            }
            Some(p) => OutputFile::create(p, &inputs).map(Some),
            None => Ok(None),
        })
        .collect::<Result<Vec<_>>>()?;
    let open = || input.reader();
    // A first streaming pass finds the peak live bytes a percent budget refers to, and checks
    // the whole trace before any replay starts.
    // The same pass records the program for the link-limit bound.
    let mut program = unimem_core::bound::Program::new().held_to_host_time(config.replay.program_host_time);
    let stats = {
        let reader = open()?;
        let (consumed, total) = reader.progress();
        let _progress = output::Progress::start(consumed, total, args.json, "checking");
        TraceStats::compute_with(reader, |event| program.observe_event(event))?
    };
    let (sizes, warning) = Sizes::of(budget, &stats);
    let bound = program.bound(sizes.budget, backends::cost_model(&config)?.link_rate_gbps);
    let mut warnings: Vec<String> = warning.into_iter().collect();
    let device = device_memory(&config)?;
    if let Some(device) = device.filter(|&d| sizes.budget > d) {
        warnings.push(format!(
            "budget {budget} ({}) is more than the device's {}: replaying at {}",
            Bytes(sizes.budget),
            Bytes(device),
            Bytes(device)
        ));
    }
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let name =
        Path::new(input.name()).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut table = output::report_table(true);
    let mut backends_ran = output::BackendsRan::default();
    for (policy, log) in policies.into_iter().zip(logs) {
        let mut report = replay_one(&open, sizes, policy, &config, !args.json, log, args.undeclared)?;
        report.bound = Some(bound);
        backends_ran.add(&report);
        if args.json {
            output::print_report_json(&report, &budget.to_string(), &warnings)
                .map_err(|e| Error::io("stdout", e))?;
        } else {
            table.row(output::report_row(&name, &budget.to_string(), &report));
            let host = report.backend_host;
            let ms = |ns: u64| ns as f64 / 1e6;
            eprintln!(
                "{}: {} events in {:.2} s; backend host time: launch {:.1} ms, alloc {:.1} ms, hints {:.1} ms",
                report.policy,
                report.events,
                report.wall_ns as f64 / 1e9,
                ms(host.launch),
                ms(host.allocate),
                ms(host.hints()),
            );
        }
    }
    if !args.json {
        println!("{name}: {} kernels, peak live {}", stats.kernels, Bytes(stats.peak_live_page_bytes));
        println!("{}", table.render_with(args.wide));
        println!(
            "compute floor {}; link-limit bound {}: {} in, {} out at {:.1} GB/s each way\nphase bound {}: \
             the traffic the order of the program's uses forces, a stretch at a time\nbackend: {}; peak RSS {}",
            unimem_core::units::Nanos(stats.compute_floor_ns),
            unimem_core::units::Nanos(bound.bound_ns),
            Bytes(bound.h2d_bytes),
            Bytes(bound.d2h_bytes),
            backends::cost_model(&config)?.link_rate_gbps,
            unimem_core::units::Nanos(bound.phase_ns),
            backends_ran,
            output::peak_rss_bytes().map(|b| Bytes(b).to_string()).unwrap_or("n/a".into())
        );
        if let Some(line) = backends_ran.memory_line() {
            println!("{line}");
        }
        if stats.program_host_ns > 0 {
            let held = if config.replay.program_host_time {
                format!(
                    "each kernel issued no sooner than its host time after the one before: with every \
                     byte resident it runs in {} (the program floor, which the bounds include)",
                    unimem_core::units::Nanos(bound.program_floor_ns)
                )
            } else {
                "not held to it (replay.program_host_time = false)".to_string()
            };
            println!(
                "the program's recorded host time between its kernels: {}; {held}",
                unimem_core::units::Nanos(stats.program_host_ns)
            );
        }
    }
    Ok(())
}

/// The device memory a replay's budget is capped at, where it is known before the replay:
/// the simulator's profile (the CUDA backend reports its own cap when it opens).
fn device_memory(config: &Config) -> Result<Option<u64>> {
    Ok(match config.backend {
        BackendChoice::Sim => Some(backends::cost_model(config)?.device_memory_bytes),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy over the device arena plans for the share of the budget its data takes in
    /// whole blocks, less the slab's room its regions do not fill; an empty trace plans for all
    /// of it.
    #[test]
    fn the_arena_s_planning_share_is_bytes_over_blocks() {
        let stats = TraceStats {
            peak_live_page_bytes: 3 << 20,
            peak_live_block_bytes: 4 << 20,
            ..Default::default()
        };
        assert_eq!(block_share(&stats), 0.75);
        let (sizes, _) = Sizes::of(Budget::Bytes(4 << 20), &stats);
        assert_eq!(sizes.planning(4 << 20), 3 << 20);
        let with_slab = TraceStats { slab_bytes: 2 << 20, peak_live_packed_bytes: 1 << 20, ..stats };
        let (sizes, _) = Sizes::of(Budget::Bytes(5 << 20), &with_slab);
        assert_eq!(
            sizes.planning(5 << 20),
            3 << 20,
            "the chunk's unfilled half, then three quarters of the rest"
        );
        assert_eq!(block_share(&TraceStats::default()), 1.0);
        assert_eq!(sizes.planning_whole_blocks(5 << 20), 3 << 20, "whole blocks: the slab left out");
    }
}
