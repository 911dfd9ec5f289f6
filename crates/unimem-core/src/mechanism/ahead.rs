//! Managed buffers made ahead of the allocations that will want them: both backends' ledger.
//!
//! Under a tight budget the pool sheds buffers (their pages given back) and they retire; a new
//! region of a shed buffer's size then needs a new buffer, on the H200 a `cuMemAllocManaged`
//! of 100-400 us on the thread that issues the program's kernels. A program allocates the same
//! sizes step after step, so a buffer of the shed one's size is ordered as it retires and made
//! on a thread of the backend's own; the next allocation of that size the pool cannot serve
//! takes it. A buffer made ahead was never touched: it holds no page and costs the GPU no
//! memory, only address space. The bytes ordered and not yet taken stay under a cap (the
//! budget), so a program whose sizes change leaves at most that much unused.

use rustc_hash::FxHashMap;

/// Buffers ordered and made, by size: `T` is the buffer (or, on the simulator, the time it is
/// ready).
#[derive(Debug)]
pub(crate) struct AheadStock<T> {
    made: FxHashMap<u64, Vec<T>>,
    /// Bytes ordered and not yet taken, made or not.
    held: u64,
    cap: u64,
}

impl<T> AheadStock<T> {
    /// A stock of at most `cap` bytes ordered and not taken.
    pub fn new(cap: u64) -> Self {
        Self { made: FxHashMap::default(), held: 0, cap }
    }

    /// Orders a buffer of `bytes` where it fits under the cap: true if the caller is to make it
    /// (then [`AheadStock::made`] or [`AheadStock::failed`]).
    pub fn order(&mut self, bytes: u64) -> bool {
        if bytes == 0 || self.held.saturating_add(bytes) > self.cap {
            return false;
        }
        self.held += bytes;
        true
    }

    /// An ordered buffer of `bytes`, made.
    pub fn made(&mut self, bytes: u64, buf: T) {
        self.made.entry(bytes).or_default().push(buf);
    }

    /// An ordered buffer of `bytes` could not be made: it no longer counts.
    pub fn failed(&mut self, bytes: u64) {
        self.held = self.held.saturating_sub(bytes);
    }

    /// A made buffer of exactly `bytes`, the earliest made first.
    pub fn take(&mut self, bytes: u64) -> Option<T> {
        self.take_if(bytes, |_| true)
    }

    /// [`AheadStock::take`], where `ready` holds for the earliest made buffer of the size.
    pub fn take_if(&mut self, bytes: u64, ready: impl FnOnce(&T) -> bool) -> Option<T> {
        let list = self.made.get_mut(&bytes)?;
        if !ready(&list[0]) {
            return None;
        }
        let buf = list.remove(0);
        if list.is_empty() {
            self.made.remove(&bytes);
        }
        self.held -= bytes;
        Some(buf)
    }

    /// Bytes ordered and not yet taken.
    #[cfg(test)]
    pub fn held_bytes(&self) -> u64 {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_stay_under_the_cap_until_taken_or_failed() {
        let mut s = AheadStock::new(10);
        assert!(s.order(4) && s.order(6));
        assert!(!s.order(1), "10 of 10 bytes held");
        assert!(!s.order(0), "nothing to make of no bytes");
        s.made(4, "a");
        assert_eq!(s.take(6), None, "the 6-byte buffer is not made yet");
        assert_eq!(s.take(4), Some("a"));
        assert_eq!(s.held_bytes(), 6);
        s.failed(6);
        assert_eq!(s.held_bytes(), 0);
        assert!(s.order(10));
    }

    #[test]
    fn a_size_gives_its_earliest_buffer_and_only_its_own() {
        let mut s = AheadStock::new(100);
        for (bytes, t) in [(8, 1), (8, 2), (16, 3)] {
            assert!(s.order(bytes));
            s.made(bytes, t);
        }
        assert_eq!(s.take(12), None, "no buffer of 12 bytes: none larger is given");
        assert_eq!(s.take_if(8, |&t| t > 1), None, "the earliest is not ready");
        assert_eq!((s.take(8), s.take(8), s.take(8)), (Some(1), Some(2), None));
        assert_eq!(s.held_bytes(), 16);
    }
}
