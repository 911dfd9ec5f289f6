//! The handle a policy acts through: it gives hints (prefetch, evict, discard, advise) and asks
//! where data is, and never holds the backend itself.

use crate::error::Result;
use crate::region::RegionId;
use crate::seam::{Advice, ByteRange, Location, MemoryBackend, MemoryBackendExt, Residency};

/// What a policy may do to the backend during one hook.
pub struct Hints<'a> {
    backend: &'a mut dyn MemoryBackend,
    /// Prefetches for later operations, issued once the operation has been (see
    /// [`Hints::prefetch_ahead`]).
    ahead: Vec<ByteRange>,
}

impl<'a> Hints<'a> {
    /// A handle on `backend` for one hook.
    pub(crate) fn new(backend: &'a mut dyn MemoryBackend) -> Self {
        Self { backend, ahead: Vec::new() }
    }

    /// Moves ranges to the device ahead of their use, in one batched call.
    pub fn prefetch(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.backend.prefetch(ranges, Location::DEVICE)
    }

    /// Moves ranges that later operations use (not the one about to run) to the device, in one
    /// batched call once the operation is issued: its launch does not wait behind their calls
    /// (a program's thread waiting on the runtime does not either). The room they take must
    /// have been made by then; the operation's own data must come through
    /// [`Hints::prefetch`]. In `after`, where the operation is issued already, this is
    /// [`Hints::prefetch`].
    pub fn prefetch_ahead(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.ahead.extend_from_slice(ranges);
        Ok(())
    }

    /// The prefetches held back by [`Hints::prefetch_ahead`].
    pub(crate) fn take_ahead(&mut self) -> Vec<ByteRange> {
        std::mem::take(&mut self.ahead)
    }

    /// Moves ranges off the device: through the backend's pinned staging buffers where it has
    /// them, else migrated to the host.
    pub fn evict(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.backend.stage_out(ranges)
    }

    /// Declares ranges dead: dropped on both sides without a transfer.
    pub fn discard(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.backend.discard(ranges)
    }

    /// Tells the driver how a range is used.
    pub fn advise(&mut self, range: ByteRange, advice: Advice) -> Result<()> {
        self.backend.advise(range, advice)
    }

    /// Where the bytes of a range are.
    pub fn residency(&self, range: ByteRange) -> Result<Residency> {
        self.backend.residency(range)
    }

    /// The 2 MiB blocks of `region` (of `bytes` bytes) with pages on the device: which pages
    /// of a new region came from the pool.
    pub fn device_blocks(&self, region: RegionId, bytes: u64) -> Result<Vec<u32>> {
        self.backend.device_blocks(region, bytes)
    }

    /// Bytes of managed data on the device now.
    pub fn resident_bytes(&self) -> u64 {
        self.backend.device_resident_bytes()
    }

    /// Bytes the driver has taken off the device on its own so far: where this moved, a
    /// policy's own account of what is resident is stale.
    pub fn driver_dropped_bytes(&self) -> u64 {
        self.backend.stats().driver_dropped_bytes
    }
}
