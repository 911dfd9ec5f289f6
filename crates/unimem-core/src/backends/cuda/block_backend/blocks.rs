//! Blocks moving: restores (map device chunks, copy in), evictions (copy out after the last
//! kernel, remap to host chunks once done), room made as the driver would, kernel launches.

use rustc_hash::FxHashSet;

use super::copies::Copy;
use super::unset::zero_async;
use super::*;
use crate::seam::Direction;

/// Where the room a restore needed came from (the emulated driver's evictions are counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Site {
    Prefetch = 0,
    Kernel = 1,
}

/// When [`BlockBackend::settle`] looks at the work under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settle {
    /// The device is idle: every eviction and free is done.
    All,
    /// Now: room is short.
    Now,
    /// If [`SETTLE_EVERY`] has passed since the last look: the calls that issue work settle
    /// in passing, and each look queries the driver.
    IfDue,
}

/// How often the calls that issue work look for what completed when no room is short. Each
/// look queries an event or more (`cuEventQuery`); looking at every call took 49 ms of
/// ResNet-50's 317 ms of host time at 75% on an H200 (`docs/decisions.md`, "Completed work
/// is looked for at most every 100 us"). What it frees is no later for a restore: one short
/// of room looks at once (`make_room`), and lends the chunks of evictions under way anyway.
pub(super) const SETTLE_EVERY: std::time::Duration = std::time::Duration::from_micros(100);

impl BlockBackend {
    /// Remaps blocks whose eviction is done to their host chunks and releases freed regions
    /// whose work is done (every one with [`Settle::All`]).
    pub(super) fn settle(&mut self, when: Settle) -> Result<()> {
        if when == Settle::IfDue && self.settled_at.elapsed() < SETTLE_EVERY {
            return Ok(());
        }
        self.settled_at = Instant::now();
        let all = when == Settle::All;
        if all {
            // The device is idle and stays so: an eviction copies what is left to write back.
            self.write_backs.clear();
        } else {
            self.issue_write_backs()?;
        }
        while let Some(front) = self.releasing.front() {
            if !all && !front.after.iter().all(|e| e.is_complete()) {
                break;
            }
            let rel = self.releasing.pop_front().expect("front");
            self.release(rel.region)?;
            rel.after.into_iter().for_each(|e| self.marks.give_back(e));
        }
        let mut ready = Vec::new();
        while let Some((block, ev)) = self.leaving.front() {
            match self.leaving_state(*block, ev) {
                None => {}
                Some(done) if done || all => ready.push(*block),
                Some(_) => break,
            }
            let (_, ev) = self.leaving.pop_front().expect("front");
            self.marks.give_back(ev);
        }
        self.remap_to_host(ready)
    }

    /// For a queued eviction: `None` where it is stale (the block went, or a use cancelled it),
    /// else whether everything it waits for is done.
    fn leaving_state(&self, block: BlockId, ev: &Arc<CudaEvent>) -> Option<bool> {
        let blk = self.leaving_block(block, ev)?;
        let done = |e: &Option<Arc<CudaEvent>>| e.as_ref().is_none_or(|e| e.is_complete());
        Some(ev.is_complete() && done(&blk.host_ready))
    }

    /// The block of a queued eviction that is still current (no driver call: `make_room`
    /// walks every eviction under way, and a query of each event per walk cost more host time
    /// than the copies).
    fn leaving_block(&self, block: BlockId, ev: &Arc<CudaEvent>) -> Option<&VBlock> {
        let blk = self.regions.get(&block.region)?.blocks.get(block.block as usize)?;
        blk.leaving.as_ref().filter(|l| Arc::ptr_eq(l, ev))?;
        Some(blk)
    }

    /// Remaps `blocks` (evictions done) to their host chunks, or to nothing where they have
    /// none (dead data); their device chunks become free (a lent one is its new owner's
    /// already). One unmap and one grant per run; then free chunks past the capacity go.
    fn remap_to_host(&mut self, mut blocks: Vec<BlockId>) -> Result<()> {
        if blocks.is_empty() {
            return Ok(());
        }
        let t0 = Instant::now();
        blocks.sort_unstable();
        blocks.dedup();
        for run in runs(&blocks) {
            let id = run[0].region;
            let (first, n) = (run[0].block as u64, run.len() as u64);
            let r = self.regions.get_mut(&id).expect("queued blocks are live");
            if let Some(va) = &r.va {
                va.unmap(first * BLOCK_SIZE, n * BLOCK_SIZE)?;
            }
            let mut mapped = Vec::new();
            for blk in run {
                let b = blk.block as usize;
                let v = &mut r.blocks[b];
                v.leaving.take().into_iter().chain(v.arrive.take()).for_each(|e| self.marks.give_back(e));
                if let Some(chunk) = v.device.take() {
                    self.free_chunks.push(chunk);
                    self.budget.unstamp(*blk, std::mem::take(&mut v.stamp));
                    self.budget.remove_data(BLOCK_SIZE);
                    self.budget.add_spare(BLOCK_SIZE);
                }
                v.lent = false;
                if let (Some(va), Some(HostChunk::Mapped { phys, .. })) = (&r.va, &v.host) {
                    va.map(b as u64 * BLOCK_SIZE, BLOCK_SIZE, phys, 0)?;
                    mapped.push(b as u64);
                }
            }
            for (start, len) in spans(&mapped) {
                r.va().grant(start * BLOCK_SIZE, len * BLOCK_SIZE, self.device)?;
            }
            self.log.remaps += n;
        }
        self.trim();
        self.log.remap_ns += t0.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// Free chunks past the capacity go back to the driver or the arena (nothing maps them).
    pub(super) fn trim(&mut self) {
        while self.budget.held() > self.info.capacity {
            let Some(chunk) = self.free_chunks.pop() else { break };
            self.store.drop_device(chunk);
            self.budget.remove_spare(BLOCK_SIZE);
        }
    }

    /// Room for `n` more blocks: free chunks and new ones within the capacity, then chunks
    /// lent by freed regions (in the order `lend` asks) and by evictions under way (oldest
    /// first), then the emulated driver's own evictions of the least recently used blocks
    /// `protected` does not keep, whose chunks are lent in turn. A lent chunk comes with what
    /// its copies in must wait for on the device (the host never waits for room).
    pub(super) fn make_room(
        &mut self,
        n: u64,
        protected: &FxHashSet<BlockId>,
        site: Site,
        lend: Lend,
    ) -> Result<Vec<Credit>> {
        let capacity = self.info.capacity;
        let short =
            |this: &Self, got: usize| short_of(n, capacity, &this.budget, this.free_chunks.len(), got);
        let mut credits = Vec::new();
        if short(self, 0) == 0 {
            return Ok(credits);
        }
        self.settle(Settle::Now)?;
        // Freed regions' chunks, after the work that used them.
        let releasing: Box<dyn Iterator<Item = &mut Releasing>> = match lend {
            Lend::Earliest => Box::new(self.releasing.iter_mut()),
            Lend::Latest => Box::new(self.releasing.iter_mut().rev()),
        };
        for rel in releasing {
            for v in rel.region.blocks.iter_mut().filter(|v| v.device.is_some()) {
                if short_of(n, capacity, &self.budget, self.free_chunks.len(), credits.len()) == 0 {
                    break;
                }
                let chunk = v.device.take().expect("filtered");
                v.lent = true;
                self.budget.remove_spare(BLOCK_SIZE);
                credits.push(Credit { chunk, after: rel.after.clone() });
            }
        }
        let mut evicted = false;
        while short(self, credits.len()) > 0 {
            // Evictions under way, oldest first.
            let mut i = 0;
            while i < self.leaving.len() && short(self, credits.len()) > 0 {
                let (block, ev) = self.leaving[i].clone();
                i += 1;
                if self.leaving_block(block, &ev).is_none_or(|v| v.device.is_none()) {
                    continue;
                }
                let v = &mut self.regions.get_mut(&block.region).expect("live").blocks[block.block as usize];
                let Some(chunk) = v.device.take() else { continue };
                v.lent = true;
                let mut after = vec![ev];
                after.extend(v.host_ready.clone());
                self.budget.unstamp(block, std::mem::take(&mut v.stamp));
                self.budget.remove_data(BLOCK_SIZE);
                credits.push(Credit { chunk, after });
            }
            if short(self, credits.len()) == 0 || evicted {
                break;
            }
            // The emulated driver: least recently used first, copied out, as many blocks as
            // are short (`victims` frees what takes the account past the capacity, which the
            // lent chunks have left already: it is asked for the rest of the capacity too).
            let short_bytes = short(self, credits.len()) * BLOCK_SIZE;
            let need = short_bytes + capacity.saturating_sub(self.budget.held());
            let victims: Vec<BlockId> = self
                .budget
                .victims(need, |b| protected.contains(b), |_| BLOCK_SIZE)
                .blocks
                .into_iter()
                .filter(|b| self.regions[&b.region].blocks[b.block as usize].leaving.is_none())
                .collect();
            if victims.is_empty() {
                break; // only the work's own blocks are left: it runs over the capacity
            }
            self.log.waits_for_room += 1;
            self.log.driver_evicted[site as usize] += victims.len() as u64 * BLOCK_SIZE;
            self.stats.evicted_bytes += victims.len() as u64 * BLOCK_SIZE;
            self.stats.driver_dropped_bytes += victims.len() as u64 * BLOCK_SIZE;
            self.evict_blocks(victims, true)?;
            evicted = true;
        }
        Ok(credits)
    }

    /// A device chunk for one block (room made first).
    pub(super) fn take_chunk(&mut self) -> Result<DevChunk> {
        if let Some(c) = self.free_chunks.pop() {
            self.budget.remove_spare(BLOCK_SIZE);
            return Ok(c);
        }
        if self.budget.held() + BLOCK_SIZE > self.info.capacity {
            self.log.over_capacity += 1;
        }
        self.log.device_chunks_made += 1;
        self.store.new_device(self.device)
    }

    /// A free host chunk, or a new one within the staging size; `None` where neither is left.
    pub(super) fn spare_host_chunk(&mut self) -> Result<Option<HostChunk>> {
        if let Some(h) = self.host_free.pop() {
            return Ok(Some(h));
        }
        if self.host_made < self.host_limit {
            return self.new_host_chunk().map(Some);
        }
        Ok(None)
    }

    /// A host chunk for an evicted block: a free one, a new one within the staging size, one
    /// taken from a block on the device whose copy it holds, or a new one past the size.
    pub(super) fn take_host_chunk(&mut self, not: BlockId) -> Result<HostChunk> {
        if let Some(h) = self.spare_host_chunk()? {
            return Ok(h);
        }
        let donor = self.regions.iter().find_map(|(&id, r)| {
            r.blocks.iter().enumerate().find_map(|(b, v)| {
                // Its host chunk holds a valid copy (a block whose copy out is being queued
                // holds its chunk without one).
                let ok = v.device.is_some()
                    && v.leaving.is_none()
                    && v.host.is_some()
                    && v.host_valid
                    && v.host_ready.as_ref().is_none_or(|e| e.is_complete())
                    && BlockId::new(id, b) != not;
                ok.then_some(BlockId::new(id, b))
            })
        });
        if let Some(d) = donor {
            let v = &mut self.regions.get_mut(&d.region).expect("found").blocks[d.block as usize];
            v.host_valid = false;
            v.host_ready = None;
            self.log.host_chunks_stolen += 1;
            return Ok(v.host.take().expect("found with one"));
        }
        self.new_host_chunk()
    }

    /// The mark after kernel `seq`, or one after everything on `compute` where it is no
    /// longer kept.
    pub(super) fn mark_after(&mut self, seq: u64) -> Result<Arc<CudaEvent>> {
        match self.kernel_mark(seq) {
            Some(ev) => Ok(ev.clone()),
            None => self.marks.record(&self.compute, "eviction after its kernels"),
        }
    }

    /// The mark after kernel `seq` where it is still kept.
    pub(super) fn kernel_mark(&self, seq: u64) -> Option<&Arc<CudaEvent>> {
        let &(first, _) = self.kernel_marks.front()?;
        let i = seq.checked_sub(first)?;
        self.kernel_marks.get(i as usize).map(|(_, ev)| ev)
    }

    /// Evicts `blocks` on the device: data not in its host chunk is copied out on `d2h` after
    /// the block's last kernel (`copy`; else it is dead and dropped); the address is remapped
    /// once that is done (`settle`).
    pub(super) fn evict_blocks(&mut self, blocks: Vec<BlockId>, copy: bool) -> Result<()> {
        let d2h = self.d2h.take();
        let mut dirty = Vec::new();
        let mut last = 0u64;
        for block in blocks {
            let (id, b) = (block.region, block.block as usize);
            let v = &self.regions[&id].blocks[b];
            if v.device.is_none() || v.leaving.is_some() {
                continue;
            }
            let keep = copy && v.data;
            if keep && v.host.is_none() {
                let h = self.take_host_chunk(block)?;
                self.regions.get_mut(&id).expect("live").blocks[b].host = Some(h);
            }
            let v = &mut self.regions.get_mut(&id).expect("live").blocks[b];
            if !keep {
                v.data = false;
                v.host_valid = false;
            }
            if keep && !v.host_valid {
                last = last.max(v.last_kernel);
                dirty.push(block);
            } else {
                if keep {
                    self.stats.staged_clean_bytes += BLOCK_SIZE;
                    self.stats.staged_out_bytes += BLOCK_SIZE;
                }
                let (seq, arrive) = (v.last_kernel, v.arrive.clone());
                let mut ev = self.mark_after(seq)?;
                if let Some(a) = arrive.as_ref().filter(|a| !a.is_complete()) {
                    // Its restore's copy must land before the device chunk is unmapped.
                    if !ev.is_complete() {
                        d2h.wait(&ev).map_err(cuda_err("cuStreamWaitEvent", "clean eviction"))?;
                    }
                    d2h.wait(a).map_err(cuda_err("cuStreamWaitEvent", "clean eviction"))?;
                    ev = self.marks.record(&d2h, "clean eviction")?;
                }
                let v = &mut self.regions.get_mut(&id).expect("live").blocks[b];
                v.leaving = Some(ev.clone());
                self.leaving.push_back((block, ev));
            }
        }
        if dirty.is_empty() {
            return Ok(());
        }
        let ev = self.copy_out(&dirty, last, &d2h)?;
        let n = dirty.len() as u64 * BLOCK_SIZE;
        self.stats.staged_out_bytes += n;
        for block in dirty {
            let v = &mut self.regions.get_mut(&block.region).expect("live").blocks[block.block as usize];
            v.leaving = Some(ev.clone());
            self.leaving.push_back((block, ev.clone()));
        }
        Ok(())
    }

    /// Brings `blocks` (off the device) in: their device chunks mapped at their addresses,
    /// their data copied in on `h2d`. A block without data is zeroed, as a first touch is; in
    /// the arena it is left `unset` instead, for `set_unset_blocks`. Returns the bytes copied;
    /// the event of the copies is each block's `arrive`.
    pub(super) fn restore_blocks(
        &mut self,
        mut blocks: Vec<BlockId>,
        protected: &FxHashSet<BlockId>,
        site: Site,
    ) -> Result<u64> {
        if blocks.is_empty() {
            return Ok(0);
        }
        blocks.sort_unstable();
        blocks.dedup();
        let mapped = self.store.is_mapped();
        // In the arena, blocks with nothing to copy in are there once their chunks are (their
        // bytes are set when a kernel needs them): such a restore is quiet on the copy lanes.
        let quiet = !mapped
            && blocks
                .iter()
                .all(|b| self.regions[&b.region].blocks[b.block as usize].copy_source().is_none());
        let lend = if quiet { Lend::Latest } else { Lend::Earliest };
        let t0 = Instant::now();
        let mut credits = self.make_room(blocks.len() as u64, protected, site, lend)?;
        self.log.room_ns += t0.elapsed().as_nanos() as u64;
        if site == Site::Prefetch {
            // A prefetch is a hint: what does not fit (the room left is its own blocks) stays
            // where it is, for the kernel that uses it; only a kernel's own data may take the
            // device past the capacity.
            let n = blocks.len() as u64;
            let short = short_of(n, self.info.capacity, &self.budget, self.free_chunks.len(), credits.len());
            let room = (n - short) as usize;
            if short > 0 {
                for b in blocks.drain(room..) {
                    self.regions.get_mut(&b.region).expect("live").blocks[b.block as usize].prefetched =
                        false;
                    self.log.prefetch_dropped += 1;
                }
                if blocks.is_empty() {
                    return Ok(0);
                }
            }
        }
        let t0 = Instant::now();
        let h2d = self.h2d.take();
        // The copies in wait for the work that still holds the lent chunks. With nothing to
        // copy, the kernels wait for it instead: a wait and a mark on a copy lane would make
        // them wait for every copy queued there before it (the freed regions' share is a
        // mark on `compute` already).
        let waiter = if quiet { self.compute.clone() } else { h2d.clone() };
        let mut waited: FxHashSet<*const CudaEvent> = FxHashSet::default();
        for c in &credits {
            for e in &c.after {
                if waited.insert(Arc::as_ptr(e)) && !e.is_complete() {
                    waiter.wait(e).map_err(cuda_err("cuStreamWaitEvent", "a restore into lent pages"))?;
                }
            }
        }
        let mut copied = 0u64;
        let (mut copies, mut to_copy) = (Vec::new(), Vec::new());
        let start = if quiet { None } else { self.timing_mark(&h2d)? };
        for run in runs(&blocks) {
            let id = run[0].region;
            // A kernel still reading the host chunks over the link keeps their mappings (in
            // the arena, a copy in leaves the host chunk as it is).
            let busy = run.iter().map(|b| self.regions[&id].blocks[b.block as usize].last_kernel).max();
            if let Some(seq) = busy.filter(|&s| mapped && s > 0) {
                let mark = self.mark_after(seq)?;
                if !mark.is_complete() {
                    let t = Instant::now();
                    mark.synchronize().map_err(cuda_err("cuEventSynchronize", "restore after remote use"))?;
                    self.log.host_waits += 1;
                    self.log.wait_ns += t.elapsed().as_nanos() as u64;
                }
            }
            let host_mapped: Vec<u64> = run
                .iter()
                .map(|b| b.block as u64)
                .filter(|&b| mapped && self.regions[&id].blocks[b as usize].host.is_some())
                .collect();
            for (start, len) in spans(&host_mapped) {
                self.regions[&id].va().unmap(start * BLOCK_SIZE, len * BLOCK_SIZE)?;
            }
            for blk in run {
                let chunk = match credits.pop() {
                    Some(c) => c.chunk,
                    None => self.take_chunk()?,
                };
                self.budget.add_data(BLOCK_SIZE);
                let b = blk.block as usize;
                let r = self.regions.get_mut(&id).expect("live");
                if let (Some(va), DevChunk::Mapped(phys)) = (&r.va, &chunk) {
                    va.map(b as u64 * BLOCK_SIZE, BLOCK_SIZE, phys, 0)?;
                }
                let v = &mut r.blocks[b];
                v.device = Some(chunk);
                v.stamp = self.budget.restamp(*blk, v.stamp);
            }
            let (first, n) = (run[0].block as u64, run.len() as u64);
            if mapped {
                self.regions[&id].va().grant(first * BLOCK_SIZE, n * BLOCK_SIZE, self.device)?;
            }
            for blk in run {
                let r = self.regions.get_mut(&id).expect("live");
                let dst = r.device_addr(blk.block as usize);
                let v = &mut r.blocks[blk.block as usize];
                match v.copy_source() {
                    Some(h) => {
                        to_copy.push(Copy { dst, src: h.addr(), bytes: BLOCK_SIZE });
                        v.unset = false;
                        copied += BLOCK_SIZE;
                        copies.push(*blk);
                    }
                    // Only declared uses reach the arena's slots: its bytes are set when one
                    // needs them.
                    None if !mapped => v.unset = true,
                    None => {
                        v.unset = false;
                        zero_async(dst, BLOCK_SIZE, &h2d)?
                    }
                }
            }
        }
        if quiet {
            for blk in &blocks {
                let r = self.regions.get_mut(&blk.region).expect("live");
                if let Some(old) = r.blocks[blk.block as usize].arrive.take() {
                    self.marks.give_back(old);
                }
            }
        } else {
            let ev = self.issue_staging(to_copy, &h2d, start, Direction::H2D, &copies, "copy in")?;
            for blk in &blocks {
                let r = self.regions.get_mut(&blk.region).expect("live");
                r.blocks[blk.block as usize].arrive = Some(ev.clone());
            }
        }
        self.stats.h2d_bytes += copied;
        self.stats.staged_in_bytes += copied;
        self.log.restore_ns += t0.elapsed().as_nanos() as u64;
        self.budget.note_held();
        Ok(copied)
    }

    /// The blocks of `ranges`, each once, in order.
    pub(super) fn blocks_in(&self, ranges: impl Iterator<Item = (RegionId, u64, u64)>) -> Vec<BlockId> {
        let mut out: Vec<BlockId> = ranges
            .flat_map(|(id, offset, len)| {
                self.regions[&id].blocks_of(offset, len).map(move |b| BlockId::new(id, b))
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// A use of a block whose eviction is not done keeps it on the device; one whose chunk is
    /// lent already waits for its eviction and is restored as any evicted block: the host
    /// waits where the block's address is remapped, the streams alone in the arena (its copy
    /// in, or a kernel using it in place, reads the host chunk once the copy out is done).
    fn cancel_evictions(&mut self, blocks: &[BlockId]) -> Result<()> {
        let mut lent = Vec::new();
        let mapped = self.store.is_mapped();
        for b in blocks {
            let v = &mut self.regions.get_mut(&b.region).expect("live").blocks[b.block as usize];
            if v.lent {
                let t = Instant::now();
                for e in v.leaving.iter().chain(v.host_ready.iter()).filter(|e| !e.is_complete()) {
                    if mapped {
                        e.synchronize().map_err(cuda_err("cuEventSynchronize", "a use of a lent block"))?;
                    } else {
                        // `compute` too: a host-preferred block is used in its host chunk.
                        for stream in self.h2d.all().iter().chain([&self.compute]) {
                            stream.wait(e).map_err(cuda_err("cuStreamWaitEvent", "a use of a lent block"))?;
                        }
                    }
                }
                if mapped {
                    self.log.host_waits += 1;
                    self.log.wait_ns += t.elapsed().as_nanos() as u64;
                }
                lent.push(*b);
            } else if v.leaving.take().is_some() {
                self.log.cancelled_evictions += 1;
            }
        }
        self.remap_to_host(lent)
    }

    pub(super) fn prefetch_in(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.settle(Settle::IfDue)?;
        let blocks = self.blocks_in(ranges.iter().map(|r| (r.region, r.offset, r.len)));
        self.cancel_evictions(&blocks)?;
        let protected: FxHashSet<BlockId> = blocks.iter().copied().collect();
        let need: Vec<BlockId> = blocks
            .iter()
            .copied()
            .filter(|b| self.regions[&b.region].blocks[b.block as usize].device.is_none())
            .collect();
        for b in &need {
            self.regions.get_mut(&b.region).expect("live").blocks[b.block as usize].prefetched = true;
        }
        let copied = self.restore_blocks(need.clone(), &protected, Site::Prefetch)?;
        let arrived =
            need.iter().filter(|b| self.regions[&b.region].blocks[b.block as usize].device.is_some()).count()
                as u64;
        self.stats.prefetch_ranges += ranges.len() as u64;
        self.stats.prefetch_h2d_bytes += copied;
        self.stats.prefetch_arrived_bytes += arrived * BLOCK_SIZE;
        Ok(())
    }

    pub(super) fn evict_ranges(&mut self, ranges: &[ByteRange], staged: bool) -> Result<()> {
        self.settle(Settle::IfDue)?;
        let blocks = self.blocks_in(ranges.iter().map(|r| (r.region, r.offset, r.len)));
        let before = self.stats.staged_out_bytes;
        self.evict_blocks(blocks, true)?;
        if !staged {
            self.stats.prefetch_d2h_bytes += self.stats.staged_out_bytes - before;
        }
        Ok(())
    }

    /// Dead data: blocks wholly inside the ranges are dropped without a copy (a block only
    /// partly inside keeps its bytes).
    pub(super) fn discard_ranges(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.settle(Settle::IfDue)?;
        let mut whole = Vec::new();
        for r in ranges {
            let reg = &self.regions[&r.region];
            for b in reg.blocks_of(r.offset, r.len) {
                if reg.covers_block(r.offset, r.len, b) {
                    whole.push(BlockId::new(r.region, b));
                }
            }
        }
        for b in &whole {
            let v = &mut self.regions.get_mut(&b.region).expect("live").blocks[b.block as usize];
            if v.data {
                self.stats.discarded_bytes += BLOCK_SIZE;
            }
            v.prefetched = false;
            if v.device.is_none() {
                v.data = false;
                v.host_valid = false;
            }
        }
        self.evict_blocks(whole, false)
    }

    /// `compute` waits for the copies in of `blocks` still running, one wait per event; the
    /// events are taken (what comes after the kernel is ordered after them). Returns the
    /// blocks whose data was still in flight.
    fn wait_for_arrivals(&mut self, blocks: &[BlockId]) -> Result<FxHashSet<BlockId>> {
        let mut late = FxHashSet::default();
        let mut waited: FxHashSet<*const CudaEvent> = FxHashSet::default();
        for block in blocks {
            let v = &mut self.regions.get_mut(&block.region).expect("live").blocks[block.block as usize];
            let Some(ev) = v.arrive.take() else { continue };
            if !ev.is_complete() {
                late.insert(*block);
                if waited.insert(Arc::as_ptr(&ev)) {
                    self.compute.wait(&ev).map_err(cuda_err("cuStreamWaitEvent", "kernel after its data"))?;
                }
            }
            self.marks.give_back(ev);
        }
        Ok(late)
    }

    pub(super) fn launch_kernel(&mut self, kernel: &KernelLaunch<'_>) -> Result<()> {
        self.settle(Settle::IfDue)?;
        let blocks = self.blocks_in(kernel.accesses.iter().map(|a| (a.region, a.offset, a.len)));
        self.cancel_evictions(&blocks)?;
        let protected: FxHashSet<BlockId> = blocks.iter().copied().collect();
        let need: Vec<BlockId> = blocks
            .iter()
            .copied()
            .filter(|b| {
                let v = &self.regions[&b.region].blocks[b.block as usize];
                v.device.is_none() && !(v.remote && v.host.is_some())
            })
            .collect();
        // The kernel's slice starts before its waits: the wait for data is part of its stall.
        let compute = self.compute.clone();
        let start = self.timing().map(|rec| rec.start_kernel(&compute)).transpose()?;
        self.restore_blocks(need, &protected, Site::Kernel)?;
        // Data in flight: the kernel waits for every copy in of its blocks, each event once. A
        // region's blocks may come in on several lanes (a prefetch of some, this restore of the
        // rest), so no one event stands for them all.
        let late = self.wait_for_arrivals(&blocks)?;
        self.set_unset_blocks(kernel.accesses)?;
        let ranges = touch_ranges(&self.regions, kernel);
        self.kernels.touch(&self.compute, &ranges, crate::seam::PAGE_SIZE as u32, kernel.dur_ns)?;
        self.close_timed(&compute, start, |_, start, end| Pending::Kernel {
            name: kernel.name.to_string(),
            dur_ns: kernel.dur_ns,
            start,
            end,
        })?;
        let seq = self.stats.kernels + 1;
        let mark = self.marks.record(&self.compute, "kernel mark")?;
        self.kernel_marks.push_back((seq, mark));
        if self.kernel_marks.len() > KERNEL_MARKS {
            if let Some((_, old)) = self.kernel_marks.pop_front() {
                self.marks.give_back(old);
            }
        }
        let mut writes: FxHashSet<BlockId> = FxHashSet::default();
        for a in kernel.accesses.iter().filter(|a| a.mode.writes()) {
            writes.extend(
                self.regions[&a.region].blocks_of(a.offset, a.len).map(|b| BlockId::new(a.region, b)),
            );
        }
        for block in &blocks {
            let v = &mut self.regions.get_mut(&block.region).expect("live").blocks[block.block as usize];
            v.last_kernel = seq;
            if writes.contains(block) {
                v.data = true;
                // A block used in place on the host (remote) was written there.
                v.host_valid = v.device.is_none();
            }
            if v.device.is_some() {
                v.stamp = self.budget.restamp(*block, v.stamp);
            } else {
                self.stats.remote_bytes += BLOCK_SIZE;
            }
            if std::mem::take(&mut v.prefetched) {
                self.stats.prefetch_used_bytes += BLOCK_SIZE;
                if !late.contains(block) {
                    self.stats.prefetch_timely_bytes += BLOCK_SIZE;
                }
            }
        }
        self.stats.kernels += 1;
        Ok(())
    }
}

/// Which freed regions' chunks a restore takes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lend {
    /// Those freed first, which the device is done with first: for copies in, which start
    /// once their chunks are free.
    Earliest,
    /// Those freed last: for blocks with nothing to copy, which need their chunks only by
    /// their kernel, after every free issued so far, so that the room freed first is left
    /// to the copies.
    Latest,
}

/// A device chunk lent to a restore, and what its copies in wait for.
pub(super) struct Credit {
    pub chunk: DevChunk,
    pub after: Vec<Arc<CudaEvent>>,
}

/// Blocks still short of `n` with `free` chunks and `got` lent ones (which left the account
/// when lent, and are held all the same until used).
fn short_of<T: Buffer, E>(
    n: u64,
    capacity: u64,
    budget: &DeviceBudget<T, E>,
    free: usize,
    got: usize,
) -> u64 {
    let fits = capacity.saturating_sub(budget.held() + got as u64 * BLOCK_SIZE) / BLOCK_SIZE;
    n.saturating_sub(free as u64 + fits + got as u64)
}

/// Runs of adjacent blocks of one region in sorted `blocks`.
fn runs(blocks: &[BlockId]) -> impl Iterator<Item = &[BlockId]> {
    blocks.chunk_by(|a, b| a.region == b.region && a.block + 1 == b.block)
}

/// (first, count) spans of adjacent indices in sorted `xs`.
pub(super) fn spans(xs: &[u64]) -> Vec<(u64, u64)> {
    xs.chunk_by(|a, b| a + 1 == *b).map(|s| (s[0], s.len() as u64)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_spans_split_where_blocks_are_not_adjacent() {
        let b = |r: u64, i: usize| BlockId::new(RegionId(r), i);
        let blocks = [b(1, 0), b(1, 1), b(1, 3), b(2, 4), b(2, 5)];
        let got: Vec<usize> = runs(&blocks).map(|r| r.len()).collect();
        assert_eq!(got, vec![2, 1, 2]);
        assert_eq!(spans(&[0, 1, 2, 5, 7, 8]), vec![(0, 3), (5, 1), (7, 2)]);
        assert!(spans(&[]).is_empty());
    }
}
