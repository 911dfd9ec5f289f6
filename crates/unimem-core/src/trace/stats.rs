//! Whole-trace statistics in one streaming pass: sizes, compute floor, reuse.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use serde::Serialize;

use super::{TraceEvent, TraceReader};
use crate::error::{Error, Result};
use crate::mechanism::slab::{packs, slot_bytes, SlabDemand};
use crate::seam::{page_round, BLOCK_SIZE, PAGE_SIZE};

/// The device arena's bytes for a region of `bytes`: whole 2 MiB blocks, or under 2 MiB the
/// power of two (512 bytes up) it is packed in.
fn block_round(bytes: u64) -> u64 {
    if packs(bytes) {
        slot_bytes(bytes)
    } else {
        bytes.div_ceil(BLOCK_SIZE) * BLOCK_SIZE
    }
}

/// A region's bytes in the arena's packed slots: 0 for one of whole blocks.
fn packed_round(bytes: u64) -> u64 {
    if packs(bytes) {
        slot_bytes(bytes)
    } else {
        0
    }
}

/// A program's time with every byte resident at its own pace: each kernel issued no sooner than
/// its host time (a trace's `host_ns`) after the one before, as a replay holds it
/// (`replay.program_host_time`), and run once the one before has ended. With no host times it
/// is the sum of the kernels' times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgramFloor {
    issue_ns: u64,
    end_ns: u64,
}

impl ProgramFloor {
    /// The next kernel: issued `host_ns` after the one before, running `dur_ns`.
    pub fn kernel(&mut self, host_ns: u64, dur_ns: u64) {
        self.issue_ns = self.issue_ns.saturating_add(host_ns);
        self.end_ns = self.end_ns.max(self.issue_ns).saturating_add(dur_ns);
    }

    /// When the latest kernel ends.
    pub fn ns(&self) -> u64 {
        self.end_ns
    }
}

/// A set of region ids (trace ids).
pub type RegionIds = HashSet<u64>;

/// Serialises a set as its size.
fn count<S: serde::Serializer>(set: &RegionIds, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_u64(set.len() as u64)
}

/// The device memory one kernel needs at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KernelFootprint {
    /// The kernel's name.
    pub name: String,
    /// Its line in the trace file (0: no kernel).
    pub line: u64,
    /// The pages its accesses cover, in bytes.
    pub bytes: u64,
}

/// The whole blocks that accesses to regions of a block or more cover (`size` gives a region's
/// bytes): what the device arena holds for them, regions under a block being in its slab.
fn block_footprint_bytes(acc: &[super::TraceAccess], size: impl Fn(u64) -> u64) -> u64 {
    let accesses = acc.iter().filter(|a| !packs(size(a.id)));
    covered_units(accesses, BLOCK_SIZE).saturating_mul(BLOCK_SIZE)
}

/// How many `unit`-sized pieces of their regions the accesses cover (each counted once).
fn covered_units<'a>(acc: impl Iterator<Item = &'a super::TraceAccess>, unit: u64) -> u64 {
    let mut spans: Vec<(u64, u64, u64)> = acc
        .filter(|a| a.len > 0)
        .map(|a| (a.id, a.offset / unit, (a.offset + a.len).div_ceil(unit)))
        .collect();
    spans.sort_unstable();
    let mut units = 0u64;
    let mut open: Option<(u64, u64, u64)> = None;
    for (id, first, end) in spans {
        match &mut open {
            Some((oid, _, oend)) if *oid == id && first <= *oend => *oend = (*oend).max(end),
            _ => {
                if let Some((_, f, e)) = open.replace((id, first, end)) {
                    units = units.saturating_add(e - f);
                }
            }
        }
    }
    if let Some((_, f, e)) = open {
        units = units.saturating_add(e - f);
    }
    units
}

/// What a trace contains.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TraceStats {
    /// Events after the header.
    pub events: u64,
    /// Regions allocated.
    pub regions: u64,
    /// Bytes allocated over the whole trace.
    pub allocated_bytes: u64,
    /// Most bytes live at once.
    pub peak_live_bytes: u64,
    /// Most bytes live at once, each region rounded up to 4 KiB pages: what a device holding
    /// the whole working set needs, and what percent budgets of a replay refer to.
    pub peak_live_page_bytes: u64,
    /// Most bytes live at once, each region as whole 2 MiB blocks (one under 2 MiB as the
    /// power of two that holds it, 512 bytes up): what the device arena (`memory = "device"`)
    /// holds for the same data.
    pub peak_live_block_bytes: u64,
    /// Most bytes live at once in regions under 2 MiB, as the device arena packs them (the
    /// power of two that holds each): the arena keeps them on the device.
    pub peak_live_packed_bytes: u64,
    /// The device arena's chunks for the regions under 2 MiB: for each size class, the most of
    /// them live at once in whole 2 MiB chunks, which stay on the device from their first use
    /// (`mechanism::slab`).
    pub slab_bytes: u64,
    /// Kernel launches.
    pub kernels: u64,
    /// Host events.
    pub host_events: u64,
    /// Step markers.
    pub steps: u64,
    /// Sum of kernel `dur_ns`: the time with all data resident.
    pub compute_floor_ns: u64,
    /// Sum of kernel `host_ns`: the program's own host time, where the trace measured it.
    pub program_host_ns: u64,
    /// The time with all data resident at the program's own pace ([`ProgramFloor`]): the
    /// compute floor where the trace has no host times or the host kept ahead of the kernels.
    pub program_floor_ns: u64,
    /// Bytes read by kernels and the host (sum of access lengths with r or rw).
    pub bytes_read: u64,
    /// Bytes written (sum of access lengths with w or rw).
    pub bytes_written: u64,
    /// Largest sum of access lengths of one kernel.
    pub max_kernel_bytes: u64,
    /// The kernel whose accesses cover the most pages: the smallest budget at which every
    /// kernel's data fits on the device at once (a smaller one makes that kernel fault and
    /// evict its own data).
    pub largest_kernel: KernelFootprint,
    /// The most whole 2 MiB blocks one kernel's accesses cover of regions of a block or more:
    /// what the device arena holds for them (the regions under a block are in its slab, which
    /// stays on the device: `slab_bytes`).
    pub largest_kernel_block_bytes: u64,
    /// Regions that some event accesses.
    pub accessed_regions: u64,
    /// Accesses per accessed region, on average.
    pub accesses_per_region: f64,
    /// Bytes accessed over the sizes of the regions accessed: how many times, on average, each
    /// byte is touched. High reuse is what keeping data resident pays for.
    pub reuse_factor: f64,
    /// Regions whose first access reads them: they hold data from before the trace, which
    /// starts on the host (`spec/trace-v1.md`). Their ids, for a replay to put that data on
    /// the host as they are allocated; reports give their number (`pre_existing_regions`).
    #[serde(rename = "pre_existing_regions", serialize_with = "count")]
    pub pre_existing: RegionIds,
}

/// Bytes of device memory a kernel needs at once: the pages its accesses cover, each page once
/// however many accesses overlap it.
pub fn footprint_bytes(acc: &[super::TraceAccess]) -> u64 {
    covered_units(acc.iter(), PAGE_SIZE).saturating_mul(PAGE_SIZE)
}

impl TraceStats {
    /// The smallest budget that holds every kernel's data at once, in pages and as the device
    /// arena holds it (whole blocks, and the slab's chunks at their peak): a smaller one makes a
    /// kernel evict its own data, which no backend emulates.
    pub fn smallest_budget(&self) -> u64 {
        self.largest_kernel.bytes.max(self.largest_kernel_block_bytes.saturating_add(self.slab_bytes))
    }

    /// Reads the whole trace once. A sum that would not fit its counter is an error naming the
    /// line where it overflows, never a wrapped number.
    pub fn compute(reader: TraceReader) -> Result<Self> {
        Self::compute_with(reader, |_| {})
    }

    /// [`TraceStats::compute`], showing each event (once checked) to `each` on the way, so a
    /// caller that needs the whole trace reads it once.
    pub fn compute_with(mut reader: TraceReader, mut each: impl FnMut(&TraceEvent)) -> Result<Self> {
        let mut s = TraceStats::default();
        let (mut live, mut live_pages, mut live_blocks, mut live_packed) = (0u64, 0u64, 0u64, 0u64);
        let mut slab = SlabDemand::default();
        let mut pace = ProgramFloor::default();
        // Live regions only (size, touched yet?): memory stays bounded by what is live.
        let mut regions: HashMap<u64, (u64, bool)> = HashMap::default();
        let mut accessed_region_bytes = 0u64;
        let mut accesses = 0u64;
        while let Some(event) = reader.next_event()? {
            let overflow = |what: &str| Error::Trace {
                file: reader.file().to_string(),
                line: reader.line(),
                reason: format!("the trace's {what} add up past 2^64-1; unimem cannot count them"),
            };
            let add = |total: u64, n: u64, what: &str| total.checked_add(n).ok_or_else(|| overflow(what));
            s.events += 1;
            match &event {
                TraceEvent::Alloc { id, bytes, .. } => {
                    s.regions += 1;
                    s.allocated_bytes = add(s.allocated_bytes, *bytes, "allocated bytes")?;
                    // The reader keeps the live page bytes below 2^62: these cannot overflow.
                    live += bytes;
                    live_pages += page_round(*bytes);
                    live_blocks += block_round(*bytes);
                    s.peak_live_bytes = s.peak_live_bytes.max(live);
                    s.peak_live_page_bytes = s.peak_live_page_bytes.max(live_pages);
                    s.peak_live_block_bytes = s.peak_live_block_bytes.max(live_blocks);
                    live_packed += packed_round(*bytes);
                    s.peak_live_packed_bytes = s.peak_live_packed_bytes.max(live_packed);
                    slab.alloc(*bytes);
                    regions.insert(*id, (*bytes, false));
                }
                TraceEvent::Free { id } => {
                    let bytes = regions.remove(id).map(|(b, _)| b).unwrap_or(0);
                    live -= bytes;
                    live_pages -= page_round(bytes);
                    live_blocks -= block_round(bytes);
                    live_packed -= packed_round(bytes);
                    if bytes > 0 {
                        slab.free(bytes);
                    }
                }
                TraceEvent::Kernel { name, dur_ns, host_ns, acc } => {
                    s.kernels += 1;
                    // The reader keeps the kernel and host times below 2^62 ns.
                    s.compute_floor_ns += dur_ns;
                    s.program_host_ns += host_ns.unwrap_or(0);
                    pace.kernel(host_ns.unwrap_or(0), *dur_ns);
                    let declared = acc
                        .iter()
                        .try_fold(0u64, |sum, a| add(sum, a.len, "access lengths of one kernel"))?;
                    s.max_kernel_bytes = s.max_kernel_bytes.max(declared);
                    let footprint = footprint_bytes(acc);
                    let in_blocks = block_footprint_bytes(acc, |id| regions.get(&id).map_or(0, |r| r.0));
                    s.largest_kernel_block_bytes = s.largest_kernel_block_bytes.max(in_blocks);
                    if footprint > s.largest_kernel.bytes {
                        s.largest_kernel =
                            KernelFootprint { name: name.to_string(), line: reader.line(), bytes: footprint };
                    }
                }
                TraceEvent::Host { .. } => s.host_events += 1,
                TraceEvent::Step { .. } => s.steps += 1,
            }
            each(&event);
            for a in event.accesses() {
                accesses += 1;
                if a.mode.reads() {
                    s.bytes_read = add(s.bytes_read, a.len, "bytes read")?;
                }
                if a.mode.writes() {
                    s.bytes_written = add(s.bytes_written, a.len, "bytes written")?;
                }
                if let Some((bytes, touched)) = regions.get_mut(&a.id) {
                    if !*touched {
                        *touched = true;
                        s.accessed_regions += 1;
                        accessed_region_bytes =
                            add(accessed_region_bytes, *bytes, "sizes of accessed regions")?;
                        if a.mode.reads() {
                            s.pre_existing.insert(a.id);
                        }
                    }
                }
            }
        }
        s.accesses_per_region =
            if s.accessed_regions == 0 { 0.0 } else { accesses as f64 / s.accessed_regions as f64 };
        let accessed: u64 = s.bytes_read.max(s.bytes_written);
        s.reuse_factor =
            if accessed_region_bytes == 0 { 0.0 } else { accessed as f64 / accessed_region_bytes as f64 };
        s.slab_bytes = slab.bytes();
        s.program_floor_ns = pace.ns();
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{TraceAccess, TraceEvent, TraceHeader, TraceWriter};

    /// Live bytes as the device arena holds them: whole 2 MiB blocks, smaller regions as the
    /// power of two that holds them; a freed region leaves the count.
    #[test]
    fn peak_live_block_bytes_rounds_as_the_arena_holds_regions() {
        assert_eq!(block_round(3 << 20), 4 << 20);
        assert_eq!(block_round(2 << 20), 2 << 20);
        assert_eq!(block_round(100_000), 131_072);
        assert_eq!(block_round(1), 512);
        let mut w = TraceWriter::new(Vec::new(), false, "mem", &TraceHeader::new("test")).unwrap();
        let alloc = |id, bytes| TraceEvent::Alloc { id, bytes, name: None };
        for e in [alloc(1, 3 << 20), alloc(2, 100_000), TraceEvent::Free { id: 1 }, alloc(3, 1 << 20)] {
            w.write(&e).unwrap();
        }
        let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
        let s = TraceStats::compute(TraceReader::from_bytes("mem", bytes).unwrap()).unwrap();
        assert_eq!(s.peak_live_block_bytes, (4 << 20) + 131_072);
        assert_eq!(s.peak_live_packed_bytes, 131_072 + (1 << 20));
        assert_eq!(s.slab_bytes, 2 * BLOCK_SIZE, "a chunk for each class");
        assert_eq!(s.peak_live_page_bytes, (3 << 20) + 102_400);
    }

    /// The smallest budget holds the largest kernel as the arena holds it: the whole blocks it
    /// touches of regions of a block or more, and the slab's chunks, beyond the pages it covers.
    #[test]
    fn the_smallest_budget_holds_the_largest_kernel_in_whole_blocks() {
        let mut w = TraceWriter::new(Vec::new(), false, "mem", &TraceHeader::new("test")).unwrap();
        let access = |id, offset, len| TraceAccess { id, offset, len, mode: crate::access::AccessMode::Read };
        let events = [
            TraceEvent::Alloc { id: 1, bytes: 5 << 20, name: None },
            TraceEvent::Alloc { id: 2, bytes: 4096, name: None },
            TraceEvent::Kernel {
                name: "k".into(),
                dur_ns: 1,
                host_ns: None,
                // 1 MiB at each end of a 5 MiB region, and a small region: 2 MiB + 4 KiB of
                // pages, two blocks and the small region's chunk in the arena.
                acc: vec![access(1, 0, 1 << 20), access(1, 4 << 20, 1 << 20), access(2, 0, 4096)],
            },
        ];
        for e in &events {
            w.write(e).unwrap();
        }
        let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
        let s = TraceStats::compute(TraceReader::from_bytes("mem", bytes).unwrap()).unwrap();
        assert_eq!(s.largest_kernel.bytes, (2 << 20) + 4096);
        assert_eq!(s.slab_bytes, BLOCK_SIZE);
        assert_eq!(s.largest_kernel_block_bytes, 2 * BLOCK_SIZE);
        assert_eq!(s.smallest_budget(), 3 * BLOCK_SIZE);
    }

    /// The program floor is its kernels at its host's pace: a kernel waits for its host time
    /// after the one before is issued, and for the one before to end.
    #[test]
    fn the_program_floor_is_the_kernels_at_their_hosts_pace() {
        let mut w = TraceWriter::new(Vec::new(), false, "mem", &TraceHeader::new("test")).unwrap();
        let kernel =
            |dur_ns, host_ns| TraceEvent::Kernel { name: "k".into(), dur_ns, host_ns, acc: Vec::new() };
        // Issued at 0, 5 and 6 ms, running 2, 3 and 1 ms: the third waits for the second, to 8.
        for e in
            [kernel(2_000_000, None), kernel(3_000_000, Some(5_000_000)), kernel(1_000_000, Some(1_000_000))]
        {
            w.write(&e).unwrap();
        }
        let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
        let s = TraceStats::compute(TraceReader::from_bytes("mem", bytes).unwrap()).unwrap();
        assert_eq!(
            (s.compute_floor_ns, s.program_host_ns, s.program_floor_ns),
            (6_000_000, 6_000_000, 9_000_000)
        );
        let mut alone = ProgramFloor::default();
        [(0, 2), (0, 3)].iter().for_each(|&(h, d)| alone.kernel(h, d));
        assert_eq!(alone.ns(), 5, "no host times: the kernels back to back");
    }
}
