//! The placements in blocks on a real GPU (`--features gpu-tests`), CUDA virtual memory and the
//! device arena: every byte survives evictions, restores, discards, cancelled evictions,
//! recycled chunks and host access within the software budget; in virtual memory a kernel
//! that touches an evicted region without declaring it reads and writes its data over the
//! link, and in the arena kernels use host-preferred data where it is. At most 4 GiB of
//! device memory and as much host memory.
#![cfg(feature = "gpu-tests")]

use unimem_core::backends::cuda::{BlockBackend, CudaDevice, Kernels};
use unimem_core::seam::{ByteRange, KernelLaunch, Location, MemoryBackend, MemoryBackendExt};
use unimem_core::{AccessMode, RangeAccess, RegionId};

const MIB: u64 = 1 << 20;

fn pattern(seed: u32, bytes: u64) -> Vec<u8> {
    (0..bytes / 4)
        .flat_map(|i| (i as u32).wrapping_mul(2654435761).wrapping_add(seed).to_le_bytes())
        .collect()
}

fn open(budget: u64, host: u64) -> BlockBackend {
    BlockBackend::open(0, budget).unwrap().with_staging(host, host).unwrap()
}

/// The same backend with regions in the device arena (`memory = "device"`).
fn open_arena(budget: u64, host: u64) -> BlockBackend {
    BlockBackend::open_arena(0, budget).unwrap().with_staging(host, host).unwrap()
}

fn kernel<B: MemoryBackend>(b: &mut B, id: RegionId, bytes: u64, mode: AccessMode, dur_ns: u64) {
    let acc = [RangeAccess { region: id, offset: 0, len: bytes, mode }];
    b.launch(&KernelLaunch { name: "k", dur_ns, accesses: &acc }).unwrap();
}

fn bad_pages(seen: &[u8], want: &[u8]) -> usize {
    seen.chunks(4096).zip(want.chunks(4096)).filter(|(a, b)| a != b).count()
}

/// The pages of region `id` whose bytes, read by the host from offset 0, differ from `want`.
fn bad_pages_of(b: &mut BlockBackend, id: RegionId, want: &[u8]) -> usize {
    let mut seen = vec![0u8; want.len()];
    b.read(id, 0, &mut seen).unwrap();
    bad_pages(&seen, want)
}

/// 8 regions of 512 MiB (4 GiB through) on a 1 GiB budget: host writes and device writes,
/// kernels that force the emulated driver's evictions, prefetches both ways, stage-outs with
/// and without a copy (clean data), a discard, frees and reallocations; every region reads
/// back as last written and the footprint stays within the budget plus the running kernel.
#[test]
fn every_byte_survives_every_move_within_the_budget() {
    every_byte_survives(open(1024 * MIB, 4096 * MIB), 512 * MIB);
}

/// The same in the device arena, with regions of a size that is not whole blocks (their last
/// block is part of a slot).
#[test]
fn every_byte_survives_every_move_in_the_arena() {
    every_byte_survives(open_arena(1024 * MIB, 4096 * MIB), 512 * MIB + 12_288);
}

fn every_byte_survives(mut b: BlockBackend, size: u64) {
    let (n, budget) = (8u64, 1024 * MIB);
    let mut data: Vec<Vec<u8>> = (0..n).map(|i| pattern(i as u32, size)).collect();
    for i in 0..n {
        let id = RegionId(i);
        b.allocate(id, size).unwrap();
        if i % 2 == 0 {
            b.write(id, 0, &data[i as usize]).unwrap();
        } else {
            b.prefetch(&[ByteRange::whole(id, size)], Location::DEVICE).unwrap();
            b.kernel_store(id, 0, &data[i as usize]).unwrap();
        }
    }
    for round in 0..3u64 {
        for i in 0..n {
            let id = RegionId(i);
            let whole = ByteRange::whole(id, size);
            match (i + round) % 4 {
                0 => b.prefetch(&[whole], Location::DEVICE).unwrap(),
                1 => b.stage_out(&[whole]).unwrap(),
                2 => b.prefetch(&[whole], Location::Host).unwrap(),
                _ => {}
            }
            kernel(&mut b, id, size, AccessMode::Read, 1000);
            assert!(b.device_resident_bytes() <= budget + size, "round {round}: over the budget");
        }
        // One region rewritten on the device (its host copy is stale now) and staged out again.
        let id = RegionId(round);
        data[round as usize] = pattern(100 + round as u32, size);
        b.kernel_store(id, 0, &data[round as usize]).unwrap();
        b.stage_out(&[ByteRange::whole(id, size)]).unwrap();
    }
    // A discarded region is dead; a freed one's chunks serve a new region.
    b.discard(&[ByteRange::whole(RegionId(7), size)]).unwrap();
    b.free(RegionId(6)).unwrap();
    b.allocate(RegionId(16), size).unwrap();
    data[6] = pattern(66, size);
    b.write(RegionId(16), 0, &data[6]).unwrap();
    kernel(&mut b, RegionId(16), size, AccessMode::Read, 1000);
    b.synchronize().unwrap();
    for i in 0..7 {
        let id = RegionId(if i == 6 { 16 } else { i });
        assert_eq!(bad_pages_of(&mut b, id, &data[i as usize]), 0, "region {id} lost bytes");
    }
    let s = b.stats();
    assert!(s.staged_out_bytes > 0 && s.staged_in_bytes > 0 && s.staged_clean_bytes > 0, "{s:?}");
    assert!(s.evicted_bytes > 0 && s.prefetch_h2d_bytes > 0, "{s:?}");
    assert!(s.peak_footprint_bytes <= budget + size, "{s:?}");
}

/// A kernel that does not declare its accesses finds an evicted region's data at its address
/// (mapped to host memory, read over the link), and its writes there are what a declared
/// kernel and the host see next.
#[test]
fn an_undeclared_access_to_an_evicted_region_sees_its_data() {
    let size = 256 * MIB;
    let mut b = open(1024 * MIB, 1024 * MIB);
    let id = RegionId(1);
    let addr = b.allocate(id, size).unwrap();
    let data = pattern(5, size);
    b.write(id, 0, &data).unwrap();
    kernel(&mut b, id, size, AccessMode::Read, 1000);
    b.stage_out(&[ByteRange::whole(id, size)]).unwrap();
    b.synchronize().unwrap();
    assert_eq!(b.residency(ByteRange::whole(id, size)).unwrap().staged, size, "evicted");
    let dev = CudaDevice::open(0).unwrap();
    let kernels = Kernels::load(&dev).unwrap();
    let s = dev.new_stream().unwrap();
    let words = size / 4;
    let want: u64 = data.chunks(4).map(|w| u32::from_le_bytes(w.try_into().unwrap()) as u64).sum();
    assert_eq!(kernels.sum_u32(&s, addr, words).unwrap(), want, "read over the link");
    kernels.add_u32(&s, addr, words, 3).unwrap();
    s.synchronize().unwrap();
    assert_eq!(b.residency(ByteRange::whole(id, size)).unwrap().staged, size, "still in host memory");
    kernel(&mut b, id, size, AccessMode::Read, 1000);
    assert_eq!(b.residency(ByteRange::whole(id, size)).unwrap().device, size, "restored for the kernel");
    let mut seen = vec![0u8; size as usize];
    b.read(id, 0, &mut seen).unwrap();
    let plus: Vec<u8> = data
        .chunks(4)
        .flat_map(|w| u32::from_le_bytes(w.try_into().unwrap()).wrapping_add(3).to_le_bytes())
        .collect();
    assert_eq!(bad_pages(&seen, &plus), 0, "the undeclared writes were lost");
}

/// Uses right behind an eviction: a kernel queued behind a 100 ms kernel cancels the eviction
/// still waiting for it, a write after that is copied out again, a prefetch brings the newest
/// bytes back; four rounds on recycled chunks.
#[test]
fn a_use_right_behind_an_eviction_keeps_the_newest_bytes() {
    use_right_behind_an_eviction(open(512 * MIB, 1024 * MIB));
}

/// The same in the device arena, where the use takes a new slot, or keeps its own.
#[test]
fn a_use_right_behind_an_eviction_keeps_the_newest_bytes_in_the_arena() {
    use_right_behind_an_eviction(open_arena(512 * MIB, 1024 * MIB));
}

fn use_right_behind_an_eviction(mut b: BlockBackend) {
    let size = 128 * MIB;
    for round in 0..4u64 {
        let id = RegionId(10 + round);
        let whole = ByteRange::whole(id, size);
        b.allocate(id, size).unwrap();
        b.prefetch(&[whole], Location::DEVICE).unwrap();
        b.kernel_store(id, 0, &pattern(round as u32, size)).unwrap();
        kernel(&mut b, id, size, AccessMode::Read, 100_000_000);
        b.stage_out(&[whole]).unwrap();
        kernel(&mut b, id, size, AccessMode::ReadWrite, 1000);
        let newest = pattern(50 + round as u32, size);
        b.kernel_store(id, 0, &newest).unwrap();
        b.stage_out(&[whole]).unwrap();
        b.synchronize().unwrap();
        b.prefetch(&[whole], Location::DEVICE).unwrap();
        kernel(&mut b, id, size, AccessMode::Read, 1000);
        assert_eq!(bad_pages_of(&mut b, id, &newest), 0, "round {round}");
        b.free(id).unwrap();
    }
}

/// A region freed while its restore is still copying in lends its chunks only after that
/// copy: a staged region restored right away into those chunks (on another copy stream)
/// keeps its bytes. The freed region's copy is held back 100 ms behind a kernel (it waits for
/// room a busy region frees), so a restore not waiting for it would land first and be
/// overwritten. Three rounds, in both placements.
#[test]
fn a_freed_region_lends_its_chunks_after_its_copy_in() {
    restore_into_a_region_freed_while_copying_in(open(256 * MIB, 1024 * MIB));
    restore_into_a_region_freed_while_copying_in(open_arena(256 * MIB, 1024 * MIB));
}

fn restore_into_a_region_freed_while_copying_in(mut b: BlockBackend) {
    let size = 256 * MIB;
    for round in 0..3u32 {
        let id = |k: u64| RegionId(20 + 3 * round as u64 + k);
        let (gone, kept, busy) = (id(0), id(1), id(2));
        let kept_data = pattern(70 + round, size);
        for (r, data) in [(gone, pattern(60 + round, size)), (kept, kept_data.clone())] {
            b.allocate(r, size).unwrap();
            b.write(r, 0, &data).unwrap();
            b.stage_out(&[ByteRange::whole(r, size)]).unwrap();
        }
        b.synchronize().unwrap();
        // The budget holds one region: `busy`, whose kernel runs 100 ms, then `gone`'s copy
        // in behind it, then `kept`'s into the same chunks.
        b.allocate(busy, size).unwrap();
        b.write(busy, 0, &pattern(80 + round, size)).unwrap();
        kernel(&mut b, busy, size, AccessMode::Read, 100_000_000);
        b.free(busy).unwrap();
        b.prefetch(&[ByteRange::whole(gone, size)], Location::DEVICE).unwrap();
        b.free(gone).unwrap();
        b.prefetch(&[ByteRange::whole(kept, size)], Location::DEVICE).unwrap();
        kernel(&mut b, kept, size, AccessMode::Read, 1000);
        assert_eq!(bad_pages_of(&mut b, kept, &kept_data), 0, "round {round}: the restore was overwritten");
        b.free(kept).unwrap();
    }
}

/// In the arena a region whose blocks come in on two copy lanes is whole for its kernel: the
/// first half is prefetched into the chunks of an eviction queued behind a 100 ms kernel, the
/// second half restored by the kernel at once into chunks freed sooner. The kernel must wait
/// for both copies: run before the first half lands, it would write the chunks' old bytes,
/// and the stage-out behind it would copy them into the region's host copy. Checked by the
/// kernel's timed end against every copy in, and by the bytes. Three rounds.
#[test]
fn a_kernel_waits_for_every_copy_in_of_its_region() {
    use unimem_core::seam::{Direction, MemEvent};
    let half = 128 * MIB;
    let mut b = open_arena(2 * half, 1024 * MIB);
    for round in 0..3u32 {
        let id = |k: u64| RegionId(40 + 3 * round as u64 + k);
        let (r, slow, quick) = (id(0), id(1), id(2));
        let data = pattern(90 + round, 2 * half);
        b.allocate(r, 2 * half).unwrap();
        b.write(r, 0, &data).unwrap();
        b.stage_out(&[ByteRange::whole(r, 2 * half)]).unwrap();
        b.synchronize().unwrap();
        // The budget is full: `slow`, written by a 100 ms kernel, and `quick`, written by the
        // host; both are staged out, `slow`'s copy behind its kernel.
        for (k, other) in [slow, quick].into_iter().enumerate() {
            b.allocate(other, half).unwrap();
            b.write(other, 0, &pattern(100 + 2 * round + k as u32, half)).unwrap();
        }
        b.record_events(true);
        kernel(&mut b, slow, half, AccessMode::ReadWrite, 100_000_000);
        b.stage_out(&[ByteRange::whole(slow, half)]).unwrap();
        b.prefetch(&[ByteRange { region: r, offset: 0, len: half }], Location::DEVICE).unwrap();
        b.stage_out(&[ByteRange::whole(quick, half)]).unwrap();
        let acc = [RangeAccess { region: r, offset: 0, len: 2 * half, mode: AccessMode::ReadWrite }];
        b.launch(&KernelLaunch { name: "both halves", dur_ns: 1000, accesses: &acc }).unwrap();
        b.stage_out(&[ByteRange::whole(r, 2 * half)]).unwrap();
        b.synchronize().unwrap();
        let mut events = Vec::new();
        b.drain_events(&mut events);
        b.record_events(false);
        let kernel_end = events.iter().find_map(|e| match e {
            MemEvent::Kernel { name, end_ns, .. } if name == "both halves" => Some(*end_ns),
            _ => None,
        });
        // (bytes, end) of each copy in of the region.
        let copies_in: Vec<(u64, u64)> = events
            .iter()
            .filter_map(|e| match e {
                MemEvent::Migration { region, dir: Direction::H2D, bytes, end_ns, .. } if *region == r => {
                    Some((*bytes, *end_ns))
                }
                _ => None,
            })
            .collect();
        let kernel_end = kernel_end.expect("the kernel is timed");
        let came_in: u64 = copies_in.iter().map(|c| c.0).sum();
        assert_eq!(came_in, 2 * half, "round {round}: every block came in");
        let last_in = copies_in.iter().map(|c| c.1).max().expect("copies in");
        assert!(
            kernel_end >= last_in,
            "round {round}: the kernel ended at {kernel_end}, a copy in at {last_in}"
        );
        assert_eq!(bad_pages_of(&mut b, r, &data), 0, "round {round}: the kernel ran before its data");
        for region in [r, slow, quick] {
            b.free(region).unwrap();
        }
    }
}

/// An eviction counts as done where the bytes are reported, though the device chunk waits for
/// a 100 ms kernel and the copy behind it: a stage-out is staged at once, a discard leaves
/// nothing, and a use right behind it brings the region back. In both placements.
#[test]
fn an_eviction_under_way_is_off_the_device() {
    for mut b in [open(256 * MIB, 512 * MIB), open_arena(256 * MIB, 512 * MIB)] {
        let size = 64 * MIB;
        let (kept, dead) = (RegionId(60), RegionId(61));
        for id in [kept, dead] {
            b.allocate(id, size).unwrap();
            b.write(id, 0, &pattern(7, size)).unwrap();
        }
        let (whole, gone) = (ByteRange::whole(kept, size), ByteRange::whole(dead, size));
        let acc = [
            RangeAccess { region: kept, offset: 0, len: size, mode: AccessMode::ReadWrite },
            RangeAccess { region: dead, offset: 0, len: size, mode: AccessMode::ReadWrite },
        ];
        b.launch(&KernelLaunch { name: "k", dur_ns: 100_000_000, accesses: &acc }).unwrap();
        b.stage_out(&[whole]).unwrap();
        b.discard(&[gone]).unwrap();
        let (now, dropped) = (b.residency(whole).unwrap(), b.residency(gone).unwrap());
        assert_eq!((now.device, now.staged), (0, size), "staged while its copy waits: {now:?}");
        assert_eq!((dropped.device, dropped.unpopulated), (0, size), "discarded: {dropped:?}");
        kernel(&mut b, kept, size, AccessMode::Read, 1000);
        assert_eq!(b.residency(whole).unwrap().device, size, "a use brings it back");
        assert_eq!(bad_pages_of(&mut b, kept, &pattern(7, size)), 0);
    }
}

/// In the arena, small regions (packed into slots) and host-preferred blocks (used in place by
/// kernels, read and written over the link) keep their bytes through kernels that write them,
/// stage-outs and restores.
#[test]
fn the_arena_keeps_small_and_host_preferred_regions() {
    use unimem_core::seam::Advice;
    let mut b = open_arena(256 * MIB, 1024 * MIB);
    let small = RegionId(1);
    let remote = RegionId(2);
    let (small_size, remote_size) = (100_000u64, 64 * MIB + 4096);
    b.allocate(small, small_size).unwrap();
    b.allocate(remote, remote_size).unwrap();
    let small_data = pattern(9, small_size);
    b.write(small, 0, &small_data).unwrap();
    let remote_data = pattern(11, remote_size);
    b.write(remote, 0, &remote_data).unwrap();
    b.stage_out(&[ByteRange::whole(remote, remote_size)]).unwrap();
    b.synchronize().unwrap();
    let whole = ByteRange::whole(remote, remote_size);
    b.advise(whole, Advice::SetPreferredLocation(Location::Host)).unwrap();
    b.advise(whole, Advice::SetAccessedByDevice).unwrap();
    // A kernel writes the host-preferred region in place (the touch kernel rewrites what it
    // reads), then its bytes come back to the device and to the host unchanged.
    kernel(&mut b, remote, remote_size, AccessMode::ReadWrite, 1000);
    kernel(&mut b, small, small_size, AccessMode::ReadWrite, 1000);
    b.synchronize().unwrap();
    assert_eq!(b.residency(whole).unwrap().device, 0, "used where it is");
    b.advise(whole, Advice::UnsetPreferredLocation).unwrap();
    b.advise(whole, Advice::UnsetAccessedByDevice).unwrap();
    kernel(&mut b, remote, remote_size, AccessMode::Read, 1000);
    assert_eq!(b.residency(whole).unwrap().device, remote_size, "restored for the kernel");
    assert_eq!(bad_pages_of(&mut b, remote, &remote_data), 0, "the host-preferred region lost bytes");
    let mut seen = vec![0u8; small_size as usize];
    b.read(small, 0, &mut seen).unwrap();
    assert_eq!(seen, small_data, "the packed region lost bytes");
}

/// In the arena a block without data gets a slot and no copy, on slots that held another
/// region's bytes: what was never written reads as zeroes after a kernel read it, after a
/// kernel wrote part of its block, and where only the host reads it.
#[test]
fn the_arena_reads_what_was_never_written_as_zeroes() {
    let size = 64 * MIB;
    let mut b = open_arena(size, 256 * MIB);
    let old = RegionId(1);
    b.allocate(old, size).unwrap();
    b.write(old, 0, &pattern(3, size)).unwrap();
    kernel(&mut b, old, size, AccessMode::ReadWrite, 1000);
    b.free(old).unwrap();
    let id = RegionId(2);
    b.allocate(id, size).unwrap();
    // Blocks 0-3 read, block 4 written but for its first page, blocks 5-7 written whole.
    let acc = [
        RangeAccess { region: id, offset: 0, len: 8 * MIB, mode: AccessMode::Read },
        RangeAccess { region: id, offset: 8 * MIB + 4096, len: 8 * MIB - 4096, mode: AccessMode::Write },
    ];
    b.launch(&KernelLaunch { name: "k", dur_ns: 1000, accesses: &acc }).unwrap();
    assert_eq!(b.residency(ByteRange::whole(id, size)).unwrap().device, 16 * MIB);
    let mut seen = vec![0xffu8; size as usize];
    b.read(id, 0, &mut seen).unwrap();
    let nonzero =
        |r: std::ops::Range<u64>| seen[r.start as usize..r.end as usize].iter().filter(|&&x| x != 0).count();
    assert_eq!(nonzero(0..8 * MIB), 0, "read by a kernel");
    assert_eq!(nonzero(8 * MIB..8 * MIB + 4096), 0, "beside a kernel's write");
    assert_eq!(nonzero(16 * MIB..size), 0, "read by the host");
    assert!(b.stats().peak_footprint_bytes <= size);
}

/// A mark of the work issued so far (where a replay's step begins) does not wait for it: the
/// host goes on while a 200 ms kernel runs, and once the work is done the mark's time is that
/// kernel's end, on the clock `synchronize` reads.
#[test]
fn a_work_mark_waits_for_nothing_and_times_the_work_before_it() {
    let size = 16 * MIB;
    let mut b = open_arena(size, size);
    let id = RegionId(1);
    b.allocate(id, size).unwrap();
    let first = b.mark_work().unwrap(); // the first mark takes its reference: little queued
    let t0 = std::time::Instant::now();
    kernel(&mut b, id, size, AccessMode::Write, 200_000_000);
    let after = b.mark_work().unwrap();
    let waited = t0.elapsed();
    assert!(waited < std::time::Duration::from_millis(100), "the mark waited {waited:?} for the kernel");
    let end = b.synchronize().unwrap();
    let (first_ns, after_ns) = (b.work_mark_ns(first).unwrap(), b.work_mark_ns(after).unwrap());
    assert!(after_ns >= first_ns + 190_000_000, "the kernel ran between: {first_ns} then {after_ns}");
    assert!(after_ns <= end + 1_000_000, "it ended before the synchronize returned: {after_ns} vs {end}");
}

/// A write-back waits for its region's kernel, then copies the data into host chunks and
/// leaves it on the device; the region's eviction then copies nothing and its bytes read back
/// intact; one written after its write-back is copied out again by its eviction, with its new
/// bytes. In virtual memory and in the arena.
#[test]
fn a_write_back_saves_the_eviction_its_copy() {
    for mut b in [open(256 * MIB, 1024 * MIB), open_arena(256 * MIB, 1024 * MIB)] {
        let size = 64 * MIB;
        let (a, c) = (RegionId(1), RegionId(2));
        let (da, dc, dc2) = (pattern(21, size), pattern(22, size), pattern(23, size));
        for (id, d) in [(a, &da), (c, &dc)] {
            b.allocate(id, size).unwrap();
            b.write(id, 0, d).unwrap();
        }
        // Region a's kernel runs 50 ms: its write-back waits for it, the host does not.
        kernel(&mut b, a, size, AccessMode::ReadWrite, 50_000_000);
        let t0 = std::time::Instant::now();
        b.write_back(&[ByteRange::whole(a, size), ByteRange::whole(c, size)]).unwrap();
        assert!(t0.elapsed() < std::time::Duration::from_millis(20), "the host waited {:?}", t0.elapsed());
        std::thread::sleep(std::time::Duration::from_millis(80));
        b.write_back(&[]).unwrap(); // issues what is due
        assert_eq!(b.stats().written_back_bytes, 2 * size);
        assert_eq!(b.residency(ByteRange::whole(a, size)).unwrap().device, size, "left on the device");
        // Region c is written after its write-back: its copy is stale.
        b.write(c, 0, &dc2).unwrap();
        let before = b.stats();
        b.stage_out(&[ByteRange::whole(a, size), ByteRange::whole(c, size)]).unwrap();
        let st = b.stats();
        assert_eq!(st.staged_clean_bytes - before.staged_clean_bytes, size, "a's eviction copied nothing");
        assert_eq!(st.d2h_bytes - before.d2h_bytes, size, "c's eviction copied its new bytes");
        b.synchronize().unwrap();
        assert_eq!(b.residency(ByteRange::whole(a, size)).unwrap().device, 0);
        assert_eq!(bad_pages_of(&mut b, a, &da), 0, "the written-back region lost bytes");
        assert_eq!(bad_pages_of(&mut b, c, &dc2), 0, "the region written after its write-back lost bytes");
    }
}
