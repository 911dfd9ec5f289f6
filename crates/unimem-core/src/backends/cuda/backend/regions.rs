//! Regions: managed buffers from the pool or new, freed into the pool (cuMemFree synchronises
//! the device), advice and discards.

use super::*;

impl CudaBackend {
    pub(super) fn alloc_region(&mut self, id: RegionId, bytes: u64) -> Result<u64> {
        crate::seam::check_new_region(id, bytes, self.regions.contains_key(&id))?;
        let (buf, blocks) = self.timed(HostOp::Allocate, |this| this.take_buffer(bytes))?;
        let addr = buf.ptr();
        // Recycled pages that are on the device count again (they need no faults): they enter
        // the account through touch_block, like any page arriving.
        let pooled: Vec<usize> = (0..blocks.len()).filter(|&b| blocks[b].on_device).collect();
        let blocks = blocks.into_iter().map(|b| Block { on_device: false, prefetched: false, ..b }).collect();
        self.regions.insert(id, CudaRegion { buf, bytes, blocks, ready: None });
        for b in pooled {
            self.touch_block(id, b);
        }
        Ok(addr)
    }

    pub(super) fn free_region(&mut self, id: RegionId) -> Result<()> {
        if !self.regions.contains_key(&id) {
            return Err(Error::UnknownRegion(id));
        }
        // Pages a relocation took over for staged blocks are on the device, for the pool.
        let spare: Vec<bool> = self.regions[&id].blocks.iter().map(|b| b.spare).collect();
        // The buffer's next user must not race a stage-out's discard of it still queued...
        self.drop_staged(id, 0, self.regions[&id].bytes)?;
        let r = self.regions.remove(&id).expect("checked");
        // ... nor a copy into it.
        if let Some(ev) = r.ready.as_ref().filter(|ev| !ev.is_complete()) {
            for s in [&self.streams.compute, &self.streams.h2d] {
                s.wait(ev).map_err(cuda_err("cuStreamWaitEvent", "reuse after copies"))?;
            }
        }
        self.sync_timing();
        if let Some(rec) = self.recording.as_mut() {
            let marks = vec![
                rec.mark(&self.streams.compute)?,
                rec.mark(&self.streams.h2d)?,
                rec.mark(&self.streams.d2h)?,
                rec.mark(&self.streams.remap)?,
            ];
            rec.pending.push_back(Pending::Released { region: id, marks });
        }
        let mut blocks = r.blocks;
        for (b, blk) in blocks.iter_mut().enumerate() {
            if blk.on_device {
                // The pages stay where they are, out of the account of data (pooled pages
                // count against the capacity: `shed_pool`); `on_device` tells the buffer's
                // next user.
                self.budget.unstamp(BlockId::new(id, b), blk.stamp);
                self.budget.remove_data(block_bytes(r.bytes, b as u64));
            }
            blk.stamp = 0;
            blk.on_host = false; // dead data
        }
        // Advice stays on the buffer: clear what would surprise its next user.
        if blocks.iter().any(|b| b.read_mostly || b.remote) {
            for advice in
                [Advice::UnsetReadMostly, Advice::UnsetPreferredLocation, Advice::UnsetAccessedByDevice]
            {
                r.buf.advise(0, r.bytes, advice)?;
            }
            for blk in &mut blocks {
                (blk.read_mostly, blk.remote) = (false, false);
            }
        }
        let resident = blocks.iter().zip(spare).map(|(b, spare)| b.on_device || spare).collect();
        // What writes other bytes into its pages next (a relocation's copies, a shed's discard)
        // must not run under the kernels issued before the free: as after `cuMemFree`.
        let last_use =
            Arc::new(self.streams.compute.record_event(None).map_err(cuda_err("cuEventRecord", "free"))?);
        self.budget.pool_mut().put(r.buf, resident, Vec::new(), Some(last_use));
        Ok(())
    }

    pub(super) fn advise_range(&mut self, range: ByteRange, advice: Advice) -> Result<()> {
        self.timed(HostOp::Advise, |this| {
            this.checked(range.region, range.offset, range.len)?;
            if range.len == 0 {
                return Ok(());
            }
            let r = this.regions.get_mut(&range.region).expect("checked");
            r.buf.advise(range.offset, range.len, advice)?;
            let mut collapsed = Vec::new();
            for b in r.blocks_of(range.offset, range.len) {
                let blk = &mut r.blocks[b];
                match advice {
                    Advice::SetReadMostly => blk.read_mostly = true,
                    Advice::UnsetReadMostly => {
                        blk.read_mostly = false;
                        // Duplicates collapse to the host: on the H200 a kernel read data just
                        // collapsed at 7.3 GB/s, the fault-driven rate (`unimem probe`).
                        if blk.on_device && blk.on_host {
                            collapsed.push(b);
                        }
                    }
                    Advice::SetPreferredLocation(Location::Host) | Advice::SetAccessedByDevice => {
                        // Remote once both are set; the account treats either as the intent.
                        blk.remote = true;
                    }
                    Advice::UnsetPreferredLocation | Advice::UnsetAccessedByDevice => blk.remote = false,
                    Advice::SetPreferredLocation(Location::Device(_)) => blk.remote = false,
                }
            }
            for b in collapsed {
                this.leave_device(range.region, b);
            }
            Ok(())
        })
    }

    pub(super) fn discard_ranges(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.timed(HostOp::Discard, |this| {
            for r in ranges {
                this.checked(r.region, r.offset, r.len)?;
            }
            for r in ranges {
                let staged = this.regions[&r.region]
                    .blocks_of(r.offset, r.len)
                    .any(|b| this.regions[&r.region].blocks[b].staged.is_some());
                if staged {
                    this.stats.discarded_bytes += r.len; // dead: the staged copy goes too
                    this.drop_staged(r.region, r.offset, r.len)?;
                }
            }
            let list = this.addresses(ranges);
            this.streams
                .d2h
                .join(&this.streams.compute)
                .map_err(cuda_err("cuStreamWaitEvent", "discard after kernels"))?;
            if !this.discard_pages(this.streams.d2h.clone(), &list)? {
                return Ok(()); // no discard on this driver: the data simply stays (a hint)
            }
            this.after_moves_back("order after discard")?;
            let (blocks, _) = this.missing(ranges.iter().map(|r| (r.region, r.offset, r.len)));
            for BlockId { region: id, block: b } in blocks {
                let r = &this.regions[&id];
                if r.blocks[b as usize].on_device || r.blocks[b as usize].on_host {
                    this.stats.discarded_bytes += r.block_bytes(b as usize);
                }
                this.leave_device(id, b as usize);
                this.regions.get_mut(&id).expect("checked").blocks[b as usize].on_host = false;
            }
            Ok(())
        })
    }

    /// A buffer of `bytes` for a new region, from the pool where one of that size waits (its
    /// blocks on the device marked), else new.
    pub(super) fn take_buffer(&mut self, bytes: u64) -> Result<(ManagedBuffer, Vec<Block>)> {
        if let Some(entry) = self.budget.pool_mut().take(bytes) {
            self.log.pool_hits += 1;
            return self.reuse(entry, false);
        }
        self.stats.new_buffers += 1;
        let blocks = vec![Block::default(); bytes.div_ceil(BLOCK_SIZE) as usize];
        match self.free_memory.alloc(&self.dev, bytes, self.allow_oversubscription) {
            Ok(buf) => Ok((buf, blocks)),
            Err(Error::Allocation { .. }) if !self.budget.pool().is_empty() => {
                // Give pooled memory back (cuMemFree synchronises) and try once more.
                self.sync_all()?;
                // The refusal rested on a fresh reading, which this retry's estimate cannot pass:
                // it reads again.
                self.budget.pool_mut().clear();
                self.retired.clear();
                Ok((self.free_memory.alloc(&self.dev, bytes, self.allow_oversubscription)?, blocks))
            }
            Err(e) => Err(e),
        }
    }

    /// A pooled buffer back in use: every stream that may touch its pages waits for the work
    /// still queued on it (a discard), `h2d` for its last kernels too where staged data is
    /// copied in (`copies_in`: a relocation), and its blocks say which pages are on the
    /// device. (A new region's own writes come from kernels, after the old ones on `compute`,
    /// or from the host, which synchronises first.)
    pub(super) fn reuse(
        &mut self,
        entry: Pooled<ManagedBuffer, Arc<CudaEvent>>,
        copies_in: bool,
    ) -> Result<(ManagedBuffer, Vec<Block>)> {
        for ev in entry.after.iter().filter(|ev| !ev.is_complete()) {
            for s in [&self.streams.compute, &self.streams.h2d, &self.streams.d2h, &self.streams.remap] {
                s.wait(ev).map_err(cuda_err("cuStreamWaitEvent", "reuse after a discard"))?;
            }
        }
        if let Some(ev) = entry.last_use.as_ref().filter(|ev| copies_in && !ev.is_complete()) {
            self.streams
                .h2d
                .wait(ev)
                .map_err(cuda_err("cuStreamWaitEvent", "copies in after its last kernels"))?;
        }
        let blocks =
            entry.resident.iter().map(|&on_device| Block { on_device, ..Block::default() }).collect();
        Ok((entry.buf, blocks))
    }
}
