//! Regions under a block packed into shared 2 MiB chunks by power-of-two size classes (512
//! bytes up): the device arena's small regions, and the simulator's model of them.
//!
//! A chunk per region would put the transformer trace's 513 regions of 7 MB in all at 1.07
//! GB. Packed regions stay on the device: their chunks count against the budget whole, from
//! the first region that needs one, and a freed slot waits for the next region of its class
//! (chunks are never given back while the backend lives).

use crate::seam::BLOCK_SIZE;

/// The smallest slot.
pub(crate) const MIN_SLOT: u64 = 512;

/// Whether a region of `bytes` is packed (it has no whole block).
pub(crate) fn packs(bytes: u64) -> bool {
    bytes < BLOCK_SIZE
}

/// The bytes of the slot a region of `bytes` (under a block) is packed in.
pub(crate) fn slot_bytes(bytes: u64) -> u64 {
    bytes.max(MIN_SLOT).next_power_of_two()
}

/// A slot of the slab: its size class and address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub class: usize,
    pub addr: u64,
}

/// The free slots of each size class (the chunks themselves are the backend's).
#[derive(Debug, Default)]
pub(crate) struct Slab {
    free: Vec<Vec<u64>>,
    chunks: u64,
}

impl Slab {
    fn class_of(bytes: u64) -> usize {
        (slot_bytes(bytes) / MIN_SLOT).trailing_zeros() as usize
    }

    /// A free slot for a region of `bytes` (under a block), or `None` where its class has
    /// none: the caller then makes room for a chunk and gives it to [`Slab::carve`].
    pub fn take(&mut self, bytes: u64) -> Option<Slot> {
        let class = Self::class_of(bytes);
        let addr = self.free.get_mut(class)?.pop()?;
        Some(Slot { class, addr })
    }

    /// Cuts the chunk at `base` into slots of the class of `bytes` and takes the first.
    pub fn carve(&mut self, bytes: u64, base: u64) -> Slot {
        let (class, size) = (Self::class_of(bytes), slot_bytes(bytes));
        if self.free.len() <= class {
            self.free.resize_with(class + 1, Vec::new);
        }
        self.free[class].extend((1..BLOCK_SIZE / size).rev().map(|i| base + i * size));
        self.chunks += 1;
        Slot { class, addr: base }
    }

    /// A freed region's slot, for the next region of its class.
    pub fn put(&mut self, slot: Slot) {
        self.free[slot.class].push(slot.addr);
    }

    /// Chunks carved so far.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }
}

/// The chunks a program's packed regions take, allocation by allocation: for each size class,
/// the most of its regions live at once fill whole chunks, and chunks stay (a trace's
/// statistics; the replay's policies plan for the rest of the device).
#[derive(Debug, Default, Clone)]
pub(crate) struct SlabDemand {
    live: Vec<u64>,
    peak: Vec<u64>,
}

impl SlabDemand {
    /// A region of `bytes` allocated (nothing if it is not packed).
    pub fn alloc(&mut self, bytes: u64) {
        if packs(bytes) {
            let class = Slab::class_of(bytes);
            if self.live.len() <= class {
                self.live.resize(class + 1, 0);
                self.peak.resize(class + 1, 0);
            }
            self.live[class] += 1;
            self.peak[class] = self.peak[class].max(self.live[class]);
        }
    }

    /// A region of `bytes` freed.
    pub fn free(&mut self, bytes: u64) {
        if packs(bytes) {
            self.live[Slab::class_of(bytes)] -= 1;
        }
    }

    /// Bytes of the chunks needed so far.
    pub fn bytes(&self) -> u64 {
        let per_chunk = |class: usize| BLOCK_SIZE / (MIN_SLOT << class);
        self.peak.iter().enumerate().map(|(c, &n)| n.div_ceil(per_chunk(c)) * BLOCK_SIZE).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_share_a_chunk_by_size_class_and_reuse_freed_slots() {
        let mut s = Slab::default();
        assert!(packs(BLOCK_SIZE - 1) && !packs(BLOCK_SIZE));
        assert_eq!(
            (slot_bytes(1), slot_bytes(512), slot_bytes(513), slot_bytes(1 << 20)),
            (512, 512, 1024, 1 << 20)
        );
        assert_eq!(s.take(100), None, "no chunk yet");
        let a = s.carve(100, 1 << 30);
        assert_eq!(a, Slot { class: 0, addr: 1 << 30 });
        // The chunk's other 4,095 slots of 512 bytes serve the class in address order.
        let b = s.take(512).unwrap();
        assert_eq!(b.addr, (1 << 30) + 512);
        for _ in 2..BLOCK_SIZE / 512 {
            assert!(s.take(300).is_some());
        }
        assert_eq!(s.take(300), None, "the chunk is full");
        assert_eq!(s.take(600), None, "another class has its own chunks");
        s.put(b);
        assert_eq!(s.take(512), Some(b), "a freed slot serves the next region of its class");
        // Two regions of 1 MiB fill a chunk.
        let c = s.carve(1 << 20, 2 << 30);
        assert_eq!(s.take((1 << 20) - 1).map(|x| x.addr), Some((2 << 30) + (1 << 20)));
        assert_eq!(s.take(1 << 20), None);
        assert_eq!((c.class, s.chunks()), (11, 2));
    }

    #[test]
    fn the_demand_is_each_class_s_most_live_regions_in_whole_chunks() {
        let mut d = SlabDemand::default();
        d.alloc(BLOCK_SIZE); // not packed
        assert_eq!(d.bytes(), 0);
        for _ in 0..4097 {
            d.alloc(512);
        }
        assert_eq!(d.bytes(), 2 * BLOCK_SIZE, "4,096 slots of 512 bytes fill a chunk");
        for _ in 0..4097 {
            d.free(300);
        }
        d.alloc(1 << 20);
        d.alloc(1 << 20);
        d.free(1 << 20);
        d.alloc(1 << 20);
        assert_eq!(d.bytes(), 3 * BLOCK_SIZE, "chunks stay: the 512-byte class keeps its two");
        // The simulator's slab carves the same chunks for the same allocations.
        let mut s = Slab::default();
        let mut chunks = 0u64;
        for _ in 0..4097 {
            if s.take(512).is_none() {
                s.carve(512, chunks * BLOCK_SIZE);
                chunks += 1;
            }
        }
        assert_eq!(s.chunks(), 2);
    }
}
