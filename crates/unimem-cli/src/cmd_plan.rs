//! `unimem plan`: the smallest budget at which a trace's replay stays within a slowdown over
//! its compute floor, found on the simulator (`unimem_core::budget_search`), with the curve of
//! time against budget as a table, JSON and an SVG plot.

use std::io::Write;
use std::path::PathBuf;

use unimem_core::budget_search::{self, CurvePoint, Search, SearchSpec};
use unimem_core::config::{BackendChoice, PolicyName};
use unimem_core::output_file::OutputFile;
use unimem_core::trace::TraceStats;
use unimem_core::units::{Bytes, Nanos};
use unimem_core::{Error, Result};

use crate::cmd_replay::{policies, replay_one, Sizes};
use crate::input::TraceInput;
use crate::output::{self, Table};

/// Arguments of `unimem plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trace file (`.jsonl` or `.jsonl.gz`); `-` reads standard input.
    pub trace: PathBuf,
    /// The limit: the replay may take at most this many times the compute floor (the time
    /// with all data resident), e.g. 1.5.
    #[arg(long, value_name = "X")]
    pub max_slowdown: f64,
    /// Comma-separated policies to plan for, each on the same curve: none, oracle, advisor.
    /// Default: advisor.
    #[arg(long, value_delimiter = ',')]
    pub policy: Option<Vec<String>>,
    /// Print one JSON object per policy instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Draw the curve (time over the compute floor against the budget) as SVG to this file.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

/// One policy's search.
struct Planned {
    policy: PolicyName,
    search: Search,
}

/// What `--json` prints for a policy.
#[derive(serde::Serialize)]
struct JsonPlan<'a> {
    trace: &'a str,
    policy: &'a str,
    max_slowdown: f64,
    /// Whether some budget up to the peak live bytes meets the limit.
    met: bool,
    /// The smallest budget replayed that met it (null when none did).
    budget_bytes: Option<u64>,
    time_ns: Option<u64>,
    compute_floor_ns: u64,
    bound_ns: Option<u64>,
    over_floor: Option<f64>,
    over_bound: Option<f64>,
    /// The trace's peak live bytes (page-rounded): 100%.
    peak_live_bytes: u64,
    /// The smallest budget that runs the trace (what its largest kernel holds at once).
    min_budget_bytes: u64,
    /// Every replay, by budget.
    curve: &'a [CurvePoint],
}

pub fn run(args: &Args, config_file: Option<&std::path::Path>) -> Result<()> {
    let loaded = crate::load_config(config_file)?;
    let mut config = loaded.config;
    // Planning is the simulator's: many replays, each deterministic.
    config.backend = BackendChoice::Sim;
    let policies = policies(args.policy.as_deref(), &[PolicyName::Advisor])?;
    let input = TraceInput::open(&args.trace)?;
    let mut inputs = vec![input.file(), args.trace.as_path()];
    inputs.extend(loaded.file.as_deref());
    let profile = PathBuf::from(&config.sim.profile);
    if !config.sim.profile.is_empty() {
        inputs.push(&profile);
    }
    let plot = match &args.plot {
        Some(path) => Some(OutputFile::create(path, &inputs)?),
        None => None,
    };
    let open = || input.reader();
    let mut program = unimem_core::bound::Program::new().held_to_host_time(config.replay.program_host_time);
    let stats = TraceStats::compute_with(open()?, |event| program.observe_event(event))?;
    let spec = SearchSpec::new(stats.peak_live_page_bytes, stats.smallest_budget(), args.max_slowdown)?;
    let rate = unimem_core::backends::cost_model(&config)?.link_rate_gbps;
    let mut planned = Vec::new();
    for policy in policies {
        let replay_at = |budget: u64| -> Result<CurvePoint> {
            let sizes = Sizes {
                budget,
                peak: stats.peak_live_page_bytes,
                pre_existing: &stats.pre_existing,
                block_share: crate::cmd_replay::block_share(&stats),
                packed: stats.peak_live_packed_bytes,
                slab: stats.slab_bytes,
            };
            let report = replay_one(&open, sizes, policy, &config, false, None, 0)?;
            Ok(CurvePoint {
                budget_bytes: budget,
                time_ns: report.time_ns,
                compute_floor_ns: report.compute_floor_ns,
                bound_ns: program.bound(budget, rate).bound_ns,
            })
        };
        let steps = in_parallel(&spec.steps(), &replay_at)?;
        let search = budget_search::search(&spec, steps, replay_at)?;
        planned.push(Planned { policy, search });
    }
    let name = output::trace_stem(input.name()).to_string();
    if args.json {
        print_json(&planned, &spec, &stats, input.name())?;
    } else {
        print_table(&planned, &spec, &name, &stats);
    }
    if let Some(out) = plot {
        output::write_whole(out, draw(&planned, &spec, &name)?.as_bytes())?;
    }
    Ok(())
}

/// Replays at each of `budgets` on as many threads as the machine has cores (each replay is
/// deterministic and independent; the bisection after them is sequential).
fn in_parallel(
    budgets: &[u64],
    replay_at: &(dyn Fn(u64) -> Result<CurvePoint> + Sync),
) -> Result<Vec<CurvePoint>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(budgets.len()).max(1);
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, Result<CurvePoint>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&budget) = budgets.get(i) else { break mine };
                        mine.push((i, replay_at(budget)));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect()
    });
    done.sort_by_key(|(i, _)| *i);
    if done.len() != budgets.len() {
        return Err(Error::Stopped("a replay thread of the plan panicked".into()));
    }
    done.into_iter().map(|(_, r)| r).collect()
}

fn print_json(planned: &[Planned], spec: &SearchSpec, stats: &TraceStats, trace: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    for p in planned {
        let chosen = p.search.chosen;
        let plan = JsonPlan {
            trace,
            policy: p.policy.as_str(),
            max_slowdown: spec.max_slowdown,
            met: chosen.is_some(),
            budget_bytes: chosen.map(|c| c.budget_bytes),
            time_ns: chosen.map(|c| c.time_ns),
            compute_floor_ns: stats.compute_floor_ns,
            bound_ns: chosen.map(|c| c.bound_ns),
            over_floor: chosen.map(|c| c.over_floor()),
            over_bound: chosen.map(|c| c.over_bound()),
            peak_live_bytes: spec.peak_bytes,
            min_budget_bytes: spec.min_bytes,
            curve: &p.search.curve,
        };
        serde_json::to_writer(&mut stdout, &plan)
            .map_err(|e| Error::io("stdout", std::io::Error::other(e)))?;
        writeln!(stdout).map_err(|e| Error::io("stdout", e))?;
    }
    Ok(())
}

fn percent(spec: &SearchSpec, budget: u64) -> String {
    format!("{:.0}%", budget as f64 * 100.0 / spec.peak_bytes as f64)
}

fn print_table(planned: &[Planned], spec: &SearchSpec, name: &str, stats: &TraceStats) {
    println!(
        "{name}: peak live {}, compute floor {}\nthe smallest budget within {}x the floor, replayed on the simulator",
        Bytes(spec.peak_bytes),
        Nanos(stats.compute_floor_ns),
        spec.max_slowdown
    );
    let mut table = Table::new(vec!["policy", "budget", "of peak", "time", "x floor", "x bound", "within"]);
    for p in planned {
        for c in &p.search.curve {
            let chosen = p.search.chosen.is_some_and(|x| x.budget_bytes == c.budget_bytes);
            table.row(vec![
                p.policy.to_string(),
                Bytes(c.budget_bytes).to_string(),
                percent(spec, c.budget_bytes),
                Nanos(c.time_ns).to_string(),
                format!("{:.2}", c.over_floor()),
                format!("{:.2}", c.over_bound()),
                match (chosen, spec.meets(c)) {
                    (true, _) => "yes, smallest".into(),
                    (false, true) => "yes".into(),
                    (false, false) => "no".into(),
                },
            ]);
        }
    }
    println!("{}", table.render());
    for p in planned {
        match p.search.chosen {
            Some(c) => println!(
                "{}: {} ({} of the peak) keeps it within {}x:\n  {}, {:.2}x the floor, {:.2}x the bound",
                p.policy,
                Bytes(c.budget_bytes),
                percent(spec, c.budget_bytes),
                spec.max_slowdown,
                Nanos(c.time_ns),
                c.over_floor(),
                c.over_bound()
            ),
            None => {
                let full = p.search.curve.last().map_or(0.0, |c| c.over_floor());
                println!(
                    "{}: no budget up to the peak keeps it within {}x (at 100%: {full:.2}x the floor)",
                    p.policy, spec.max_slowdown
                )
            }
        }
    }
}

/// The curve as SVG: time over the compute floor (log scale) against the budget, a line per
/// policy, the link-limit bound, the limit and each policy's answer.
fn draw(planned: &[Planned], spec: &SearchSpec, name: &str) -> Result<String> {
    use plotters::prelude::*;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let plot_err = |e: String| Error::InvalidArgument(format!("drawing the plot: {e}"));
    let points = planned.iter().flat_map(|p| &p.search.curve);
    let y_max = points.clone().map(|c| c.over_floor()).fold(spec.max_slowdown, f64::max) * 1.15;
    let x_max = gib(spec.peak_bytes) * 1.02;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_err(e.to_string()))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{name}: time against budget"), ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, (0.9..y_max).log_scale())
            .map_err(|e| plot_err(e.to_string()))?;
        chart
            .configure_mesh()
            .light_line_style(RGBColor(240, 240, 240))
            .bold_line_style(RGBColor(205, 205, 205))
            .x_desc("budget (GiB of device memory)")
            .y_desc("time over the compute floor (x)")
            .x_label_formatter(&|x| format!("{x:.1}"))
            .y_label_formatter(&|y| format!("{y:.1}"))
            .draw()
            .map_err(|e| plot_err(e.to_string()))?;
        let limit = spec.max_slowdown;
        chart
            .draw_series(LineSeries::new([(0.0, limit), (x_max, limit)], RED.stroke_width(1)))
            .map_err(|e| plot_err(e.to_string()))?
            .label(format!("limit: {limit}x the floor"))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
        if let Some(first) = planned.first() {
            let bound = first
                .search
                .curve
                .iter()
                .map(|c| (gib(c.budget_bytes), c.bound_ns as f64 / c.compute_floor_ns.max(1) as f64));
            chart
                .draw_series(LineSeries::new(bound, BLACK.mix(0.5).stroke_width(2)))
                .map_err(|e| plot_err(e.to_string()))?
                .label("link-limit bound")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.mix(0.5)));
        }
        // Colours that stay apart on white and for the common colour-vision deficiencies.
        let colors =
            [RGBColor(0, 114, 178), RGBColor(213, 94, 0), RGBColor(0, 158, 115), RGBColor(204, 121, 167)];
        for (i, p) in planned.iter().enumerate() {
            let color = colors[i % colors.len()];
            let line = p.search.curve.iter().map(|c| (gib(c.budget_bytes), c.over_floor()));
            let label = match p.search.chosen {
                Some(c) => format!("{} (smallest within: {})", p.policy, Bytes(c.budget_bytes)),
                None => format!("{} (never within)", p.policy),
            };
            chart
                .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))
                .map_err(|e| plot_err(e.to_string()))?
                .label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
            chart
                .draw_series(line.map(|xy| Circle::new(xy, 3, color.filled())))
                .map_err(|e| plot_err(e.to_string()))?;
            if let Some(c) = p.search.chosen {
                let at = (gib(c.budget_bytes), c.over_floor());
                chart
                    .draw_series([Circle::new(at, 8, color.stroke_width(2))])
                    .map_err(|e| plot_err(e.to_string()))?;
            }
        }
        unimem_telemetry::draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
            .map_err(|e| plot_err(e.to_string()))?;
        root.present().map_err(|e| plot_err(e.to_string()))?;
    }
    Ok(svg)
}
