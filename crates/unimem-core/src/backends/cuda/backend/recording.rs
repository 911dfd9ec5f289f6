//! Events timed on the device, for telemetry: kernels, staging copies and the release of freed
//! regions, each with a pair of CUDA events read once the device has reached them.

use super::*;

/// Pending timed events looked at in one go (see `Recording::next_resolve_at`).
pub(super) const RESOLVE_BATCH: usize = 512;

/// GPU-timed events waiting for the device to reach them.
pub(super) struct Recording {
    /// A completed event and its time on the event clock: other events are timed from it.
    pub(super) reference: CudaEvent,
    pub(super) reference_ns: u64,
    pub(super) pending: std::collections::VecDeque<Pending>,
    /// Events whose times were read, recorded again rather than created anew (creating and
    /// destroying two to three events per kernel was host time on the critical path).
    pub(super) spare: Vec<CudaEvent>,
    /// Pending events are looked at again once there are this many (or at a synchronize):
    /// querying events after every operation would be driver calls on the critical path,
    /// contending with fault handling, for times nobody needs before the replay ends.
    pub(super) next_resolve_at: usize,
}

pub(super) enum Pending {
    Kernel {
        name: String,
        dur_ns: u64,
        start: CudaEvent,
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
        marks: [CudaEvent; 4],
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
    /// Time of a completed event on the event clock.
    pub(super) fn time_of(&self, ev: &CudaEvent) -> u64 {
        // elapsed_ms is an f32 of milliseconds: about 1 us resolution over a 10 s replay.
        let ms = self.reference.elapsed_ms(ev).unwrap_or(0.0) as f64;
        self.reference_ns + (ms.max(0.0) * 1e6) as u64
    }

    /// Records a timing event on `stream`, reusing a spare one where there is one.
    pub(super) fn mark(&mut self, stream: &CudaStream) -> Result<CudaEvent> {
        match self.spare.pop() {
            Some(ev) => {
                ev.record(stream).map_err(cuda_err("cuEventRecord", "telemetry mark"))?;
                Ok(ev)
            }
            None => mark(stream),
        }
    }

    /// Moves the pending events the device has reached, in order, into `out`.
    pub(super) fn resolve(&mut self, out: &mut Vec<MemEvent>) {
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
                    let (start_ns, end_ns) = (self.time_of(&start), self.time_of(&end));
                    let end_ns = end_ns.max(start_ns);
                    let stall_ns = (end_ns - start_ns).saturating_sub(dur_ns);
                    out.push(MemEvent::Kernel { name, start_ns, end_ns, stall_ns });
                    self.spare.extend([start, end]);
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
                    self.spare.extend([start, end]);
                }
                Pending::PageWork { work, bytes, start, end } => {
                    let (start_ns, end_ns) = (self.time_of(&start), self.time_of(&end));
                    out.push(MemEvent::PageWork { work, bytes, start_ns, end_ns: end_ns.max(start_ns) });
                    self.spare.extend([start, end]);
                }
                Pending::Released { region, marks } => {
                    let at_ns = marks.iter().map(|m| self.time_of(m)).max().unwrap_or(0);
                    out.push(MemEvent::Released { region, at_ns });
                    self.spare.extend(marks);
                }
            }
        }
    }
}

/// Records a timing event on `stream`.
pub(super) fn mark(stream: &CudaStream) -> Result<CudaEvent> {
    stream
        .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda_err("cuEventRecord", "telemetry mark"))
}

impl CudaBackend {
    /// The device timing of recorded events, started or stopped as the recorder was switched:
    /// faults and migrations need CUPTI (the telemetry crate); the backend times its kernels,
    /// staging copies and the releases of freed regions on the device.
    pub(super) fn timing(&mut self) -> Option<&mut Recording> {
        self.sync_timing();
        self.recording.as_mut()
    }

    /// Starts or stops the device timing as the recorder is switched.
    pub(super) fn sync_timing(&mut self) {
        if !self.recorder.is_recording() {
            self.recording = None;
        } else if self.recording.is_none() {
            self.start_timing();
        }
    }

    /// Starts timing events on the device: a first event, synchronised, that the others are
    /// timed from. Where that fails, recording goes off with a warning.
    pub(super) fn start_timing(&mut self) {
        let reference = mark(&self.streams.compute).and_then(|ev| {
            ev.synchronize().map_err(cuda_err("cuEventSynchronize", "telemetry reference"))?;
            Ok(ev)
        });
        match reference {
            Ok(reference) => {
                let reference_ns = self.start.elapsed().as_nanos() as u64;
                self.recording = Some(Recording {
                    reference,
                    reference_ns,
                    pending: Default::default(),
                    spare: Vec::new(),
                    next_resolve_at: RESOLVE_BATCH,
                });
            }
            Err(e) => {
                tracing::warn!("cannot time events on the device, recording none: {e}");
                self.recorder.set_recording(false);
            }
        }
    }

    /// Moves the timed events the device has reached into the recorder, once enough wait.
    pub(super) fn resolve_recorded(&mut self) {
        if let Some(rec) = self.timing() {
            if rec.pending.len() >= rec.next_resolve_at {
                let mut done = Vec::new();
                rec.resolve(&mut done);
                rec.next_resolve_at = rec.pending.len() + RESOLVE_BATCH;
                self.recorder.extend(done);
            }
        }
    }

    /// Runs `work` (enqueued on `stream`) and, when recording, times it with a pair of events
    /// on that stream: `event` makes the pending record of the pair, from what `work` did.
    fn timed_on<T>(
        &mut self,
        stream: &Arc<CudaStream>,
        work: impl FnOnce(&mut Self) -> Result<T>,
        event: impl FnOnce(&Self, CudaEvent, CudaEvent) -> Pending,
    ) -> Result<T> {
        let start = match self.timing() {
            Some(rec) => Some(rec.mark(stream)?),
            None => None,
        };
        let out = work(self)?;
        let (Some(start), Some(rec)) = (start, self.recording.as_mut()) else { return Ok(out) };
        let end = rec.mark(stream)?;
        let pending = event(self, start, end);
        if let Some(rec) = self.recording.as_mut() {
            rec.pending.push_back(pending);
        }
        Ok(out)
    }

    /// Runs `copy` (staging copies of `blocks` enqueued on `stream`), and when recording times
    /// it with a pair of events: the copies become `Migration` events with cause `Staging`.
    pub(super) fn timed_copies(
        &mut self,
        stream: &Arc<CudaStream>,
        dir: crate::seam::Direction,
        blocks: &[StagedBlock],
        copy: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        self.timed_on(stream, copy, |this, start, end| {
            let blocks = blocks
                .iter()
                .map(|&StagedBlock { block: BlockId { region: id, block: b }, .. }| {
                    let r = &this.regions[&id];
                    (id, b as u64 * BLOCK_SIZE, r.block_bytes(b as usize))
                })
                .collect();
            Pending::Staging { dir, blocks, start, end }
        })
    }

    /// Prefetches `ranges` to the device on `stream` (the driver's page work `work`: a
    /// population or a repopulation), timed as such where recording.
    pub(super) fn prefetch_pages(
        &mut self,
        work: PageWork,
        stream: Arc<CudaStream>,
        ranges: &[DevRange],
    ) -> Result<()> {
        let bytes = ranges.iter().map(|r| r.1).sum();
        self.timed_on(
            &stream,
            |this| prefetch_batch(&this.dev, ranges, Location::DEVICE, &stream),
            |_, start, end| Pending::PageWork { work, bytes, start, end },
        )
    }

    /// Discards `ranges` on `stream`, timed as page work where recording; false where the
    /// driver has no batch discard (nothing was queued).
    pub(super) fn discard_pages(&mut self, stream: Arc<CudaStream>, ranges: &[DevRange]) -> Result<bool> {
        let bytes = ranges.iter().map(|r| r.1).sum();
        self.timed_on(
            &stream,
            |this| discard_batch(&this.dev, ranges, &stream),
            |_, start, end| Pending::PageWork { work: PageWork::Discard, bytes, start, end },
        )
    }
}
