//! Staged evictions: device-only pages copied into pinned staging buffers, and their way back
//! (to the device before a prefetch or kernel uses them, to the host before a host access).

use super::*;

impl SimBackend {
    pub(super) fn stage_ranges(&mut self, ranges: &[ByteRange]) -> Result<()> {
        // What does not fit migrates as a prefetch to the host, after the stage-out's own
        // calls, as the CUDA backend does (and counts it).
        let migrate = self.host_timed(HostOp::StageOut, |this| {
            for r in ranges {
                this.checked(r.region, r.offset, r.len)?;
            }
            // Blocks that do not fit in the staging buffers, or hold no device-only data, migrate.
            let mut migrate: Vec<ByteRange> = Vec::new();
            let mut copies = 0u64;
            // Per region, its blocks whose every page left the device in this call.
            let mut emptied: HashMap<RegionId, Vec<bool>> = HashMap::default();
            for range in ranges {
                let id = range.region;
                let (s, e) = this.regions[&id].page_range(range.offset, range.len);
                for b in this.regions[&id].block_range(s, e) {
                    let r = &this.regions[&id];
                    let (bs, be) = r.block_pages(b);
                    let (bs, be) = (bs.max(s), be.min(e));
                    let dev_only = r.on_device.count(bs, be) - r.on_device.count_and(&r.on_host, bs, be);
                    let bytes = dev_only as u64 * PAGE_SIZE;
                    // Kept copies give up their slots for data that has none.
                    let kept = r.kept.count(bs, be) as u64 * PAGE_SIZE;
                    this.reclaim_kept(
                        (bytes - kept).saturating_sub(this.staging_free()),
                        BlockId::new(id, b),
                    );
                    let r = &this.regions[&id];
                    if dev_only == 0
                        || this.staged_bytes + this.kept_bytes - kept + bytes > this.staging_capacity
                    {
                        let (offset, len) = (bs as u64 * PAGE_SIZE, (be - bs) as u64 * PAGE_SIZE);
                        crate::seam::push_merged(
                            &mut migrate,
                            ByteRange { region: id, offset, len: len.min(r.bytes - offset) },
                        );
                        continue;
                    }
                    // The copy waits for the kernels using the block, on the copy engine's lane,
                    // and for a write-back of its pages still copying.
                    let last_use = r.blocks[b].last_use_ns.max(r.blocks[b].written_back_until);
                    // Pages whose staging copy is still valid are dropped, not copied.
                    let clean = this.forget_kept(id, bs, be) as u64 * PAGE_SIZE;
                    let r = this.regions.get_mut(&id).expect("checked");
                    let (staged, on_device, on_host) = (&mut r.staged, &r.on_device, &r.on_host);
                    staged.insert_only_in(on_device, on_host, bs, be);
                    r.device_bytes_to_host(bs, be);
                    // Duplicates keep their host copy; every device page of the block is dropped.
                    let dropped = r.on_device.remove(bs, be);
                    r.prefetched.remove(bs, be);
                    let (b0, b1) = r.block_pages(b);
                    if dropped == b1 - b0 {
                        emptied.entry(id).or_insert_with(|| vec![false; r.blocks.len()])[b] = true;
                    }
                    this.note_device_released(dropped);
                    this.unstamp_empty(id, b..b + 1);
                    this.staged_bytes += bytes;
                    let start_at = this.host_now.max(last_use);
                    let copied = bytes - clean;
                    // Clean pages copy nothing: their stage-out is the discard, which waits for
                    // the block's kernels only, never for the link (the CUDA backend issues it
                    // on its own stream).
                    let (start, end) = if copied > 0 {
                        let dur = CostModel::transfer_ns(copied, this.cost.stage_d2h_rate_gbps);
                        this.occupy_link(Direction::D2H, start_at, dur)
                    } else {
                        (start_at, start_at)
                    };
                    this.regions.get_mut(&id).expect("checked").blocks[b].staged_until = end;
                    this.room_freed_at(end, dropped as u64 * PAGE_SIZE);
                    this.stage_out_until = this.stage_out_until.max(end);
                    copies += 1;
                    this.stats.d2h_bytes += copied;
                    this.stats.staged_out_bytes += bytes;
                    this.stats.staged_clean_bytes += clean;
                    let offset = bs as u64 * PAGE_SIZE;
                    if clean > 0 {
                        this.emit(|| MemEvent::Drop {
                            region: id,
                            offset,
                            bytes: clean,
                            from: Location::DEVICE,
                        });
                    }
                    if copied > 0 {
                        this.emit_migration(
                            id,
                            offset,
                            copied,
                            Direction::D2H,
                            MigrationCause::Staging,
                            (start, end),
                        );
                    }
                }
            }
            let mut swapped = 0;
            for (id, emptied) in emptied {
                swapped += this.swap_out(id, emptied);
            }
            if copies > 0 {
                // The copies' calls and the discard of their device pages hold the host (a
                // buffer swapped out keeps its pages: no discard).
                this.host_now += this.discard_host_ns(copies.saturating_sub(swapped) * BLOCK_SIZE);
            }
            Ok(migrate)
        })?;
        if migrate.is_empty() {
            return Ok(());
        }
        self.prefetch_ranges(&migrate, Location::Host)
    }

    /// `ranges` less the blocks with staged pages whose stage-out has not ended by now: as the
    /// CUDA backend, a prefetch leaves them to the kernel that needs them (restoring pages soon
    /// after their discard is slow on the H200).
    pub(super) fn settled(&self, ranges: &[ByteRange]) -> Vec<ByteRange> {
        let mut out: Vec<ByteRange> = Vec::with_capacity(ranges.len());
        for range in ranges {
            let r = &self.regions[&range.region];
            let (s, e) = r.page_range(range.offset, range.len);
            for b in r.block_range(s, e) {
                let (bs, be) = r.block_pages(b);
                if r.blocks[b].staged_until > self.host_now && r.staged.count(bs, be) > 0 {
                    continue;
                }
                let lo = (bs.max(s) as u64 * PAGE_SIZE).max(range.offset);
                let hi = (be.min(e) as u64 * PAGE_SIZE).min(range.offset + range.len);
                crate::seam::push_merged(
                    &mut out,
                    ByteRange { region: range.region, offset: lo, len: hi - lo },
                );
            }
        }
        out
    }

    /// Brings the staged pages of `s..e` back to the device, after making room (outside
    /// `protect`) from `earliest` on: the pages are repopulated and copied from the staging
    /// buffers over the link's H2D side. `prefetch`: a prefetch asked for them (they count in
    /// its metrics). Returns (pages, when they are there).
    pub(super) fn restore_to_device(
        &mut self,
        id: RegionId,
        s: usize,
        e: usize,
        protect: &HashSet<BlockId>,
        earliest: u64,
        prefetch: bool,
    ) -> (usize, u64) {
        let runs = self.regions[&id].staged.runs(s, e);
        // Pages taken over are written once the copies out of them are done.
        let earliest = earliest.max(self.relocate(id));
        let mut pages = 0;
        let mut done = earliest;
        for (rs, re) in runs {
            let n = re - rs;
            // Pages of a pooled buffer taken over (the region relocated into it) are on the
            // device already: no repopulation, and the copy lands in resident pages. They
            // leave the spare account before room is made for the run, as the CUDA backend
            // takes them (`take_spare`) before it makes room: held once, not twice.
            let r = &self.regions[&id];
            let spare_blocks = r.block_range(rs, re).filter(|&b| r.spare[b]).count();
            let resident = r.spare_pages_in(rs, re);
            self.budget.remove_spare(resident as u64 * PAGE_SIZE);
            let room_at = self.make_room(n as u64 * PAGE_SIZE, protect, earliest);
            let r = self.regions.get_mut(&id).expect("checked by caller");
            // The staging copy stays, valid until the device writes the pages.
            if !r.host_data.is_empty() {
                let (host_data, dev_data, kept_data) = (&mut r.host_data, &mut r.dev_data, &mut r.kept_data);
                r.staged.for_each(rs, re, |p| {
                    let page = host_data.take(p);
                    dev_data.put(p, page.clone());
                    kept_data.put(p, page);
                });
            }
            r.staged.remove(rs, re);
            r.kept.insert(rs, re);
            r.clear_spare_restored(rs, re);
            r.on_device.insert(rs, re);
            if prefetch {
                // A prefetch's restore counts as prefetched (accuracy and timeliness).
                r.prefetched.insert(rs, re);
                self.stats.prefetch_arrived_bytes += (re - rs) as u64 * PAGE_SIZE;
            }
            let blocks = r.block_range(rs, re);
            // Read-mostly advice is unset before the copy, as the CUDA backend unsets it
            // (`drop_staged_advice`): a staged block comes back with no host copy to duplicate.
            self.drop_advice_of(id, blocks.clone());
            self.staged_bytes -= n as u64 * PAGE_SIZE;
            self.kept_bytes += n as u64 * PAGE_SIZE;
            self.kept_order.extend(blocks.clone().map(|b| BlockId::new(id, b)));
            self.note_device_added(n);
            let bytes = n as u64 * PAGE_SIZE;
            // A prefetch's own call cost is charged by the prefetch; a restore for a kernel
            // makes its own call, which repopulates the discarded pages (per range, as any).
            // Either way the CUDA backend repopulates one range per 2 MiB block, which the
            // driver does behind the copies before it (the probe's "time per block", between
            // two restores' copies on the H200), then copies the data in.
            let call = if prefetch { 0 } else { self.cost.batch_range_ns };
            let repopulated = blocks.len() - spare_blocks;
            let per_block = repopulated as u64 * self.cost.stage_h2d_block_ns;
            let resident_bytes = resident as u64 * PAGE_SIZE;
            let dur = call
                + per_block
                + CostModel::transfer_ns(bytes - resident_bytes, self.cost.stage_h2d_rate_gbps)
                + CostModel::transfer_ns(resident_bytes, self.cost.stage_h2d_resident_rate_gbps);
            let (start, end) = self.occupy_h2d_stream(room_at.max(self.host_now), dur, true);
            let r = self.regions.get_mut(&id).expect("checked by caller");
            for b in blocks.clone() {
                r.blocks[b].ready_ns = r.blocks[b].ready_ns.max(end);
            }
            self.restamp(id, blocks);
            self.stats.h2d_bytes += bytes;
            self.stats.staged_in_bytes += bytes;
            // The repopulation, then the copy.
            let copied_from = start + call + per_block;
            if repopulated > 0 {
                let bytes = (bytes - resident_bytes).min(repopulated as u64 * BLOCK_SIZE);
                let work = PageWork::Repopulate;
                self.emit(|| MemEvent::PageWork { work, bytes, start_ns: start + call, end_ns: copied_from });
            }
            self.emit_migration(
                id,
                rs as u64 * PAGE_SIZE,
                bytes,
                Direction::H2D,
                MigrationCause::Staging,
                (copied_from, end),
            );
            pages += n;
            done = done.max(end);
        }
        (pages, done)
    }

    /// After a stage-out, when relocation is allowed: a region now wholly staged whose every
    /// block left the device in that stage-out gives its buffer to the pool with its pages on
    /// the device (no discard), as the CUDA backend does, and takes a pooled buffer with none
    /// (or a new one). The next restore of a region of its size relocates into those pages
    /// (`relocate`): a copy alone, no repopulation. Returns the blocks swapped.
    fn swap_out(&mut self, id: RegionId, emptied: Vec<bool>) -> u64 {
        let r = &self.regions[&id];
        if !self.relocate || !r.wholly_staged() || emptied.contains(&false) {
            return 0;
        }
        let bytes = r.bytes;
        let peer = self.regions.iter().any(|(&o, q)| o != id && q.bytes == bytes && q.wholly_staged());
        if !peer {
            return 0;
        }
        let to = match self.budget.pool_mut().take_empty(bytes) {
            Some(entry) => entry.buf.addr,
            None => self.new_buffer(bytes),
        };
        let swapped = emptied.len() as u64;
        self.drop_advice(id);
        let r = self.regions.get_mut(&id).expect("checked by caller");
        let from = std::mem::replace(&mut r.addr, to);
        // Its next user writes the pages once the copies out of them are done.
        let copied = r.blocks.iter().map(|b| b.staged_until).max().unwrap_or(0);
        let owner = Owner { region: id, placeholder: to };
        self.budget.pool_mut().put_swapped(
            SimBuffer { addr: from, bytes },
            emptied,
            vec![copied],
            None,
            owner,
        );
        self.budget.note_held();
        let at_ns = self.host_now;
        self.emit(|| MemEvent::Relocated { region: id, from, to, at_ns });
        swapped
    }

    /// A wholly staged region moving to another buffer leaves its read-mostly advice behind,
    /// as the CUDA backend unsets it there (`CudaBackend::drop_advice`): the call holds the host.
    pub(super) fn drop_advice(&mut self, id: RegionId) {
        let n = self.regions[&id].blocks.len();
        self.drop_advice_of(id, 0..n);
    }

    /// The read-mostly advice of `blocks` of region `id` unset where they have it, the calls'
    /// host time charged.
    pub(super) fn drop_advice_of(&mut self, id: RegionId, blocks: std::ops::Range<usize>) {
        let r = self.regions.get_mut(&id).expect("checked by caller");
        let mut bytes = 0;
        for b in blocks {
            if r.blocks[b].advice & ADV_READ_MOSTLY != 0 {
                r.blocks[b].advice &= !ADV_READ_MOSTLY;
                bytes += crate::seam::block_bytes(r.bytes, b as u64);
            }
        }
        self.host_now += Self::advise_host_ns(bytes, self.cost.advise_unset_read_mostly_ns_per_gib as f64);
    }

    /// As a restore begins, when relocation is allowed: as the CUDA backend, a region whose
    /// every page is staged moves into a pooled buffer of its size with pages on the device,
    /// which need no repopulation, for this restore and the region's next ones (its blocks
    /// become `spare`); its own buffer, its pages discarded, goes to the pool.
    /// Returns when the pages taken over are free to write (0: none taken).
    pub(super) fn relocate(&mut self, id: RegionId) -> u64 {
        let r = &self.regions[&id];
        if !(self.relocate && r.wholly_staged()) {
            return 0;
        }
        let Some(entry) = self.budget.pool_mut().take_resident(r.bytes) else { return 0 };
        self.drop_advice(id);
        let r = self.regions.get_mut(&id).expect("checked by caller");
        r.spare = entry.resident;
        let from = std::mem::replace(&mut r.addr, entry.buf.addr);
        // Every page is staged: the spare blocks' pages, all of them.
        self.budget.add_spare(r.spare_pages_in(0, r.pages) as u64 * PAGE_SIZE);
        let old = SimBuffer { addr: from, bytes: r.bytes };
        let (blocks, to, at_ns) = (r.blocks.len(), r.addr, self.host_now);
        self.budget.pool_mut().put(old, vec![false; blocks], Vec::new(), None);
        self.emit(|| MemEvent::Relocated { region: id, from, to, at_ns });
        entry.after.into_iter().max().unwrap_or(0)
    }

    /// Brings the staged pages of `s..e` back to the host (the copy engine copies them into
    /// the host's pages, over the link) from `at`; returns when the copy is done.
    pub(super) fn restore_to_host(&mut self, id: RegionId, s: usize, e: usize, at: u64) -> u64 {
        let r = self.regions.get_mut(&id).expect("checked by caller");
        let (staged, on_host) = (&mut r.staged, &mut r.on_host);
        on_host.union_from(staged, s, e);
        let n = staged.remove(s, e);
        if n == 0 {
            return at;
        }
        let bytes = n as u64 * PAGE_SIZE;
        self.staged_bytes -= bytes;
        self.stats.staged_in_bytes += bytes;
        let dur = CostModel::transfer_ns(bytes, self.cost.stage_host_rate_gbps);
        self.occupy_link(Direction::H2D, at, dur).1
    }

    /// Drops the staged copies of `s..e` (dead data); returns how many pages had one.
    pub(super) fn drop_staged(&mut self, id: RegionId, s: usize, e: usize) -> usize {
        self.forget_kept(id, s, e);
        let r = self.regions.get_mut(&id).expect("checked by caller");
        if !r.host_data.is_empty() {
            let host_data = &mut r.host_data;
            r.staged.for_each(s, e, |p| host_data.drop_page(p));
        }
        // Pages taken over for data now dead go back to the driver.
        let spare = r.spare_pages_in(s, e);
        let n = r.staged.remove(s, e);
        r.clear_spare_restored(s, e);
        self.budget.remove_spare(spare as u64 * PAGE_SIZE);
        self.staged_bytes -= n as u64 * PAGE_SIZE;
        n
    }

    /// Staging bytes neither staged nor kept.
    pub(super) fn staging_free(&self) -> u64 {
        self.staging_capacity.saturating_sub(self.staged_bytes + self.kept_bytes)
    }

    /// Forgets the kept staging copies of pages `s..e` of `id` (the device wrote them, or they
    /// left the device another way); returns how many pages had one.
    pub(super) fn forget_kept(&mut self, id: RegionId, s: usize, e: usize) -> usize {
        let Some(r) = self.regions.get_mut(&id) else { return 0 };
        if !r.kept_data.is_empty() {
            let kept_data = &mut r.kept_data;
            r.kept.for_each(s, e, |p| kept_data.drop_page(p));
        }
        let n = r.kept.remove(s, e);
        self.kept_bytes -= n as u64 * PAGE_SIZE;
        n
    }

    /// Gives up kept copies, oldest first, until `need` more staging bytes are free (or none
    /// is left but those of `keep`, the block being staged).
    fn reclaim_kept(&mut self, need: u64, keep: BlockId) {
        let mut skipped = Vec::new();
        while need > self.staging_free() {
            let Some(b) = self.kept_order.pop_front() else { break };
            if b == keep {
                skipped.push(b);
                continue;
            }
            let Some(r) = self.regions.get(&b.region) else { continue };
            if b.block as usize >= r.blocks.len() {
                continue;
            }
            let (s, e) = r.block_pages(b.block as usize);
            self.forget_kept(b.region, s, e);
        }
        for b in skipped.into_iter().rev() {
            self.kept_order.push_front(b);
        }
    }

    /// Queues the blocks of `ranges` for a write-back ([`SimBackend::with_write_back`]), as
    /// the device arena does: each is copied once the device is done with its kernels and
    /// the host's clock has passed that ([`SimBackend::issue_write_backs`]). An eviction
    /// issued before copies the block itself. Nothing where write-backs are off.
    pub(super) fn write_back_ranges(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.host_timed(HostOp::StageOut, |this| {
            for r in ranges {
                this.checked(r.region, r.offset, r.len)?;
            }
            if !this.write_back {
                return Ok(());
            }
            for range in ranges {
                let id = range.region;
                let (s, e) = this.regions[&id].page_range(range.offset, range.len);
                let r = &this.regions[&id];
                for b in r.block_range(s, e) {
                    let (bs, be) = r.block_pages(b);
                    this.write_backs.push_back(WriteBack { region: id, pages: (bs.max(s), be.min(e)) });
                }
            }
            Ok(())
        })
    }

    /// Copies the queued write-backs the device is done with by the host's clock into kept
    /// staging copies on the link's D2H side, leaving the data on the device: a later
    /// stage-out drops them instead of copying. Pages off the device or kept already, and
    /// blocks whose copies the free staging memory cannot hold, are left (no kept copy is
    /// given up for them).
    pub(super) fn issue_write_backs(&mut self) {
        let mut copied = false;
        while let Some(wb) = self.write_backs.front().copied() {
            let Some(r) = self.regions.get(&wb.region) else {
                self.write_backs.pop_front();
                continue;
            };
            let (bs, be) = wb.pages;
            let b = bs / PAGES_PER_BLOCK;
            // Due once the last kernel using the block is done, by the host's clock.
            let ready = r.blocks[b].last_use_ns;
            if ready > self.host_now {
                break;
            }
            self.write_backs.pop_front();
            let mut only = PageSet::new(r.pages);
            only.insert_only_in(&r.on_device, &r.on_host, bs, be);
            only.remove_in(&r.kept, bs, be);
            let bytes = only.count(bs, be) as u64 * PAGE_SIZE;
            if bytes == 0 || bytes > self.staging_free() {
                continue;
            }
            let dur = CostModel::transfer_ns(bytes, self.cost.stage_d2h_rate_gbps);
            let (start, end) =
                self.occupy_link(Direction::D2H, ready.max(r.blocks[b].written_back_until), dur);
            let r = self.regions.get_mut(&wb.region).expect("looked up");
            if !r.dev_data.is_empty() {
                let (dev_data, kept_data) = (&r.dev_data, &mut r.kept_data);
                only.for_each(bs, be, |p| kept_data.put(p, dev_data.copy(p)));
            }
            r.kept.union_from(&only, bs, be);
            r.blocks[b].written_back_until = end;
            self.kept_bytes += bytes;
            self.kept_order.push_back(BlockId::new(wb.region, b));
            self.stats.d2h_bytes += bytes;
            self.stats.written_back_bytes += bytes;
            let offset = bs as u64 * PAGE_SIZE;
            self.emit_migration(
                wb.region,
                offset,
                bytes,
                Direction::D2H,
                MigrationCause::Staging,
                (start, end),
            );
            copied = true;
        }
        if copied {
            // The copies due go in one batched call, as the arena issues them.
            self.host_now += self.cost.batch_range_ns;
        }
    }
}
