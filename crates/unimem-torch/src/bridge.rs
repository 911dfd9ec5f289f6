//! One process's bridge between PyTorch and a unimem runtime: every allocation PyTorch makes
//! is a region under the budget, every operator's declared accesses are placed before it runs
//! on PyTorch's stream, and the counters say what that cost.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::Serialize;
use unimem_core::config::{BackendChoice, PolicyName};
use unimem_core::{AccessMode, Budget, Config, Error, ProgramStream, RangeAccess, Result, Runtime};

/// What [`Bridge::open`] is asked for; `None` keeps the configuration's value.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `"50%"` (of the device) or bytes (`"8GiB"`).
    pub budget: Option<String>,
    /// `none`, `oracle` or `advisor` (the default).
    pub policy: Option<String>,
    /// A unimem configuration file (TOML), read as `unimem` reads one (environment too).
    pub config: Option<PathBuf>,
    /// Writes the program's trace v1 here.
    pub record: Option<PathBuf>,
    /// `auto`, `cuda` or `sim` (the simulator: addresses that are not memory, for tests).
    pub backend: Option<String>,
}

/// One range an operator touches: the first byte's device address, its length and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TouchedRange {
    pub ptr: u64,
    pub len: u64,
    pub mode: AccessMode,
}

/// Counters of the bridge's own work (host time on PyTorch's threads).
#[derive(Debug, Default)]
struct Counters {
    ops: AtomicU64,
    op_ns: AtomicU64,
    mallocs: AtomicU64,
    malloc_ns: AtomicU64,
    frees: AtomicU64,
    free_ns: AtomicU64,
    /// Declared ranges that are not unimem's memory (another allocator's, or the host's).
    foreign_ranges: AtomicU64,
    steps: AtomicU64,
}

/// The bridge's counters and the runtime's, as `stats()` returns them.
#[derive(Debug, Serialize)]
pub struct Stats {
    pub backend: String,
    pub budget_bytes: u64,
    pub live_regions: usize,
    pub live_bytes: u64,
    pub device_resident_bytes: u64,
    pub peak_footprint_bytes: u64,
    pub peak_device_bytes: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
    pub gpu_faults: u64,
    /// Bytes the emulated driver migrated off the device on its own to make room.
    pub evicted_bytes: u64,
    /// Managed buffers allocated anew (the pool had none of the size).
    pub new_buffers: u64,
    /// Bytes evictions copied into pinned staging memory (the policy's, and the room made for
    /// operators' outputs).
    pub staged_out_bytes: u64,
    /// Pinned staging memory held now (pinned as evictions need it, kept until the end).
    pub staging_pinned_bytes: u64,
    pub ops: u64,
    pub steps: u64,
    /// Host time of the bridge per declared operator (placement included), ns.
    pub op_host_ns: f64,
    pub mallocs: u64,
    pub malloc_host_ns: f64,
    pub frees: u64,
    pub free_host_ns: f64,
    pub foreign_ranges: u64,
    /// The runtime's host time (its engine thread), ns by kind of work.
    pub runtime_host_ns: unimem_core::seam::HostTime,
    /// Of it, the parts of moving data a GPU backend times apart (evictions' slots, ordering
    /// and copies, discards, restores' page population and copies, making room), ns; zero on
    /// the simulator.
    pub runtime_move_host_ns: unimem_core::seam::MoveHostTime,
    /// The engine thread's time in the policy (planning, learning and its hints' calls,
    /// which `runtime_host_ns` also counts by kind), ns in all.
    pub policy_host_ns: u64,
    /// The engine thread's wall time on the bridge's calls, ns by kind of call: what the
    /// program's waits are made of (the policy and the backend's calls among them).
    pub engine_host_ns: unimem_core::runtime::EngineTime,
}

/// See the module documentation.
pub struct Bridge {
    rt: Runtime,
    counters: Counters,
}

fn per(total: &AtomicU64, n: &AtomicU64) -> f64 {
    let n = n.load(Ordering::Relaxed);
    if n == 0 {
        0.0
    } else {
        total.load(Ordering::Relaxed) as f64 / n as f64
    }
}

fn elapsed_ns(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

impl Bridge {
    /// A runtime as `options` ask (the configuration file and `UNIMEM_*` settings first).
    pub fn open(options: &Options) -> Result<Self> {
        let mut config = Config::from_env(options.config.as_deref())?.config;
        if let Some(budget) = &options.budget {
            config.budget =
                Budget::parse(budget).map_err(|e| Error::config("budget", &e, "unimem_torch.enable"))?;
        }
        if let Some(backend) = &options.backend {
            config.backend = match backend.as_str() {
                "auto" => BackendChoice::Auto,
                "cuda" => BackendChoice::Cuda,
                "sim" => BackendChoice::Sim,
                other => {
                    let why = format!("`{other}`: expected auto, cuda or sim");
                    return Err(Error::config("backend", &why, "unimem_torch.enable"));
                }
            };
        }
        let policy: PolicyName = match &options.policy {
            Some(p) => p.parse().map_err(|e: String| Error::config("policy", &e, "unimem_torch.enable"))?,
            None => PolicyName::Advisor,
        };
        // The runtime's log goes to stderr, at `log.level` unless RUST_LOG says otherwise.
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log.level));
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
        let log = config.telemetry.log_path();
        let settings = config.telemetry.clone();
        let mut builder = Runtime::builder().config(config).policy(policy);
        if let Some(path) = &options.record {
            builder = builder.record_trace(path);
        }
        if let Some(path) = log {
            let source = format!("PyTorch (unimem_torch, {policy})");
            builder = builder.telemetry_for(Box::new(move |backend| {
                let source = format!("{source}, {}", unimem_core::MemoryBackendExt::describe(backend));
                let out = unimem_core::output_file::OutputFile::create(&path, &[])?;
                unimem_telemetry::log_file_sink(out, &source, backend, &settings)
            }));
        }
        Ok(Self { rt: builder.build()?, counters: Counters::default() })
    }

    /// The runtime behind the bridge.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// A region of `bytes` for PyTorch's `stream`; `in_op`: allocated by the operator running
    /// on this thread (an output or a workspace), which writes it. Returns its address.
    pub fn malloc(&self, bytes: u64, stream: u64, in_op: Option<&str>) -> Result<u64> {
        let t0 = Instant::now();
        let name = in_op.unwrap_or("torch");
        let region = self.rt.alloc_on(name, bytes, ProgramStream(stream), in_op.is_some())?;
        self.counters.mallocs.fetch_add(1, Ordering::Relaxed);
        self.counters.malloc_ns.fetch_add(elapsed_ns(t0), Ordering::Relaxed);
        Ok(region.addr)
    }

    /// Frees the region at `ptr` after the work PyTorch enqueued on `stream`.
    pub fn free(&self, ptr: u64, stream: u64) -> Result<()> {
        let t0 = Instant::now();
        let (region, _) =
            self.rt.registry().find_address(ptr).filter(|(_, offset)| *offset == 0).ok_or_else(|| {
                Error::InvalidArgument(format!("free of {ptr:#x}: not an allocation of unimem's"))
            })?;
        self.rt.free_on(region.id, ProgramStream(stream))?;
        self.counters.frees.fetch_add(1, Ordering::Relaxed);
        self.counters.free_ns.fetch_add(elapsed_ns(t0), Ordering::Relaxed);
        Ok(())
    }

    /// The accesses of `ranges` on unimem's regions, one per region (a region touched twice
    /// is touched over the union of both, read if either reads, written if either writes);
    /// ranges outside unimem's memory are counted and left out.
    pub fn accesses(&self, ranges: &[TouchedRange]) -> Vec<RangeAccess> {
        let mut out: Vec<RangeAccess> = Vec::with_capacity(ranges.len());
        for r in ranges.iter().filter(|r| r.len > 0) {
            let Some((region, offset)) = self.rt.registry().find_address(r.ptr) else {
                self.counters.foreign_ranges.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let len = r.len.min(region.bytes - offset);
            match out.iter_mut().find(|a| a.region == region.id) {
                Some(a) => {
                    let end = (a.offset + a.len).max(offset + len);
                    a.offset = a.offset.min(offset);
                    a.len = end - a.offset;
                    a.mode = union(a.mode, r.mode);
                }
                None => out.push(RangeAccess { region: region.id, offset, len, mode: r.mode }),
            }
        }
        out
    }

    /// Places an operator's data before PyTorch enqueues it on `stream`.
    pub fn op_begin(&self, name: &str, ranges: &[TouchedRange], stream: u64) -> Result<()> {
        let t0 = Instant::now();
        let accesses = self.accesses(ranges);
        self.rt.launch_on(name, &accesses, ProgramStream(stream))?;
        self.counters.ops.fetch_add(1, Ordering::Relaxed);
        self.counters.op_ns.fetch_add(elapsed_ns(t0), Ordering::Relaxed);
        Ok(())
    }

    /// The operator begun last is enqueued in full on `stream`.
    pub fn op_end(&self, stream: u64) -> Result<()> {
        let t0 = Instant::now();
        self.rt.finish_on(ProgramStream(stream))?;
        self.counters.op_ns.fetch_add(elapsed_ns(t0), Ordering::Relaxed);
        Ok(())
    }

    /// A step of the program (an iteration of its training loop).
    pub fn step(&self) -> Result<()> {
        self.counters.steps.fetch_add(1, Ordering::Relaxed);
        self.rt.step()
    }

    /// The counters, once unimem's own work issued so far is done (not PyTorch's).
    pub fn stats(&self) -> Result<Stats> {
        let s = self.rt.synchronize()?;
        let b = &s.backend_stats;
        let c = &self.counters;
        Ok(Stats {
            backend: s.backend.to_string(),
            budget_bytes: s.budget_bytes,
            live_regions: s.live_regions,
            live_bytes: s.live_bytes,
            device_resident_bytes: s.device_resident_bytes,
            peak_footprint_bytes: b.peak_footprint_bytes,
            peak_device_bytes: b.peak_device_bytes,
            h2d_bytes: b.h2d_bytes,
            d2h_bytes: b.d2h_bytes,
            gpu_faults: b.gpu_faults,
            evicted_bytes: b.evicted_bytes,
            staged_out_bytes: b.staged_out_bytes,
            staging_pinned_bytes: b.staging_pinned_bytes,
            new_buffers: b.new_buffers,
            ops: c.ops.load(Ordering::Relaxed),
            steps: c.steps.load(Ordering::Relaxed),
            op_host_ns: per(&c.op_ns, &c.ops),
            mallocs: c.mallocs.load(Ordering::Relaxed),
            malloc_host_ns: per(&c.malloc_ns, &c.mallocs),
            frees: c.frees.load(Ordering::Relaxed),
            free_host_ns: per(&c.free_ns, &c.frees),
            foreign_ranges: c.foreign_ranges.load(Ordering::Relaxed),
            runtime_host_ns: b.host,
            runtime_move_host_ns: b.move_parts,
            policy_host_ns: s.policy_host_ns,
            engine_host_ns: s.engine_ns,
        })
    }

    /// Ends the trace being recorded, if any; returns its file.
    pub fn stop_recording(&self) -> Result<Option<PathBuf>> {
        self.rt.stop_recording()
    }

    /// Completes the telemetry log (`telemetry.log`), if one is written.
    pub fn close_telemetry(&self) -> Result<()> {
        self.rt.close_telemetry()
    }
}

/// The mode of two accesses to the same range.
fn union(a: AccessMode, b: AccessMode) -> AccessMode {
    match (a.reads() || b.reads(), a.writes() || b.writes()) {
        (true, true) => AccessMode::ReadWrite,
        (false, true) => AccessMode::Write,
        _ => AccessMode::Read,
    }
}
