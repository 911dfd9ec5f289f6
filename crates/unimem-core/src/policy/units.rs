//! 2 MiB units of regions, as the placing policies (oracle, advisor) see memory: which units an
//! access touches, their bytes and byte ranges, and how a unit gets to the device.

use rustc_hash::FxHashMap;

use super::Hints;
use crate::error::Result;
use crate::region::RegionId;
use crate::seam::{page_round, ByteRange, BLOCK_SIZE};

/// A unit of placement: a 2 MiB block of a region.
pub type Unit = crate::seam::BlockId;

/// Sizes of the live regions a policy knows, and how the device holds them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sizes {
    bytes: FxHashMap<RegionId, u64>,
    /// The device holds a region of 2 MiB or more in whole 2 MiB blocks, its last one too, and
    /// packs smaller ones in chunks that stay on the device, planned for apart (the device
    /// arena): those count as nothing. Otherwise it holds pages (managed memory).
    whole_blocks: bool,
}

impl Sizes {
    /// Counts each region's blocks as the device arena holds them (see `whole_blocks`).
    pub fn hold_whole_blocks(&mut self) {
        self.whole_blocks = true;
    }

    /// Region `id`'s size (0 if unknown).
    pub fn get(&self, id: RegionId) -> u64 {
        self.bytes.get(&id).copied().unwrap_or(0)
    }

    pub fn contains(&self, id: RegionId) -> bool {
        self.bytes.contains_key(&id)
    }

    pub fn insert(&mut self, id: RegionId, bytes: u64) {
        self.bytes.insert(id, bytes);
    }

    /// Forgets region `id`, returning its size (0 if unknown).
    pub fn remove(&mut self, id: RegionId) -> u64 {
        self.bytes.remove(&id).unwrap_or(0)
    }

    /// The live regions and their sizes.
    pub fn iter(&self) -> impl Iterator<Item = (RegionId, u64)> + '_ {
        self.bytes.iter().map(|(&id, &bytes)| (id, bytes))
    }

    /// Bytes a region of `size` takes on the device, as the keep model weighs it: in whole
    /// blocks where the device holds them so, else in pages. A small region counts its pages
    /// either way (weighed as nothing, the arena's small regions flipped that model's choice on
    /// the transformer at 75%: `docs/decisions.md`).
    pub fn held(&self, size: u64) -> u64 {
        if self.whole_blocks && size >= BLOCK_SIZE {
            size.div_ceil(BLOCK_SIZE) * BLOCK_SIZE
        } else {
            page_round(size)
        }
    }
}

#[cfg(test)]
impl FromIterator<(RegionId, u64)> for Sizes {
    fn from_iter<I: IntoIterator<Item = (RegionId, u64)>>(iter: I) -> Self {
        Self { bytes: iter.into_iter().collect(), whole_blocks: false }
    }
}

/// The units of a region of `bytes`, block by block.
pub(super) fn region_units(id: RegionId, bytes: u64) -> impl Iterator<Item = Unit> {
    (0..bytes.div_ceil(BLOCK_SIZE) as u32).map(move |block| Unit { region: id, block })
}

/// Bytes `unit` occupies on the device: page-rounded, where a region's last block is partial,
/// unless the device holds whole blocks ([`Sizes::hold_whole_blocks`]: 2 MiB, and nothing for
/// a region under 2 MiB).
pub(super) fn unit_bytes(sizes: &Sizes, Unit { region: id, block: b }: Unit) -> u64 {
    let size = sizes.get(id);
    let lo = b as u64 * BLOCK_SIZE;
    if lo >= size {
        return 0;
    }
    if sizes.whole_blocks {
        return if size >= BLOCK_SIZE { BLOCK_SIZE } else { 0 };
    }
    page_round((size - lo).min(BLOCK_SIZE))
}

/// The byte range of `unit` (empty if the region is unknown).
pub(super) fn unit_range(sizes: &Sizes, Unit { region: id, block: b }: Unit) -> ByteRange {
    let size = sizes.get(id);
    let lo = b as u64 * BLOCK_SIZE;
    ByteRange { region: id, offset: lo, len: size.min(lo + BLOCK_SIZE).saturating_sub(lo) }
}

/// Appends the units `offset..offset+len` of region `id` touches to `out`, each with whether
/// this access overwrites it whole (`writes_only`: the access does not read). One call adds
/// each unit once; callers that add several accesses merge them with [`merge_units`].
pub(super) fn add_units(
    sizes: &Sizes,
    id: RegionId,
    offset: u64,
    len: u64,
    writes_only: bool,
    out: &mut Vec<(Unit, bool)>,
) {
    let size = sizes.get(id);
    let end = offset.saturating_add(len).min(size);
    if end <= offset {
        return;
    }
    for b in offset / BLOCK_SIZE..end.div_ceil(BLOCK_SIZE) {
        let (lo, hi) = (b * BLOCK_SIZE, ((b + 1) * BLOCK_SIZE).min(size));
        out.push((Unit { region: id, block: b as u32 }, writes_only && offset <= lo && end >= hi));
    }
}

/// Merges the units several accesses added, in order of first appearance: a unit stays an
/// overwrite only if every access to it overwrites it (data another access of the same kernel
/// reads is not dead). Linear in the units (a kernel's accesses can add hundreds).
pub(super) fn merge_units(units: &mut Vec<(Unit, bool)>) {
    let mut at: rustc_hash::FxHashMap<Unit, usize> = rustc_hash::FxHashMap::default();
    let mut out: Vec<(Unit, bool)> = Vec::with_capacity(units.len());
    for &(unit, overwrite) in units.iter() {
        match at.get(&unit) {
            Some(&i) => out[i].1 &= overwrite,
            None => {
                at.insert(unit, out.len());
                out.push((unit, overwrite));
            }
        }
    }
    *units = out;
}

/// Coalesces units into byte ranges: contiguous blocks of a region become one range, so a
/// batch call pays its per-range cost once per run of blocks.
pub(super) fn coalesce(sizes: &Sizes, mut units: Vec<Unit>) -> Vec<ByteRange> {
    units.sort_unstable();
    units.dedup();
    let mut out: Vec<ByteRange> = Vec::new();
    for r in units.into_iter().map(|u| unit_range(sizes, u)).filter(|r| r.len > 0) {
        crate::seam::push_merged(&mut out, r);
    }
    out
}

/// How `unit` gets to the device: `None` if the backend has it there already, else
/// `Some(discard_first)`, true when its host copy is about to be wholly overwritten and should
/// be dropped rather than copied in.
pub(super) fn fetch_needed(
    sizes: &Sizes,
    hints: &Hints<'_>,
    unit: Unit,
    overwrite: bool,
) -> Result<Option<bool>> {
    let range = unit_range(sizes, unit);
    if range.len == 0 {
        return Ok(None);
    }
    let res = hints.residency(range)?;
    // Staged data (its only copy in a pinned slot) counts as off the device: left to the
    // kernel that needs it, it comes back only when that kernel is issued, and the kernel waits.
    if res.host + res.staged + res.unpopulated == 0 {
        return Ok(None);
    }
    Ok(Some(overwrite && res.host + res.staged > 0))
}

/// Of `candidates` (units a policy counts as resident, in the order the driver most likely
/// evicted them), those the backend no longer has on the device, until they add up to
/// `missing` bytes (the bytes its driver took off on its own since the policy last looked),
/// else all of them: the stale part of the policy's account.
pub(super) fn stale_units(
    sizes: &Sizes,
    hints: &Hints<'_>,
    candidates: impl Iterator<Item = Unit>,
    missing: u64,
) -> Result<Vec<Unit>> {
    let (mut stale, mut found) = (Vec::new(), 0u64);
    for u in candidates {
        if hints.residency(unit_range(sizes, u))?.on_device() == 0 {
            stale.push(u);
            found += unit_bytes(sizes, u);
            if found >= missing {
                break;
            }
        }
    }
    Ok(stale)
}

/// Blocks of a newly allocated region that are on the device already (memory recycled from
/// the pool).
pub(super) fn pooled_blocks(sizes: &Sizes, hints: &Hints<'_>, id: RegionId) -> Result<Vec<u32>> {
    hints.device_blocks(id, sizes.get(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn units_merge_and_coalesce() {
        let sizes: Sizes = [(RegionId(1), 5 * MIB)].into_iter().collect();
        let mut out = Vec::new();
        // A full write of blocks 0-1 and a read of block 1: block 1 is not dead.
        add_units(&sizes, RegionId(1), 0, 4 * MIB, true, &mut out);
        add_units(&sizes, RegionId(1), 3 * MIB, 10, false, &mut out);
        merge_units(&mut out);
        assert_eq!(out, vec![(Unit::new(RegionId(1), 0), true), (Unit::new(RegionId(1), 1), false)]);
        // The last block is partial: 1 MiB.
        assert_eq!(unit_bytes(&sizes, Unit { region: RegionId(1), block: 2 }), MIB);
        assert_eq!(unit_bytes(&sizes, Unit { region: RegionId(1), block: 3 }), 0, "past the end");
        let ranges = coalesce(
            &sizes,
            vec![
                Unit { region: RegionId(1), block: 2 },
                Unit { region: RegionId(1), block: 0 },
                Unit { region: RegionId(1), block: 1 },
                Unit { region: RegionId(1), block: 0 },
            ],
        );
        assert_eq!(ranges, vec![ByteRange { region: RegionId(1), offset: 0, len: 5 * MIB }]);
        // In the device arena the last block is whole, and a small region lives in the slab.
        let mut arena: Sizes = [(RegionId(1), 5 * MIB), (RegionId(2), MIB)].into_iter().collect();
        arena.hold_whole_blocks();
        assert_eq!(unit_bytes(&arena, Unit { region: RegionId(1), block: 2 }), 2 * MIB);
        assert_eq!(unit_bytes(&arena, Unit { region: RegionId(1), block: 3 }), 0, "past the end");
        assert_eq!(unit_bytes(&arena, Unit { region: RegionId(2), block: 0 }), 0);
        assert_eq!(
            (arena.held(5 * MIB), arena.held(MIB), sizes.held(5 * MIB + 1)),
            (6 * MIB, MIB, 5 * MIB + 4096),
            "the keep model's bytes: a small region's pages"
        );
        assert_eq!(unit_range(&arena, Unit { region: RegionId(1), block: 2 }).len, MIB, "the data's range");
        let mut none = Vec::new();
        add_units(&sizes, RegionId(9), 0, 10, false, &mut none);
        assert!(none.is_empty(), "unknown regions have no units");
    }
}
