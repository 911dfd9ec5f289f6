//! Swapped-out buffers (where relocation is allowed): a region staged whole in one stage-out
//! gives its buffer, pages still on the device, to the pool and takes one with none, when
//! another region of its size waits staged whole to come back. That restore then relocates
//! into those pages (`relocate_region`): a copy alone, where a restore into discarded pages
//! waits for the driver to repopulate them (25-30 us per 2 MiB block on the H200) and copies
//! in at 40 GB/s instead of 51. Where the pages are shed before any restore takes them,
//! they go back to their region, discarded, as a stage-out without the swap would have left
//! them (`swap_back`), and neither buffer retires.

use super::*;
use crate::mechanism::pool::Owner;

impl CudaBackend {
    /// Whether every block of `r` is staged (none spare or remote): it may come back into any
    /// buffer of its size (read-mostly advice dropped, `drop_advice`).
    pub(super) fn wholly_staged(r: &CudaRegion) -> bool {
        r.blocks.iter().all(|b| b.staged.is_some() && !b.spare && !b.remote)
    }

    /// Region `id`, wholly staged, moved out of buffer `from`: its blocks' read-mostly advice
    /// stays behind and is unset there (advice is on addresses; a pooled buffer must not
    /// surprise its next user). The region loses nothing by it: a staged block has no pages,
    /// and it comes back by copy into device pages with no host copy to duplicate; setting
    /// the advice again would cost 70.8 ms of host time per GiB on the H200 (`unimem probe`),
    /// unsetting it 1.56.
    pub(super) fn drop_advice(&mut self, id: RegionId, from: &ManagedBuffer) -> Result<()> {
        let n = self.regions[&id].blocks.len();
        for run in self.take_read_mostly((0..n).map(|b| BlockId::new(id, b))) {
            from.advise(run.offset, run.len, Advice::UnsetReadMostly)?;
            self.log.advice_dropped += 1;
        }
        Ok(())
    }

    /// Clears the read-mostly mark of each of `blocks` that has one; returns those blocks as
    /// runs, for the caller to unset the advice on the buffer that holds it.
    pub(super) fn take_read_mostly(&mut self, blocks: impl IntoIterator<Item = BlockId>) -> Vec<ByteRange> {
        let mut advised: Vec<BlockId> = Vec::new();
        for b in blocks {
            let r = self.regions.get_mut(&b.region).expect("checked by the caller");
            if std::mem::take(&mut r.blocks[b.block as usize].read_mostly) {
                advised.push(b);
            }
        }
        crate::seam::block_ranges(advised, |id| self.regions[&id].bytes)
    }

    /// The regions of `blocks` (just staged out, their pages still on the device) to swap out,
    /// each with the buffer it takes meanwhile: staged whole by this stage-out, and with
    /// another region of its size staged whole.
    pub(super) fn swaps(&mut self, blocks: &[StagedBlock]) -> Result<Vec<(RegionId, ManagedBuffer)>> {
        if !self.relocate {
            return Ok(Vec::new());
        }
        let mut count: FxHashMap<RegionId, usize> = FxHashMap::default();
        for s in blocks {
            *count.entry(s.block.region).or_default() += 1;
        }
        let mut out = Vec::new();
        for (id, n) in count {
            let r = &self.regions[&id];
            if n != r.blocks.len() || !Self::wholly_staged(r) {
                continue;
            }
            let bytes = r.bytes;
            let peer =
                self.regions.iter().any(|(&o, q)| o != id && q.bytes == bytes && Self::wholly_staged(q));
            if !peer {
                continue;
            }
            let buf = match self.budget.pool_mut().take_empty(bytes) {
                Some(entry) => self.reuse(entry, false)?.0,
                None => match self.free_memory.alloc(&self.dev, bytes, self.allow_oversubscription) {
                    Ok(buf) => {
                        self.stats.new_buffers += 1;
                        buf
                    }
                    // No memory for a second buffer: the stage-out discards, as without swaps.
                    Err(Error::Allocation { .. }) => continue,
                    Err(e) => return Err(e),
                },
            };
            out.push((id, buf));
        }
        Ok(out)
    }

    /// Swaps region `id` out into `buf` (see the module documentation): its own buffer goes to
    /// the pool with its pages on the device once `copied` (its copies out) is done.
    pub(super) fn swap_out(
        &mut self,
        id: RegionId,
        buf: ManagedBuffer,
        copied: &Arc<CudaEvent>,
    ) -> Result<()> {
        let r = self.regions.get_mut(&id).expect("checked by the caller");
        let old = std::mem::replace(&mut r.buf, buf);
        self.drop_advice(id, &old)?;
        let r = &self.regions[&id];
        let (from, to, blocks) = (old.ptr(), r.buf.ptr(), r.blocks.len());
        for b in 0..blocks as u32 {
            // A restore copies the slots in once they hold the data.
            self.staged_done.insert(BlockId { region: id, block: b }, copied.clone());
        }
        let owner = Owner { region: id, placeholder: to };
        self.budget.pool_mut().put_swapped(old, vec![true; blocks], vec![copied.clone()], None, owner);
        self.log.swaps += 1;
        let at_ns = self.clock.now();
        self.recorder.emit(|| MemEvent::Relocated { region: id, from, to, at_ns });
        Ok(())
    }

    /// A shed buffer, its discard issued on `remap` and ending at `discarded`, goes back to
    /// the region it was swapped out of, where that region is still staged whole in the buffer
    /// it took; that one goes to the pool, holding nothing. Returns the buffer where it does
    /// not go back (to retire).
    pub(super) fn swap_back(
        &mut self,
        entry: Pooled<ManagedBuffer, Arc<CudaEvent>>,
        discarded: &Arc<CudaEvent>,
    ) -> Result<Option<ManagedBuffer>> {
        let Some(Owner { region: id, placeholder }) = entry.owner else { return Ok(Some(entry.buf)) };
        let fits =
            self.regions.get(&id).is_some_and(|r| r.buf.ptr() == placeholder && Self::wholly_staged(r));
        if !fits {
            return Ok(Some(entry.buf));
        }
        // The buffer it held meanwhile may have a discard queued (a stage-out since): its
        // next user waits for it.
        let blocks = self.regions[&id].blocks.len() as u32;
        let mut after: Vec<Arc<CudaEvent>> = Vec::new();
        for b in 0..blocks {
            let key = BlockId { region: id, block: b };
            if self.pending_blocks.contains(&key) {
                self.issue_discard_of(key)?;
            }
            if let Some(ev) = self.staged_done.insert(key, discarded.clone()) {
                if !after.iter().any(|e| Arc::ptr_eq(e, &ev)) {
                    after.push(ev);
                }
            }
        }
        let r = self.regions.get_mut(&id).expect("checked");
        let held = std::mem::replace(&mut r.buf, entry.buf);
        self.drop_advice(id, &held)?;
        let (from, to) = (held.ptr(), self.regions[&id].buf.ptr());
        self.budget.pool_mut().put(held, vec![false; blocks as usize], after, None);
        self.log.swaps_back += 1;
        let at_ns = self.clock.now();
        self.recorder.emit(|| MemEvent::Relocated { region: id, from, to, at_ns });
        Ok(None)
    }
}
