//! The emulated GPU's memory: blocks arriving and leaving the budget's account, and the room
//! the emulated driver makes (pooled pages first, then least recently used blocks, moved back to
//! the host behind the kernels issued before).

use super::*;

impl CudaBackend {
    /// Marks block `b` of `id` on the device, most recently used.
    pub(super) fn touch_block(&mut self, id: RegionId, b: usize) {
        let r = self.regions.get_mut(&id).expect("checked");
        let bytes = r.block_bytes(b);
        let blk = &mut r.blocks[b];
        if !blk.on_device {
            self.budget.add_data(bytes);
        }
        blk.stamp = self.budget.restamp(BlockId::new(id, b), if blk.on_device { blk.stamp } else { 0 });
        blk.on_device = true;
        // Pages whose stage-out is still queued count as gone from its issue on.
        self.budget.note_held();
    }

    /// Clears block `b`'s `spare` mark; returns whether it had one.
    pub(super) fn take_spare(&mut self, id: RegionId, b: usize) -> bool {
        let r = self.regions.get_mut(&id).expect("checked");
        let spare = std::mem::take(&mut r.blocks[b].spare);
        if spare {
            self.budget.remove_spare(r.block_bytes(b));
        }
        spare
    }

    /// Drops block `b` of `id` from the device account.
    pub(super) fn leave_device(&mut self, id: RegionId, b: usize) {
        self.forget_kept(BlockId::new(id, b));
        let r = self.regions.get_mut(&id).expect("checked");
        let bytes = r.block_bytes(b);
        let blk = &mut r.blocks[b];
        if blk.on_device {
            self.budget.unstamp(BlockId::new(id, b), blk.stamp);
            self.budget.remove_data(bytes);
            blk.on_device = false;
            blk.stamp = 0;
        }
        blk.prefetched = false; // left before any kernel used it
    }

    /// Makes room for `need` more bytes in the emulated capacity, which holds the account, the
    /// pooled pages on the device and the spare pages: first by giving back pooled pages
    /// (`shed_pool`), then by moving least recently used blocks outside `protect` back to the
    /// host. Returns whether anything moved back (the caller's stream then waits for `d2h`).
    pub(super) fn make_room(
        &mut self,
        need: u64,
        protect: &FxHashSet<BlockId>,
        site: RoomSite,
    ) -> Result<bool> {
        self.timed_part(|p| &mut p.room, |this| this.evict_for(need, protect, site))
    }

    /// [`Self::make_room`]'s work, untimed.
    pub(super) fn evict_for(
        &mut self,
        need: u64,
        protect: &FxHashSet<BlockId>,
        site: RoomSite,
    ) -> Result<bool> {
        let victims = self.room_victims(need, protect)?.blocks;
        if victims.is_empty() {
            return Ok(false);
        }
        let freed: u64 = victims.iter().map(|v| self.regions[&v.region].block_bytes(v.block as usize)).sum();
        self.log.room_evicted.add(site, freed);
        self.stats.driver_dropped_bytes += freed;
        let mut ranges = Vec::with_capacity(victims.len());
        for &BlockId { region: id, block: b } in &victims {
            let r = &self.regions[&id];
            let dirty = !r.blocks[b as usize].on_host;
            let bytes = r.block_bytes(b as usize);
            if dirty {
                self.stats.evicted_bytes += bytes;
                self.stats.d2h_bytes += bytes;
            }
            ranges.push((id, r.buf.ptr() + b as u64 * BLOCK_SIZE, bytes));
            self.leave_device(id, b as usize);
            self.regions.get_mut(&id).expect("victim").blocks[b as usize].on_host = true;
        }
        self.streams
            .d2h
            .join(&self.streams.compute)
            .map_err(cuda_err("cuStreamWaitEvent", "evict after kernels"))?;
        prefetch_batch(&self.dev, &coalesce(ranges), Location::Host, &self.streams.d2h)?;
        Ok(true)
    }

    /// The blocks to take off the device, least recently used first and none in `protect`, for
    /// `need` more bytes to fit, once pooled pages have given way (`shed_pool`): the driver's
    /// victims, whether they migrate (`evict_for`) or are staged out (a program's outputs).
    pub(super) fn room_victims(&mut self, need: u64, protect: &FxHashSet<BlockId>) -> Result<Victims> {
        self.shed_pool(need)?;
        let block_size = |v: &BlockId| self.regions[&v.region].block_bytes(v.block as usize);
        Ok(self.budget.victims(need, |v| protect.contains(v), block_size))
    }

    /// Gives back the device pages of pooled buffers, the longest pooled first, until `need`
    /// more bytes fit beside the account, the pool and the spare pages: a GPU of the budget's
    /// size has no room for a pool beside data that fills it (the simulator pools the same
    /// way, with the same `BufferPool`). The pages are discarded on `remap` after the buffer's
    /// last users (the kernels issued before its free), and the buffers retire: a new
    /// region gets a new buffer rather than one repopulated soon after its discard, which the
    /// H200's driver does on a slow path (0.6-1 GB/s against 250 for fresh pages).
    pub(super) fn shed_pool(&mut self, need: u64) -> Result<()> {
        let shed = self.budget.shed(need);
        if shed.is_empty() {
            return Ok(());
        }
        let mut ranges: Vec<DevRange> = Vec::new();
        for e in &shed {
            ranges.extend(resident_ranges(e.buf.ptr(), e.buf.len(), &e.resident));
            self.log.shed_bytes += e.resident_bytes();
        }
        self.log.shed_buffers += shed.len() as u64;
        for ev in shed.iter().flat_map(|e| e.after.iter().chain(&e.last_use)).filter(|ev| !ev.is_complete()) {
            self.streams.remap.wait(ev).map_err(cuda_err("cuStreamWaitEvent", "shed after last use"))?;
        }
        if self.discard_pages(self.streams.remap.clone(), &ranges)? {
            let discarded = Arc::new(
                self.streams.remap.record_event(None).map_err(cuda_err("cuEventRecord", "shed discard"))?,
            );
            for e in shed {
                if let Some(buf) = self.swap_back(e, &discarded)? {
                    self.retired.push(buf);
                }
            }
        }
        // Else (no discard on this driver) the buffers drop here: cuMemFree gives their pages
        // back, waiting for the device.
        Ok(())
    }

    /// Blocks of `ranges` (outside remote mappings) not on the device, and their bytes.
    pub(super) fn missing(
        &self,
        ranges: impl Iterator<Item = (RegionId, u64, u64)>,
    ) -> (FxHashSet<BlockId>, u64) {
        let mut blocks = FxHashSet::default();
        let mut need = 0;
        for (id, offset, len) in ranges {
            let r = &self.regions[&id];
            for b in r.blocks_of(offset, len) {
                if blocks.insert(BlockId::new(id, b)) && !r.blocks[b].on_device && !r.blocks[b].remote {
                    need += r.block_bytes(b);
                }
            }
        }
        (blocks, need)
    }

    /// The device addresses of (checked) non-empty ranges, as the driver calls take them.
    pub(super) fn addresses(&self, ranges: &[ByteRange]) -> Vec<(u64, u64)> {
        ranges
            .iter()
            .filter(|r| r.len > 0)
            .map(|r| (self.regions[&r.region].buf.ptr() + r.offset, r.len))
            .collect()
    }
}
