//! Shared output: report tables, JSON lines, progress bars, and process memory.

use std::io::IsTerminal;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use unimem_core::config::MemoryKind;
use unimem_core::replay::ReplayReport;
use unimem_core::units::{Bytes, Nanos};

/// Writes `bytes` as the whole of `out`, which appears under its name only once complete.
pub fn write_whole(mut out: unimem_core::output_file::OutputFile, bytes: &[u8]) -> unimem_core::Result<()> {
    use std::io::Write;
    out.write_all(bytes).map_err(|e| unimem_core::Error::io(out.path().display(), e))?;
    out.commit()
}

/// Peak resident set size of this process (Linux `VmHWM`), if readable.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The JSON object `--json` prints for a run: the report plus derived keys.
#[derive(serde::Serialize)]
struct JsonRun<'a> {
    #[serde(flatten)]
    report: &'a ReplayReport,
    budget: &'a str,
    /// What the command warned of (a budget raised or capped).
    warnings: &'a [String],
    over_floor: f64,
    /// The time with every byte resident, the kernels held to the program's host time
    /// between them where the replay holds them (`unimem_core::bound::LinkBound`).
    program_floor_ns: Option<u64>,
    /// The link-limit bound (`unimem_core::bound`) and the run's time over it.
    bound_ns: Option<u64>,
    bound_h2d_bytes: Option<u64>,
    bound_d2h_bytes: Option<u64>,
    over_bound: Option<f64>,
    /// The phase bound (`unimem_core::bound::phase`) and the run's time over it.
    phase_bound_ns: Option<u64>,
    over_phase_bound: Option<f64>,
    events_per_sec: f64,
    peak_rss_bytes: Option<u64>,
}

/// Prints one run as a JSON line, streamed (a report with many steps is not built in memory).
pub fn print_report_json(
    report: &ReplayReport,
    budget_spec: &str,
    warnings: &[String],
) -> std::io::Result<()> {
    use std::io::Write;
    let run = JsonRun {
        report,
        budget: budget_spec,
        warnings,
        over_floor: report.over_floor(),
        program_floor_ns: report.bound.map(|b| b.program_floor_ns),
        bound_ns: report.bound.map(|b| b.bound_ns),
        bound_h2d_bytes: report.bound.map(|b| b.h2d_bytes),
        bound_d2h_bytes: report.bound.map(|b| b.d2h_bytes),
        over_bound: report.over_bound(),
        phase_bound_ns: report.bound.map(|b| b.phase_ns),
        over_phase_bound: report.over_phase_bound(),
        events_per_sec: report.events_per_sec().round(),
        peak_rss_bytes: peak_rss_bytes(),
    };
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &run).map_err(std::io::Error::other)?;
    writeln!(out)
}

/// Most columns a table takes by default (`--wide` lifts it): a terminal of 100 columns shows
/// it whole, and a narrower terminal wraps cells rather than lines.
pub const MAX_WIDTH: u16 = 100;

/// A plain-text table (drawn by `comfy-table`, sized to the terminal): the first column shown
/// and those marked text left-aligned, the rest (numbers) right-aligned; columns marked
/// wide-only are left out unless asked for.
pub struct Table {
    header: Vec<&'static str>,
    wide_only: Vec<bool>,
    text: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles, all shown by default.
    pub fn new(header: Vec<&'static str>) -> Self {
        let (wide_only, text) = (vec![false; header.len()], vec![false; header.len()]);
        Self { header, wide_only, text, rows: Vec::new() }
    }

    /// Marks the columns titled `titles` as text, aligned left like the first one shown.
    pub fn text(mut self, titles: &[&str]) -> Self {
        for (h, t) in self.header.iter().zip(&mut self.text) {
            *t |= titles.contains(h);
        }
        self
    }

    /// Marks the columns titled `titles` as shown only when rendered wide ([`Table::render_with`]).
    pub fn wide_only(mut self, titles: &[&str]) -> Self {
        for (h, w) in self.header.iter().zip(&mut self.wide_only) {
            *w |= titles.contains(h);
        }
        self
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders the default columns within [`MAX_WIDTH`] (or the terminal, if narrower).
    pub fn render(&self) -> String {
        self.render_with(false)
    }

    /// Every column, as wide as they are, where `wide`; else [`Table::render`].
    pub fn render_with(&self, wide: bool) -> String {
        use comfy_table::{CellAlignment, ContentArrangement};
        let shown: Vec<usize> = (0..self.header.len()).filter(|&i| wide || !self.wide_only[i]).collect();
        let mut t = comfy_table::Table::new();
        // No borders; a line of dashes under the header; two spaces between columns.
        t.load_preset("     -              ");
        t.set_header(shown.iter().map(|&i| self.header[i]));
        for r in &self.rows {
            t.add_row(shown.iter().map(|&i| r.get(i).map_or("", String::as_str)));
        }
        for (n, (&i, column)) in shown.iter().zip(t.column_iter_mut()).enumerate() {
            let left = n == 0 || self.text[i];
            column.set_cell_alignment(if left { CellAlignment::Left } else { CellAlignment::Right });
            column.set_padding((0, 2));
        }
        if !wide {
            let terminal = t.width().unwrap_or(MAX_WIDTH);
            t.set_width(terminal.min(MAX_WIDTH)).set_content_arrangement(ContentArrangement::Dynamic);
        }
        // The header cells are aligned as their columns.
        let lines: Vec<String> = t.lines().map(|l| l.trim_end().to_string()).collect();
        lines.join("\n")
    }
}

/// The standard report columns. By default a table shows how fast each run was and what it
/// moved; `--wide` adds where the data went. A table of one trace (`one_trace`) leaves the
/// trace out (its title names it) and shows the GPU faults and the time over the phase bound
/// instead.
pub fn report_table(one_trace: bool) -> Table {
    let t = Table::new(vec![
        "trace",
        "budget",
        "policy",
        "time",
        "x floor",
        "x bound",
        "x phase",
        "H2D",
        "D2H",
        "GPU faults",
        "peak resident",
        "prefetch acc/cov/on-time",
        "staged",
        "dup",
        "remote",
    ])
    .wide_only(&["peak resident", "prefetch acc/cov/on-time", "staged", "dup", "remote"]);
    if one_trace {
        t.wide_only(&["trace"])
    } else {
        t.wide_only(&["GPU faults", "x phase"])
    }
}

/// The backend a table's replays ran on and where each policy's regions were: placing
/// policies may run in the device arena and `none` in managed memory (`memory = "auto"`).
#[derive(Debug, Default)]
pub struct BackendsRan {
    /// The backend in words, of the first replay outside the arena where there is one.
    backend: String,
    /// Each placement with the policies that ran in it.
    memory: Vec<(MemoryKind, Vec<String>)>,
}

impl BackendsRan {
    pub fn add(&mut self, r: &ReplayReport) {
        let memory = r.memory.unwrap_or(MemoryKind::Managed);
        if self.backend.is_empty()
            || (memory != MemoryKind::Device && self.memory.iter().all(|m| m.0 == MemoryKind::Device))
        {
            self.backend = format!("{} ({})", r.backend, r.backend_detail);
        }
        match self.memory.iter_mut().find(|(m, _)| *m == memory) {
            Some((_, policies)) => policies.push(r.policy.clone()),
            None => self.memory.push((memory, vec![r.policy.clone()])),
        }
    }

    /// Which policies ran where, when they did not all run in one placement.
    pub fn memory_line(&self) -> Option<String> {
        if self.memory.len() < 2 {
            return None;
        }
        let name = |m: MemoryKind| match m {
            MemoryKind::Device => "the device arena",
            MemoryKind::Vmm => "CUDA virtual memory",
            MemoryKind::Managed => "managed memory",
        };
        let parts: Vec<String> =
            self.memory.iter().map(|(m, p)| format!("{} for {}", name(*m), p.join(", "))).collect();
        Some(format!("memory: {} (`memory` in the config)", parts.join("; ")))
    }
}

impl std::fmt::Display for BackendsRan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.backend)
    }
}

/// A trace's name without its directory and its `.jsonl` / `.jsonl.gz` ending.
pub fn trace_stem(name: &str) -> &str {
    let file = name.rsplit('/').next().unwrap_or(name);
    file.strip_suffix(".gz").unwrap_or(file).strip_suffix(".jsonl").unwrap_or(file)
}

/// One report as a row of [`report_table`].
pub fn report_row(trace: &str, budget_spec: &str, r: &ReplayReport) -> Vec<String> {
    vec![
        trace_stem(trace).to_string(),
        format!("{budget_spec} ({})", Bytes(r.budget_bytes)),
        r.policy.clone(),
        Nanos(r.time_ns).to_string(),
        format!("{:.2}", r.over_floor()),
        r.over_bound().map_or("-".into(), |x| format!("{x:.2}")),
        r.over_phase_bound().map_or("-".into(), |x| format!("{x:.2}")),
        Bytes(r.h2d_bytes).to_string(),
        Bytes(r.d2h_bytes).to_string(),
        r.gpu_faults.to_string(),
        Bytes(r.peak_resident_bytes).to_string(),
        if r.prefetch.arrived_bytes == 0 {
            "-".to_string()
        } else {
            format!("{:.2}/{:.2}/{:.2}", r.prefetch.accuracy, r.prefetch.coverage, r.prefetch.timeliness)
        },
        Bytes(r.placement.staged).to_string(),
        Bytes(r.placement.duplicated).to_string(),
        Bytes(r.placement.remote).to_string(),
    ]
}

/// A progress bar over a trace's source bytes, drawn on stderr while it lives, only when stderr
/// is a terminal and `quiet` is false. A ticker thread polls the reader's byte counter every
/// 100 ms, so the work being measured needs no callbacks.
pub struct Progress {
    stop: Option<std::sync::mpsc::Sender<()>>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Starts a bar labelled `label` over `consumed` of `total` bytes.
    pub fn start(consumed: Arc<AtomicU64>, total: Option<u64>, quiet: bool, label: &str) -> Self {
        if quiet || !std::io::stderr().is_terminal() {
            return Self { stop: None, ticker: None };
        }
        let bar = match total {
            Some(t) => ProgressBar::new(t),
            None => ProgressBar::no_length(),
        };
        let style = ProgressStyle::with_template("{prefix:>8} [{bar:30}] {bytes}/{total_bytes} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(label.to_string());
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let ticker = std::thread::spawn(move || loop {
            bar.set_position(consumed.load(Ordering::Relaxed));
            match stopped.recv_timeout(std::time::Duration::from_millis(100)) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                _ => break bar.finish_and_clear(),
            }
        });
        Self { stop: Some(stop), ticker: Some(ticker) }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}
