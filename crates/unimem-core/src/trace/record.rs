//! Recording a running program as a trace (`trace.record`): every operation the runtime
//! executes becomes a trace v1 event, streamed to the file as the program runs.
//!
//! Kernel times are what the backend knows of them: on the simulator the declared time, on a
//! GPU the time between CUDA events around the kernel on the compute stream. A GPU's times
//! arrive after the kernels ran (the device is read in batches), so the events from the first
//! kernel still untimed on are held, in order, until its time comes; at most a batch of
//! kernels waits.
//!
//! The events are encoded and compressed on a thread of their own, in batches: the runtime's
//! engine, which is on the program's critical path, only hands them over.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{TraceAccess, TraceEvent, TraceHeader, TraceWriter};
use crate::error::Result;
use crate::op::Op;

/// Where kernel times come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelTimes {
    /// The time each launch declares (the simulator runs it as declared).
    Declared,
    /// Measured on the device; given to [`TraceRecording::kernel_time`] in launch order.
    Measured,
}

/// Events handed to the writing thread at once.
const BATCH: usize = 256;
/// Batches in flight to the writing thread before the engine waits for it (the memory a slow
/// disk may take).
const BATCHES_IN_FLIGHT: usize = 64;

/// The thread that encodes and writes the events.
struct WriterThread {
    tx: crossbeam_channel::Sender<Vec<TraceEvent>>,
    handle: std::thread::JoinHandle<Result<()>>,
}

impl WriterThread {
    fn spawn(mut writer: TraceWriter) -> Result<Self> {
        let (tx, rx) = crossbeam_channel::bounded::<Vec<TraceEvent>>(BATCHES_IN_FLIGHT);
        let handle = std::thread::Builder::new()
            .name("unimem-trace".into())
            .spawn(move || {
                for batch in rx {
                    for event in &batch {
                        writer.write(event)?;
                    }
                }
                writer.commit()
            })
            .map_err(|e| crate::Error::io("the trace writing thread", e))?;
        Ok(Self { tx, handle })
    }

    /// Completes the file; the writing thread's error, if it met one.
    fn join(self) -> Result<()> {
        drop(self.tx);
        self.handle
            .join()
            .unwrap_or_else(|_| Err(crate::Error::Stopped("the trace writing thread panicked".into())))
    }
}

/// A trace being recorded. [`TraceRecording::finish`] completes it and gives it its name;
/// dropped unfinished, it leaves nothing under that name.
pub struct TraceRecording {
    writer: Option<WriterThread>,
    /// Complete events not yet handed to the writing thread.
    batch: Vec<TraceEvent>,
    path: PathBuf,
    times: KernelTimes,
    /// Events held behind a kernel whose measured time is not known yet, in program order,
    /// each with whether it is complete.
    held: VecDeque<(TraceEvent, bool)>,
    /// Position in `held` of the first untimed kernel (`held.len()` when none).
    next_untimed: usize,
    kernels: u64,
}

/// Paths this process records to: a second runtime asking for one of them gets a numbered
/// sibling, so that runtimes in one program do not replace each other's traces.
static CLAIMED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// `path`, or where it is already recorded to by this process, the first free
/// `NAME.N.EXT` beside it (`t.jsonl.gz` -> `t.2.jsonl.gz`).
fn claim(path: &Path) -> PathBuf {
    let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (stem, ext) = match name.find('.') {
        Some(i) if i > 0 => (name[..i].to_string(), name[i..].to_string()),
        _ => (name.clone(), String::new()),
    };
    let mut candidate = path.to_path_buf();
    let mut n = 1;
    while claimed.contains(&candidate) {
        n += 1;
        candidate = path.with_file_name(format!("{stem}.{n}{ext}"));
    }
    claimed.push(candidate.clone());
    candidate
}

fn accesses(ops: &[crate::RangeAccess]) -> Vec<TraceAccess> {
    ops.iter().map(|a| TraceAccess { id: a.region.0, offset: a.offset, len: a.len, mode: a.mode }).collect()
}

impl TraceRecording {
    /// Starts recording to `path` (gzip when it ends in `.gz`), with `header`'s metadata. A
    /// path this process already records to becomes the first free `NAME.N.EXT` beside it
    /// (`t.jsonl.gz` -> `t.2.jsonl.gz`).
    pub fn create(path: &Path, header: &TraceHeader, times: KernelTimes) -> Result<Self> {
        let path = claim(path);
        let mut header = header.clone();
        let label = match times {
            KernelTimes::Declared => "declared",
            KernelTimes::Measured => "measured on the device (CUDA events around each kernel)",
        };
        header.meta.insert("kernel_times".into(), label.into());
        let writer = WriterThread::spawn(TraceWriter::create(&path, &[], &header)?)?;
        Ok(Self {
            writer: Some(writer),
            batch: Vec::with_capacity(BATCH),
            path,
            times,
            held: VecDeque::new(),
            next_untimed: 0,
            kernels: 0,
        })
    }

    /// Queues a complete event for the writing thread.
    fn write(&mut self, event: TraceEvent) -> Result<()> {
        self.batch.push(event);
        if self.batch.len() >= BATCH {
            self.hand_over()?;
        }
        Ok(())
    }

    /// Hands the batch to the writing thread; where it has stopped, its error.
    fn hand_over(&mut self) -> Result<()> {
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        let Some(writer) = self.writer.as_ref() else { return Ok(()) };
        if writer.tx.send(batch).is_err() {
            // The thread ended early: it met an error, which its join returns.
            let writer = self.writer.take().expect("checked");
            writer.join()?;
            return Err(crate::Error::Stopped("the trace writing thread ended".into()));
        }
        Ok(())
    }

    /// The file the trace goes to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where its kernel times come from.
    pub fn times(&self) -> KernelTimes {
        self.times
    }

    /// Kernels recorded so far.
    pub fn kernels(&self) -> u64 {
        self.kernels
    }

    /// Records one operation the runtime executed; a kernel with `host_ns`, the program's
    /// host time from issuing the kernel before it (see [`TraceEvent::Kernel`]).
    pub fn op(&mut self, op: &Op, host_ns: Option<u64>) -> Result<()> {
        let (event, complete) = match op {
            Op::Alloc { region, bytes, name } => (
                TraceEvent::Alloc { id: region.0, bytes: *bytes, name: name.as_deref().map(Into::into) },
                true,
            ),
            Op::Free { region } => (TraceEvent::Free { id: region.0 }, true),
            Op::Kernel { name, dur_ns, accesses: acc } => {
                self.kernels += 1;
                let event =
                    TraceEvent::Kernel { name: name.clone(), dur_ns: *dur_ns, host_ns, acc: accesses(acc) };
                (event, self.times == KernelTimes::Declared)
            }
            Op::Host { name, accesses: acc } => {
                (TraceEvent::Host { name: name.clone(), acc: accesses(acc) }, true)
            }
            Op::Step { index } => (TraceEvent::Step { index: *index }, true),
        };
        if self.held.is_empty() && complete {
            return self.write(event);
        }
        self.held.push_back((event, complete));
        Ok(())
    }

    /// The measured time of the next kernel still untimed (kernels are timed in launch order).
    pub fn kernel_time(&mut self, dur_ns: u64) -> Result<()> {
        while let Some((event, timed)) = self.held.get_mut(self.next_untimed) {
            if let (TraceEvent::Kernel { dur_ns: d, .. }, false) = (event, *timed) {
                *d = dur_ns;
                *timed = true;
                break;
            }
            self.next_untimed += 1;
        }
        self.write_complete()
    }

    /// Writes the held events up to the first that is still untimed.
    fn write_complete(&mut self) -> Result<()> {
        while let Some((_, true)) = self.held.front() {
            let (event, _) = self.held.pop_front().expect("front exists");
            self.next_untimed = self.next_untimed.saturating_sub(1);
            self.write(event)?;
        }
        Ok(())
    }

    /// Completes the trace (after the device is synchronised and every measured time given)
    /// and renames it into place. Kernels whose time never came are written with their declared
    /// time, and counted in the warning.
    pub fn finish(mut self) -> Result<PathBuf> {
        let untimed = self.held.iter().filter(|(_, timed)| !timed).count();
        if untimed > 0 {
            tracing::warn!(untimed, path = %self.path.display(), "kernels without a measured time were recorded with their declared time");
        }
        for (event, _) in std::mem::take(&mut self.held) {
            self.write(event)?;
        }
        self.hand_over()?;
        if let Some(writer) = self.writer.take() {
            writer.join()?;
        }
        Ok(self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AccessMode, RangeAccess, RegionId};

    fn kernel(name: &str) -> Op {
        let acc = vec![RangeAccess { region: RegionId(1), offset: 0, len: 8, mode: AccessMode::Read }];
        Op::Kernel { name: name.into(), dur_ns: 5, accesses: acc }
    }

    fn read(path: &Path) -> Vec<TraceEvent> {
        let reader = crate::trace::TraceReader::open(path).unwrap();
        reader.map(|e| e.unwrap()).collect()
    }

    #[test]
    fn measured_times_fill_the_kernels_in_order_and_keep_the_program_order() {
        let dir = std::env::temp_dir().join(format!("unimem-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.jsonl");
        let mut rec =
            TraceRecording::create(&path, &TraceHeader::new("test"), KernelTimes::Measured).unwrap();
        rec.op(&Op::Alloc { region: RegionId(1), bytes: 8, name: Some("x".into()) }, None).unwrap();
        rec.op(&kernel("a"), None).unwrap();
        rec.op(&Op::Step { index: 0 }, None).unwrap();
        rec.op(&kernel("b"), Some(40)).unwrap();
        rec.kernel_time(100).unwrap();
        rec.op(&kernel("c"), Some(70)).unwrap();
        rec.kernel_time(200).unwrap();
        rec.kernel_time(300).unwrap();
        rec.op(&Op::Free { region: RegionId(1) }, None).unwrap();
        assert_eq!(rec.finish().unwrap(), path);
        let events = read(&path);
        let kinds: Vec<String> = events
            .iter()
            .map(|e| match e {
                TraceEvent::Kernel { name, dur_ns, host_ns: None, .. } => format!("{name}={dur_ns}"),
                TraceEvent::Kernel { name, dur_ns, host_ns: Some(h), .. } => format!("{name}={dur_ns}+{h}"),
                TraceEvent::Alloc { .. } => "alloc".into(),
                TraceEvent::Free { .. } => "free".into(),
                TraceEvent::Step { .. } => "step".into(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(kinds, ["alloc", "a=100", "step", "b=200+40", "c=300+70", "free"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_second_recording_to_one_path_gets_a_numbered_sibling() {
        let dir = std::env::temp_dir().join(format!("unimem-claim-{}", std::process::id()));
        let first = claim(&dir.join("t.jsonl.gz"));
        let second = claim(&dir.join("t.jsonl.gz"));
        let third = claim(&dir.join("t.jsonl.gz"));
        assert_eq!(first, dir.join("t.jsonl.gz"));
        assert_eq!(second, dir.join("t.2.jsonl.gz"));
        assert_eq!(third, dir.join("t.3.jsonl.gz"));
    }
}
