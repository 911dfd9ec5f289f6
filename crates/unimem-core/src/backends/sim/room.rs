//! The simulated device's memory: regions coming and going, pages arriving and leaving, and the
//! room the driver makes for them (pooled pages first, then least recently migrated blocks).

use super::*;

impl SimBackend {
    pub(super) fn note_device_added(&mut self, pages: usize) {
        self.budget.add_data(pages as u64 * PAGE_SIZE);
        self.budget.note_held();
    }

    /// Device pages leaving the working set: a new owner populates them afresh.
    pub(super) fn note_device_released(&mut self, pages: usize) {
        self.budget.remove_data(pages as u64 * PAGE_SIZE);
    }

    /// `bytes` of room given up now are there from `at` on (`with_room_after_copies`).
    pub(super) fn room_freed_at(&mut self, at: u64, bytes: u64) {
        if self.room_after_copies && at > self.host_now && bytes > 0 {
            self.freeing.push((at, bytes));
        }
    }

    /// When `need` more bytes are there: the account says they fit (the caller made room), but
    /// room given up lately may still hold its old data. The room free now comes first, then
    /// that of the evictions ending first, which the need takes (the arena lends a restore
    /// the chunks of evictions under way: their room is the restore's, not the next one's).
    /// Room freed before now matters to nothing issued from now on.
    pub(super) fn room_free_at(&mut self, need: u64) -> u64 {
        let now = self.host_now;
        self.freeing.retain(|&(at, _)| at > now);
        let pending: u64 = self.freeing.iter().map(|f| f.1).sum();
        let free_now = self.info.capacity.saturating_sub(self.budget.held() + pending);
        if pending == 0 || free_now >= need {
            return 0;
        }
        let mut short = need - free_now;
        self.freeing.sort_unstable();
        let mut at = 0;
        for f in self.freeing.iter_mut() {
            at = f.0;
            let took = f.1.min(short);
            f.1 -= took;
            short -= took;
            if short == 0 {
                break;
            }
        }
        self.freeing.retain(|f| f.1 > 0);
        at
    }

    /// Gives back the device pages of pooled buffers, the longest pooled first, until `need`
    /// more bytes fit in the capacity, as the CUDA backend does: one discard of their pages,
    /// costed as any discard, and the buffers retire (a new region of their size gets a new
    /// buffer).
    pub(super) fn shed_pool(&mut self, need: u64) {
        let shed = self.budget.shed(need);
        if shed.is_empty() {
            return;
        }
        let mut bytes = 0;
        for e in shed {
            bytes += e.resident_bytes();
            if !self.swap_back(&e) {
                self.retired_free_ns += self.cost.free_retired_ns(e.resident_bytes());
            }
        }
        self.discard_on_device(self.host_now, bytes);
        self.host_now += self.discard_host_ns(bytes);
    }

    /// A shed buffer swapped out of a region still wholly staged and holding the buffer it
    /// took goes back to it, its pages discarded (as a stage-out without the swap leaves
    /// them), and that buffer to the pool, with no page on the device: neither retires.
    fn swap_back(&mut self, e: &Pooled<SimBuffer, u64>) -> bool {
        let Some(Owner { region, placeholder }) = e.owner else { return false };
        let Some(r) = self.regions.get_mut(&region) else { return false };
        if r.addr != placeholder || !r.wholly_staged() {
            return false;
        }
        self.drop_advice(region);
        let r = self.regions.get_mut(&region).expect("checked");
        r.addr = e.buf.addr;
        let (blocks, bytes) = (r.blocks.len(), r.bytes);
        self.budget.pool_mut().put(
            SimBuffer { addr: placeholder, bytes },
            vec![false; blocks],
            Vec::new(),
            None,
        );
        let (from, to, at_ns) = (placeholder, e.buf.addr, self.host_now);
        self.emit(|| MemEvent::Relocated { region, from, to, at_ns });
        true
    }

    /// Re-stamps blocks that just received device pages (least-recently-migrated order).
    pub(super) fn restamp(&mut self, id: RegionId, blocks: std::ops::Range<usize>) {
        let Some(r) = self.regions.get_mut(&id).filter(|r| r.packed.is_none()) else {
            return;
        };
        for b in blocks {
            let blk = &mut r.blocks[b];
            blk.stamp = self.budget.restamp(BlockId::new(id, b), blk.stamp);
        }
    }

    /// Drops blocks with no device pages left from the eviction order.
    pub(super) fn unstamp_empty(&mut self, id: RegionId, blocks: std::ops::Range<usize>) {
        let Some(r) = self.regions.get_mut(&id) else {
            return;
        };
        for b in blocks {
            let (s, e) = r.block_pages(b);
            let blk = &mut r.blocks[b];
            if blk.stamp != 0 && r.on_device.count(s, e) == 0 {
                self.budget.unstamp(BlockId::new(id, b), blk.stamp);
                blk.stamp = 0;
            }
        }
    }

    /// Makes pages `s..e` device-valid. `duplicate` keeps host copies (read-mostly).
    pub(super) fn move_to_device(&mut self, id: RegionId, s: usize, e: usize, duplicate: bool) -> Moved {
        let r = self.regions.get_mut(&id).expect("checked by caller");
        let host_only = r.on_host.count(s, e) - r.on_host.count_and(&r.on_device, s, e);
        let populated = r.on_device.count_neither(&r.on_host, s, e);
        if !r.host_data.is_empty() {
            let (on_host, on_device) = (&r.on_host, &r.on_device);
            let (host_data, dev_data) = (&mut r.host_data, &mut r.dev_data);
            on_host.for_each_not_in(on_device, s, e, |p| {
                let page = if duplicate { host_data.copy(p) } else { host_data.take(p) };
                dev_data.put(p, page);
            });
        }
        let added = r.on_device.insert(s, e);
        if !duplicate {
            r.on_host.remove(s, e);
        }
        self.note_device_added(added);
        Moved { transferred: host_only, populated, dropped: 0 }
    }

    /// Makes pages `s..e` host-valid and drops them from the device. Pages with no copy stay so.
    /// A packed region's stay on the device.
    pub(super) fn move_to_host(&mut self, id: RegionId, s: usize, e: usize) -> Moved {
        if self.regions[&id].packed.is_some() {
            return Moved::default();
        }
        self.forget_kept(id, s, e);
        let r = self.regions.get_mut(&id).expect("checked by caller");
        let dup = r.on_device.count_and(&r.on_host, s, e);
        let dev_only = r.on_device.count(s, e) - dup;
        r.device_bytes_to_host(s, e);
        let (on_host, on_device) = (&mut r.on_host, &r.on_device);
        on_host.union_from(on_device, s, e);
        let removed = r.on_device.remove(s, e);
        r.prefetched.remove(s, e);
        self.budget.remove_data(removed as u64 * PAGE_SIZE);
        let blocks = r.block_range(s, e);
        self.unstamp_empty(id, blocks);
        Moved { transferred: dev_only, populated: 0, dropped: dup }
    }

    /// The blocks to take off the device, least recently migrated first and none in `protect`,
    /// for `need` more bytes to fit, once pooled pages have given way (`shed_pool`): the
    /// driver's victims, whether they migrate (`make_room`) or are staged out (a program's
    /// outputs). Evicting a block takes every device page of it; where only the running work's
    /// own blocks are left, it runs over capacity.
    pub(super) fn room_victims(&mut self, need: u64, protect: &HashSet<BlockId>) -> Victims {
        self.shed_pool(need);
        let freed = |b: &BlockId| {
            let r = &self.regions[&b.region];
            let (s, e) = r.block_pages(b.block as usize);
            r.on_device.count(s, e) as u64 * PAGE_SIZE
        };
        self.budget.victims(need, |b| protect.contains(b), freed)
    }

    /// Sheds pooled pages (`shed_pool`), then evicts least-recently-migrated blocks not in
    /// `protect`, until `need` more bytes fit.
    /// Evictions occupy the D2H link from `earliest` (and after each block's last use); returns
    /// when the last of them completes, i.e. when the room is there (`earliest` if none).
    pub(super) fn make_room(&mut self, need: u64, protect: &HashSet<BlockId>, earliest: u64) -> u64 {
        let mut done = earliest.max(self.room_free_at(need));
        for BlockId { region: id, block: b } in self.room_victims(need, protect).blocks {
            let r = &self.regions[&id];
            let (s, e) = r.block_pages(b as usize);
            let last_use = r.blocks[b as usize].last_use_ns;
            let moved = self.move_to_host(id, s, e);
            let bytes = moved.transferred as u64 * PAGE_SIZE;
            let dur = CostModel::transfer_ns(bytes, self.cost.evict_d2h_rate_gbps)
                + CostModel::transfer_ns(
                    moved.dropped as u64 * PAGE_SIZE,
                    self.cost.duplicate_drop_rate_gbps,
                );
            let (start, end) = self.occupy_link(Direction::D2H, earliest.max(last_use), dur);
            done = done.max(end);
            self.stats.evicted_bytes += bytes;
            self.stats.driver_dropped_bytes += (moved.transferred + moved.dropped) as u64 * PAGE_SIZE;
            self.stats.d2h_bytes += bytes;
            self.emit_migration(
                id,
                s as u64 * PAGE_SIZE,
                bytes,
                Direction::D2H,
                MigrationCause::Eviction,
                (start, end),
            );
        }
        done
    }

    pub(super) fn alloc_region(&mut self, id: RegionId, bytes: u64) -> Result<u64> {
        self.host_timed(HostOp::Allocate, |this| {
            crate::seam::check_new_region(id, bytes, this.regions.contains_key(&id))?;
            let limit = this.cost.machine_memory_bytes();
            if bytes > limit - this.allocated_bytes.min(limit) {
                return Err(Error::Allocation {
                    bytes,
                    reason: format!(
                        "the simulated machine holds at most {} of managed data ({} of device and {} of host \
                         memory: `device_memory_bytes` and `host_memory_bytes` of the profile \"{}\"), and {} is \
                         allocated",
                        Bytes(limit),
                        Bytes(this.cost.device_memory_bytes),
                        Bytes(this.cost.host_memory_bytes),
                        this.cost.name,
                        Bytes(this.allocated_bytes)
                    ),
                });
            }
            this.allocated_bytes += bytes;
            let pages = bytes.div_ceil(PAGE_SIZE) as usize;
            let mut region = SimRegion {
                addr: 0,
                bytes,
                pages,
                on_device: PageSet::new(pages),
                on_host: PageSet::new(pages),
                prefetched: PageSet::new(pages),
                staged: PageSet::new(pages),
                blocks: vec![Block::default(); pages.div_ceil(PAGES_PER_BLOCK)],
                host_data: PageStore::default(),
                dev_data: PageStore::default(),
                kept: PageSet::new(pages),
                kept_data: PageStore::default(),
                spare: vec![false; pages.div_ceil(PAGES_PER_BLOCK)],
                packed: None,
            };
            if this.pack_small && packs(bytes) {
                // A zeroed slot on the device, once the room for its chunk is there.
                let (slot, ready_ns) = this.slab_take(bytes);
                region.addr = slot.addr;
                region.packed = Some(slot);
                region.on_device.insert(0, pages);
                region.blocks[0].ready_ns = ready_ns;
                this.regions.insert(id, region);
                // Its bytes are data; the rest of its chunk is held, not data.
                this.budget.remove_spare(bytes);
                this.budget.add_data(bytes);
                this.emit(|| MemEvent::Populate { region: id, offset: 0, bytes, on: Location::DEVICE });
                return Ok(slot.addr);
            }
            // A pooled buffer's pages on the device are already mapped (zeroed for the user).
            let mut pooled = Vec::new();
            match this.budget.pool_mut().take(bytes) {
                Some(entry) => {
                    region.addr = entry.buf.addr;
                    // Its pages are written once the work on them still queued is done.
                    let after = entry.after.iter().copied().max().unwrap_or(0);
                    for blk in &mut region.blocks {
                        blk.ready_ns = blk.ready_ns.max(after);
                    }
                    for b in (0..entry.resident.len()).filter(|&b| entry.resident[b]) {
                        let (bs, be) = region.block_pages(b);
                        region.on_device.insert(bs, be);
                        pooled.push((b, be - bs));
                    }
                }
                None => region.addr = this.new_buffer(bytes),
            }
            let addr = region.addr;
            this.regions.insert(id, region);
            for (b, pages) in pooled {
                this.note_device_added(pages);
                this.restamp(id, b..b + 1);
                // The region holds these device pages from its allocation on.
                let (offset, bytes) = (b as u64 * BLOCK_SIZE, pages as u64 * PAGE_SIZE);
                this.emit(|| MemEvent::Populate { region: id, offset, bytes, on: Location::DEVICE });
            }
            Ok(addr)
        })
    }

    /// A slot for a packed region of `bytes`, and when it is there: a free one, or one of a
    /// chunk carved once the room for it is made (the chunk stays the slab's).
    fn slab_take(&mut self, bytes: u64) -> (Slot, u64) {
        if let Some(slot) = self.slab.take(bytes) {
            return (slot, self.host_now);
        }
        let ready_ns = self.make_room(BLOCK_SIZE, &HashSet::default(), self.host_now);
        self.budget.add_spare(BLOCK_SIZE);
        self.budget.note_held();
        let base = self.next_addr;
        self.next_addr += BLOCK_SIZE;
        (self.slab.carve(bytes, base), ready_ns)
    }

    /// The address of a new buffer of `bytes` (the pool had none), its allocation on the host's
    /// clock.
    pub(super) fn new_buffer(&mut self, bytes: u64) -> u64 {
        self.host_now += self.cost.alloc_ns(bytes);
        self.stats.new_buffers += 1;
        let addr = self.next_addr;
        self.next_addr += bytes.div_ceil(BLOCK_SIZE) * BLOCK_SIZE;
        addr
    }

    pub(super) fn free_region(&mut self, id: RegionId) -> Result<()> {
        let r = self.regions.remove(&id).ok_or(Error::UnknownRegion(id))?;
        self.allocated_bytes -= r.bytes;
        if let Some(slot) = r.packed {
            // Its chunk stays held; the slot serves the next region of its class.
            self.budget.remove_data(r.bytes);
            self.budget.add_spare(r.bytes);
            self.slab.put(slot);
            return Ok(());
        }
        self.staged_bytes -= r.staged.count(0, r.pages) as u64 * PAGE_SIZE;
        self.kept_bytes -= r.kept.count(0, r.pages) as u64 * PAGE_SIZE;
        // The runtime pools managed memory: a free does not synchronise the device, and the
        // buffer keeps its blocks on the device (whole ones, as the CUDA backend accounts
        // them) for its next region.
        let resident: Vec<bool> = (0..r.blocks.len())
            .map(|b| {
                let (bs, be) = r.block_pages(b);
                r.spare[b] || r.on_device.count(bs, be) == be - bs
            })
            .collect();
        self.note_device_released(r.on_device.count(0, r.pages));
        self.budget.remove_spare(r.spare_pages_in(0, r.pages) as u64 * PAGE_SIZE);
        self.budget.pool_mut().put(SimBuffer { addr: r.addr, bytes: r.bytes }, resident, Vec::new(), None);
        for (b, blk) in r.blocks.iter().enumerate() {
            self.budget.unstamp(BlockId::new(id, b), blk.stamp);
        }
        Ok(())
    }
}
