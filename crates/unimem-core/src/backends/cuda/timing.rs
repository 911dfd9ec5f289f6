//! Events timed on the device for telemetry, shared by the CUDA backends: kernels, copies, the
//! driver's page work and the release of freed regions, each with a pair of CUDA events (or
//! one per stream) read once the device has reached them.

use std::time::Instant;

use cudarc::driver::{CudaEvent, CudaStream};

use super::cuda_err;
use super::marks::EventPool;
use crate::error::{Error, Result};
use crate::region::RegionId;
use crate::seam::{MemEvent, PageWork, Recorder, WorkMark};

/// The CUDA backends' clock: the host's monotonic time since the backend opened, less the
/// set-up it excludes (pinning staging memory, data from before the work).
#[derive(Debug, Clone, Copy)]
pub(in crate::backends::cuda) struct HostClock {
    start: Instant,
    excluded_ns: u64,
}

impl HostClock {
    pub(in crate::backends::cuda) fn new(start: Instant) -> Self {
        Self { start, excluded_ns: 0 }
    }

    /// Nanoseconds on the clock now.
    pub(in crate::backends::cuda) fn now(&self) -> u64 {
        (self.start.elapsed().as_nanos() as u64).saturating_sub(self.excluded_ns)
    }

    /// Takes the time since `t0` off the clock: set-up, not the work's.
    pub(in crate::backends::cuda) fn exclude_since(&mut self, t0: Instant) {
        self.excluded_ns += t0.elapsed().as_nanos() as u64;
    }

    /// When the backend opened.
    pub(in crate::backends::cuda) fn start(&self) -> Instant {
        self.start
    }

    /// Set-up time taken off the clock so far.
    pub(in crate::backends::cuda) fn excluded_ns(&self) -> u64 {
        self.excluded_ns
    }
}

/// A completed event at a known time on the event clock (the host's time since the backend
/// opened, set-up included): events recorded later are timed from it.
pub(in crate::backends::cuda) struct EventClock {
    reference: CudaEvent,
    reference_ns: u64,
}

impl EventClock {
    /// Records the reference on `stream` and waits for it (`origin`: the clock's origin;
    /// `what` names it in errors).
    fn start(stream: &CudaStream, origin: Instant, what: &str) -> Result<Self> {
        let reference = mark(stream)?;
        reference.synchronize().map_err(cuda_err("cuEventSynchronize", what))?;
        Ok(EventClock { reference, reference_ns: origin.elapsed().as_nanos() as u64 })
    }

    /// The time of a completed event on the event clock.
    fn time_of(&self, ev: &CudaEvent) -> std::result::Result<u64, cudarc::driver::DriverError> {
        // elapsed_ms is an f32 of milliseconds: about 1 us resolution over a 10 s replay.
        let ms = self.reference.elapsed_ms(ev)? as f64;
        Ok(self.reference_ns + (ms.max(0.0) * 1e6) as u64)
    }
}

/// Marks in the compute stream's work ([`crate::seam::MemoryBackend::mark_work`]), timed once
/// the device has passed them. The first mark starts the event clock, waiting for its
/// reference (once, at the first step of a replay, where little is queued); later marks never
/// wait.
#[derive(Default)]
pub(in crate::backends::cuda) struct WorkMarks {
    clock: Option<EventClock>,
    /// Each mark's event, with the set-up the backend's clock had excluded when it was made.
    marks: Vec<(CudaEvent, u64)>,
}

impl WorkMarks {
    /// Marks the work issued on `stream` so far.
    pub(in crate::backends::cuda) fn mark(
        &mut self,
        stream: &CudaStream,
        clock: &HostClock,
    ) -> Result<WorkMark> {
        if self.clock.is_none() {
            self.clock = Some(EventClock::start(stream, clock.start(), "work mark reference")?);
        }
        self.marks.push((mark(stream)?, clock.excluded_ns()));
        Ok(WorkMark(self.marks.len() as u64 - 1))
    }

    /// When the work before `m` completed, on the backend's clock (waiting for it if need be).
    pub(in crate::backends::cuda) fn time(&self, m: WorkMark) -> Result<u64> {
        let (ev, excluded) = self
            .marks
            .get(m.0 as usize)
            .ok_or_else(|| Error::InvalidArgument(format!("no work mark {}", m.0)))?;
        let clock = self.clock.as_ref().expect("the first mark starts the clock");
        ev.synchronize().map_err(cuda_err("cuEventSynchronize", "work mark"))?;
        let at = clock.time_of(ev).map_err(cuda_err("cuEventElapsedTime", "work mark"))?;
        Ok(at.saturating_sub(*excluded))
    }
}

/// Pending timed events looked at in one go (see `Recording::next_resolve_at`).
pub(in crate::backends::cuda) const RESOLVE_BATCH: usize = 512;

/// GPU-timed events waiting for the device to reach them.
pub(in crate::backends::cuda) struct Recording {
    /// The event clock's origin (the backend's opening): host times on the same clock.
    origin: Instant,
    /// What the events are timed from.
    clock: EventClock,
    pub(in crate::backends::cuda) pending: std::collections::VecDeque<Pending>,
    /// Events whose times were read, recorded again rather than created anew (creating and
    /// destroying two to three events per kernel was host time on the critical path).
    spare: EventPool,
    /// Pending events are looked at again once there are this many (or at a synchronize):
    /// querying events after every operation would be driver calls on the critical path,
    /// contending with fault handling, for times nobody needs before the replay ends.
    pub(in crate::backends::cuda) next_resolve_at: usize,
}

/// A kernel's timed slice opened: its start mark, and when the host issued it.
pub(in crate::backends::cuda) struct KernelStart {
    pub(in crate::backends::cuda) event: CudaEvent,
    /// On the event clock.
    pub(in crate::backends::cuda) issued_ns: u64,
}

pub(in crate::backends::cuda) enum Pending {
    Kernel {
        name: String,
        dur_ns: u64,
        start: KernelStart,
        end: CudaEvent,
    },
    /// The driver's page-table work queued on a stream (populations, repopulations, discards).
    PageWork {
        work: PageWork,
        bytes: u64,
        start: CudaEvent,
        end: CudaEvent,
    },
    /// One mark per stream, recorded at the free.
    Released {
        region: RegionId,
        marks: Vec<CudaEvent>,
    },
    /// Copies through the staging buffers (CUPTI's unified-memory counters do not see them):
    /// (region, offset, bytes) of each block, timed together; they share the interval.
    Staging {
        dir: crate::seam::Direction,
        blocks: Vec<(RegionId, u64, u64)>,
        start: CudaEvent,
        end: CudaEvent,
    },
}

impl Recording {
    /// Starts timing events on the device: a first event on `stream`, synchronised, that the
    /// others are timed from (`clock` is the event clock's origin). Where that fails,
    /// `recorder` stops recording, with a warning.
    pub(in crate::backends::cuda) fn start(
        stream: &CudaStream,
        clock: Instant,
        recorder: &mut Recorder,
    ) -> Option<Self> {
        match EventClock::start(stream, clock, "telemetry reference") {
            Ok(event_clock) => Some(Recording {
                origin: clock,
                clock: event_clock,
                pending: Default::default(),
                spare: EventPool::timed(),
                next_resolve_at: RESOLVE_BATCH,
            }),
            Err(e) => {
                tracing::warn!("cannot time events on the device, recording none: {e}");
                recorder.set_recording(false);
                None
            }
        }
    }

    /// The timing `slot` holds, started (on `stream`, timed from `clock`) or stopped as
    /// `recorder` was switched: what each backend calls before it times anything.
    pub(in crate::backends::cuda) fn follow<'a>(
        slot: &'a mut Option<Recording>,
        recorder: &mut Recorder,
        stream: &CudaStream,
        clock: Instant,
    ) -> Option<&'a mut Recording> {
        if !recorder.is_recording() {
            *slot = None;
        } else if slot.is_none() {
            *slot = Recording::start(stream, clock, recorder);
        }
        slot.as_mut()
    }

    /// Moves the events the device has reached into `recorder`, once enough wait.
    pub(in crate::backends::cuda) fn resolve_some(&mut self, recorder: &mut Recorder) {
        if self.pending.len() >= self.next_resolve_at {
            let mut done = Vec::new();
            self.resolve(&mut done);
            self.next_resolve_at = self.pending.len() + RESOLVE_BATCH;
            recorder.extend(done);
        }
    }

    /// Moves every event into `recorder` (the device is idle).
    pub(in crate::backends::cuda) fn resolve_all(&mut self, recorder: &mut Recorder) {
        let mut done = Vec::new();
        self.resolve(&mut done);
        self.next_resolve_at = RESOLVE_BATCH;
        recorder.extend(done);
    }

    /// Time of a completed event on the event clock.
    pub(in crate::backends::cuda) fn time_of(&self, ev: &CudaEvent) -> u64 {
        self.clock.time_of(ev).unwrap_or(self.clock.reference_ns)
    }

    /// Records a timing event on `stream`, reusing a spare one where there is one.
    pub(in crate::backends::cuda) fn mark(&mut self, stream: &CudaStream) -> Result<CudaEvent> {
        self.spare.record(stream, "telemetry mark")
    }

    /// Opens a kernel's timed slice on `stream`: a mark, and the host's time as it issues it.
    pub(in crate::backends::cuda) fn start_kernel(&mut self, stream: &CudaStream) -> Result<KernelStart> {
        let issued_ns = self.origin.elapsed().as_nanos() as u64;
        Ok(KernelStart { event: self.mark(stream)?, issued_ns })
    }

    /// Moves the pending events the device has reached, in order, into `out`.
    pub(in crate::backends::cuda) fn resolve(&mut self, out: &mut Vec<MemEvent>) {
        while let Some(front) = self.pending.front() {
            let done = match front {
                Pending::Kernel { end, .. }
                | Pending::Staging { end, .. }
                | Pending::PageWork { end, .. } => end.is_complete(),
                Pending::Released { marks, .. } => marks.iter().all(|m| m.is_complete()),
            };
            if !done {
                return;
            }
            match self.pending.pop_front().expect("front exists") {
                Pending::Kernel { name, dur_ns, start, end } => {
                    let (start_ns, end_ns) = (self.time_of(&start.event), self.time_of(&end));
                    let end_ns = end_ns.max(start_ns);
                    let stall_ns = (end_ns - start_ns).saturating_sub(dur_ns);
                    let issued_ns = Some(start.issued_ns);
                    out.push(MemEvent::Kernel { name, start_ns, end_ns, stall_ns, issued_ns });
                    self.spare.put([start.event, end]);
                }
                Pending::Staging { dir, blocks, start, end } => {
                    let (start_ns, end_ns) = (self.time_of(&start), self.time_of(&end));
                    let end_ns = end_ns.max(start_ns);
                    let total: u64 = blocks.iter().map(|b| b.2).sum::<u64>().max(1);
                    let mut at = start_ns;
                    for (region, offset, bytes) in blocks {
                        let until = (at + (end_ns - start_ns) * bytes / total).min(end_ns);
                        out.push(MemEvent::Migration {
                            region,
                            offset,
                            bytes,
                            dir,
                            cause: crate::seam::MigrationCause::Staging,
                            start_ns: at,
                            end_ns: until,
                        });
                        at = until;
                    }
                    self.spare.put([start, end]);
                }
                Pending::PageWork { work, bytes, start, end } => {
                    let (start_ns, end_ns) = (self.time_of(&start), self.time_of(&end));
                    out.push(MemEvent::PageWork { work, bytes, start_ns, end_ns: end_ns.max(start_ns) });
                    self.spare.put([start, end]);
                }
                Pending::Released { region, marks } => {
                    let at_ns = marks.iter().map(|m| self.time_of(m)).max().unwrap_or(0);
                    out.push(MemEvent::Released { region, at_ns });
                    self.spare.put(marks);
                }
            }
        }
    }
}

/// Records a timing event on `stream`.
pub(in crate::backends::cuda) fn mark(stream: &CudaStream) -> Result<CudaEvent> {
    stream
        .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda_err("cuEventRecord", "telemetry mark"))
}
