//! `unimem`: replay memory-access traces through prefetch policies on the calibrated simulator
//! (or a GPU), inspect and generate traces, and check configuration.

mod bundled;
mod cmd_config;
mod cmd_demo;
mod cmd_plan;
mod cmd_probe;
mod cmd_replay;
mod cmd_telemetry;
mod cmd_trace;
mod input;
mod output;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The replay parses on one thread and frees on another; mimalloc's per-thread heaps avoid the
/// arena lock traffic that cost the system allocator ~15% of replay time.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// unimem: host RAM as a fast extension of GPU memory.
#[derive(Debug, Parser)]
#[command(name = "unimem", version, about, long_about = None)]
struct Cli {
    /// Configuration file (TOML); `UNIMEM_CONFIG` also names one.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay the bundled real traces at 100% and 50% budget with every policy.
    Demo(cmd_demo::Args),
    /// Replay a trace through one or more policies and report time against the compute floor.
    Replay(cmd_replay::Args),
    /// The smallest budget at which a trace stays within a slowdown over its compute floor
    /// (replays on the simulator), with the curve of time against budget
    Plan(cmd_plan::Args),
    /// Inspect or generate traces.
    #[command(subcommand)]
    Trace(cmd_trace::Command),
    /// Show or check the configuration.
    #[command(subcommand)]
    Config(cmd_config::Command),
    /// Measure this GPU's unified-memory costs and write a calibration profile (needs CUDA; `--merge` does not).
    Probe(cmd_probe::Args),
    /// Report on telemetry logs (`unimem replay --telemetry LOG` writes them).
    #[command(subcommand)]
    Telemetry(cmd_telemetry::Command),
}

fn main() -> ExitCode {
    #[cfg(unix)]
    // SAFETY: called first thing, before any other thread exists; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Demo(args) => cmd_demo::run(args, cli.config.as_deref()),
        Command::Replay(args) => cmd_replay::run(args, cli.config.as_deref()),
        Command::Plan(args) => cmd_plan::run(args, cli.config.as_deref()),
        Command::Trace(cmd) => cmd_trace::run(cmd),
        Command::Config(cmd) => cmd_config::run(cmd, cli.config.as_deref()),
        Command::Probe(args) => cmd_probe::run(args),
        Command::Telemetry(cmd) => cmd_telemetry::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Loads the configuration and starts logging at its level (`RUST_LOG` overrides).
fn load_config(file: Option<&std::path::Path>) -> unimem_core::Result<unimem_core::LoadedConfig> {
    let loaded = unimem_core::Config::from_env(file)?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&loaded.config.log.level));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    Ok(loaded)
}
