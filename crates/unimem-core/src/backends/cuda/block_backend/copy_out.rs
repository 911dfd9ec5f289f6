//! Copies out: a block's device data written into its host chunk on a `d2h` lane, after the
//! block's last kernel. An eviction copies out what it takes off the device; a write-back
//! ([`crate::seam::Destination::HostCopy`]) copies out ahead of the eviction, leaving the
//! block on the device with a valid host copy, so that its eviction copies nothing and its
//! chunk is free once its kernels and this copy are done.

use super::copies::Copy;
use super::*;
use crate::seam::Direction;

impl BlockBackend {
    /// Copies `dirty` (blocks on the device, each with a host chunk) into their host chunks on
    /// `d2h`, after kernel `last` (the latest of their last kernels) and after any earlier copy
    /// into the same chunks, maybe on another lane (this one's bytes are the newer). Each
    /// block's host copy is valid once the returned event completes (`host_ready`).
    pub(super) fn copy_out(
        &mut self,
        dirty: &[BlockId],
        last: u64,
        d2h: &CudaStream,
    ) -> Result<Arc<CudaEvent>> {
        if last > 0 {
            let mark = self.mark_after(last)?;
            if !mark.is_complete() {
                d2h.wait(&mark).map_err(cuda_err("cuStreamWaitEvent", "copy out after kernels"))?;
            }
        }
        for block in dirty {
            let v = &self.regions[&block.region].blocks[block.block as usize];
            if let Some(e) = v.host_ready.as_ref().filter(|e| !e.is_complete()) {
                d2h.wait(e).map_err(cuda_err("cuStreamWaitEvent", "copy out after an earlier one"))?;
            }
        }
        let start = self.timing_mark(d2h)?;
        let copies = dirty
            .iter()
            .map(|block| {
                let r = &self.regions[&block.region];
                let v = &r.blocks[block.block as usize];
                let src = r.device_addr(block.block as usize);
                Copy { dst: v.host.as_ref().expect("given a host chunk").addr(), src, bytes: BLOCK_SIZE }
            })
            .collect();
        let ev = self.issue_staging(copies, d2h, start, Direction::D2H, dirty, "copy out")?;
        self.stats.d2h_bytes += dirty.len() as u64 * BLOCK_SIZE;
        for block in dirty {
            let v = &mut self.regions.get_mut(&block.region).expect("live").blocks[block.block as usize];
            v.host_valid = true;
            v.host_ready = Some(ev.clone());
        }
        Ok(ev)
    }

    /// Queues the blocks of `ranges` for a write-back: each is copied into a host chunk once
    /// its last kernel is done (`issue_write_backs`), so that a write-back never holds a copy
    /// lane waiting for kernels still queued, ahead of evictions issued after it.
    pub(super) fn write_back_ranges(&mut self, ranges: &[ByteRange]) -> Result<()> {
        let blocks = self.blocks_in(ranges.iter().map(|r| (r.region, r.offset, r.len)));
        self.write_backs.extend(blocks);
        self.settle(Settle::IfDue)
    }

    /// Copies the queued write-backs whose blocks' last kernels are done into host chunks, in
    /// one batch: those still on the device with data only it holds, and for which a free host
    /// chunk within the staging size is left (a write-back only saves an eviction its copy: it
    /// never takes another block's host copy or pins more memory). The first block whose last
    /// kernel is not done holds back those queued after it.
    pub(super) fn issue_write_backs(&mut self) -> Result<()> {
        let (mut dirty, mut last) = (Vec::new(), 0u64);
        let mut seen = FxHashSet::default();
        while let Some(&block) = self.write_backs.front() {
            let Some(v) = self.regions.get(&block.region).and_then(|r| r.blocks.get(block.block as usize))
            else {
                self.write_backs.pop_front(); // freed
                continue;
            };
            let seq = v.last_kernel;
            if !self.kernel_done(seq) {
                break;
            }
            self.write_backs.pop_front();
            if v.device.is_none() || v.leaving.is_some() || !v.data || v.host_valid || !seen.insert(block) {
                continue;
            }
            if v.host.is_none() {
                let Some(chunk) = self.spare_host_chunk()? else { continue };
                self.regions.get_mut(&block.region).expect("live").blocks[block.block as usize].host =
                    Some(chunk);
            }
            last = last.max(seq);
            dirty.push(block);
        }
        if dirty.is_empty() {
            return Ok(());
        }
        let d2h = self.d2h.take();
        self.copy_out(&dirty, last, &d2h)?;
        self.stats.written_back_bytes += dirty.len() as u64 * BLOCK_SIZE;
        Ok(())
    }

    /// Whether the device is done with kernel `seq` (the backend's count, from 1): its mark is
    /// complete, or no longer kept (long done).
    fn kernel_done(&self, seq: u64) -> bool {
        self.kernel_mark(seq).is_none_or(|ev| ev.is_complete())
    }
}
