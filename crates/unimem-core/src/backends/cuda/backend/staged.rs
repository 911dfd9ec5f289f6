//! Staged evictions: device-only blocks copied into pinned slots after the kernels that used
//! them, their managed pages discarded once the copy is done; and what each way back waits for.

use super::*;

/// A stage-out's discard, issued on `remap` once its copy (on `stage`) is done rather than on
/// `stage` right behind it: on the H200 a discard beside a restore's repopulation made the two
/// 1.5-15x slower than one after the other, while a stage-out without its discard ran beside a
/// restore in 0.56-0.97x the time of the two in turn (`unimem probe`, "beside a restore"). On
/// `remap`, with the repopulations, a discard never runs beside one, and waits for nothing but
/// its own copy.
pub(super) struct PendingDiscard {
    /// The end of the copies out.
    pub(super) copied: Arc<CudaEvent>,
    /// Address ranges to discard.
    pub(super) ranges: Vec<(u64, u64)>,
    pub(super) blocks: Vec<BlockId>,
}

impl CudaBackend {
    pub(super) fn stage_ranges(&mut self, ranges: &[ByteRange]) -> Result<()> {
        for r in ranges {
            self.checked(r.region, r.offset, r.len)?;
        }
        let migrate = self.timed(HostOp::StageOut, |this| {
            this.timed_part(|p| &mut p.discards, |this| this.issue_discards(false))?;
            let (blocks, _) = this.missing(ranges.iter().map(|r| (r.region, r.offset, r.len)));
            let mut blocks: Vec<BlockId> = blocks.into_iter().collect();
            blocks.sort_unstable(); // slots in address order: copies coalesce
            let mut migrate: Vec<ByteRange> = Vec::new();
            let mut staged: Vec<StagedBlock> = Vec::new();
            // Blocks whose slot holds their data already: discarded, not copied.
            let mut clean: Vec<StagedBlock> = Vec::new();
            // The last kernel that touched a block staged here: the copies wait for it.
            let mut after = 0u64;
            for BlockId { region: id, block: b } in blocks {
                let r = &this.regions[&id];
                let blk = r.blocks[b as usize];
                let (offset, len) = (b as u64 * BLOCK_SIZE, r.block_bytes(b as usize));
                if !blk.on_device {
                    this.log.stage_absent += if blk.staged.is_none() { len } else { 0 };
                    continue;
                }
                // Duplicates drop for free, and remote data is not the device's to copy.
                if blk.on_host || blk.remote {
                    this.log.stage_migrated_host_copy += len;
                    crate::seam::push_merged(&mut migrate, ByteRange { region: id, offset, len });
                    continue;
                }
                after = after.max(blk.last_kernel);
                let key = BlockId { region: id, block: b };
                let slot = if let Some((slot, _)) = this.kept.remove(&key) {
                    clean.push(StagedBlock { block: key, slot });
                    this.stats.staged_clean_bytes += len;
                    this.recorder.emit(|| MemEvent::Drop {
                        region: id,
                        offset,
                        bytes: len,
                        from: Location::DEVICE,
                    });
                    slot
                } else {
                    let Some(slot) = this.take_slot(key)? else {
                        this.log.stage_migrated_no_slot += len;
                        crate::seam::push_merged(&mut migrate, ByteRange { region: id, offset, len });
                        continue;
                    };
                    staged.push(StagedBlock { block: key, slot });
                    this.stats.d2h_bytes += len;
                    slot
                };
                this.leave_device(id, b as usize);
                let blk = &mut this.regions.get_mut(&id).expect("checked").blocks[b as usize];
                blk.staged = Some(slot);
                blk.on_host = false;
                this.stats.staged_out_bytes += len;
            }
            if !staged.is_empty() || !clean.is_empty() {
                this.log.stage.calls += 1;
                this.timed_part(|p| &mut p.order, |this| this.stage_after_kernel(after))?;
                let stage = this.streams.stage.clone();
                let runs = this.staged_runs(&staged);
                let all: Vec<StagedBlock> = staged.iter().chain(&clean).copied().collect();
                // Regions swapped out keep their pages for a restore of their size: no discard.
                let swaps = this.timed_part(|p| &mut p.swaps, |this| this.swaps(&all))?;
                let all: Vec<StagedBlock> =
                    all.into_iter().filter(|s| !swaps.iter().any(|(id, _)| *id == s.block.region)).collect();
                let discards = managed_pages(&this.staged_runs(&all));
                if !staged.is_empty() {
                    this.timed_part(
                        |p| &mut p.copies_out,
                        |this| {
                            this.timed_copies(&stage, crate::seam::Direction::D2H, &staged, |this| {
                                this.staging.copy(runs, true, &stage)
                            })
                        },
                    )?;
                    this.log.stage.blocks += staged.len() as u64;
                }
                let staged = all;
                let copied = Arc::new(
                    this.streams
                        .stage
                        .record_event(None)
                        .map_err(cuda_err("cuEventRecord", "staged eviction"))?,
                );
                this.timed_part(
                    |p| &mut p.swaps,
                    |this| swaps.into_iter().try_for_each(|(id, buf)| this.swap_out(id, buf, &copied)),
                )?;
                if !staged.is_empty() {
                    let blocks: Vec<BlockId> = staged.iter().map(|s| s.block).collect();
                    this.pending_blocks.extend(blocks.iter().copied());
                    this.pending_discards.push_back(PendingDiscard { copied, ranges: discards, blocks });
                }
            }
            Ok(migrate)
        })?;
        if migrate.is_empty() {
            return Ok(());
        }
        self.prefetch_ranges(&migrate, Location::Host)
    }

    /// Issues the pending discard of block `key` now (`remap` waiting for its copy if need be),
    /// and only that one: the others may wait for copies behind later kernels.
    pub(super) fn issue_discard_of(&mut self, key: BlockId) -> Result<()> {
        let Some(at) = self.pending_discards.iter().position(|p| p.blocks.contains(&key)) else {
            return Ok(());
        };
        let p = self.pending_discards.remove(at).expect("just found");
        self.issue_discard(p)
    }

    /// Issues one pending discard on `remap`, after its copy.
    pub(super) fn issue_discard(&mut self, p: PendingDiscard) -> Result<()> {
        if !p.copied.is_complete() {
            self.streams
                .remap
                .wait(&p.copied)
                .map_err(cuda_err("cuStreamWaitEvent", "discard after its copy"))?;
        }
        self.discard_pages(self.streams.remap.clone(), &p.ranges)?;
        let done = Arc::new(
            self.streams.remap.record_event(None).map_err(cuda_err("cuEventRecord", "staged eviction"))?,
        );
        for key in p.blocks {
            self.pending_blocks.remove(&key);
            self.staged_done.insert(key, done.clone());
        }
        Ok(())
    }

    /// Issues the pending discards whose copies are done (`all`: every one, `remap` waiting for
    /// the copies still running), in order, on `remap`; each block's stage-out ends with its
    /// discard there.
    pub(super) fn issue_discards(&mut self, all: bool) -> Result<()> {
        while let Some(p) = self.pending_discards.front() {
            let copied = p.copied.is_complete();
            if !all && !copied {
                break;
            }
            let p = self.pending_discards.pop_front().expect("just seen");
            self.issue_discard(p)?;
        }
        Ok(())
    }

    /// The staging copies of staged blocks (region, block, slot): one run per block, which
    /// `StagingPool::copy` merges where they continue each other.
    pub(super) fn staged_runs(&self, staged: &[StagedBlock]) -> Vec<Run> {
        staged
            .iter()
            .map(|&StagedBlock { block: BlockId { region: id, block: b }, slot }| {
                let r = &self.regions[&id];
                Run {
                    alloc: id.0,
                    dptr: r.buf.ptr() + b as u64 * BLOCK_SIZE,
                    slot,
                    bytes: r.block_bytes(b as usize),
                }
            })
            .collect()
    }

    /// Makes the stage stream wait for kernel `seq` (the backend's count, from 1; 0: none) to
    /// finish: by its mark where one is kept, else for every kernel issued (the mark is gone
    /// when the kernel is older than the marks kept, which are then done unless the device
    /// lags far behind).
    pub(super) fn stage_after_kernel(&mut self, seq: u64) -> Result<()> {
        if seq == 0 {
            return Ok(());
        }
        let at = self.kernel_marks.partition_point(|m| m.0 < seq);
        let wait = match self.kernel_marks.get(at) {
            Some((s, ev)) if *s == seq => Some(ev.clone()),
            _ if at == 0 && self.kernel_marks.front().is_some_and(|m| m.1.is_complete()) => None,
            _ => {
                self.streams
                    .stage
                    .join(&self.streams.compute)
                    .map_err(cuda_err("cuStreamWaitEvent", "stage after kernels"))?;
                None
            }
        };
        if let Some(ev) = wait.filter(|ev| !ev.is_complete()) {
            self.streams.stage.wait(&ev).map_err(cuda_err("cuStreamWaitEvent", "stage after its kernel"))?;
        }
        Ok(())
    }

    /// Copies the staged blocks of a range back into the managed pages on the host (callers
    /// synchronise first): a prefetch populates the pages on the host, then the copy engine
    /// fills them (64 MiB in 77-88 ms on the H200, host read included; the CPU copying them
    /// took 165-220 ms, populating page by page; docs/decisions.md).
    pub(super) fn restore_to_host(&mut self, id: RegionId, offset: u64, len: u64) -> Result<()> {
        let r = &self.regions[&id];
        let staged: Vec<StagedBlock> = r
            .blocks_of(offset, len)
            .filter_map(|b| r.blocks[b].staged.map(|slot| StagedBlock { block: BlockId::new(id, b), slot }))
            .collect();
        if staged.is_empty() {
            return Ok(());
        }
        let runs = self.staged_runs(&staged);
        // The pages go to the host first: a copy straight into pages discarded after device
        // use landed nowhere on the H200 (the host then read zeros) unless some other work
        // ran on the device in between; populated on the host, the copy lands there.
        prefetch_batch(&self.dev, &managed_pages(&runs), Location::Host, &self.streams.d2h)?;
        self.staging.copy(runs, false, &self.streams.d2h)?;
        self.streams.d2h.synchronize().map_err(cuda_err("cuStreamSynchronize", "restore to the host"))?;
        for StagedBlock { block: BlockId { region: id, block: b }, slot } in staged {
            self.take_spare(id, b as usize); // its pages hold the data now
            let r = self.regions.get_mut(&id).expect("checked");
            let bytes = r.block_bytes(b as usize);
            let blk = &mut r.blocks[b as usize];
            blk.staged = None;
            blk.on_host = true; // where the host reads them
            self.staging.release(slot, None);
            self.stats.staged_in_bytes += bytes;
        }
        Ok(())
    }

    /// Drops the staged copies of a range's blocks (dead data, or data about to be replaced).
    /// Whatever writes those pages next must not race the stage-out's discard still queued:
    /// the compute and `h2d` streams wait for it.
    pub(super) fn drop_staged(&mut self, id: RegionId, offset: u64, len: u64) -> Result<()> {
        let blocks = self.regions[&id].blocks_of(offset, len);
        let mut waited: FxHashSet<*const CudaEvent> = FxHashSet::default();
        let writers = [self.streams.compute.clone(), self.streams.h2d.clone()];
        for b in blocks {
            self.take_spare(id, b); // its pages hold nothing now
            let blk = &mut self.regions.get_mut(&id).expect("checked").blocks[b];
            if let Some(slot) = blk.staged.take() {
                // A copy into the slot may be in flight; the next one is on the same stream.
                self.staging.release(slot, None);
            }
            self.forget_kept(BlockId::new(id, b));
            self.after_stage_out(id, b as u32, &writers, &mut waited, "write after staging")?;
        }
        Ok(())
    }

    /// Makes `streams` wait for the stage-out of block `b` of `id` where one is still queued
    /// (its copy and the discard of its pages), once per event (`waited`), and forgets it.
    /// Returns the end of that stage-out, if the block had one.
    pub(super) fn after_stage_out(
        &mut self,
        id: RegionId,
        b: u32,
        streams: &[Arc<CudaStream>],
        waited: &mut FxHashSet<*const CudaEvent>,
        what: &'static str,
    ) -> Result<Option<Arc<CudaEvent>>> {
        if self.pending_blocks.contains(&BlockId { region: id, block: b }) {
            self.issue_discard_of(BlockId { region: id, block: b })?;
        }
        let Some(ev) = self.staged_done.remove(&BlockId { region: id, block: b }) else { return Ok(None) };
        if waited.insert(Arc::as_ptr(&ev)) && !ev.is_complete() {
            for s in streams {
                s.wait(&ev).map_err(cuda_err("cuStreamWaitEvent", what))?;
            }
        }
        Ok(Some(ev))
    }

    /// Gives back the slot of block `key`'s clean copy, if it has one (the block was written,
    /// or its data left the device another way).
    pub(super) fn forget_kept(&mut self, key: BlockId) {
        if let Some((slot, read)) = self.kept.remove(&key) {
            self.staging.release(slot, Some(read));
        }
    }

    /// A free slot for staging block `key` (see `free_slot`), its host time counted in the
    /// data moves' `slots`, and what staging took to grow in their `pinning`.
    fn take_slot(&mut self, key: BlockId) -> Result<Option<Slot>> {
        let (t0, pinned_ns) = (Instant::now(), self.staging.pin_ns());
        let slot = self.free_slot(key);
        let pin = self.staging.pin_ns() - pinned_ns;
        let parts = &mut self.stats.move_parts;
        parts.pinning += pin;
        parts.slots += (t0.elapsed().as_nanos() as u64).saturating_sub(pin);
        slot
    }

    /// A free slot for staging block `key`, giving up the oldest clean copy (of another
    /// block) where none is free and staging cannot grow.
    fn free_slot(&mut self, key: BlockId) -> Result<Option<Slot>> {
        let stage = self.streams.stage.clone();
        loop {
            if let Some(slot) = self.staging.take(&stage)? {
                return Ok(Some(slot));
            }
            let Some(oldest) = self.kept_order.pop_front() else { return Ok(None) };
            if oldest != key {
                self.forget_kept(oldest);
            } else if self.kept.contains_key(&oldest) {
                self.kept_order.push_back(oldest);
                if self.kept.len() == 1 {
                    return Ok(None);
                }
            }
        }
    }
}

/// The managed pages of staging runs, as (address, bytes) ranges merged where they continue
/// each other within one allocation.
fn managed_pages(runs: &[Run]) -> Vec<(u64, u64)> {
    coalesce(runs.iter().map(|r| (RegionId(r.alloc), r.dptr, r.bytes)).collect())
}
