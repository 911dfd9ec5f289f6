//! The handle a policy acts through: it gives hints (prefetch, evict, discard, advise) and asks
//! where data is, and never holds the backend itself.

use crate::error::Result;
use crate::region::RegionId;
use crate::seam::{Advice, ByteRange, Location, MemoryBackend, MemoryBackendExt, Residency};

/// What a policy may do to the backend during one hook.
pub struct Hints<'a> {
    backend: &'a mut dyn MemoryBackend,
    /// The `*_ahead` hints wait until the operation is issued (see [`Hints::prefetch_ahead`]).
    defer: bool,
    /// Those hints, in order.
    ahead: Vec<Later>,
}

/// A hint for later operations, held back until the operation about to run is issued.
#[derive(Debug)]
pub(crate) enum Later {
    Discard(Vec<ByteRange>),
    Evict(Vec<ByteRange>),
    Prefetch(Vec<ByteRange>),
}

impl Later {
    /// Gives the hint to `backend`.
    pub(crate) fn issue(self, backend: &mut dyn MemoryBackend) -> Result<()> {
        match self {
            Later::Discard(r) => backend.discard(&r),
            Later::Evict(r) => backend.stage_out(&r),
            Later::Prefetch(r) => backend.prefetch(&r, Location::DEVICE),
        }
    }
}

impl<'a> Hints<'a> {
    /// A handle on `backend` for one hook; every hint is given at once.
    pub(crate) fn new(backend: &'a mut dyn MemoryBackend) -> Self {
        Self { backend, defer: false, ahead: Vec::new() }
    }

    /// A handle for the `before` of an operation a caller waits on: the `*_ahead` hints are
    /// held for [`Hints::take_ahead`].
    pub(crate) fn deferring(backend: &'a mut dyn MemoryBackend) -> Self {
        Self { backend, defer: true, ahead: Vec::new() }
    }

    /// Moves ranges to the device ahead of their use, in one batched call.
    pub fn prefetch(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.backend.prefetch(ranges, Location::DEVICE)
    }

    /// [`Hints::prefetch`] for data later operations use (not the one about to run). Where a
    /// caller waits on the operation (a program's thread, which enqueues the kernel itself
    /// once its data is placed), the `*_ahead` hints are given, in order, once the operation
    /// is issued, so that the caller goes on while they are; elsewhere at once. The room they
    /// need must come from `*_ahead` hints given before them, or have been made already.
    pub fn prefetch_ahead(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.later(Later::Prefetch(ranges.to_vec()))
    }

    /// [`Hints::evict`] to make room for data later operations use (see
    /// [`Hints::prefetch_ahead`]).
    pub fn evict_ahead(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.later(Later::Evict(ranges.to_vec()))
    }

    /// [`Hints::discard`] to make room for data later operations use (see
    /// [`Hints::prefetch_ahead`]).
    pub fn discard_ahead(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.later(Later::Discard(ranges.to_vec()))
    }

    /// Whether the `*_ahead` hints wait for the operation to be issued.
    pub fn defers(&self) -> bool {
        self.defer
    }

    fn later(&mut self, hint: Later) -> Result<()> {
        if self.defer {
            self.ahead.push(hint);
            Ok(())
        } else {
            hint.issue(self.backend)
        }
    }

    /// The hints held back, in order.
    pub(crate) fn take_ahead(&mut self) -> Vec<Later> {
        std::mem::take(&mut self.ahead)
    }

    /// Moves ranges off the device: through the backend's pinned staging buffers where it has
    /// them, else migrated to the host.
    pub fn evict(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.backend.stage_out(ranges)
    }

    /// Writes ranges back to the staging memory, leaving them on the device, so that their
    /// eviction copies nothing ([`crate::seam::Destination::HostCopy`]).
    pub fn write_back(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.backend.write_back(ranges)
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
