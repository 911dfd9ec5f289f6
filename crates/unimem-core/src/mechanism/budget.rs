//! The device budget, as both backends keep it: an emulated GPU of `capacity` bytes holds the
//! data on the device, the pages of freed buffers pooled for reuse, and pages taken over for
//! restores still to come (spare). When more is needed than fits, pooled pages go first
//! ([`DeviceBudget::shed`]), then whole 2 MiB blocks in the driver's eviction order
//! ([`DeviceBudget::victims`]); the backend does the moving. A block's place in that order is
//! its stamp: the simulator stamps a block when pages migrate into it (the driver evicts the
//! least recently migrated), the CUDA backend when a kernel uses it (least recently used).

use std::collections::VecDeque;

use rustc_hash::FxHashSet;

use crate::mechanism::pool::{Buffer, BufferPool, Pooled};
pub(crate) use crate::seam::BlockId;

/// The account of an emulated device's memory (see the module documentation). `T` is a pooled
/// buffer, `E` what its next user waits for.
#[derive(Debug)]
pub(crate) struct DeviceBudget<T, E> {
    capacity: u64,
    /// Bytes of data on the device.
    data: u64,
    /// Bytes of pages held for restores to come, outside the data.
    spare: u64,
    /// Freed buffers kept for reuse, their device pages counted against the capacity.
    pool: BufferPool<T, E>,
    /// Blocks with pages on the device by stamp, oldest first: the first live one is the next
    /// to go. A restamp appends and leaves the old entry behind as stale: a kernel restamps
    /// every block it uses, and a search tree's removal and insertion per block took 5% of a
    /// GPU replay's host time.
    order: VecDeque<(u64, BlockId)>,
    /// Stamps in `order` no longer current (restamped or taken out).
    stale: FxHashSet<u64>,
    next_stamp: u64,
    peak_data: u64,
    peak_held: u64,
}

impl<T: Buffer, E> DeviceBudget<T, E> {
    /// An empty device of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            data: 0,
            spare: 0,
            pool: BufferPool::new(),
            order: VecDeque::new(),
            stale: FxHashSet::default(),
            next_stamp: 1,
            peak_data: 0,
            peak_held: 0,
        }
    }

    /// Device memory held: the data, the pooled pages and the spare pages.
    pub fn held(&self) -> u64 {
        self.data + self.pool.resident_bytes() + self.spare
    }

    /// `stats` with the device's bytes now and its peaks from this account.
    pub fn report(&self, stats: crate::seam::BackendStats) -> crate::seam::BackendStats {
        crate::seam::BackendStats {
            device_bytes: self.data,
            peak_device_bytes: self.peak_data,
            peak_footprint_bytes: self.peak_held,
            ..stats
        }
    }

    /// The freed buffers kept for reuse.
    pub fn pool(&self) -> &BufferPool<T, E> {
        &self.pool
    }

    /// The same, to put buffers in or take them out.
    pub fn pool_mut(&mut self) -> &mut BufferPool<T, E> {
        &mut self.pool
    }

    /// `bytes` of data arrived on the device.
    pub fn add_data(&mut self, bytes: u64) {
        self.data += bytes;
        self.peak_data = self.peak_data.max(self.data);
    }

    /// `bytes` of data left the device.
    pub fn remove_data(&mut self, bytes: u64) {
        self.data -= bytes;
    }

    /// `bytes` of pages are held for restores to come.
    pub fn add_spare(&mut self, bytes: u64) {
        self.spare += bytes;
    }

    /// `bytes` of spare pages went to data, or back to the driver.
    pub fn remove_spare(&mut self, bytes: u64) {
        self.spare -= bytes;
    }

    /// Keeps the peak of the memory held.
    pub fn note_held(&mut self) {
        self.peak_held = self.peak_held.max(self.held());
    }

    /// Gives `block` (stamped `old`, 0 for none) the newest stamp, which it returns.
    pub fn restamp(&mut self, block: BlockId, old: u64) -> u64 {
        self.unstamp(block, old);
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.order.push_back((stamp, block));
        stamp
    }

    /// Takes `block` (stamped `stamp`) out of the eviction order: no page of it is left. The
    /// stamp alone names its entry.
    pub fn unstamp(&mut self, _block: BlockId, stamp: u64) {
        if stamp == 0 {
            return;
        }
        self.stale.insert(stamp);
        while let Some(&(front, _)) = self.order.front() {
            if !self.stale.remove(&front) {
                break;
            }
            self.order.pop_front();
        }
        // Stale entries behind a live one go once they outnumber the live ones.
        let live = self.order.len().saturating_sub(self.stale.len());
        if self.stale.len() > live + 1024 {
            let stale = std::mem::take(&mut self.stale);
            self.order.retain(|(s, _)| !stale.contains(s));
        }
    }

    /// Pooled buffers to give their pages back so that `need` more bytes fit, the longest
    /// pooled first (none where they fit already).
    pub fn shed(&mut self, need: u64) -> Vec<Pooled<T, E>> {
        let over = (self.held() + need).saturating_sub(self.capacity).min(self.pool.resident_bytes());
        if over == 0 {
            return Vec::new();
        }
        self.pool.shed(over)
    }

    /// The blocks to evict so that `need` more bytes fit, in the eviction order, passing over
    /// those `protected` keeps (the running work's own); `freed` says what evicting a block
    /// gives back. Fewer than needed where only protected blocks are left (`short`): the work
    /// then runs over the capacity, or, where it may wait, waits. One pass: it runs on the
    /// launch path of a GPU.
    pub fn victims(
        &self,
        need: u64,
        protected: impl Fn(&BlockId) -> bool,
        freed: impl Fn(&BlockId) -> u64,
    ) -> Victims {
        let mut over = (self.held() + need).saturating_sub(self.capacity);
        let mut blocks = Vec::new();
        for (stamp, block) in &self.order {
            if over == 0 {
                break;
            }
            if self.stale.contains(stamp) || protected(block) {
                continue;
            }
            over = over.saturating_sub(freed(block));
            blocks.push(*block);
        }
        Victims { blocks, short: over }
    }
}

/// What [`DeviceBudget::victims`] chose.
#[derive(Debug, PartialEq, Eq)]
pub struct Victims {
    /// The blocks to evict, oldest first.
    pub blocks: Vec<BlockId>,
    /// Bytes still over the capacity once they are gone: 0 where they make all the room.
    pub short: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::RegionId;

    struct Buf(u64);
    impl Buffer for Buf {
        fn len(&self) -> u64 {
            self.0
        }
    }

    const MIB: u64 = 1 << 20;

    fn block(r: u64, b: usize) -> BlockId {
        BlockId::new(RegionId(r), b)
    }

    #[test]
    fn restamps_keep_the_order_and_their_stale_entries_are_dropped() {
        let mut d: DeviceBudget<Buf, ()> = DeviceBudget::new(0);
        let mut stamps: Vec<u64> = (0..10).map(|b| d.restamp(block(1, b), 0)).collect();
        d.add_data(20 * MIB);
        // Block 0 used 5,000 times, block 5 taken out: the order is 1-4, 6-9, then 0.
        for _ in 0..5000 {
            stamps[0] = d.restamp(block(1, 0), stamps[0]);
        }
        d.unstamp(block(1, 5), stamps[5]);
        let all = d.victims(20 * MIB, |_| false, |_| 2 * MIB).blocks;
        let want: Vec<BlockId> = [1, 2, 3, 4, 6, 7, 8, 9, 0].into_iter().map(|b| block(1, b)).collect();
        assert_eq!(all, want);
        // Stale entries never outnumber the live ones by more than 1,024.
        assert!(d.order.len() <= 2 * 9 + 1024, "stale entries pile up: {}", d.order.len());
        // Once the oldest live entries go, the stale ones before the next live one go too.
        for b in [1, 2, 3, 4, 6, 7, 8, 9] {
            d.unstamp(block(1, b), stamps[b]);
        }
        assert_eq!(d.order.len(), 1, "only block 0's newest stamp is left");
        assert!(d.stale.is_empty());
    }

    proptest::proptest! {
        /// Any sequence of uses and removals leaves the blocks in the order of a search tree
        /// kept beside it: least recently stamped first.
        #[test]
        fn the_queue_orders_blocks_as_a_search_tree_would(
            ops in proptest::collection::vec((0usize..24, proptest::bool::weighted(0.8)), 0..3000),
        ) {
            let mut d: DeviceBudget<Buf, ()> = DeviceBudget::new(0);
            let mut stamps = [0u64; 24];
            let mut tree = std::collections::BTreeSet::new();
            for (b, used) in ops {
                if used {
                    tree.remove(&(stamps[b], block(1, b)));
                    stamps[b] = d.restamp(block(1, b), stamps[b]);
                    tree.insert((stamps[b], block(1, b)));
                } else if stamps[b] != 0 {
                    tree.remove(&(stamps[b], block(1, b)));
                    d.unstamp(block(1, b), std::mem::take(&mut stamps[b]));
                }
            }
            d.add_data(48 * MIB);
            let all = d.victims(48 * MIB, |_| false, |_| 2 * MIB).blocks;
            let want: Vec<BlockId> = tree.into_iter().map(|(_, b)| b).collect();
            proptest::prop_assert_eq!(all, want);
        }
    }

    #[test]
    fn pooled_pages_go_first_then_the_oldest_unprotected_block() {
        let mut d: DeviceBudget<Buf, ()> = DeviceBudget::new(8 * MIB);
        let s1 = d.restamp(block(1, 0), 0);
        d.add_data(2 * MIB);
        let s2 = d.restamp(block(2, 0), 0);
        d.add_data(2 * MIB);
        d.pool_mut().put(Buf(4 * MIB), vec![true, true], Vec::new(), None);
        d.note_held();
        let two = |_: &BlockId| 2 * MIB;
        // 8 MiB held: 2 more need the pool's pages, which go first.
        assert_eq!(d.victims(2 * MIB, |_| false, two).blocks, vec![block(1, 0)], "over: the oldest block");
        let shed = d.shed(2 * MIB);
        assert_eq!(shed.len(), 1, "one buffer covers it");
        assert_eq!(d.held(), 4 * MIB);
        assert!(d.victims(2 * MIB, |_| false, two).blocks.is_empty(), "fits now");
        // 6 more: the oldest block unless the work keeps it; 8 more: both.
        assert_eq!(d.victims(6 * MIB, |_| false, two).blocks, vec![block(1, 0)]);
        assert_eq!(d.victims(6 * MIB, |b| *b == block(1, 0), two).blocks, vec![block(2, 0)]);
        assert_eq!(d.victims(8 * MIB, |_| false, two).blocks, vec![block(1, 0), block(2, 0)]);
        assert!(d.victims(6 * MIB, |_| true, two).blocks.is_empty(), "only protected blocks: run over");
        // A block freeing less than its size: the next one goes too.
        assert_eq!(d.victims(6 * MIB, |_| false, |_| MIB).blocks, vec![block(1, 0), block(2, 0)]);
        // A use restamps: the other block is now the oldest.
        let s1 = d.restamp(block(1, 0), s1);
        assert_eq!(d.victims(6 * MIB, |_| false, two).blocks, vec![block(2, 0)]);
        d.unstamp(block(2, 0), s2);
        d.remove_data(2 * MIB);
        assert_eq!(d.victims(8 * MIB, |_| false, two).blocks, vec![block(1, 0)]);
        d.unstamp(block(1, 0), s1);
        assert!(d.victims(16 * MIB, |_| false, two).blocks.is_empty(), "nothing left to evict");
        let r = d.report(Default::default());
        assert_eq!((r.peak_device_bytes, r.peak_footprint_bytes), (4 * MIB, 8 * MIB));
    }

    #[test]
    fn victims_say_how_short_they_fall_where_protected_blocks_leave_too_little() {
        let mut d: DeviceBudget<Buf, ()> = DeviceBudget::new(6 * MIB);
        d.restamp(block(1, 0), 0);
        d.add_data(2 * MIB);
        d.restamp(block(2, 0), 0);
        d.add_data(2 * MIB);
        let two = |_: &BlockId| 2 * MIB;
        let v = |blocks: Vec<BlockId>, short: u64| Victims { blocks, short };
        assert_eq!(d.victims(2 * MIB, |_| false, two), v(vec![], 0), "fits as it is");
        assert_eq!(d.victims(4 * MIB, |_| false, two), v(vec![block(1, 0)], 0));
        assert_eq!(d.victims(4 * MIB, |b| *b == block(1, 0), two), v(vec![block(2, 0)], 0));
        // 6 more with block 1 kept: evicting block 2, as many as there are, leaves 2 MiB over.
        assert_eq!(d.victims(6 * MIB, |b| *b == block(1, 0), two), v(vec![block(2, 0)], 2 * MIB));
    }
}
