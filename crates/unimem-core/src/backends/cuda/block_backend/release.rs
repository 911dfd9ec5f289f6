//! Freed regions: their chunks and mappings wait for the work that used them, then go back
//! to the free chunks (`settle`), lent to restores meanwhile (`make_room`).

use super::blocks::spans;
use super::*;

/// A freed region whose chunks and mappings wait for its work: its last kernel and the copies
/// of its blocks still running (`after`).
#[derive(Debug)]
pub(super) struct Releasing {
    pub(super) region: VRegion,
    pub(super) after: Vec<Arc<CudaEvent>>,
}

impl BlockBackend {
    pub(super) fn free_region(&mut self, id: RegionId) -> Result<()> {
        let mut r = self.regions.remove(&id).ok_or(Error::UnknownRegion(id))?;
        if let Some(slot) = r.packed {
            // Its next region is zeroed on `compute`, after this one's kernels.
            self.slab.slots.put(slot);
            return Ok(());
        }
        // The chunks and mappings go once the work that touches them is done: the region's
        // last kernel, and copies into or out of its blocks still running. Not every copy
        // queued before the free: a restore issued far ahead of the device would hold the
        // room back for nothing (and the restores waiting for that room, in turn).
        let last = r.blocks.iter().map(|b| b.last_kernel).max().unwrap_or(0);
        let mut after = Vec::new();
        if last > 0 {
            after.push(self.mark_after(last)?);
        }
        let mut seen: FxHashSet<*const CudaEvent> = after.iter().map(Arc::as_ptr).collect();
        for (b, blk) in r.blocks.iter_mut().enumerate() {
            if blk.device.is_some() {
                self.budget.unstamp(BlockId::new(id, b), blk.stamp);
                self.budget.remove_data(BLOCK_SIZE);
                self.budget.add_spare(BLOCK_SIZE); // held until its mapping goes
            }
            let copies = [blk.arrive.take(), blk.leaving.take(), blk.host_ready.take()];
            for e in copies.into_iter().flatten() {
                if seen.insert(Arc::as_ptr(&e)) && !e.is_complete() {
                    after.push(e);
                } else {
                    self.marks.give_back(e);
                }
            }
        }
        // Where recording, the release is timed on every stream.
        if self.timing().is_some() {
            let streams: Vec<Arc<CudaStream>> =
                std::iter::once(&self.compute).chain(self.h2d.all()).chain(self.d2h.all()).cloned().collect();
            if let Some(rec) = self.recording.as_mut() {
                let marks = streams.iter().map(|s| rec.mark(s)).collect::<Result<Vec<_>>>()?;
                rec.pending.push_back(Pending::Released { region: id, marks });
            }
        }
        self.releasing.push_back(Releasing { region: r, after });
        self.settle(Settle::IfDue)
    }

    /// Unmaps a freed region and pools its chunks.
    pub(super) fn release(&mut self, mut r: VRegion) -> Result<()> {
        self.unmap_region(&r)?;
        let chunks_before = self.free_chunks.len();
        for blk in &mut r.blocks {
            if let Some(c) = blk.device.take() {
                self.free_chunks.push(c); // its bytes moved to the spare at the free
            }
            blk.lent = false;
            if let Some(h) = blk.host.take() {
                self.host_free.push(h);
            }
        }
        debug_assert!(self.free_chunks.len() >= chunks_before);
        self.trim();
        Ok(())
    }

    /// Undoes every mapping at a region's addresses (an arena region has none).
    pub(super) fn unmap_region(&self, r: &VRegion) -> Result<()> {
        if r.va.is_none() {
            return Ok(());
        }
        let mapped: Vec<u64> = (0..r.blocks.len() as u64)
            .filter(|&b| {
                let v = &r.blocks[b as usize];
                v.device.is_some() || v.host.is_some() || v.lent
            })
            .collect();
        for (start, len) in spans(&mapped) {
            r.va().unmap(start * BLOCK_SIZE, len * BLOCK_SIZE)?;
        }
        Ok(())
    }
}
