//! Freed managed buffers kept for reuse, and which of their pages are still on the device: the
//! CUDA backend's pool, and the simulator's model of it.
//!
//! `cuMemFree` synchronises the device, so a freed region's buffer waits here for the next
//! region of its size. Its pages stay where they were: a buffer whose pages are on the device
//! serves a new region (or a staged region coming back, see `CudaBackend::relocate_staged`)
//! without population; one whose pages were discarded lately is the worst to get (on the H200,
//! repopulating pages soon after their discard ran at 0.6-1 GB/s), so the most resident
//! buffer of a size goes first. Pooled pages on the device are device memory all the same: a
//! backend counts them against its budget and sheds the longest pooled first (`shed`) when
//! data needs the room.

use std::collections::BTreeMap;

use crate::seam::block_bytes;

/// What the pool needs of a buffer: its length.
pub(crate) trait Buffer {
    /// Length in bytes.
    fn len(&self) -> u64;
}

/// A buffer in the pool.
#[derive(Debug)]
pub(crate) struct Pooled<T, E> {
    pub buf: T,
    /// Its 2 MiB blocks whose pages are on the device.
    pub resident: Vec<bool>,
    /// Work on the buffer still queued (its last discard) that its next user must wait for.
    pub after: Vec<E>,
    /// The end of the kernels issued before it was freed: what writes other bytes into its
    /// pages (copies, a discard) waits for it; kernels run after them anyway, and prefetches
    /// keep the bytes.
    pub last_use: Option<E>,
    /// The wholly staged region whose pages these are, and the address of the buffer it took
    /// in their place (a swap-out, see [`BufferPool::put_swapped`]): shed, they go back to it.
    pub owner: Option<Owner>,
    /// Order of pooling (for `shed`).
    seq: u64,
    /// Bytes of its pages on the device.
    resident_bytes: u64,
}

impl<T: Buffer, E> Pooled<T, E> {
    fn new(buf: T, resident: Vec<bool>, after: Vec<E>, last_use: Option<E>, seq: u64) -> Self {
        let len = buf.len();
        let resident_bytes =
            resident.iter().enumerate().filter(|(_, &r)| r).map(|(b, _)| block_bytes(len, b as u64)).sum();
        Self { buf, resident, after, last_use, owner: None, seq, resident_bytes }
    }

    /// Bytes of its pages on the device.
    pub fn resident_bytes(&self) -> u64 {
        self.resident_bytes
    }
}

/// Who a swapped-out buffer belongs to (see [`Pooled::owner`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    pub region: crate::region::RegionId,
    /// The address of the buffer the region holds meanwhile: while it still holds that one,
    /// nothing restored it since.
    pub placeholder: u64,
}

/// Freed buffers by size (see the module documentation).
#[derive(Debug)]
pub(crate) struct BufferPool<T, E> {
    by_size: BTreeMap<u64, Vec<Pooled<T, E>>>,
    resident_bytes: u64,
    next_seq: u64,
}

impl<T: Buffer, E> BufferPool<T, E> {
    pub fn new() -> Self {
        Self { by_size: BTreeMap::new(), resident_bytes: 0, next_seq: 0 }
    }

    /// Device bytes the pooled buffers hold.
    pub fn resident_bytes(&self) -> u64 {
        self.resident_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.by_size.values().all(|v| v.is_empty())
    }

    /// Drops every buffer (freeing them; the caller synchronised the device first).
    pub fn clear(&mut self) {
        self.by_size.clear();
        self.resident_bytes = 0;
    }

    /// Keeps `buf`, whose blocks marked in `resident` are on the device, until `after` is done
    /// (see [`Pooled`] for `last_use`).
    pub fn put(&mut self, buf: T, resident: Vec<bool>, after: Vec<E>, last_use: Option<E>) {
        self.keep(buf, resident, after, last_use, None);
    }

    /// Keeps the buffer of a wholly staged region, whose pages stay on the device for the next
    /// restore of a region of its size (a swap-out): `owner` took another buffer meanwhile.
    pub fn put_swapped(
        &mut self,
        buf: T,
        resident: Vec<bool>,
        after: Vec<E>,
        last_use: Option<E>,
        owner: Owner,
    ) {
        self.keep(buf, resident, after, last_use, Some(owner));
    }

    fn keep(
        &mut self,
        buf: T,
        resident: Vec<bool>,
        after: Vec<E>,
        last_use: Option<E>,
        owner: Option<Owner>,
    ) {
        let mut entry = Pooled::new(buf, resident, after, last_use, self.next_seq);
        entry.owner = owner;
        self.next_seq += 1;
        self.resident_bytes += entry.resident_bytes();
        self.by_size.entry(entry.buf.len()).or_default().push(entry);
    }

    /// The buffer of `bytes` bytes with the most pages on the device (the latest pooled among
    /// equals), if any buffer of that size waits.
    pub fn take(&mut self, bytes: u64) -> Option<Pooled<T, E>> {
        self.take_by(bytes, |e| Some((e.resident_bytes(), e.seq)))
    }

    /// For a restore copying into it: the buffer of `bytes` bytes with the most pages on the
    /// device, the longest pooled among equals, if one has any. The copy in waits for the work
    /// its `after` holds (the copies out of a buffer swapped out, behind its region's kernels),
    /// which is the likeliest done in the longest pooled. (The latest pooled had made every
    /// layer's weights on the transformer's decode trace wait for the kernel before it.)
    pub fn take_resident(&mut self, bytes: u64) -> Option<Pooled<T, E>> {
        self.take_by(bytes, |e| {
            (e.resident_bytes() > 0).then_some((e.resident_bytes(), std::cmp::Reverse(e.seq)))
        })
    }

    /// The buffer of `bytes` bytes with the largest `rank` (None: not eligible), taken out.
    fn take_by<K: Ord>(
        &mut self,
        bytes: u64,
        rank: impl Fn(&Pooled<T, E>) -> Option<K>,
    ) -> Option<Pooled<T, E>> {
        let list = self.by_size.get_mut(&bytes)?;
        let (at, _) =
            list.iter().enumerate().filter_map(|(i, e)| Some((i, rank(e)?))).max_by(|a, b| a.1.cmp(&b.1))?;
        let entry = list.remove(at);
        self.resident_bytes -= entry.resident_bytes();
        Some(entry)
    }

    /// A buffer of `bytes` bytes with no page on the device, the longest pooled, if one waits.
    pub fn take_empty(&mut self, bytes: u64) -> Option<Pooled<T, E>> {
        self.take_by(bytes, |e| (e.resident_bytes() == 0).then_some(std::cmp::Reverse(e.seq)))
    }

    /// Takes out buffers with pages on the device, the longest pooled first, until they hold
    /// at least `bytes` of device pages or none is left: the caller gives their pages back.
    pub fn shed(&mut self, bytes: u64) -> Vec<Pooled<T, E>> {
        let mut oldest: Vec<(u64, u64, u64)> = self
            .by_size
            .iter()
            .flat_map(|(&size, list)| {
                list.iter().map(move |e| (e.seq, size, e.resident_bytes())).filter(|&(_, _, r)| r > 0)
            })
            .collect();
        oldest.sort_unstable();
        let mut chosen = Vec::new();
        let mut freed = 0;
        for (seq, size, resident) in oldest {
            if freed >= bytes {
                break;
            }
            freed += resident;
            chosen.push((size, seq));
        }
        let mut out = Vec::with_capacity(chosen.len());
        for (size, seq) in chosen {
            let list = self.by_size.get_mut(&size).expect("listed");
            let at = list.iter().position(|e| e.seq == seq).expect("listed");
            let entry = list.remove(at);
            self.resident_bytes -= entry.resident_bytes();
            out.push(entry);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seam::BLOCK_SIZE;

    struct Fake(u64, u64);
    impl Buffer for Fake {
        fn len(&self) -> u64 {
            self.1
        }
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn resident_pages_are_counted_until_taken() {
        let mut pool: BufferPool<Fake, u32> = BufferPool::new();
        pool.put(Fake(0, 5 * MIB), vec![true, false, true], vec![], None);
        assert_eq!(pool.resident_bytes(), 3 * MIB, "2 MiB + the last 1 MiB block");
        pool.put(Fake(64 * MIB, 4 * MIB), vec![true, true], vec![], None);
        assert_eq!(pool.resident_bytes(), 7 * MIB);
        let e = pool.take(4 * MIB).expect("one of 4 MiB");
        assert_eq!(e.buf.0, 64 * MIB);
        assert_eq!(pool.resident_bytes(), 3 * MIB);
        assert!(pool.take(4 * MIB).is_none());
        assert!(!pool.is_empty());
        pool.clear();
        assert!(pool.is_empty() && pool.resident_bytes() == 0);
    }

    #[test]
    fn the_most_resident_buffer_of_a_size_goes_first() {
        let mut pool: BufferPool<Fake, u32> = BufferPool::new();
        pool.put(Fake(0, 4 * MIB), vec![false, false], vec![1], None);
        assert!(pool.take_resident(4 * MIB).is_none(), "no pages on the device");
        pool.put(Fake(10 * MIB, 4 * MIB), vec![true, false], vec![], None);
        pool.put(Fake(20 * MIB, 4 * MIB), vec![true, true], vec![], None);
        pool.put(Fake(30 * MIB, 4 * MIB), vec![false, true], vec![], None);
        pool.put(Fake(40 * MIB, 4 * MIB), vec![true, true], vec![], None);
        assert_eq!(pool.take_resident(4 * MIB).map(|e| e.buf.0), Some(20 * MIB), "the longest pooled");
        assert_eq!(pool.take(4 * MIB).map(|e| e.buf.0), Some(40 * MIB));
        assert_eq!(pool.take(4 * MIB).map(|e| e.buf.0), Some(30 * MIB), "the latest among equals");
        assert_eq!(pool.take(4 * MIB).map(|e| e.buf.0), Some(10 * MIB));
        let last = pool.take(4 * MIB).expect("the discarded one, last");
        assert_eq!((last.buf.0, last.after), (0, vec![1]));
        assert_eq!(pool.resident_bytes(), 0);
        assert!(pool.take_resident(2 * MIB).is_none(), "no buffer of that size");
    }

    #[test]
    fn shedding_takes_the_longest_pooled_resident_buffers_first() {
        let mut pool: BufferPool<Fake, u32> = BufferPool::new();
        pool.put(Fake(0, 4 * MIB), vec![true, true], vec![], None);
        pool.put(Fake(10 * MIB, 4 * MIB), vec![false, false], vec![], None);
        pool.put(Fake(20 * MIB, 2 * MIB), vec![true], vec![], None);
        pool.put(Fake(30 * MIB, 4 * MIB), vec![false, true], vec![], None);
        assert_eq!(pool.resident_bytes(), 8 * MIB);
        let shed: Vec<u64> = pool.shed(5 * MIB).iter().map(|e| e.buf.0).collect();
        assert_eq!(shed, vec![0, 20 * MIB], "oldest first, whole buffers, until 5 MiB");
        assert_eq!(pool.resident_bytes(), 2 * MIB);
        assert!(pool.shed(0).is_empty());
        let rest: Vec<u64> = pool.shed(u64::MAX).iter().map(|e| e.buf.0).collect();
        assert_eq!(rest, vec![30 * MIB], "buffers with no page on the device stay");
        assert_eq!(pool.resident_bytes(), 0);
        assert_eq!(pool.take(4 * MIB).map(|e| e.buf.0), Some(10 * MIB));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u64, Vec<bool>),
        Take(u64),
        TakeResident(u64),
        Shed(u64),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        // Three sizes of 1-3 blocks, so that takes find buffers and sheds choose among many.
        let size = (1u64..4).prop_map(|blocks| blocks * 2 * MIB - MIB / 2);
        prop_oneof![
            size.clone().prop_flat_map(|len| {
                proptest::collection::vec(any::<bool>(), len.div_ceil(BLOCK_SIZE) as usize)
                    .prop_map(move |resident| Op::Put(len, resident))
            }),
            size.clone().prop_map(Op::Take),
            size.prop_map(Op::TakeResident),
            (0u64..8 * MIB).prop_map(Op::Shed),
        ]
    }

    proptest::proptest! {
        /// Against a plain list of what was put: the pool's count of device bytes is the sum
        /// over its buffers, a take hands out a buffer of the size asked with the most resident
        /// bytes (the latest among equals; for a restore, one with resident bytes, the longest
        /// pooled among equals), and a shed takes the longest-pooled buffers with
        /// device pages, in order, until it has the bytes asked for or none is left.
        #[test]
        fn the_pool_agrees_with_a_plain_list(ops in proptest::collection::vec(op(), 1..80)) {
            let mut pool: BufferPool<Fake, u32> = BufferPool::new();
            // (id, len, resident bytes), in pooling order.
            let mut plain: Vec<(u64, u64, u64)> = Vec::new();
            let resident_of = |len: u64, r: &[bool]| -> u64 {
                r.iter().enumerate().filter(|(_, &on)| on).map(|(b, _)| (len - b as u64 * BLOCK_SIZE).min(BLOCK_SIZE)).sum()
            };
            for (id, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Put(len, resident) => {
                        plain.push((id as u64, len, resident_of(len, &resident)));
                        pool.put(Fake(id as u64, len), resident, vec![], None);
                    }
                    Op::Take(len) | Op::TakeResident(len) => {
                        let restore = matches!(op, Op::TakeResident(_));
                        // The latest among equals, or for a restore the longest pooled.
                        let want = plain
                            .iter()
                            .enumerate()
                            .filter(|(_, e)| e.1 == len && (!restore || e.2 > 0))
                            .max_by_key(|(i, e)| (e.2, if restore { usize::MAX - i } else { *i }))
                            .map(|(i, _)| i);
                        let got = if restore { pool.take_resident(len) } else { pool.take(len) };
                        proptest::prop_assert_eq!(got.map(|e| e.buf.0), want.map(|i| plain[i].0));
                        if let Some(i) = want {
                            plain.remove(i);
                        }
                    }
                    Op::Shed(bytes) => {
                        let mut want = Vec::new();
                        let mut freed = 0;
                        for e in plain.iter().filter(|e| e.2 > 0) {
                            if freed >= bytes {
                                break;
                            }
                            freed += e.2;
                            want.push(e.0);
                        }
                        let got: Vec<u64> = pool.shed(bytes).iter().map(|e| e.buf.0).collect();
                        proptest::prop_assert_eq!(&got, &want);
                        plain.retain(|e| !want.contains(&e.0));
                    }
                }
                proptest::prop_assert_eq!(pool.resident_bytes(), plain.iter().map(|e| e.2).sum::<u64>());
            }
        }
    }
}
