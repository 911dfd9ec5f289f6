//! Events timed on the device, for telemetry: kernels, staging copies, the driver's page work
//! and the release of freed regions (`cuda::timing` keeps and reads them).

use super::*;

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
        Recording::follow(&mut self.recording, &mut self.recorder, &self.streams.compute, self.clock.start());
    }

    /// Moves the timed events the device has reached into the recorder, once enough wait.
    pub(super) fn resolve_recorded(&mut self) {
        self.sync_timing();
        if let Some(rec) = self.recording.as_mut() {
            rec.resolve_some(&mut self.recorder);
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
