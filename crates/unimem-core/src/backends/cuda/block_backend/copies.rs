//! Copies between blocks' device and host chunks, issued together: those contiguous on both
//! sides merged, the rest in one batched call where the driver has one (`cuMemcpyBatchAsync`,
//! CUDA 13), else one call each. A restore or eviction of hundreds of blocks otherwise makes
//! as many driver calls on the replaying thread.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{sys, CudaEvent, CudaStream};

use super::super::cuda_err;
use super::{BlockBackend, BlockId, Pending};
use crate::error::Result;
use crate::seam::{Direction, BLOCK_SIZE};
use crate::RegionId;

/// One copy: `bytes` from `src` to `dst` (device addresses; pinned host memory at its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Copy {
    pub dst: u64,
    pub src: u64,
    pub bytes: u64,
}

/// Copies issued on one stream, and the calls they took.
#[derive(Debug, Default)]
pub(super) struct CopyCalls {
    pub calls: u64,
    pub copies: u64,
}

/// Merges copies contiguous on both sides (sorted by destination) within one allocation on
/// each side (`allocation` names the one an address is in): a copy must not span two.
pub(super) fn merged(mut copies: Vec<Copy>, allocation: impl Fn(u64) -> u64) -> Vec<Copy> {
    copies.sort_unstable_by_key(|c| c.dst);
    let mut out: Vec<Copy> = Vec::with_capacity(copies.len());
    for c in copies {
        match out.last_mut() {
            Some(m)
                if m.dst + m.bytes == c.dst
                    && m.src + m.bytes == c.src
                    && allocation(m.dst) == allocation(c.dst)
                    && allocation(m.src) == allocation(c.src) =>
            {
                m.bytes += c.bytes
            }
            _ => out.push(c),
        }
    }
    out
}

/// Most copies in one batched call.
const BATCH: usize = 1024;

/// Issues `copies` on `stream` (the caller keeps both sides alive until the stream passes
/// them); `batched`: the driver has `cuMemcpyBatchAsync_v2` (cleared where a call says it
/// has not, which falls back to single copies).
pub(super) fn issue(
    copies: Vec<Copy>,
    allocation: impl Fn(u64) -> u64,
    stream: &CudaStream,
    batched: &mut bool,
) -> Result<CopyCalls> {
    let copies = merged(copies, allocation);
    let mut calls = CopyCalls { calls: 0, copies: copies.len() as u64 };
    if *batched && copies.len() > 1 {
        for chunk in copies.chunks(BATCH) {
            match batch(chunk, stream) {
                Ok(()) => calls.calls += 1,
                Err(e) if calls.calls == 0 => {
                    tracing::info!("batched copies unavailable ({e}): one call per copy");
                    *batched = false;
                    return single(&copies, stream).map(|n| CopyCalls { calls: n, ..calls });
                }
                Err(e) => return Err(e),
            }
        }
        return Ok(calls);
    }
    calls.calls = single(&copies, stream)?;
    Ok(calls)
}

fn single(copies: &[Copy], stream: &CudaStream) -> Result<u64> {
    for c in copies {
        // SAFETY: both ranges are live device or pinned memory, kept until the stream passes
        // the copy (evictions and frees wait for its event).
        unsafe { sys::cuMemcpyAsync(c.dst, c.src, c.bytes as usize, stream.cu_stream()) }
            .result()
            .map_err(cuda_err("cuMemcpyAsync", format!("{} bytes", c.bytes)))?;
    }
    Ok(copies.len() as u64)
}

fn batch(copies: &[Copy], stream: &CudaStream) -> Result<()> {
    let mut dsts: Vec<sys::CUdeviceptr> = copies.iter().map(|c| c.dst).collect();
    let mut srcs: Vec<sys::CUdeviceptr> = copies.iter().map(|c| c.src).collect();
    let mut sizes: Vec<usize> = copies.iter().map(|c| c.bytes as usize).collect();
    // Location hints apply to managed memory only; these are device and pinned memory.
    // SAFETY: a plain-data struct for which all zeroes is "no hint".
    let mut attrs: sys::CUmemcpyAttributes = unsafe { std::mem::zeroed() };
    attrs.srcAccessOrder = sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    let mut index = 0usize;
    // SAFETY: the arrays hold `copies.len()` entries and outlive the call (the driver reads
    // them during it); one attribute applies from copy 0; the memory as in `single`.
    unsafe {
        sys::cuMemcpyBatchAsync_v2(
            dsts.as_mut_ptr(),
            srcs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            copies.len(),
            &mut attrs,
            &mut index,
            1,
            stream.cu_stream(),
        )
    }
    .result()
    .map_err(cuda_err("cuMemcpyBatchAsync", format!("{} copies", copies.len())))
}

impl BlockBackend {
    /// Issues the staging copies of `blocks` (`copies`) on `stream` after the timing mark
    /// `start`, timed as a stretch of the link in direction `dir` where recording; returns
    /// their event (`what` names it in errors).
    pub(super) fn issue_staging(
        &mut self,
        copies: Vec<Copy>,
        stream: &CudaStream,
        start: Option<CudaEvent>,
        dir: Direction,
        blocks: &[BlockId],
        what: &str,
    ) -> Result<Arc<CudaEvent>> {
        self.issue_copies(copies, stream)?;
        self.close_timed(stream, start, |this, start, end| Pending::Staging {
            dir,
            blocks: this.copied_blocks(blocks),
            start,
            end,
        })?;
        self.marks.record(stream, what)
    }

    /// Issues `copies` on `stream` (see `copies::issue`), counted in the log.
    pub(super) fn issue_copies(&mut self, copies: Vec<Copy>, stream: &CudaStream) -> Result<()> {
        if copies.is_empty() {
            return Ok(());
        }
        let t0 = Instant::now();
        let store = &self.store;
        let n = issue(copies, |a| store.allocation_of(a), stream, &mut self.batched_copies)?;
        self.log.copies += n.copies;
        self.log.copy_calls += n.calls;
        self.log.copy_ns += t0.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// (region, offset, bytes) of copied blocks, for their timed record.
    fn copied_blocks(&self, blocks: &[BlockId]) -> Vec<(RegionId, u64, u64)> {
        blocks
            .iter()
            .map(|b| {
                let bytes = crate::seam::block_bytes(self.regions[&b.region].bytes, b.block as u64);
                (b.region, b.block as u64 * BLOCK_SIZE, bytes)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_contiguous_on_both_sides_merge() {
        let c = |dst, src, bytes| Copy { dst, src, bytes };
        let one = |_| 0;
        let got = merged(vec![c(200, 1200, 100), c(0, 1000, 100), c(100, 1100, 100), c(400, 5000, 100)], one);
        assert_eq!(got, vec![c(0, 1000, 300), c(400, 5000, 100)]);
        // Contiguous at the destination only: two copies.
        assert_eq!(merged(vec![c(0, 1000, 100), c(100, 3000, 100)], one).len(), 2);
        assert!(merged(Vec::new(), one).is_empty());
        // Contiguous on both sides but across two allocations (from 1100 on): two copies.
        let split = |a: u64| if a >= 1100 { 1 } else { 0 };
        assert_eq!(merged(vec![c(0, 1000, 100), c(100, 1100, 100)], split).len(), 2);
    }
}
