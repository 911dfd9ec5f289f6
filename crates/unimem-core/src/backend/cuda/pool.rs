//! Freed managed buffers kept for reuse, and which of their pages are still on the device.
//!
//! `cuMemFree` synchronises the device, so a freed region's buffer waits here for the next
//! region of its size. Its pages stay where they were: a buffer whose pages are on the device
//! serves a new region (or a staged region coming back, see `CudaBackend::relocate_staged`)
//! without population; one whose pages were discarded lately is the worst to get (on the H200,
//! repopulating pages soon after their discard ran at 0.6-1 GB/s), so the most resident
//! buffer of a size goes first.

use std::collections::BTreeMap;

use crate::backend::BLOCK_SIZE;

/// What the pool needs of a buffer: its length.
pub(super) trait Buffer {
    /// Length in bytes.
    fn len(&self) -> u64;
}

impl Buffer for super::ManagedBuffer {
    fn len(&self) -> u64 {
        super::ManagedBuffer::len(self)
    }
}

/// A buffer in the pool.
pub(super) struct Pooled<T, E> {
    pub buf: T,
    /// Its 2 MiB blocks whose pages are on the device.
    pub resident: Vec<bool>,
    /// Work on the buffer still queued (its last discard) that its next user must wait for.
    pub after: Vec<E>,
}

impl<T: Buffer, E> Pooled<T, E> {
    /// Bytes of its pages on the device.
    pub fn resident_bytes(&self) -> u64 {
        let len = self.buf.len();
        self.resident
            .iter()
            .enumerate()
            .filter(|(_, &r)| r)
            .map(|(b, _)| (len - b as u64 * BLOCK_SIZE).min(BLOCK_SIZE))
            .sum()
    }
}

/// Freed buffers by size (see the module documentation).
pub(super) struct BufferPool<T, E> {
    by_size: BTreeMap<u64, Vec<Pooled<T, E>>>,
    resident_bytes: u64,
}

impl<T: Buffer, E> BufferPool<T, E> {
    pub fn new() -> Self {
        Self { by_size: BTreeMap::new(), resident_bytes: 0 }
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

    /// Keeps `buf`, whose blocks marked in `resident` are on the device, until `after` is done.
    pub fn put(&mut self, buf: T, resident: Vec<bool>, after: Vec<E>) {
        let entry = Pooled { buf, resident, after };
        self.resident_bytes += entry.resident_bytes();
        self.by_size.entry(entry.buf.len()).or_default().push(entry);
    }

    /// The buffer of `bytes` bytes with the most pages on the device (the latest pooled among
    /// equals), if any buffer of that size waits.
    pub fn take(&mut self, bytes: u64) -> Option<Pooled<T, E>> {
        let list = self.by_size.get_mut(&bytes)?;
        let (at, _) =
            list.iter().enumerate().map(|(i, e)| (i, e.resident_bytes())).max_by_key(|&(i, r)| (r, i))?;
        let entry = list.remove(at);
        self.resident_bytes -= entry.resident_bytes();
        Some(entry)
    }

    /// The same, only if that buffer has pages on the device.
    pub fn take_resident(&mut self, bytes: u64) -> Option<Pooled<T, E>> {
        let resident = self.by_size.get(&bytes)?.iter().any(|e| e.resident.iter().any(|&r| r));
        if resident {
            self.take(bytes)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        pool.put(Fake(0, 5 * MIB), vec![true, false, true], vec![]);
        assert_eq!(pool.resident_bytes(), 3 * MIB, "2 MiB + the last 1 MiB block");
        pool.put(Fake(64 * MIB, 4 * MIB), vec![true, true], vec![]);
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
        pool.put(Fake(0, 4 * MIB), vec![false, false], vec![1]);
        assert!(pool.take_resident(4 * MIB).is_none(), "no pages on the device");
        pool.put(Fake(10 * MIB, 4 * MIB), vec![true, false], vec![]);
        pool.put(Fake(20 * MIB, 4 * MIB), vec![true, true], vec![]);
        pool.put(Fake(30 * MIB, 4 * MIB), vec![false, true], vec![]);
        assert_eq!(pool.take_resident(4 * MIB).map(|e| e.buf.0), Some(20 * MIB));
        assert_eq!(pool.take(4 * MIB).map(|e| e.buf.0), Some(30 * MIB), "the latest among equals");
        assert_eq!(pool.take(4 * MIB).map(|e| e.buf.0), Some(10 * MIB));
        let last = pool.take(4 * MIB).expect("the discarded one, last");
        assert_eq!((last.buf.0, last.after), (0, vec![1]));
        assert_eq!(pool.resident_bytes(), 0);
        assert!(pool.take_resident(2 * MIB).is_none(), "no buffer of that size");
    }
}
