//! Blocks without data in the arena: a restore gives them a slot and no copy (`unset`), and
//! their bytes are set only where something would read them.

use rustc_hash::FxHashSet;

use super::*;
use crate::access::RangeAccess;

impl BlockBackend {
    /// Sets the bytes of the `unset` blocks `accesses` touch, on `compute` before the work
    /// that uses them: a block only written, over all of it, takes its bytes from that write;
    /// any other is zeroed first, so that what was never written reads as zeroes, as in
    /// managed memory. A new region's blocks are mostly of the first kind: written whole
    /// before they are read.
    pub(super) fn set_unset_blocks(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        let (mut whole, mut zero) = (FxHashSet::default(), FxHashSet::default());
        for a in accesses.iter().filter(|a| a.len > 0) {
            let r = &self.regions[&a.region];
            for b in
                r.blocks_of(a.offset, a.len).filter(|&b| r.blocks[b].unset && r.blocks[b].device.is_some())
            {
                if a.mode.reads() || !r.covers_block(a.offset, a.len, b) {
                    zero.insert(BlockId::new(a.region, b));
                } else {
                    whole.insert(BlockId::new(a.region, b));
                }
            }
        }
        for id in whole.iter().chain(&zero) {
            let r = self.regions.get_mut(&id.region).expect("live");
            let dst = r.device_addr(id.block as usize);
            let v = &mut r.blocks[id.block as usize];
            if std::mem::take(&mut v.unset) && zero.contains(id) {
                zero_async(dst, BLOCK_SIZE, &self.compute)?;
                self.log.zeroed_late += 1;
            }
        }
        Ok(())
    }
}

/// Zeroes `bytes` at `dst` on `stream`.
pub(super) fn zero_async(dst: u64, bytes: u64, stream: &CudaStream) -> Result<()> {
    // SAFETY: the range is mapped for the device and stays so until the stream passes the
    // zeroing (evictions and frees wait for its event before unmapping).
    unsafe { cudarc::driver::sys::cuMemsetD8Async(dst, 0, bytes as usize, stream.cu_stream()) }
        .result()
        .map_err(cuda_err("cuMemsetD8Async", format!("{bytes} bytes")))
}
