//! `unimem demo`: the bundled real traces at 100% and 50% budget with every policy (none, oracle,
//! advisor), on the default backend. No arguments, no files, no GPU needed.

use unimem_core::config::{MemoryKind, PolicyName};
use unimem_core::trace::TraceStats;
use unimem_core::units::Nanos;
use unimem_core::{Budget, Result};

use crate::bundled::TRACES;
use crate::cmd_replay::{replay_one, Sizes};
use crate::output;

/// Arguments of `unimem demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Show every column (where the data went: faults, peak resident, prefetch quality,
    /// placements), however wide.
    #[arg(long)]
    pub wide: bool,
}

pub fn run(args: &Args, config_file: Option<&std::path::Path>) -> Result<()> {
    let mut config = crate::load_config(config_file)?.config;
    // The demo is the simulator's unless CUDA is asked for by name (`auto` would pick a GPU).
    if config.backend == unimem_core::config::BackendChoice::Auto {
        config.backend = unimem_core::config::BackendChoice::Sim;
    }
    let cost = unimem_core::backends::cost_model(&config)?;
    if config.backend == unimem_core::config::BackendChoice::Sim {
        println!("unimem demo: real PyTorch traces recorded on an H200, replayed on the simulator");
        println!("(profile: {}). The budget emulates a GPU with that much", cost.name);
    } else {
        println!("unimem demo: real PyTorch traces recorded on an H200, replayed on this GPU (CUDA).");
        println!("The budget emulates a GPU with that much");
    }
    println!("memory; 'x floor' is time over the compute floor (all data resident = 1.00); 'x bound',");
    println!(
        "over the link-limit bound (only the bytes that must move, at {:.1} GB/s each way, overlapped);",
        cost.link_rate_gbps
    );
    println!("'--wide' adds 'x phase', over the phase bound (what each stretch of the program must move).\n");
    let mut table = output::report_table(false);
    let mut in_arena = false;
    for trace in &TRACES {
        let mut program =
            unimem_core::bound::Program::new().held_to_host_time(config.replay.program_host_time);
        let stats = TraceStats::compute_with(trace.reader()?, |e| program.observe_event(e))?;
        println!(
            "{}: {};\n    peak live {}, {} kernels, compute floor {}",
            trace.name,
            trace.about,
            unimem_core::units::Bytes(stats.peak_live_bytes),
            stats.kernels,
            Nanos(stats.compute_floor_ns)
        );
        for budget in [Budget::Percent(100.0), Budget::Percent(50.0)] {
            let (sizes, _) = Sizes::of(budget, &stats);
            for policy in PolicyName::ALL {
                let mut report = replay_one(&|| trace.reader(), sizes, policy, &config, false, None, 0)?;
                report.bound = Some(program.bound(sizes.budget, cost.link_rate_gbps));
                in_arena |= report.memory == Some(MemoryKind::Device);
                table.row(output::report_row(trace.name, &budget.to_string(), &report));
            }
        }
    }
    println!("\n{}", table.render_with(args.wide));
    println!("\nnone: the driver alone (managed memory: fault on access, evict least recently migrated).");
    println!("oracle: clairvoyant reference (just-in-time prefetch, farthest-next-use eviction).");
    println!("advisor: unimem's prefetch advisor (learns the access history as the trace runs).");
    if in_arena {
        println!("oracle and advisor place data in the device arena (`memory` in the configuration):");
        println!("         copies between device and pinned host slots, both ways at once.");
    } else {
        println!("oracle and advisor place data in managed memory: they migrate, stage evictions in");
        println!("         pinned host memory, and duplicate or write remotely long-lived data.");
    }
    if args.wide {
        println!("prefetch acc/cov/on-time: prefetched bytes used / needed bytes that came by prefetch /");
        println!("         used prefetched bytes that were there in time. staged: bytes evicted through");
        println!("         pinned staging buffers (`staging` in the config); dup, remote: bytes so placed.");
    } else {
        println!("`unimem demo --wide` adds faults, peak resident bytes, prefetch quality and placements.");
    }
    Ok(())
}
