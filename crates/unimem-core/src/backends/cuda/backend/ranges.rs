//! Address ranges as the driver's calls take them, and the host's memory.

use super::*;

/// Ranges for the driver's calls from (region, address, bytes, alone) pieces in order:
/// contiguous pieces of one region merge, except those that must stay a range of their own
/// (`alone`); a range never spans two allocations, even where their addresses meet (the driver
/// answers CUDA_ERROR_INVALID_VALUE).
pub(super) fn merge_pieces(pieces: Vec<(RegionId, u64, u64, bool)>) -> Vec<(u64, u64)> {
    let mut out: Vec<(RegionId, u64, u64, bool)> = Vec::with_capacity(pieces.len());
    for p in pieces {
        match out.last_mut() {
            Some(last) if !p.3 && !last.3 && last.0 == p.0 && last.1 + last.2 == p.1 => last.2 += p.2,
            _ => out.push(p),
        }
    }
    out.into_iter().map(|(_, a, l, _)| (a, l)).collect()
}

/// The host's physical memory (`MemTotal` of /proc/meminfo), where the system says.
pub(in crate::backends::cuda) fn host_memory_bytes() -> Option<u64> {
    parse_mem_total(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// `MemTotal` in bytes from the text of /proc/meminfo.
pub(super) fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The address ranges of a buffer at `base` of `len` bytes whose 2 MiB blocks are marked in
/// `resident`, neighbouring blocks merged (one buffer's: a range never spans two allocations).
pub(super) fn resident_ranges(base: u64, len: u64, resident: &[bool]) -> Vec<DevRange> {
    let mut out: Vec<DevRange> = Vec::new();
    for (b, _) in resident.iter().enumerate().filter(|(_, &on)| on) {
        let at = b as u64 * BLOCK_SIZE;
        let bytes = block_bytes(len, b as u64);
        match out.last_mut() {
            Some((start, n)) if *start + *n == base + at => *n += bytes,
            _ => out.push((base + at, bytes)),
        }
    }
    out
}

/// Sorts (region, address, bytes) ranges and merges the adjacent ones of the same allocation
/// ([`merge_pieces`]): -> (address, bytes).
pub(super) fn coalesce(mut ranges: Vec<(RegionId, u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    merge_pieces(ranges.into_iter().map(|(id, p, l)| (id, p, l, false)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_is_read_from_meminfo() {
        let text = "MemTotal:       131072000 kB\nMemFree:        1000 kB\n";
        assert_eq!(parse_mem_total(text), Some(131_072_000 * 1024));
        assert_eq!(parse_mem_total("MemFree: 5 kB\n"), None);
        assert_eq!(parse_mem_total("MemTotal: lots kB\n"), None);
    }

    #[test]
    fn prefetch_pieces_merge_within_a_region_and_staged_blocks_stay_alone() {
        const M: u64 = BLOCK_SIZE;
        let (a, b) = (RegionId(1), RegionId(2));
        let pieces = vec![
            (a, 0x1000_0000, M, false),
            (a, 0x1000_0000 + M, M, false),    // merges
            (a, 0x1000_0000 + 2 * M, M, true), // staged: alone
            (a, 0x1000_0000 + 3 * M, M, true), // alone again
            (a, 0x1000_0000 + 4 * M, M / 2, false),
            (b, 0x1000_0000 + 4 * M + M / 2, M, false), // adjacent, another allocation
        ];
        assert_eq!(
            merge_pieces(pieces),
            vec![
                (0x1000_0000, 2 * M),
                (0x1000_0000 + 2 * M, M),
                (0x1000_0000 + 3 * M, M),
                (0x1000_0000 + 4 * M, M / 2),
                (0x1000_0000 + 4 * M + M / 2, M),
            ]
        );
    }

    #[test]
    fn resident_blocks_of_a_buffer_become_merged_ranges() {
        const MIB: u64 = 1 << 20;
        let base = 1 << 40;
        // Blocks 0, 1 and 3 of a 7 MiB buffer (the last one 1 MiB).
        let ranges = resident_ranges(base, 7 * MIB, &[true, true, false, true]);
        assert_eq!(ranges, vec![(base, 4 * MIB), (base + 6 * MIB, MIB)]);
        assert!(resident_ranges(base, 4 * MIB, &[false, false]).is_empty());
    }

    #[test]
    fn merged_ranges_stay_inside_their_allocation() {
        let r = |id, p, l| (RegionId(id), p, l);
        // Adjacent in the address space but in two allocations: two ranges.
        assert_eq!(coalesce(vec![r(1, 0, 4), r(2, 4, 4), r(1, 8, 4), r(1, 4, 4)]), vec![(0, 12), (4, 4)]);
    }
}
