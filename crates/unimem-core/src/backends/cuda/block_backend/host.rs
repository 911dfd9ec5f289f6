//! The host's side: bytes read and written through a block's address wherever it is mapped
//! (after the device is done with it), CPU touches as the copies they take, data from before
//! the work, and where data is.

use rustc_hash::FxHashSet;

use super::blocks::{spans, Site};
use super::*;
use crate::access::{AccessMode, RangeAccess};

impl BlockBackend {
    /// Every block of the range mapped: one never used gets a device chunk (zeroed, or in the
    /// arena `unset` until `set_unset_blocks`).
    fn ensure_mapped(&mut self, id: RegionId, offset: u64, len: u64) -> Result<()> {
        let r = &self.regions[&id];
        let unmapped: Vec<BlockId> = r
            .blocks_of(offset, len)
            .filter(|&b| r.blocks[b].device.is_none() && r.blocks[b].host.is_none())
            .map(|b| BlockId::new(id, b))
            .collect();
        if unmapped.is_empty() {
            return Ok(());
        }
        let protected: FxHashSet<BlockId> = unmapped.iter().copied().collect();
        self.restore_blocks(unmapped, &protected, Site::Kernel)?;
        for s in self.h2d.all() {
            s.synchronize().map_err(cuda_err("cuStreamSynchronize", "first touch by the host"))?;
        }
        Ok(())
    }

    /// The pieces of a range where its bytes are: one for the range at its mapped address,
    /// one per block in the arena.
    fn pieces(&self, id: RegionId, offset: u64, len: u64) -> Vec<Piece> {
        let r = &self.regions[&id];
        if r.va.is_some() || r.packed.is_some() {
            return vec![Piece { at: 0, addr: r.addr() + offset, len: len as usize, pinned: false }];
        }
        r.blocks_of(offset, len)
            .map(|b| {
                let lo = (b as u64 * BLOCK_SIZE).max(offset);
                let hi = ((b as u64 + 1) * BLOCK_SIZE).min(offset + len);
                let pinned = r.blocks[b].device.is_none();
                let addr = r.block_addr(b).expect("placed by ensure_mapped") + lo % BLOCK_SIZE;
                Piece { at: (lo - offset) as usize, addr, len: (hi - lo) as usize, pinned }
            })
            .collect()
    }

    /// The pieces of a range the host reads or writes (`mode`), with the device idle, every
    /// block of it placed and its unset bytes set.
    fn host_pieces(&mut self, id: RegionId, offset: u64, len: u64, mode: AccessMode) -> Result<Vec<Piece>> {
        self.checked(id, offset, len)?;
        self.sync_all()?;
        self.ensure_mapped(id, offset, len)?;
        self.set_unset_blocks(&[RangeAccess { region: id, offset, len, mode }])?;
        Ok(self.pieces(id, offset, len))
    }

    pub(super) fn read_bytes(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        for p in self.host_pieces(id, offset, buf.len() as u64, AccessMode::Read)? {
            let out = &mut buf[p.at..p.at + p.len];
            if p.pinned {
                // SAFETY: an arena host chunk, pinned host memory the device no longer uses
                // (idle: `host_pieces`), holds the block's bytes.
                unsafe { std::ptr::copy_nonoverlapping(p.addr as *const u8, out.as_mut_ptr(), p.len) };
                continue;
            }
            // SAFETY: the range is mapped for the device and the device idle; the copy is
            // synchronised below.
            unsafe { cudarc::driver::result::memcpy_dtoh_async(out, p.addr, self.compute.cu_stream()) }
                .map_err(cuda_err("cuMemcpyDtoHAsync", format!("{} bytes of {id}", p.len)))?;
        }
        self.compute.synchronize().map_err(cuda_err("cuStreamSynchronize", "host read"))
    }

    pub(super) fn write_bytes(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        for p in self.host_pieces(id, offset, data.len() as u64, AccessMode::Write)? {
            let from = &data[p.at..p.at + p.len];
            if p.pinned {
                // SAFETY: as in `read_bytes`.
                unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), p.addr as *mut u8, p.len) };
                continue;
            }
            // SAFETY: as in `read_bytes`.
            unsafe { cudarc::driver::result::memcpy_htod_async(p.addr, from, self.compute.cu_stream()) }
                .map_err(cuda_err("cuMemcpyHtoDAsync", format!("{} bytes of {id}", p.len)))?;
        }
        self.compute.synchronize().map_err(cuda_err("cuStreamSynchronize", "host write"))?;
        let r = self.regions.get_mut(&id).expect("checked");
        for b in r.blocks_of(offset, data.len() as u64) {
            let v = &mut r.blocks[b];
            v.data = true;
            // Written through a device chunk: its host copy is stale. Through the host chunk
            // (mapped there), the host chunk is the data.
            v.host_valid = v.device.is_none();
        }
        Ok(())
    }

    /// The CPU touches ranges: it reads what it reads through a copy to the host, and writes
    /// by copying back what it read (the bytes stay as they were).
    pub(super) fn touch_host(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        for a in accesses {
            self.checked(a.region, a.offset, a.len)?;
        }
        let t0 = Instant::now();
        for a in accesses.iter().filter(|a| a.len > 0) {
            let mut buf = vec![0u8; a.len as usize];
            self.read_bytes(a.region, a.offset, &mut buf)?;
            self.stats.d2h_bytes += a.len;
            if a.mode.writes() {
                self.write_bytes(a.region, a.offset, &buf)?;
                self.stats.h2d_bytes += a.len;
            }
        }
        self.stats.host.add(HostOp::HostAccess, t0.elapsed().as_nanos() as u64);
        Ok(())
    }

    /// Data from before the work: blocks not on the device start in host chunks, valid there
    /// (set-up, off the clock).
    pub(super) fn preload(&mut self, range: ByteRange) -> Result<()> {
        self.checked(range.region, range.offset, range.len)?;
        self.sync_all()?;
        let t0 = Instant::now();
        let id = range.region;
        let todo: Vec<u64> = self.regions[&id]
            .blocks_of(range.offset, range.len)
            .filter(|&b| {
                let v = &self.regions[&id].blocks[b];
                v.device.is_none() && v.host.is_none()
            })
            .map(|b| b as u64)
            .collect();
        for &b in &todo {
            let h = self.take_host_chunk(BlockId::new(id, b as usize))?;
            let r = self.regions.get_mut(&id).expect("checked");
            if let (Some(va), HostChunk::Mapped { phys, .. }) = (&r.va, &h) {
                va.map(b * BLOCK_SIZE, BLOCK_SIZE, phys, 0)?;
            }
            r.blocks[b as usize].host = Some(h);
        }
        if self.regions[&id].va.is_some() {
            for (start, len) in spans(&todo) {
                self.regions[&id].va().grant(start * BLOCK_SIZE, len * BLOCK_SIZE, self.device)?;
            }
        }
        let r = self.regions.get_mut(&id).expect("checked");
        for b in r.blocks_of(range.offset, range.len) {
            let v = &mut r.blocks[b];
            v.data = true;
            if v.device.is_none() {
                v.host_valid = true;
            }
        }
        self.clock.exclude_since(t0);
        Ok(())
    }

    pub(super) fn residency_of(&self, range: ByteRange) -> Result<Residency> {
        self.checked(range.region, range.offset, range.len)?;
        let r = &self.regions[&range.region];
        let mut out = Residency::default();
        if r.packed.is_some() {
            out.device = range.len;
            return Ok(out);
        }
        for b in r.blocks_of(range.offset, range.len) {
            let lo = (b as u64 * BLOCK_SIZE).max(range.offset);
            let hi = ((b as u64 + 1) * BLOCK_SIZE).min(range.offset + range.len);
            let v = &r.blocks[b];
            // A block whose eviction is issued is off the device, as a policy sees it (the
            // simulator's view too): its chunk is only waiting for the copy, and a use
            // cancels the eviction.
            let slot = if v.device.is_some() && v.leaving.is_none() {
                &mut out.device
            } else if v.host.is_some() && v.data {
                &mut out.staged
            } else {
                &mut out.unpopulated
            };
            *slot += hi - lo;
        }
        Ok(out)
    }
}

/// Part of a host access: its offset in the caller's bytes, where it is, its length, and
/// whether that is an arena host chunk (the CPU copies it itself).
struct Piece {
    at: usize,
    addr: u64,
    len: usize,
    pinned: bool,
}
