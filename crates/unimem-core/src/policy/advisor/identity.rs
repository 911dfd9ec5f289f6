//! Region identity that survives re-allocation. Activations and gradients are allocated and
//! freed every step, so their `RegionId`s never repeat; predictors need to recognise "the same
//! tensor" in the next step. A region's key is its size and its rank among the allocations of
//! that size in the current step: the third 205 MB allocation of step 2 has the key of the
//! third 205 MB allocation of step 1. Allocations of other sizes in between (weights created
//! in the first step) do not disturb it.

use rustc_hash::FxHashMap;

use crate::region::RegionId;

/// A step-stable identity: equal for "the same" region in different steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RegionKey(pub u64);

/// Hashed through a full 64-bit mix: a key's rank sits in its top bits and its size's
/// multiple of a page leaves its low bits zero, which the multiplicative hashers the
/// predictors use spread badly (keys of equal size shared the control bits a hash table
/// filters by, and every lookup compared against all of them: a third of the tournament's
/// host time).
impl std::hash::Hash for RegionKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // The finaliser of SplitMix64.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        state.write_u64(z ^ (z >> 31));
    }
}

/// Assigns [`RegionKey`]s to allocations.
#[derive(Debug, Default)]
pub struct Identity {
    /// Allocations of each size so far in the current step.
    rank: FxHashMap<u64, u32>,
    live: FxHashMap<RegionId, RegionKey>,
}

impl Identity {
    /// A new identity map.
    pub fn new() -> Self {
        Self::default()
    }

    /// A step starts: ranks start again.
    pub fn on_step(&mut self) {
        self.rank.clear();
    }

    /// A region is allocated; returns its key.
    pub fn on_alloc(&mut self, id: RegionId, bytes: u64) -> RegionKey {
        let r = self.rank.entry(bytes).or_insert(0);
        let key = RegionKey(bytes.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(*r).rotate_left(48));
        *r += 1;
        self.live.insert(id, key);
        key
    }

    /// A region is freed.
    pub fn on_free(&mut self, id: RegionId) {
        self.live.remove(&id);
    }

    /// The key of a live region.
    pub fn key(&self, id: RegionId) -> Option<RegionKey> {
        self.live.get(&id).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_rank_and_size_in_another_step_is_the_same_key() {
        let mut idn = Identity::new();
        let a1 = idn.on_alloc(RegionId(1), 100);
        let w = idn.on_alloc(RegionId(2), 7); // a weight of another size, first step only
        let b1 = idn.on_alloc(RegionId(3), 100);
        idn.on_step();
        let a2 = idn.on_alloc(RegionId(10), 100);
        let b2 = idn.on_alloc(RegionId(11), 100);
        assert_eq!((a1, b1), (a2, b2));
        assert_ne!(a1, b1);
        assert_ne!(w, a1);
        assert_eq!(idn.key(RegionId(10)), Some(a2));
        idn.on_free(RegionId(10));
        assert_eq!(idn.key(RegionId(10)), None);
    }
}
