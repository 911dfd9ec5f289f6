//! Pinned staging buffers for staged evictions ([`crate::seam::MemoryBackend::stage_out`]).
//!
//! On the H200 a migration of GPU-written data back to the host runs at 10-17 GB/s (host page
//! population bounds it), while the copy engine copies device-resident managed data into
//! pinned memory at 52.3 GB/s (`unimem probe`; neither overlaps a prefetch the other way). So
//! an eviction copies the data into a 2 MiB slot of pinned memory and discards the managed
//! pages; bringing it back repopulates them (a prefetch) and copies it in.
//!
//! Slots are carved from 64 MiB pinned chunks, allocated on demand up to a capacity and kept
//! until the pool is dropped (pinning memory is slow: it is paid once). A slot read by a copy
//! back to the device is reused only after that copy: the pool keeps the event that ends it.

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaEvent, CudaStream};

use super::{cuda_err, CudaDevice};
use crate::error::Result;
use crate::seam::BLOCK_SIZE;

/// Bytes of one staging slot: the driver's 2 MiB block, the unit the backend accounts in.
pub const SLOT_BYTES: u64 = BLOCK_SIZE;

/// Bytes pinned at a time.
const CHUNK_BYTES: u64 = 64 << 20;

/// A 2 MiB slot of one pinned chunk. Ordered by chunk, then index: the pool takes the lowest
/// free slot, so that blocks staged together get neighbouring slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot {
    /// The chunk, in the order pinned.
    pub chunk: u32,
    /// The slot within the chunk.
    pub index: u32,
}

struct Chunk {
    ptr: *mut u8,
}

/// Pinned host memory for staged data, in 2 MiB slots. See the module documentation.
pub struct StagingPool {
    dev: CudaDevice,
    capacity: u64,
    chunks: Vec<Chunk>,
    /// Free slots, each with the event after which it may be overwritten (a copy reading it).
    /// Taken lowest first, so that blocks staged together get neighbouring slots and their
    /// copies merge into fewer calls.
    free: BTreeMap<Slot, Option<Arc<CudaEvent>>>,
    in_use: u64,
    /// Pinning failed once (host memory is short): use what there is.
    exhausted: bool,
    /// Host time spent pinning on demand (in `take`; `reserve` is set-up), ns.
    pin_ns: u64,
}

// SAFETY: the chunks are plain pinned host memory owned by the pool; the backend that owns the
// pool is used from one thread at a time (`MemoryBackend: Send`, not `Sync`).
unsafe impl Send for StagingPool {}

impl StagingPool {
    /// A pool of up to `capacity` bytes (rounded down to whole slots); nothing is pinned yet.
    pub fn new(dev: &CudaDevice, capacity: u64) -> Self {
        Self {
            dev: dev.clone(),
            capacity: capacity / SLOT_BYTES * SLOT_BYTES,
            chunks: Vec::new(),
            free: BTreeMap::new(),
            in_use: 0,
            exhausted: false,
            pin_ns: 0,
        }
    }

    /// The most bytes it may hold.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes held now.
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    /// Bytes pinned so far.
    pub fn pinned(&self) -> u64 {
        self.chunks.len() as u64 * CHUNK_BYTES
    }

    /// Host time spent pinning more memory as slots were taken, ns.
    pub fn pin_ns(&self) -> u64 {
        self.pin_ns
    }

    /// Pins `bytes` ahead of use (set-up, so that the first evictions do not pay for it).
    pub fn reserve(&mut self, bytes: u64) -> Result<()> {
        while self.pinned() < bytes.min(self.capacity) && self.grow()? {}
        Ok(())
    }

    /// Pins one more chunk; false when the capacity is reached or the host refuses.
    fn grow(&mut self) -> Result<bool> {
        if self.exhausted || self.pinned() + SLOT_BYTES > self.capacity {
            return Ok(false);
        }
        let bytes = CHUNK_BYTES.min(self.capacity - self.pinned());
        self.dev.context().bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "staging"))?;
        // Mapped into the device's address space (the same address under unified addressing),
        // so that a kernel can read or write it too.
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: a plain allocation; freed once in Drop.
        match unsafe { result::malloc_host(bytes as usize, flags) } {
            Ok(ptr) => {
                let c = self.chunks.len() as u32;
                self.chunks.push(Chunk { ptr: ptr as *mut u8 });
                self.free
                    .extend((0..(bytes / SLOT_BYTES) as u32).map(|index| (Slot { chunk: c, index }, None)));
                Ok(true)
            }
            Err(e) => {
                tracing::warn!(
                    "pinning {bytes} more bytes of staging memory failed ({e:?}); staging stays at {} bytes",
                    self.pinned()
                );
                self.exhausted = true;
                Ok(false)
            }
        }
    }

    /// Takes a free slot; `stream` (the one that will write it) first waits for any copy still
    /// reading it. `None` when the pool is full.
    pub fn take(&mut self, stream: &CudaStream) -> Result<Option<Slot>> {
        if self.free.is_empty() {
            let t0 = std::time::Instant::now();
            let grown = self.grow();
            self.pin_ns += t0.elapsed().as_nanos() as u64;
            if !grown? {
                return Ok(None);
            }
        }
        let Some((slot, after)) = self.free.pop_first() else { return Ok(None) };
        if let Some(ev) = after {
            if !ev.is_complete() {
                stream.wait(&ev).map_err(cuda_err("cuStreamWaitEvent", "staging slot reuse"))?;
            }
        }
        self.in_use += SLOT_BYTES;
        Ok(Some(slot))
    }

    /// Returns a slot; `after`: the event of the last copy reading it, if one may be in flight.
    pub fn release(&mut self, slot: Slot, after: Option<Arc<CudaEvent>>) {
        self.in_use -= SLOT_BYTES;
        self.free.insert(slot, after);
    }

    /// The host address of a slot.
    pub fn ptr(&self, slot: Slot) -> *mut u8 {
        // SAFETY: a slot lies inside its chunk.
        unsafe { self.chunks[slot.chunk as usize].ptr.add(slot.index as usize * SLOT_BYTES as usize) }
    }
}

impl Drop for StagingPool {
    fn drop(&mut self) {
        if self.chunks.is_empty() {
            return;
        }
        if let Err(e) = self.dev.synchronize() {
            tracing::warn!("synchronising before freeing staging memory failed: {e}");
        }
        for c in self.chunks.drain(..) {
            // SAFETY: allocated by cuMemHostAlloc, freed once, after the device is idle.
            if let Err(e) = unsafe { result::free_host(c.ptr as *mut std::ffi::c_void) } {
                tracing::warn!("cuMemFreeHost of staging memory failed: {e:?}");
            }
        }
    }
}

/// One block's staging copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// The allocation it belongs to (any key: a copy never spans two).
    pub alloc: u64,
    /// Its device address.
    pub dptr: u64,
    /// The slot it is copied to or from.
    pub slot: Slot,
    /// Its bytes: a slot a block (less for a region's last), several slots once merged.
    pub bytes: u64,
}

impl Run {
    /// One whole-slot run per slot of `slots`, at consecutive 2 MiB blocks from `base` of one
    /// allocation.
    pub fn per_slot(base: u64, slots: &[Slot]) -> Vec<Run> {
        let at = |i: usize| base + i as u64 * SLOT_BYTES;
        slots
            .iter()
            .enumerate()
            .map(|(i, &slot)| Run { alloc: base, dptr: at(i), slot, bytes: SLOT_BYTES })
            .collect()
    }

    /// Whether `next` continues this run on both sides: the same allocation and pinned chunk,
    /// the next addresses and slots, this run being whole slots.
    fn continued_by(&self, next: &Run) -> bool {
        self.alloc == next.alloc
            && self.dptr + self.bytes == next.dptr
            && self.slot.chunk == next.slot.chunk
            && self.slot.index as u64 + self.bytes / SLOT_BYTES == next.slot.index as u64
            && self.bytes % SLOT_BYTES == 0
    }
}

/// `runs` in address order, those contiguous on both sides merged: a copy must lie in one
/// allocation on each side.
fn merged(mut runs: Vec<Run>) -> Vec<Run> {
    runs.sort_unstable_by_key(|r| (r.alloc, r.dptr));
    let mut merged: Vec<Run> = Vec::with_capacity(runs.len());
    for r in runs {
        match merged.last_mut() {
            Some(m) if m.continued_by(&r) => m.bytes += r.bytes,
            _ => merged.push(r),
        }
    }
    merged
}

impl StagingPool {
    /// Copies runs between managed memory and their slots on `stream`, merging runs contiguous
    /// on both sides (same allocation, same pinned chunk) into one call each. `to_host`:
    /// device -> slots, else slots -> device.
    pub fn copy(&self, runs: Vec<Run>, to_host: bool, stream: &CudaStream) -> Result<()> {
        for Run { dptr, slot, bytes, .. } in merged(runs) {
            let hptr = self.ptr(slot);
            // SAFETY: the caller passes device ranges of live managed buffers and slots it
            // holds (the runs stay inside one chunk); the stream orders the copy after the work
            // it depends on.
            let res = unsafe {
                if to_host {
                    sys::cuMemcpyDtoHAsync_v2(hptr as *mut _, dptr, bytes as usize, stream.cu_stream())
                } else {
                    sys::cuMemcpyHtoDAsync_v2(dptr, hptr as *const _, bytes as usize, stream.cu_stream())
                }
            };
            let call = if to_host { "cuMemcpyDtoHAsync" } else { "cuMemcpyHtoDAsync" };
            res.result().map_err(cuda_err(call, format!("{bytes} bytes of staged data")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(alloc: u64, dptr: u64, chunk: u32, index: u32, bytes: u64) -> Run {
        Run { alloc, dptr, slot: Slot { chunk, index }, bytes }
    }

    /// Runs merge only where both sides continue: the same allocation, the next device
    /// addresses, the next slots of the same chunk, after whole slots.
    #[test]
    fn runs_merge_where_both_sides_continue() {
        let b = SLOT_BYTES;
        let runs = vec![
            run(1, 3 * b, 0, 3, b),
            run(1, b, 0, 1, b),
            run(1, 2 * b, 0, 2, b),
            run(1, 4 * b, 1, 0, b),         // next address, another chunk
            run(1, 5 * b, 1, 2, b),         // next address, not the next slot
            run(2, 6 * b, 1, 3, b / 2),     // another allocation
            run(2, 6 * b + b / 2, 1, 4, b), // after a part of a slot
        ];
        assert_eq!(
            merged(runs),
            vec![
                run(1, b, 0, 1, 3 * b),
                run(1, 4 * b, 1, 0, b),
                run(1, 5 * b, 1, 2, b),
                run(2, 6 * b, 1, 3, b / 2),
                run(2, 6 * b + b / 2, 1, 4, b),
            ]
        );
        assert!(merged(Vec::new()).is_empty());
    }

    /// Whole-slot runs of one allocation, block after block; those on neighbouring slots merge.
    #[test]
    fn per_slot_runs_follow_the_blocks() {
        let b = SLOT_BYTES;
        let slots = [Slot { chunk: 0, index: 4 }, Slot { chunk: 0, index: 5 }, Slot { chunk: 2, index: 0 }];
        let runs = Run::per_slot(10 * b, &slots);
        assert_eq!(
            runs,
            vec![run(10 * b, 10 * b, 0, 4, b), run(10 * b, 11 * b, 0, 5, b), run(10 * b, 12 * b, 2, 0, b)]
        );
        assert_eq!(merged(runs), vec![run(10 * b, 10 * b, 0, 4, 2 * b), run(10 * b, 12 * b, 2, 0, b)]);
    }

    /// Slots are taken lowest first: by chunk, then index.
    #[test]
    fn slots_order_by_chunk_then_index() {
        assert!(Slot { chunk: 0, index: 31 } < Slot { chunk: 1, index: 0 });
        assert!(Slot { chunk: 1, index: 0 } < Slot { chunk: 1, index: 1 });
    }
}
