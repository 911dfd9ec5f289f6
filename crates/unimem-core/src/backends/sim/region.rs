//! A simulated region's state: per-page residency on each side (4 KiB pages), its bytes
//! (sparse), and the driver's per-2 MiB-block state.

use super::pages::PageSet;
use super::store::PageStore;
use crate::mechanism::pool::Buffer;
use crate::mechanism::slab::Slot;
use crate::region::RegionId;
use crate::seam::{BLOCK_SIZE, PAGE_SIZE};

pub(super) const PAGES_PER_BLOCK: usize = (BLOCK_SIZE / PAGE_SIZE) as usize;
pub(super) const ADV_READ_MOSTLY: u8 = 1;
pub(super) const ADV_PREFER_HOST: u8 = 2;
pub(super) const ADV_PREFER_DEVICE: u8 = 4;
pub(super) const ADV_ACCESSED_BY: u8 = 8;

/// Per-2 MiB-block state the driver keeps.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Block {
    /// Migration stamp for least-recently-migrated eviction; 0 when not on the device.
    pub(super) stamp: u64,
    /// When data in flight to the device arrives.
    pub(super) ready_ns: u64,
    /// When the last kernel touching the block ends (D2H and discard wait for it).
    pub(super) last_use_ns: u64,
    /// When its last staged eviction ends (its copy out and the discard of its pages).
    pub(super) staged_until: u64,
    /// When its last write-back's copy ends: an eviction of its kept pages frees their room
    /// no earlier.
    pub(super) written_back_until: u64,
    /// `ADV_*` flags.
    pub(super) advice: u8,
}

/// A write-back queued (`SimBackend::issue_write_backs`): pages of one block of a region.
#[derive(Debug, Clone, Copy)]
pub(super) struct WriteBack {
    pub(super) region: RegionId,
    pub(super) pages: (usize, usize),
}

/// A pooled buffer: its address and length (which of its blocks are on the device, the pool
/// keeps).
#[derive(Debug)]
pub(super) struct SimBuffer {
    pub(super) addr: u64,
    pub(super) bytes: u64,
}

impl Buffer for SimBuffer {
    fn len(&self) -> u64 {
        self.bytes
    }
}

#[derive(Debug)]
pub(super) struct SimRegion {
    /// Its (simulated) address: a pooled buffer's when it took one over.
    pub(super) addr: u64,
    pub(super) bytes: u64,
    pub(super) pages: usize,
    pub(super) on_device: PageSet,
    pub(super) on_host: PageSet,
    /// Device pages a prefetch brought that no kernel has touched yet (for the metrics).
    pub(super) prefetched: PageSet,
    /// Pages whose only copy is in a staging buffer (their bytes are kept in `host_data`).
    pub(super) staged: PageSet,
    pub(super) blocks: Vec<Block>,
    pub(super) host_data: PageStore,
    pub(super) dev_data: PageStore,
    /// Device pages restored from staging whose staging copy is still valid (not written on
    /// the device since): evicting them again needs no copy. Their bytes are in `kept_data`.
    pub(super) kept: PageSet,
    pub(super) kept_data: PageStore,
    /// Blocks whose pages are on the device although their data is staged: the region took
    /// over a pooled buffer (a relocation, see [`SimBackend::relocate`]) and no restore has
    /// used them yet.
    pub(super) spare: Vec<bool>,
    /// Its slot, for a region packed in the slab: it stays on the device
    /// ([`SimBackend::with_small_regions_packed`]).
    pub(super) packed: Option<Slot>,
}

impl SimRegion {
    pub(super) fn page_range(&self, offset: u64, len: u64) -> (usize, usize) {
        ((offset / PAGE_SIZE) as usize, (offset + len).div_ceil(PAGE_SIZE) as usize)
    }

    pub(super) fn block_range(&self, start: usize, end: usize) -> std::ops::Range<usize> {
        if start >= end {
            return 0..0;
        }
        start / PAGES_PER_BLOCK..(end - 1) / PAGES_PER_BLOCK + 1
    }

    pub(super) fn block_pages(&self, b: usize) -> (usize, usize) {
        (b * PAGES_PER_BLOCK, ((b + 1) * PAGES_PER_BLOCK).min(self.pages))
    }

    /// Whether every page is staged and no block spare: it may come back into any buffer of
    /// its size.
    pub(super) fn wholly_staged(&self) -> bool {
        !self.spare.contains(&true) && self.staged.count(0, self.pages) == self.pages
    }

    /// Staged pages of `s..e` in `spare` blocks (their device pages held for their restore).
    pub(super) fn spare_pages_in(&self, s: usize, e: usize) -> usize {
        self.block_range(s, e)
            .filter(|&b| self.spare[b])
            .map(|b| {
                let (bs, be) = self.block_pages(b);
                self.staged.count(bs.max(s), be.min(e))
            })
            .sum()
    }

    /// Clears `spare` on the blocks of `s..e` with no staged page left.
    pub(super) fn clear_spare_restored(&mut self, s: usize, e: usize) {
        for b in self.block_range(s, e) {
            let (bs, be) = self.block_pages(b);
            if self.spare[b] && self.staged.count(bs, be) == 0 {
                self.spare[b] = false;
            }
        }
    }

    /// Pages of `s..e` valid on both sides keep only their device copy (a GPU write collapsed
    /// them, or read-mostly was unset); returns how many.
    pub(super) fn drop_host_duplicates(&mut self, s: usize, e: usize) -> usize {
        if !self.host_data.is_empty() {
            let (on_host, host_data) = (&self.on_host, &mut self.host_data);
            self.on_device.for_each(s, e, |p| {
                if on_host.contains(p) {
                    host_data.drop_page(p)
                }
            });
        }
        self.on_host.remove_in(&self.on_device, s, e)
    }

    /// The bytes of the device pages of `s..e` leave the device's store; those the host has no
    /// copy of go to the host's (the page sets are the caller's to update).
    pub(super) fn device_bytes_to_host(&mut self, s: usize, e: usize) {
        if self.dev_data.is_empty() {
            return;
        }
        let (on_host, host_data, dev_data) = (&self.on_host, &mut self.host_data, &mut self.dev_data);
        self.on_device.for_each(s, e, |p| {
            let page = dev_data.take(p);
            if !on_host.contains(p) {
                host_data.put(p, page);
            }
        });
    }

    /// Pages of `s..e` valid on both sides keep only their host copy (a CPU write); returns
    /// how many device pages that frees.
    pub(super) fn drop_device_duplicates(&mut self, s: usize, e: usize) -> usize {
        if !self.dev_data.is_empty() {
            let (on_device, dev_data) = (&self.on_device, &mut self.dev_data);
            self.on_host.for_each(s, e, |p| {
                if on_device.contains(p) {
                    dev_data.drop_page(p)
                }
            });
        }
        self.prefetched.remove(s, e);
        self.on_device.remove_in(&self.on_host, s, e)
    }
}

/// What moving pages to one side did.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Moved {
    /// Pages that crossed the link.
    pub(super) transferred: usize,
    /// Pages that got a fresh, zeroed copy (no transfer).
    pub(super) populated: usize,
    /// Pages whose duplicate on the other side was dropped (no transfer).
    pub(super) dropped: usize,
}

/// Splits `offset..offset+len` at page boundaries: calls `f(page, byte offset, lo, hi)` where
/// `lo..hi` is the chunk's position in the caller's buffer.
pub(super) fn for_each_page_chunk(offset: u64, len: usize, mut f: impl FnMut(usize, u64, usize, usize)) {
    let mut done = 0usize;
    while done < len {
        let at = offset + done as u64;
        let n = ((PAGE_SIZE - at % PAGE_SIZE) as usize).min(len - done);
        f((at / PAGE_SIZE) as usize, at, done, done + n);
        done += n;
    }
}
