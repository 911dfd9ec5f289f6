//! Data to the device: prefetches, staged blocks repopulated and copied back, regions whose
//! data is all staged relocated into pooled pages; and moves to the host.

use super::*;
use cudarc::driver::sys;

impl CudaBackend {
    pub(super) fn prefetch_ranges(&mut self, ranges: &[ByteRange], to: Location) -> Result<()> {
        self.timed(HostOp::prefetch(to), |this| {
            for r in ranges {
                this.checked(r.region, r.offset, r.len)?;
            }
            let list = this.addresses(ranges);
            if list.is_empty() {
                return Ok(());
            }
            this.stats.prefetch_ranges += list.len() as u64;
            match to {
                Location::Device(_) => this.bring_to_device(ranges, &list, true, &FxHashSet::default())?,
                Location::Host => {
                    this.streams
                        .d2h
                        .join(&this.streams.compute)
                        .map_err(cuda_err("cuStreamWaitEvent", "evict after kernels"))?;
                    prefetch_batch(&this.dev, &list, Location::Host, &this.streams.d2h)?;
                    this.after_moves_back("order after evict")?;
                    let (blocks, _) = this.missing(ranges.iter().map(|r| (r.region, r.offset, r.len)));
                    for BlockId { region: id, block: b } in blocks {
                        let r = &this.regions[&id];
                        let blk = r.blocks[b as usize];
                        if blk.on_device && !blk.on_host {
                            let bytes = r.block_bytes(b as usize);
                            this.stats.d2h_bytes += bytes;
                            this.stats.prefetch_d2h_bytes += bytes;
                        }
                        let populated = blk.on_device || blk.on_host;
                        this.leave_device(id, b as usize);
                        this.regions.get_mut(&id).expect("checked").blocks[b as usize].on_host = populated;
                    }
                }
            }
            Ok(())
        })
    }

    /// Moves (checked) ranges to the device, `list` being their addresses: makes room,
    /// repopulates staged blocks' discarded pages on the device without a transfer (a prefetch
    /// on `remap`), prefetches the rest on `h2d`, then copies staged blocks back from their
    /// slots on `h2d` once their pages are there. Copying into the discarded pages first and
    /// prefetching after ran at 40 GB/s in `unimem probe` but 3-8x slower than `none` in
    /// replays, where the pages were never populated on the host: the copy lands them there.
    /// The repopulation is not on `h2d`, where it queued behind the copy before it, but on
    /// `remap`, ordered only after what it needs. (On the H200 the driver still runs it after
    /// the copy before it, about 30 us per block, whichever stream it is on: the simulator
    /// charges it to the link.) `explicit`: a prefetch the policy asked for (it counts in the
    /// prefetch metrics), not a kernel's own need for staged data. Room is made outside the
    /// ranges and `keep` (the blocks of the kernel about to run).
    ///
    /// A prefetch leaves out the staged blocks whose stage-out the device has not finished
    /// yet; the kernel that needs them restores them. On the H200, repopulating and copying
    /// into pages soon after their discard falls to a slow path (the copy in at 0.6-1 GB/s
    /// instead of 40-46), and restoring them as soon as their stage-out is done is no better
    /// (docs/decisions.md).
    pub(super) fn bring_to_device(
        &mut self,
        ranges: &[ByteRange],
        list: &[(u64, u64)],
        explicit: bool,
        keep: &FxHashSet<BlockId>,
    ) -> Result<()> {
        // Discards whose copies ended go first: on `h2d`, never beside what follows.
        self.timed_part(|p| &mut p.discards, |this| this.issue_discards(false))?;
        let in_place = self.relocate_staged(ranges, explicit)?;
        let (mut blocks, mut need) = self.missing(ranges.iter().map(|r| (r.region, r.offset, r.len)));
        let left_out = explicit && self.leave_unsettled(&mut blocks, &mut need);
        let mut protect = keep.clone();
        protect.extend(blocks.iter().copied());
        let site = if explicit { RoomSite::Prefetch } else { RoomSite::Restore };
        if self.make_room(need, &protect, site)? {
            self.after_moves_back("prefetch after evict")?;
        }
        let mut staged: Vec<StagedBlock> = Vec::new();
        let mut waited: FxHashSet<*const CudaEvent> = FxHashSet::default();
        for &BlockId { region: id, block: b } in &blocks {
            if let Some(slot) = self.regions[&id].blocks[b as usize].staged {
                staged.push(StagedBlock { block: BlockId { region: id, block: b }, slot });
                // Its discard is issued now if still pending; the repopulation follows it on
                // `remap`, so no stream has to wait for the stage-out's end.
                self.after_stage_out(id, b, &[], &mut waited, "restore after staging")?;
            }
        }
        self.drop_staged_advice(&staged)?;
        let owned: (Vec<DevRange>, Vec<DevRange>);
        let (repopulate, list) = if left_out || !staged.is_empty() {
            owned = self.prefetch_lists(ranges, &blocks, &staged, &in_place);
            (&owned.0[..], &owned.1[..])
        } else {
            (&[][..], list)
        };
        if !list.is_empty() {
            // As for the repopulation below: on an idle stream the call would migrate or
            // populate on the spot, holding the host (50-360 us per 64 MiB of fresh pages on
            // the H200, `unimem probe`); queued behind work (a short kernel where there is none)
            // it returns at once.
            self.hold(&self.streams.h2d.clone())?;
            self.timed_part(
                |p| &mut p.populate,
                |this| this.prefetch_pages(PageWork::Populate, this.streams.h2d.clone(), list),
            )?;
        }
        if !repopulate.is_empty() {
            // On an idle stream the call does the repopulation on the spot, holding the host
            // (27 us per block on the H200); queued behind work still running it returns at
            // once and the driver does it when the stream gets there. A short kernel ahead of
            // it on an idle `remap` frees the host (docs/decisions.md).
            self.hold(&self.streams.remap.clone())?;
            self.timed_part(
                |p| &mut p.repopulate,
                |this| {
                    this.prefetch_pages(PageWork::Repopulate, this.streams.remap.clone(), repopulate)?;
                    let there = this
                        .streams
                        .remap
                        .record_event(None)
                        .map_err(cuda_err("cuEventRecord", "pages repopulated"))?;
                    this.streams
                        .h2d
                        .wait(&there)
                        .map_err(cuda_err("cuStreamWaitEvent", "copy in after repopulation"))
                },
            )?;
        }
        if !staged.is_empty() {
            self.timed_part(
                |p| &mut p.copies_in,
                |this| {
                    let runs = this.staged_runs(&staged);
                    let h2d = this.streams.h2d.clone();
                    this.timed_copies(&h2d, crate::seam::Direction::H2D, &staged, |this| {
                        this.staging.copy(runs, false, &h2d)
                    })
                },
            )?;
        }
        let event = Arc::new(
            self.streams.h2d.record_event(None).map_err(cuda_err("cuEventRecord", "prefetch done"))?,
        );
        for StagedBlock { block: BlockId { region: id, block: b }, slot } in staged {
            // The slot keeps a clean copy until the device writes the block (or its room is
            // needed): evicting it again then needs no copy.
            self.kept.insert(BlockId { region: id, block: b }, (slot, event.clone()));
            self.kept_order.push_back(BlockId { region: id, block: b });
            let r = self.regions.get_mut(&id).expect("checked");
            r.blocks[b as usize].staged = None;
            let bytes = r.block_bytes(b as usize);
            self.stats.h2d_bytes += bytes;
            self.stats.staged_in_bytes += bytes;
        }
        for &BlockId { region: id, block: b } in &blocks {
            let r = self.regions.get_mut(&id).expect("checked");
            let blk = r.blocks[b as usize];
            let bytes = r.block_bytes(b as usize);
            r.ready = Some(event.clone());
            if !blk.on_device && explicit {
                self.stats.prefetch_arrived_bytes += bytes;
                self.regions.get_mut(&id).expect("checked").blocks[b as usize].prefetched = true;
                if blk.on_host {
                    self.stats.h2d_bytes += bytes;
                    self.stats.prefetch_h2d_bytes += bytes;
                    if blk.read_mostly {
                        self.stats.duplicated_bytes += bytes;
                    }
                }
            }
            let r = self.regions.get_mut(&id).expect("checked");
            r.blocks[b as usize].on_host = blk.on_host && blk.read_mostly;
            self.touch_block(id, b as usize);
        }
        Ok(())
    }

    /// Holds `stream` ahead of a prefetch call with a short kernel, so that the driver defers
    /// the call's page work instead of doing it inside the call, unless work is queued on the
    /// stream already: a call behind pending work is deferred anyway. A kernel launched onto a
    /// stream far behind waited for it: GPT-2 at 50% through the bridge spent 128-357 ms a
    /// step in these launches on an H100, and its steps took 0.91-0.93x the time without them
    /// (docs/decisions.md, "Streams are held only when idle").
    fn hold(&mut self, stream: &Arc<CudaStream>) -> Result<()> {
        self.timed_part(
            |p| &mut p.holds,
            |this| {
                // SAFETY: a live stream of the backend's context, current on this thread.
                match unsafe { sys::cuStreamQuery(stream.cu_stream()) } {
                    sys::CUresult::CUDA_ERROR_NOT_READY => {
                        this.log.holds_skipped += 1;
                        Ok(())
                    }
                    sys::CUresult::CUDA_SUCCESS => {
                        this.log.holds += 1;
                        this.kernels.touch_with_blocks(stream, &[], 1, HOLD_NS, 1)
                    }
                    e => Err(cuda_err("cuStreamQuery", "before a prefetch call")(
                        cudarc::driver::DriverError(e),
                    )),
                }
            },
        )
    }

    /// The read-mostly advice of staged blocks about to be copied back into their own pages,
    /// unset first: on the H200 a restore of the ResNet-50 input batch into its read-mostly
    /// pages took 7.5 ms per 2 MiB block (0.28 GB/s) where one without the advice copies at
    /// 40-47 GB/s. The block loses nothing by it, as where it relocates (`drop_advice`): it has
    /// no pages, and comes back by copy with no host copy to duplicate.
    fn drop_staged_advice(&mut self, staged: &[StagedBlock]) -> Result<()> {
        for run in self.take_read_mostly(staged.iter().map(|s| s.block)) {
            self.regions[&run.region].buf.advise(run.offset, run.len, Advice::UnsetReadMostly)?;
            self.log.advice_dropped += 1;
        }
        Ok(())
    }

    /// Moves each region of `ranges` whose every block is staged into a pooled buffer of its
    /// size with pages on the device, where one waits: its staged data is then copied into
    /// those pages as they are, without the driver first repopulating the discarded pages of
    /// its own buffer (25-30 us per 2 MiB block on the H200, run between the copies whatever
    /// stream it is queued on). As a framework's caching allocator reloads an offloaded tensor
    /// into a fresh block; the region's own buffer goes to the pool once its discards are
    /// done. Blocks `ranges` do not bring back yet keep their new pages (`Block::spare`) for
    /// their own restore. Only where the caller allows it (`allow_relocation`: the replay,
    /// whose kernels find their data by region, never by a kept address). Returns the blocks
    /// of `ranges` whose pages are on the device already.
    pub(super) fn relocate_staged(
        &mut self,
        ranges: &[ByteRange],
        explicit: bool,
    ) -> Result<FxHashSet<BlockId>> {
        let mut in_place = FxHashSet::default();
        // Spare pages belong to staged blocks only: nothing staged, nothing to do.
        if !self.relocate || self.staging.in_use() == 0 {
            return Ok(in_place);
        }
        let mut asked: BTreeMap<RegionId, FxHashSet<usize>> = BTreeMap::new();
        for r in ranges {
            asked.entry(r.region).or_default().extend(self.regions[&r.region].blocks_of(r.offset, r.len));
        }
        for (id, wanted) in asked {
            if self.budget.pool().resident_bytes() > 0 {
                self.relocate_region(id, explicit)?;
            }
            for b in wanted {
                if self.take_spare(id, b) {
                    in_place.insert(BlockId::new(id, b));
                }
            }
        }
        Ok(in_place)
    }

    /// Moves region `id` into a pooled buffer of its size with pages on the device, if every
    /// block of it is staged (and, for a prefetch, settled) and one waits: the new pages on
    /// the device mark their blocks `spare` (see `relocate_staged`).
    pub(super) fn relocate_region(&mut self, id: RegionId, explicit: bool) -> Result<()> {
        let r = &self.regions[&id];
        if !Self::wholly_staged(r) {
            return Ok(());
        }
        // A prefetch leaves out blocks still being staged out (`leave_unsettled`); their new
        // pages would wait outside the account for a kernel's restore.
        let mut running = FxHashMap::default();
        if explicit && (0..r.blocks.len() as u32).any(|b| self.unsettled(id, b, &mut running)) {
            return Ok(());
        }
        let Some(entry) = self.budget.pool_mut().take_resident(r.bytes) else { return Ok(()) };
        // The old buffer's stage-out ends with its discards (issued now where pending): the
        // copies in wait for them (they follow the copies out), the buffer's next user too.
        let (h2d, mut waited) = ([self.streams.h2d.clone()], FxHashSet::default());
        let mut after: Vec<Arc<CudaEvent>> = Vec::new();
        for b in 0..r.blocks.len() as u32 {
            if let Some(ev) = self.after_stage_out(id, b, &h2d, &mut waited, "copy in after the stage-out")? {
                if !after.iter().any(|e| Arc::ptr_eq(e, &ev)) {
                    after.push(ev);
                }
            }
        }
        let (buf, pages) = self.reuse(entry, true)?;
        let r = self.regions.get_mut(&id).expect("checked");
        let old = std::mem::replace(&mut r.buf, buf);
        self.drop_advice(id, &old)?;
        let r = self.regions.get_mut(&id).expect("checked");
        let (from, to) = (old.ptr(), r.buf.ptr());
        for (b, page) in pages.iter().enumerate() {
            if page.on_device {
                r.blocks[b].spare = true;
                self.log.relocated_resident += r.block_bytes(b);
                self.budget.add_spare(r.block_bytes(b));
            }
        }
        let old_blocks = old.len().div_ceil(BLOCK_SIZE) as usize;
        self.budget.pool_mut().put(old, vec![false; old_blocks], after, None);
        self.log.relocations += 1;
        let at_ns = self.clock.now();
        self.recorder.emit(|| MemEvent::Relocated { region: id, from, to, at_ns });
        Ok(())
    }

    /// Whether the stage-out of block `b` of `id` (its copy, then its discard) is not done: a
    /// discard still queued is a stage-out not done either. `running` keeps the answer per
    /// stage-out event (its blocks share it): one query each.
    pub(super) fn unsettled(
        &self,
        id: RegionId,
        b: u32,
        running: &mut FxHashMap<*const CudaEvent, bool>,
    ) -> bool {
        self.pending_blocks.contains(&BlockId { region: id, block: b })
            || self
                .staged_done
                .get(&BlockId { region: id, block: b })
                .is_some_and(|ev| *running.entry(Arc::as_ptr(ev)).or_insert_with(|| !ev.is_complete()))
    }

    /// The prefetch of `ranges` restricted to `blocks`, as (the repopulation of the blocks of
    /// `staged`, the rest). Each staged block is a range of its own, whole: on the H200,
    /// prefetching discarded pages as one larger range and then copying the staged data in loses
    /// the data (docs/decisions.md; the contract test `staged_data_survives_every_way_back`);
    /// the copy also covers the whole block.
    /// Blocks in `in_place` (relocated into pages already on the device) need neither.
    pub(super) fn prefetch_lists(
        &self,
        ranges: &[ByteRange],
        blocks: &FxHashSet<BlockId>,
        staged: &[StagedBlock],
        in_place: &FxHashSet<BlockId>,
    ) -> (Vec<DevRange>, Vec<DevRange>) {
        let staged: FxHashSet<BlockId> = staged.iter().map(|s| s.block).collect();
        let mut pieces: Vec<(RegionId, u64, u64, bool)> = Vec::new();
        let mut done: FxHashSet<BlockId> = FxHashSet::default();
        for r in ranges {
            let reg = &self.regions[&r.region];
            for b in reg.blocks_of(r.offset, r.len) {
                let key = BlockId::new(r.region, b);
                if !blocks.contains(&key) || in_place.contains(&key) {
                    continue;
                }
                let alone = staged.contains(&key);
                let (lo, hi) = if alone {
                    if !done.insert(key) {
                        continue;
                    }
                    (b as u64 * BLOCK_SIZE, b as u64 * BLOCK_SIZE + reg.block_bytes(b))
                } else {
                    (
                        (b as u64 * BLOCK_SIZE).max(r.offset),
                        ((b as u64 + 1) * BLOCK_SIZE).min(r.offset + r.len),
                    )
                };
                pieces.push((r.region, reg.buf.ptr() + lo, hi - lo, alone));
            }
        }
        let (alone, rest): (Vec<_>, Vec<_>) = pieces.into_iter().partition(|p| p.3);
        (merge_pieces(alone), merge_pieces(rest))
    }

    /// Makes the streams that bring data to the device (`h2d`, `remap`) wait for the moves back
    /// and discards issued on `d2h`: a block's pages must have left before they come back.
    pub(super) fn after_moves_back(&self, what: &'static str) -> Result<()> {
        for s in [&self.streams.h2d, &self.streams.remap] {
            s.join(&self.streams.d2h).map_err(cuda_err("cuStreamWaitEvent", what))?;
        }
        Ok(())
    }

    /// Takes out of `blocks` (and their bytes off `need`) the staged blocks whose stage-out is
    /// still running on the device. Returns whether it took any.
    pub(super) fn leave_unsettled(&self, blocks: &mut FxHashSet<BlockId>, need: &mut u64) -> bool {
        if self.staged_done.is_empty() && self.pending_blocks.is_empty() {
            return false;
        }
        let mut running = FxHashMap::default();
        let before = blocks.len();
        blocks.retain(|&BlockId { region: id, block: b }| {
            let r = &self.regions[&id];
            if r.blocks[b as usize].staged.is_none() {
                return true;
            }
            let unsettled = self.unsettled(id, b, &mut running);
            if unsettled {
                *need -= r.block_bytes(b as usize);
            }
            !unsettled
        });
        blocks.len() < before
    }
}
