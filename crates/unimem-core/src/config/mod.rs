//! Configuration: a TOML file plus `UNIMEM_*` environment overrides on top of documented
//! defaults, validated with errors that name the key, the allowed values and where the bad
//! value came from. Every effective value remembers its source, for `unimem config show`.
//!
//! Layers, lowest first: built-in defaults, the file (`--config FILE` or `UNIMEM_CONFIG`),
//! then environment variables named after the dotted key: `replay.oracle_lookahead` is
//! `UNIMEM_REPLAY_ORACLE_LOOKAHEAD`.

mod budget;
mod layers;
mod staging;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use budget::Budget;
pub use staging::Staging;

use crate::error::{Error, Result};

/// Which backend runs the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum BackendChoice {
    /// CUDA when a device is present, the simulator otherwise.
    Auto,
    /// The calibrated simulator.
    Sim,
    /// A real GPU.
    Cuda,
}

/// Whether managed allocations may exceed the device's free memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Oversubscribe {
    /// Refuse them (the default): asking for more managed memory than the GPU has free can
    /// hang the GPU.
    Deny,
    /// Allow them. Only for a machine of your own; no test or benchmark of unimem sets it.
    Allow,
}

/// Where the CUDA backend keeps regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Memory {
    /// The device arena for a replay by a placing policy (`oracle`, `advisor`), which finds
    /// data by region ([`Memory::Device`]); managed memory for the `none` policy (the driver
    /// alone is managed memory without hints) and for a program, whose addresses must stay
    /// put (the default).
    Auto,
    /// Managed memory (`cuMemAllocManaged`), driven by advice and prefetch.
    Managed,
    /// CUDA virtual memory: 2 MiB device chunks, and pinned host chunks mapped at the same
    /// address when data is evicted; copies run both ways at once and restores need no page
    /// population (`docs/decisions.md`, "Regions in CUDA virtual memory").
    Vmm,
    /// Plain device memory, allocated once to the budget and carved into 2 MiB slots, with
    /// pinned host slots for evicted data: data moves by copies alone, both ways at once, and
    /// no page-table work runs on the device. A region's blocks move between slots, so only
    /// a replay (which finds data by region) can use it (`docs/decisions.md`, "Replays in a
    /// device arena").
    Device,
}

impl Memory {
    /// The memory a caller gets: `arena` says whether the device arena serves it (a replay
    /// with `replay.relocate`, by a placing policy), which [`Memory::Auto`] then gives it.
    pub fn resolve(self, arena: bool) -> MemoryKind {
        match self {
            Memory::Auto if arena => MemoryKind::Device,
            Memory::Auto | Memory::Managed => MemoryKind::Managed,
            Memory::Vmm => MemoryKind::Vmm,
            Memory::Device => MemoryKind::Device,
        }
    }
}

/// The memory a backend keeps regions in: [`Memory`] resolved for one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryKind {
    /// Managed memory ([`Memory::Managed`]).
    Managed,
    /// CUDA virtual memory ([`Memory::Vmm`]).
    Vmm,
    /// The device arena ([`Memory::Device`]).
    Device,
}

/// A replay policy by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum PolicyName {
    /// No hints: the driver faults data in and evicts the least recently migrated.
    None,
    /// Clairvoyant reference: just-in-time prefetch and farthest-next-use eviction.
    Oracle,
    /// The prefetch advisor: learns the access history and plans within the budget.
    Advisor,
}

impl PolicyName {
    /// Every policy, in the order reports list them.
    pub const ALL: [PolicyName; 3] = [PolicyName::None, PolicyName::Oracle, PolicyName::Advisor];

    /// The name as written in config and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyName::None => "none",
            PolicyName::Oracle => "oracle",
            PolicyName::Advisor => "advisor",
        }
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PolicyName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        PolicyName::ALL.into_iter().find(|p| p.as_str() == s.trim()).ok_or_else(|| {
            let allowed: Vec<_> = PolicyName::ALL.iter().map(|p| p.as_str()).collect();
            format!("unknown policy `{s}`; allowed: {}", allowed.join(", "))
        })
    }
}

/// Simulator settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Calibration profile file (TOML); empty means the embedded H200 profile.
    pub profile: String,
    /// `free` or `measured`: whether a policy's own work (planning, learning) costs simulated
    /// host time.
    pub policy_time: PolicyTime,
}

/// Whether the simulator charges a policy's own host work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyTime {
    /// It costs nothing (the default): a simulated time depends on the trace, the policy's
    /// decisions and the profile alone, the same on every machine and every run.
    Free,
    /// It costs what it took on this machine, as a GPU run pays it between kernel launches
    /// (the hints it gives are costed by the profile either way). Times then vary with the
    /// machine and from run to run.
    Measured,
}

/// Replay settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    /// Policies `unimem replay` runs when `--policy` is not given.
    pub policies: Vec<PolicyName>,
    /// Events the oracle looks ahead (its memory is bounded by this window).
    pub oracle_lookahead: u64,
    /// On the CUDA backend, a region whose data is all staged may come back into a pooled
    /// buffer of its size whose pages are on the device (at another address), instead of its
    /// own discarded pages being repopulated first.
    pub relocate: bool,
    /// The oracle keeps a share of each step's read-only data resident where that streams the
    /// rest faster (`policy::keep`); false: every choice is Belady's.
    pub oracle_keep_loops: bool,
    /// The advisor plans from the trace's next kernels (within `oracle_lookahead` events)
    /// instead of its predictors' forecast: what its predictions cost on the trace.
    pub clairvoyant_advisor: bool,
    /// Each kernel of a trace that carries the program's host times (`host_ns`: one a runtime
    /// recorded on a GPU) is issued no sooner than its host time after the kernel before, as
    /// the program issued them; false: as fast as the replay's host allows.
    pub program_host_time: bool,
    /// In the device arena, the placing policy counts each region's 2 MiB blocks whole (its
    /// last one too) and leaves the regions under 2 MiB, whose chunks stay on the device, out
    /// of its account; false: it counts pages and plans for the trace's peak live bytes over
    /// the same data in whole blocks, a share of the budget.
    pub arena_whole_blocks: bool,
}

/// A placement the advisor may use besides migrating data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum PlacementName {
    /// Drop dead data without copying it (`cuMemDiscardBatchAsync`).
    Discard,
    /// Read-mostly duplicates of data predicted read-only.
    Duplicate,
    /// Host-preferred, device-mapped data for what would be evicted before its reuse.
    Remote,
}

/// The smallest unit the advisor prefetches: `"auto"` (where a prefetch call beats faults,
/// from the cost model) or a byte size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MinPrefetch {
    /// The cost model's break-even size.
    Auto,
    /// A fixed size in bytes.
    Bytes(u64),
}

impl MinPrefetch {
    /// The size in bytes, given the cost model's break-even size.
    pub fn resolve(self, break_even: u64) -> u64 {
        match self {
            MinPrefetch::Auto => break_even,
            MinPrefetch::Bytes(b) => b,
        }
    }
}

impl Serialize for MinPrefetch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            MinPrefetch::Auto => s.serialize_str("auto"),
            MinPrefetch::Bytes(b) => s.serialize_str(&b.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for MinPrefetch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text.trim() == "auto" {
            return Ok(MinPrefetch::Auto);
        }
        crate::units::parse_bytes(&text)
            .map(MinPrefetch::Bytes)
            .map_err(|e| serde::de::Error::custom(format!("{e}, or \"auto\"")))
    }
}

/// Prefetch advisor settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdvisorConfig {
    /// Kernels ahead the planner plans for.
    pub lookahead_kernels: u64,
    /// Predictions less sure than this (0 to 1) are not acted on.
    pub min_confidence: f64,
    /// Units smaller than this are left to faults.
    pub min_prefetch: MinPrefetch,
    /// Placements allowed besides migration.
    pub placements: Vec<PlacementName>,
    /// Kernels after a remote write during which its uses are served remotely; later uses
    /// bring it to the device.
    pub remote_window: u64,
    /// Faults on data a kernel did not declare enter the access history, so that the next
    /// step prefetches it.
    pub learn_from_faults: bool,
    /// Each step keeps the share of the last step's read-only data resident that streams the
    /// rest fastest, where that beats Belady's choice (`policy::keep`).
    pub keep_loops: bool,
    /// Data the last step evicted before its reuse is written back to the staging memory
    /// once its kernels are past, up to what the last step evicted, so that its eviction
    /// copies nothing (`policy::advisor::write_back`).
    pub write_back: bool,
}

impl Default for AdvisorConfig {
    fn default() -> Self {
        Self {
            lookahead_kernels: 16,
            min_confidence: 0.5,
            min_prefetch: MinPrefetch::Auto,
            placements: vec![PlacementName::Discard, PlacementName::Duplicate, PlacementName::Remote],
            remote_window: 64,
            learn_from_faults: true,
            keep_loops: true,
            write_back: false,
        }
    }
}

impl AdvisorConfig {
    /// Whether `placement` is allowed.
    pub fn allows(&self, placement: PlacementName) -> bool {
        self.placements.contains(&placement)
    }
}

/// Logging settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub level: String,
}

/// The whole configuration. `docs/configuration.md` documents each key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `auto`, `sim` or `cuda`.
    pub backend: BackendChoice,
    /// Device bytes the working set may use: bytes (`"8GiB"`) or a percent (`"50%"`) of the
    /// device (for a trace replay: of the trace's peak live bytes).
    pub budget: Budget,
    /// `deny` or `allow` managed allocations beyond the device's free memory.
    pub oversubscribe: Oversubscribe,
    /// `managed`, `vmm` or `device`: where the CUDA backend keeps regions.
    pub memory: Memory,
    /// Pinned host memory that evictions are staged in (bytes, or a percent of the budget);
    /// `0`: evictions migrate.
    pub staging: Staging,
    /// Simulator settings.
    pub sim: SimConfig,
    /// Replay settings.
    pub replay: ReplayConfig,
    /// Prefetch advisor settings.
    pub advisor: AdvisorConfig,
    /// Telemetry settings.
    pub telemetry: TelemetryConfig,
    /// Trace recording settings.
    pub trace: TraceConfig,
    /// Logging settings.
    pub log: LogConfig,
}

/// Trace recording settings.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceConfig {
    /// Every runtime writes its program's trace (trace v1, gzip when the name ends in `.gz`)
    /// to this file as it runs; empty records nothing.
    pub record: String,
}

impl TraceConfig {
    /// The file to record to, if any.
    pub fn record_path(&self) -> Option<PathBuf> {
        (!self.record.trim().is_empty()).then(|| PathBuf::from(&self.record))
    }
}

/// Telemetry settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// On a GPU, collect the driver's unified-memory counters with CUPTI (faults, migrations,
    /// thrashing). Off, a GPU log has only what the runtime itself times and decides (kernels
    /// with their stalls, staged copies, hints, forecasts), at no measurable cost: CUPTI's
    /// collection slows the driver's calls (docs/telemetry.md, "Cost").
    pub cupti: bool,
    /// On a GPU, ask CUPTI for a record per GPU page fault group, besides the migrations (by
    /// cause) and CPU faults: per-region fault counts, at a cost (see docs/telemetry.md).
    pub gpu_fault_records: bool,
    /// A program's telemetry log (JSON Lines, as `unimem replay --telemetry` writes), written
    /// by the PyTorch bridge as the program runs; empty writes none. (`unimem replay` takes
    /// `--telemetry`; a Rust program gives the runtime builder its sink.)
    pub log: String,
}

impl TelemetryConfig {
    /// The telemetry log to write, if any.
    pub fn log_path(&self) -> Option<PathBuf> {
        (!self.log.trim().is_empty()).then(|| PathBuf::from(&self.log))
    }
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self { cupti: true, gpu_fault_records: false, log: String::new() }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            backend: BackendChoice::Auto,
            budget: Budget::Percent(100.0),
            oversubscribe: Oversubscribe::Deny,
            memory: Memory::Auto,
            staging: Staging::Auto,
            sim: SimConfig { profile: String::new(), policy_time: PolicyTime::Free },
            replay: ReplayConfig {
                policies: vec![PolicyName::Advisor],
                oracle_lookahead: 65_536,
                relocate: true,
                oracle_keep_loops: true,
                clairvoyant_advisor: false,
                program_host_time: true,
                arena_whole_blocks: false,
            },
            advisor: AdvisorConfig::default(),
            telemetry: TelemetryConfig::default(),
            trace: TraceConfig::default(),
            log: LogConfig { level: "warn".into() },
        }
    }
}

/// `UNIMEM_*` variables that are not configuration keys: the configuration file's name, and
/// where the PyTorch package finds its library (`python/unimem_torch`).
pub const OTHER_VARIABLES: &[&str] = &["UNIMEM_CONFIG", "UNIMEM_TORCH_LIB"];

const LOG_LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

/// Most events the oracle may look ahead: its window holds them all.
pub const MAX_ORACLE_LOOKAHEAD: u64 = 1 << 20;
/// Most kernels the advisor may plan ahead, and the longest remote window.
pub const MAX_ADVISOR_KERNELS: u64 = 4096;
/// Largest byte size a size key takes besides the budget: 2^48 bytes (256 TiB).
pub const MAX_SIZE_BYTES: u64 = 1 << 48;

impl Config {
    /// Semantic checks that types alone cannot express: every problem, as (key, reason).
    fn check(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        let mut range = |key: &'static str, ok: bool, value: String, allowed: &str| {
            if !ok {
                problems.push((key, format!("{value} is out of range; allowed: {allowed}")));
            }
        };
        let r = &self.replay;
        range(
            "replay.oracle_lookahead",
            (1..=MAX_ORACLE_LOOKAHEAD).contains(&r.oracle_lookahead),
            r.oracle_lookahead.to_string(),
            "1 to 1048576 events",
        );
        let a = &self.advisor;
        range(
            "advisor.lookahead_kernels",
            (1..=MAX_ADVISOR_KERNELS).contains(&a.lookahead_kernels),
            a.lookahead_kernels.to_string(),
            "1 to 4096",
        );
        range(
            "advisor.min_confidence",
            (0.0..=1.0).contains(&a.min_confidence),
            a.min_confidence.to_string(),
            "0 to 1",
        );
        range(
            "advisor.remote_window",
            a.remote_window <= MAX_ADVISOR_KERNELS,
            a.remote_window.to_string(),
            "0 to 4096",
        );
        if let MinPrefetch::Bytes(b) = a.min_prefetch {
            range("advisor.min_prefetch", b <= MAX_SIZE_BYTES, b.to_string(), "\"auto\" or 0 to 2^48 bytes");
        }
        if let Staging::Bytes(b) = self.staging {
            range(
                "staging",
                b <= MAX_SIZE_BYTES,
                b.to_string(),
                "0 to 2^48 bytes, or a percent from 0 to 1000",
            );
        }
        if self.replay.policies.is_empty() {
            problems.push(("replay.policies", "must name at least one policy: none, oracle, advisor".into()));
        }
        if !LOG_LEVELS.contains(&self.log.level.as_str()) {
            problems.push((
                "log.level",
                format!("`{}` is not a level; allowed: {}", self.log.level, LOG_LEVELS.join(", ")),
            ));
        }
        if !self.sim.profile.is_empty() && !Path::new(&self.sim.profile).is_file() {
            problems.push((
                "sim.profile",
                format!(
                    "`{}` is not a file; name a calibration profile (TOML), or leave it empty for the embedded H200 profile",
                    self.sim.profile
                ),
            ));
        }
        problems
    }

    /// Loads the configuration: defaults, then `file` (if any), then `UNIMEM_*` variables from
    /// `env` (others are ignored). `UNIMEM_CONFIG` in `env` names the file when `file` is
    /// `None`. Every problem found is reported, not only the first ([`Error::Several`]).
    pub fn load<I>(file: Option<&Path>, env: I) -> Result<LoadedConfig>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let env: Vec<(String, String)> = env.into_iter().filter(|(k, _)| k.starts_with("UNIMEM_")).collect();
        let mut problems = Vec::new();
        let file: Option<PathBuf> = match file {
            Some(path) => Some(path.to_path_buf()),
            None => match env.iter().find(|(k, _)| k == "UNIMEM_CONFIG") {
                Some((_, v)) if v.trim().is_empty() => {
                    problems.push(Error::config(
                        "UNIMEM_CONFIG",
                        "is empty; set it to a config file's path, or unset it",
                        "env UNIMEM_CONFIG",
                    ));
                    None
                }
                Some((_, v)) => Some(PathBuf::from(v)),
                None => None,
            },
        };
        let mut layered = layers::Layered::defaults(&Config::default());
        if let Some(path) = &file {
            let text = std::fs::read_to_string(path).map_err(|e| Error::io(path.display(), e))?;
            problems.extend(layered.apply_file(path, &text)?);
        }
        for (key, value) in &env {
            if !OTHER_VARIABLES.contains(&key.as_str()) {
                if let Err(e) = layered.apply_env(key, value) {
                    problems.push(e);
                }
            }
        }
        let (config, bad_values) = layered.build();
        problems.extend(bad_values);
        for (key, reason) in config.check() {
            problems.push(Error::config(key, reason, layered.source_of(key).to_string()));
        }
        Error::from_problems(problems)?;
        Ok(LoadedConfig { config, sources: layered.into_sources(), file })
    }

    /// Loads from the process environment. Variables other than `UNIMEM_*` are never looked
    /// at; a `UNIMEM_*` variable whose name or value is not UTF-8 is an error naming it.
    pub fn from_env(file: Option<&Path>) -> Result<LoadedConfig> {
        let mut vars = Vec::new();
        for (key, value) in std::env::vars_os() {
            if !key.as_encoded_bytes().starts_with(b"UNIMEM_") {
                continue;
            }
            let name = key.to_string_lossy().into_owned();
            match (key.into_string(), value.into_string()) {
                (Ok(k), Ok(v)) => vars.push((k, v)),
                _ => {
                    return Err(Error::config(
                        name.as_str(),
                        "is not valid UTF-8; unimem variables take UTF-8 text",
                        format!("env {name}"),
                    ))
                }
            }
        }
        Self::load(file, vars)
    }
}

/// Where an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Built in.
    Default,
    /// A config file.
    File(PathBuf),
    /// An environment variable.
    Env(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p) => write!(f, "file {}", p.display()),
            Source::Env(v) => write!(f, "env {v}"),
        }
    }
}

/// A configuration with the source of each value.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The effective configuration.
    pub config: Config,
    /// Dotted key -> where its value came from.
    pub sources: BTreeMap<String, Source>,
    /// The file read, if any.
    pub file: Option<PathBuf>,
}

impl LoadedConfig {
    /// The effective values as TOML lines (dotted keys), each with its source as a comment.
    pub fn show(&self) -> String {
        let table = toml::Table::try_from(&self.config).expect("Config serialises to a table");
        let mut lines = Vec::new();
        for (key, value) in layers::flatten(&table) {
            let source = self.sources.get(&key).cloned().unwrap_or(Source::Default);
            lines.push(format!("{:<44} # {source}", format!("{key} = {value}")));
        }
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests;
