//! Where a backend in blocks keeps its 2 MiB chunks: mapped behind each region's own virtual
//! range (`memory = "vmm"`), or carved from device and pinned memory allocated once, with
//! regions moving between chunks (`memory = "device"`, a replay's regions only).
//!
//! The block logic (`blocks.rs`) is the same for both; what differs is here: how a chunk is
//! made and given back, and the address a block's data has. In the arena a block has no
//! address of its own: it is its device chunk's while it has one, else its host chunk's (which
//! a kernel reads over the link, as a mapped block's), so nothing is mapped or unmapped and the
//! device never waits for the driver's page tables.

use std::collections::BTreeSet;

use cudarc::driver::{result, sys};

use super::super::vmm::{Physical, Place, Reserved};
use super::super::{cuda_err, CudaDevice};
use crate::error::Result;
use crate::seam::BLOCK_SIZE;

/// Bytes allocated at a time when the arena grows (device or pinned).
const SEGMENT_BYTES: u64 = 64 << 20;

/// A block's device memory.
#[derive(Debug)]
pub(super) enum DevChunk {
    /// Physical memory, mapped at the block's address.
    Mapped(Physical),
    /// A slot of the arena at this device address.
    Slot(u64),
}

impl DevChunk {
    /// Its address where it has one of its own (an arena slot).
    pub(super) fn slot(&self) -> Option<u64> {
        match self {
            DevChunk::Mapped(_) => None,
            DevChunk::Slot(a) => Some(*a),
        }
    }
}

/// A block's host memory.
#[derive(Debug)]
pub(super) enum HostChunk {
    /// Pinned `HOST_NUMA` memory, mapped at a mirror address for the copies (and at the
    /// block's address while it is evicted).
    Mapped { phys: Physical, mirror: Reserved },
    /// A pinned slot of the arena (one address for the host, the copies and kernels).
    Pinned(u64),
}

impl HostChunk {
    /// The address copies use.
    pub(super) fn addr(&self) -> u64 {
        match self {
            HostChunk::Mapped { mirror, .. } => mirror.va(),
            HostChunk::Pinned(a) => *a,
        }
    }
}

impl Drop for HostChunk {
    fn drop(&mut self) {
        if let HostChunk::Mapped { mirror, .. } = self {
            // The mirror's mapping goes before its addresses are freed (the chunk's after it).
            let _ = mirror.unmap(0, BLOCK_SIZE);
        }
    }
}

/// Device and pinned host memory allocated in segments and carved into 2 MiB slots, kept
/// until the backend closes (`cuMemFree` would synchronise the device).
#[derive(Debug)]
pub(super) struct Arena {
    dev: CudaDevice,
    device_segments: Vec<sys::CUdeviceptr>,
    host_segments: Vec<u64>,
    /// Every segment's base (device and host), for the allocation an address is in.
    bases: BTreeSet<u64>,
    /// Free device slots, lowest first (blocks restored together get neighbouring slots).
    device_free: BTreeSet<u64>,
    host_free: Vec<u64>,
}

// SAFETY: plain device and pinned allocations owned by the arena; the backend that owns it is
// used from one thread at a time.
unsafe impl Send for Arena {}

impl Arena {
    pub(super) fn new(dev: &CudaDevice) -> Self {
        Self {
            dev: dev.clone(),
            device_segments: Vec::new(),
            host_segments: Vec::new(),
            bases: BTreeSet::new(),
            device_free: BTreeSet::new(),
            host_free: Vec::new(),
        }
    }

    /// Device bytes allocated.
    pub(super) fn device_bytes(&self) -> u64 {
        self.device_segments.len() as u64 * SEGMENT_BYTES
    }

    /// The base of the segment `addr` lies in (copies must not span two).
    pub(super) fn segment_of(&self, addr: u64) -> u64 {
        self.bases.range(..=addr).next_back().copied().unwrap_or(addr)
    }

    /// Allocates device slots until `bytes` are (set-up, so that the work does not pay for it).
    pub(super) fn reserve_device(&mut self, bytes: u64) -> Result<()> {
        while self.device_bytes() < bytes {
            self.grow_device()?;
        }
        Ok(())
    }

    fn grow_device(&mut self) -> Result<()> {
        self.dev.context().bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "device arena"))?;
        // SAFETY: a plain allocation, freed once in Drop.
        let base = unsafe { result::malloc_sync(SEGMENT_BYTES as usize) }
            .map_err(cuda_err("cuMemAlloc", format!("{SEGMENT_BYTES} bytes of device arena")))?;
        self.device_segments.push(base);
        self.bases.insert(base);
        self.device_free.extend((0..SEGMENT_BYTES / BLOCK_SIZE).map(|i| base + i * BLOCK_SIZE));
        Ok(())
    }

    /// A free device slot (the arena grows where none is left).
    pub(super) fn take_device(&mut self) -> Result<u64> {
        if self.device_free.is_empty() {
            self.grow_device()?;
        }
        Ok(self.device_free.pop_first().expect("grown above"))
    }

    pub(super) fn put_device(&mut self, addr: u64) {
        self.device_free.insert(addr);
    }

    /// A free pinned slot (the arena grows where none is left).
    pub(super) fn take_host(&mut self) -> Result<u64> {
        if let Some(a) = self.host_free.pop() {
            return Ok(a);
        }
        self.dev.context().bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "host arena"))?;
        // Mapped for the device at the same address (unified addressing): kernels read it.
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: a plain allocation, freed once in Drop.
        let base = unsafe { result::malloc_host(SEGMENT_BYTES as usize, flags) }
            .map_err(cuda_err("cuMemHostAlloc", format!("{SEGMENT_BYTES} bytes of host arena")))?
            as u64;
        self.host_segments.push(base);
        self.bases.insert(base);
        self.host_free.extend((1..SEGMENT_BYTES / BLOCK_SIZE).rev().map(|i| base + i * BLOCK_SIZE));
        Ok(base)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        if self.device_segments.is_empty() && self.host_segments.is_empty() {
            return;
        }
        if let Err(e) = self.dev.synchronize() {
            tracing::warn!("synchronising before freeing the arena failed: {e}");
        }
        for p in self.device_segments.drain(..) {
            // SAFETY: allocated by cuMemAlloc, freed once, the device idle.
            if let Err(e) = unsafe { result::free_sync(p) } {
                tracing::warn!("cuMemFree of the device arena failed: {e:?}");
            }
        }
        for p in self.host_segments.drain(..) {
            // SAFETY: allocated by cuMemHostAlloc, freed once, the device idle.
            if let Err(e) = unsafe { result::free_host(p as *mut std::ffi::c_void) } {
                tracing::warn!("cuMemFreeHost of the host arena failed: {e:?}");
            }
        }
    }
}

/// How a backend in blocks places its chunks.
#[derive(Debug)]
pub(super) enum Store {
    /// CUDA virtual memory: each region a reserved range, chunks mapped behind it.
    Mapped {
        /// The host's NUMA node for host chunks.
        numa: i32,
    },
    /// The arena: regions move between its slots.
    Arena(Box<Arena>),
}

impl Store {
    pub(super) fn is_mapped(&self) -> bool {
        matches!(self, Store::Mapped { .. })
    }

    /// Which allocation an address of a copy lies in: the arena's segment; in virtual memory
    /// each block's own (host chunks are mapped one by one), so that no copies merge.
    pub(super) fn allocation_of(&self, addr: u64) -> u64 {
        match self {
            Store::Mapped { .. } => addr,
            Store::Arena(a) => a.segment_of(addr),
        }
    }

    /// A new device chunk.
    pub(super) fn new_device(&mut self, device: i32) -> Result<DevChunk> {
        match self {
            Store::Mapped { .. } => {
                Ok(DevChunk::Mapped(Physical::create(Place::Device(device), BLOCK_SIZE)?))
            }
            Store::Arena(a) => Ok(DevChunk::Slot(a.take_device()?)),
        }
    }

    /// Gives a device chunk back (the driver's, or the arena's).
    pub(super) fn drop_device(&mut self, chunk: DevChunk) {
        if let (Store::Arena(a), DevChunk::Slot(addr)) = (self, &chunk) {
            a.put_device(*addr);
        }
    }

    /// A new host chunk, for `device` to read and copies to use.
    pub(super) fn new_host(&mut self, device: i32) -> Result<HostChunk> {
        match self {
            Store::Mapped { numa } => {
                let phys = Physical::create(Place::HostNuma(*numa), BLOCK_SIZE)?;
                let mirror = Reserved::new(BLOCK_SIZE)?;
                mirror.map(0, BLOCK_SIZE, &phys, 0)?;
                mirror.grant(0, BLOCK_SIZE, device)?;
                Ok(HostChunk::Mapped { phys, mirror })
            }
            Store::Arena(a) => Ok(HostChunk::Pinned(a.take_host()?)),
        }
    }
}
