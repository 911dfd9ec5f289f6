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
//! Pinning a chunk holds its thread for tens of milliseconds (the replays' set-up pinned a
//! ResNet's staging at about 0.4 ms per MiB on the H200), so once fewer than a chunk's slots are
//! free, the next chunk is pinned ahead on a thread of the pool's own; a take that finds no
//! free slot waits for that chunk rather than pinning another.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use cudarc::driver::{result, sys, CudaEvent, CudaStream};

use super::{cuda_err, CudaDevice};
use crate::error::Result;
use crate::seam::BLOCK_SIZE;

/// Bytes of one staging slot: the driver's 2 MiB block, the unit the backend accounts in.
pub const SLOT_BYTES: u64 = BLOCK_SIZE;

/// Bytes pinned at a time.
const CHUNK_BYTES: u64 = 64 << 20;

/// A slot: (chunk, index in the chunk).
pub type Slot = (u32, u32);

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
    /// The thread that pins chunks ahead, started at the first growth.
    ahead: Option<PinAhead>,
}

/// A thread pinning one chunk at a time for the pool, on order.
struct PinAhead {
    /// Orders by bytes (closed on drop, which ends the thread).
    orders: Option<Sender<u64>>,
    /// Each order's chunk (its address) or why it could not be pinned.
    pinned: Receiver<(u64, std::result::Result<usize, String>)>,
    /// Orders not received back yet.
    in_flight: u32,
    worker: Option<JoinHandle<()>>,
}

impl PinAhead {
    fn spawn(dev: CudaDevice) -> Option<Self> {
        let (order_tx, order_rx) = crossbeam_channel::unbounded::<u64>();
        let (pinned_tx, pinned_rx) = crossbeam_channel::unbounded();
        let worker = std::thread::Builder::new()
            .name("unimem-pin".into())
            .spawn(move || {
                for bytes in order_rx {
                    if pinned_tx.send((bytes, pin(&dev, bytes).map(|p| p as usize))).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| tracing::warn!("no thread to pin staging memory ahead ({e}); it is pinned inline"))
            .ok()?;
        Some(Self { orders: Some(order_tx), pinned: pinned_rx, in_flight: 0, worker: Some(worker) })
    }
}

impl Drop for PinAhead {
    fn drop(&mut self) {
        self.orders = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// Pins `bytes` of host memory, mapped into the device's address space (the same address
/// under unified addressing), so that a kernel can read or write it too.
fn pin(dev: &CudaDevice, bytes: u64) -> std::result::Result<*mut u8, String> {
    dev.context().bind_to_thread().map_err(|e| format!("cuCtxSetCurrent: {e:?}"))?;
    let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
    // SAFETY: a plain allocation; the pool frees it once, in its Drop.
    unsafe { result::malloc_host(bytes as usize, flags) }.map(|p| p as *mut u8).map_err(|e| format!("{e:?}"))
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
            ahead: None,
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

    /// Pins `bytes` ahead of use (set-up, so that the first evictions do not pay for it).
    pub fn reserve(&mut self, bytes: u64) -> Result<()> {
        while self.pinned() < bytes.min(self.capacity) && self.grow()? {}
        Ok(())
    }

    /// Pins one more chunk here; false when the capacity is reached or the host refuses.
    fn grow(&mut self) -> Result<bool> {
        let Some(bytes) = self.next_chunk_bytes() else { return Ok(false) };
        let pinned = pin(&self.dev, bytes);
        Ok(self.add_chunk(bytes, pinned))
    }

    /// Bytes of the next chunk, if the capacity leaves room for one beside those ordered.
    fn next_chunk_bytes(&self) -> Option<u64> {
        let ordered = self.ahead.as_ref().map_or(0, |a| a.in_flight as u64) * CHUNK_BYTES;
        let held = self.pinned() + ordered;
        (!self.exhausted && held + SLOT_BYTES <= self.capacity).then(|| CHUNK_BYTES.min(self.capacity - held))
    }

    /// A chunk pinned (or refused): its slots become free. False if it was refused.
    fn add_chunk(&mut self, bytes: u64, pinned: std::result::Result<*mut u8, String>) -> bool {
        match pinned {
            Ok(ptr) => {
                let c = self.chunks.len() as u32;
                self.chunks.push(Chunk { ptr });
                self.free.extend((0..(bytes / SLOT_BYTES) as u32).map(|i| ((c, i), None)));
                true
            }
            Err(e) => {
                tracing::warn!(
                    "pinning {bytes} more bytes of staging memory failed ({e}); staging stays at {} bytes",
                    self.pinned()
                );
                self.exhausted = true;
                false
            }
        }
    }

    /// Takes in the chunks pinned ahead; with `wait`, waits for one where one is in flight.
    /// True if a chunk came in.
    fn collect_ahead(&mut self, wait: bool) -> bool {
        let Some(a) = self.ahead.as_mut() else { return false };
        let mut got = Vec::new();
        if wait && a.in_flight > 0 {
            match a.pinned.recv() {
                Ok(r) => got.push(r),
                // The thread is gone: nothing more comes.
                Err(_) => a.in_flight = 0,
            }
        }
        got.extend(a.pinned.try_iter());
        a.in_flight = a.in_flight.saturating_sub(got.len() as u32);
        let mut added = false;
        for (bytes, r) in got {
            added |= self.add_chunk(bytes, r.map(|p| p as *mut u8));
        }
        added
    }

    /// Orders the next chunk ahead once fewer than a chunk's slots are free and none is on
    /// its way (one at a time: the pool grows no faster than it is used).
    fn order_ahead(&mut self) {
        if self.free.len() as u64 * SLOT_BYTES >= CHUNK_BYTES
            || self.ahead.as_ref().is_some_and(|a| a.in_flight > 0)
        {
            return;
        }
        let Some(bytes) = self.next_chunk_bytes() else { return };
        if self.ahead.is_none() {
            self.ahead = PinAhead::spawn(self.dev.clone());
        }
        let Some(a) = self.ahead.as_mut() else { return };
        if a.orders.as_ref().is_some_and(|o| o.send(bytes).is_ok()) {
            a.in_flight += 1;
        }
    }

    /// Takes a free slot; `stream` (the one that will write it) first waits for any copy still
    /// reading it. `None` when the pool is full.
    pub fn take(&mut self, stream: &CudaStream) -> Result<Option<Slot>> {
        self.collect_ahead(false);
        if self.free.is_empty() && !self.collect_ahead(true) && !self.grow()? {
            return Ok(None);
        }
        let Some((slot, after)) = self.free.pop_first() else { return Ok(None) };
        self.order_ahead();
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
        unsafe { self.chunks[slot.0 as usize].ptr.add(slot.1 as usize * SLOT_BYTES as usize) }
    }
}

impl Drop for StagingPool {
    fn drop(&mut self) {
        // A chunk still being pinned is waited for, and freed with the others.
        while self.ahead.as_ref().is_some_and(|a| a.in_flight > 0) {
            self.collect_ahead(true);
        }
        self.ahead = None;
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

/// One block's copy: the allocation it belongs to (any key: copies never span two), its
/// device address, its slot and its bytes.
pub type Run = (u64, u64, Slot, u64);

impl StagingPool {
    /// Copies runs between managed memory and their slots on `stream`, merging runs contiguous
    /// on both sides (same allocation, same pinned chunk) into one call each: a copy must lie
    /// in one allocation on each side. `to_host`: device -> slots, else slots -> device.
    pub fn copy(&self, mut runs: Vec<Run>, to_host: bool, stream: &CudaStream) -> Result<()> {
        runs.sort_unstable_by_key(|r| (r.0, r.1));
        let mut merged: Vec<Run> = Vec::with_capacity(runs.len());
        for r in runs {
            match merged.last_mut() {
                Some(m)
                    if m.0 == r.0
                        && m.1 + m.3 == r.1
                        && m.2 .0 == r.2 .0
                        && m.2 .1 as u64 + m.3 / SLOT_BYTES == r.2 .1 as u64
                        && m.3 % SLOT_BYTES == 0 =>
                {
                    m.3 += r.3
                }
                _ => merged.push(r),
            }
        }
        for (_, dptr, slot, bytes) in merged {
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
