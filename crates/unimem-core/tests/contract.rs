//! The backend contract: one body per test, run on the simulator everywhere and on CUDA with
//! `--features gpu-tests` (on a machine with an NVIDIA GPU). Both backends must keep every
//! byte through every placement, keep to the budget with pooled pages counted, and restore
//! staged data every way back. Sizes are in units of [`Open::MIB`]: a mebibyte on the GPU,
//! 1/32 of one on the simulator (which keeps the bytes in host memory), so each body checks
//! the same shapes of work at a size each backend can afford.

use unimem_core::seam::{
    Advice, ByteRange, Direction, KernelLaunch, Location, MemEvent, MemoryBackend, MemoryBackendExt,
    MigrationCause,
};
use unimem_core::{AccessMode, RangeAccess, RegionId};

/// A backend the contract opens: `budget` bytes of device, `staging` bytes of pinned host
/// memory, `pin_now` of them pinned up front.
trait Open: MemoryBackend + Sized {
    /// The size unit of the tests.
    const MIB: u64;
    fn open(budget: u64, staging: u64, pin_now: u64) -> Self;
    /// Restores may bring a wholly staged region back at another address.
    fn relocating(self) -> Self;
}

impl Open for unimem_core::SimBackend {
    const MIB: u64 = 1 << 15;
    fn open(budget: u64, staging: u64, _: u64) -> Self {
        unimem_core::SimBackend::new(unimem_core::CostModel::h200(), budget).with_staging(staging)
    }
    fn relocating(self) -> Self {
        self.with_relocation(true)
    }
}

#[cfg(feature = "gpu-tests")]
impl Open for unimem_core::backends::cuda::CudaBackend {
    const MIB: u64 = 1 << 20;
    fn open(budget: u64, staging: u64, pin_now: u64) -> Self {
        let b = unimem_core::backends::cuda::CudaBackend::open(0, budget, false).unwrap();
        if staging == 0 {
            b
        } else {
            b.with_staging(staging, pin_now).unwrap()
        }
    }
    fn relocating(self) -> Self {
        self.with_relocation(true)
    }
}

/// Each test body, instantiated once per backend.
macro_rules! contract {
    ($($test:ident),* $(,)?) => {
        mod sim {
            $(#[test]
            fn $test() {
                super::$test::<unimem_core::SimBackend>();
            })*
        }
        #[cfg(feature = "gpu-tests")]
        mod cuda {
            $(#[test]
            fn $test() {
                super::$test::<unimem_core::backends::cuda::CudaBackend>();
            })*
        }
    };
}

contract!(
    data_survives_every_placement_within_the_software_budget,
    staged_evictions_keep_data_through_prefetches_kernels_and_host_reads,
    a_prefetch_right_behind_its_stage_out_leaves_it_to_the_kernel,
    staged_data_survives_every_way_back,
    pooled_pages_give_way_to_data_within_the_budget,
    wholly_staged_regions_come_back_into_pooled_pages_with_their_data,
    a_region_swapped_out_keeps_its_data_every_way_back,
    a_prefetch_behind_a_swap_out_leaves_it_and_every_byte_comes_back,
    read_mostly_regions_swap_and_relocate_with_their_data,
    read_mostly_data_restored_in_place_keeps_its_bytes_and_leaves_its_advice,
    clean_restored_data_is_staged_again_without_a_copy,
    data_staged_from_the_device_is_read_straight_back_by_the_host,
);

fn pattern(seed: u32, bytes: u64) -> Vec<u8> {
    (0..bytes / 4)
        .flat_map(|i| (i as u32).wrapping_mul(2654435761).wrapping_add(seed).to_le_bytes())
        .collect()
}

fn read_kernel<B: MemoryBackend>(b: &mut B, id: RegionId, bytes: u64) {
    let acc = [RangeAccess { region: id, offset: 0, len: bytes, mode: AccessMode::Read }];
    b.launch(&KernelLaunch { name: "read", dur_ns: 1000, accesses: &acc }).unwrap();
}

/// A prefetch leaves out staged data whose stage-out the device is still running
/// (repopulating and copying into pages soon after their discard falls to a slow path on
/// the H200): the data stays staged; a prefetch after the stage-out ended brings it back,
/// and so does a kernel; bytes intact.
fn a_prefetch_right_behind_its_stage_out_leaves_it_to_the_kernel<B: Open>() {
    let size = 256 * B::MIB;
    let whole = ByteRange::whole(RegionId(1), size);
    let mut b = B::open(1024 * B::MIB, 512 * B::MIB, 512 * B::MIB);
    b.allocate(RegionId(1), size).unwrap();
    let data = pattern(11, size);
    b.prefetch(&[whole], Location::DEVICE).unwrap();
    b.kernel_store(RegionId(1), 0, &data).unwrap();
    b.synchronize().unwrap();
    // A 200 ms kernel using it: the stage-out waits for it, so it is still running when
    // the prefetch comes.
    let acc = [RangeAccess { region: RegionId(1), offset: 0, len: size, mode: AccessMode::Read }];
    let long = KernelLaunch { name: "long", dur_ns: 200_000_000, accesses: &acc };
    b.launch(&long).unwrap();
    b.stage_out(&[whole]).unwrap();
    let arrived = b.stats().prefetch_arrived_bytes;
    b.prefetch(&[whole], Location::DEVICE).unwrap();
    assert_eq!(b.residency(whole).unwrap().staged, size, "left out behind its stage-out");
    assert_eq!(b.stats().prefetch_arrived_bytes, arrived);
    b.synchronize().unwrap();
    b.prefetch(&[whole], Location::DEVICE).unwrap();
    let r = b.residency(whole).unwrap();
    assert_eq!((r.staged, r.device), (0, size), "restored once the stage-out ended: {r:?}");
    assert_eq!(b.stats().prefetch_arrived_bytes - arrived, size, "as a prefetch");
    // Again, and this time a kernel brings it back.
    b.launch(&long).unwrap();
    b.stage_out(&[whole]).unwrap();
    b.prefetch(&[whole], Location::DEVICE).unwrap();
    assert_eq!(b.residency(whole).unwrap().staged, size);
    read_kernel(&mut b, RegionId(1), size);
    assert_eq!(b.stats().staged_in_bytes, 2 * size);
    b.synchronize().unwrap();
    let mut seen = vec![0u8; size as usize];
    b.read(RegionId(1), 0, &mut seen).unwrap();
    assert!(seen == data, "the restores lost bytes");
}

/// 8 regions of 512 MiB (4 GiB) on a 1 GiB software budget: kernels force evictions, and
/// prefetch both ways, read-mostly duplicates, remote mapping and the pool all happen;
/// every region reads back as written, and the device account stays within the budget
/// plus the running kernel.
fn data_survives_every_placement_within_the_software_budget<B: Open>() {
    let (n, size, budget) = (8u64, 512 * B::MIB, 1024 * B::MIB);
    let mut b = B::open(budget, 0, 0);
    let data: Vec<Vec<u8>> = (0..n).map(|i| pattern(i as u32, size)).collect();
    let mut addrs = Vec::new();
    for i in 0..n {
        addrs.push(b.allocate(RegionId(i), size).unwrap());
        b.write(RegionId(i), 0, &data[i as usize]).unwrap();
    }
    for round in 0..3u64 {
        for i in 0..n {
            let id = RegionId(i);
            match (i + round) % 4 {
                0 => b.prefetch(&[ByteRange::whole(id, size)], Location::DEVICE).unwrap(),
                1 => b.advise(ByteRange::whole(id, size), Advice::SetReadMostly).unwrap(),
                2 => {
                    b.advise(ByteRange::whole(id, size), Advice::SetPreferredLocation(Location::Host))
                        .unwrap();
                    b.advise(ByteRange::whole(id, size), Advice::SetAccessedByDevice).unwrap();
                }
                _ => {}
            }
            read_kernel(&mut b, id, size);
            assert!(b.device_resident_bytes() <= budget + size, "round {round}: over the budget");
            if (i + round) % 4 == 1 {
                b.advise(ByteRange::whole(id, size), Advice::UnsetReadMostly).unwrap();
            }
            if (i + round) % 4 == 2 {
                b.advise(ByteRange::whole(id, size), Advice::UnsetPreferredLocation).unwrap();
                b.advise(ByteRange::whole(id, size), Advice::UnsetAccessedByDevice).unwrap();
            }
        }
        b.prefetch(&[ByteRange::whole(RegionId(round), size)], Location::Host).unwrap();
    }
    b.synchronize().unwrap();
    for i in 0..n {
        let mut seen = vec![0u8; size as usize];
        b.read(RegionId(i), 0, &mut seen).unwrap();
        assert!(seen == data[i as usize], "region {i} lost its bytes");
    }
    let s = b.stats();
    assert!(s.evicted_bytes > 0 && s.prefetch_h2d_bytes > 0 && s.remote_bytes > 0, "{s:?}");
    assert!(s.peak_device_bytes <= budget + size, "{s:?}");
    assert!(s.peak_footprint_bytes <= budget + size, "pooled pages over the budget: {s:?}");
    // Freed buffers are pooled and reused by size: no new managed allocation.
    b.free(RegionId(0)).unwrap();
    assert_eq!(b.allocate(RegionId(100), size).unwrap(), addrs[0]);
}

/// Freed buffers' pages on the device count against the budget: when new data needs the
/// room, the longest pooled buffers give their pages back before any data is evicted,
/// they are not handed out again, and every region keeps its bytes.
fn pooled_pages_give_way_to_data_within_the_budget<B: Open>() {
    let (size, budget) = (64 * B::MIB, 256 * B::MIB);
    let mut b = B::open(budget, 0, 0);
    // The region's address and data.
    let put = |b: &mut B, id: u64, bytes: u64| {
        let (id, data) = (RegionId(id), pattern(id as u32, bytes));
        let addr = b.allocate(id, bytes).unwrap();
        b.prefetch(&[ByteRange::whole(id, bytes)], Location::DEVICE).unwrap();
        b.kernel_store(id, 0, &data).unwrap();
        read_kernel(b, id, bytes);
        (addr, data)
    };
    // Four regions fill the budget; two of them are freed into the pool, pages on the device.
    let (addrs, kept): (Vec<u64>, Vec<Vec<u8>>) = (0..4).map(|i| put(&mut b, i, size)).unzip();
    let shed = &addrs[2..4];
    b.free(RegionId(2)).unwrap();
    b.free(RegionId(3)).unwrap();
    // Data of another size needs their room: the pool gives it, nothing is evicted.
    let (_, big) = put(&mut b, 10, 2 * size);
    let mut seen = vec![0u8; big.len()];
    b.kernel_view(RegionId(10), 0, &mut seen).unwrap(); // in place, as a kernel reads it
    assert!(seen == big, "the region in the pool's room lost its bytes");
    // And a region of the freed size gets a new buffer, the big one's pooled pages giving way.
    b.free(RegionId(10)).unwrap();
    let (small_addr, small) = put(&mut b, 11, size);
    assert!(!shed.contains(&small_addr), "a shed buffer came back");
    b.synchronize().unwrap();
    let s = b.stats();
    assert_eq!(s.evicted_bytes, 0, "data evicted while pooled pages held the room: {s:?}");
    assert!(s.peak_footprint_bytes <= budget, "pooled pages over the budget: {s:?}");
    for (id, want) in [(0, &kept[0]), (1, &kept[1]), (11, &small)] {
        let mut seen = vec![0u8; want.len()];
        b.read(RegionId(id), 0, &mut seen).unwrap();
        assert!(seen == *want, "region {id} lost its bytes");
    }
}

/// Staged data comes back intact every way, four rounds each on recycled buffers: a kernel
/// right behind its stage-out (queued behind a 100 ms kernel), a kernel after the device is
/// idle, a prefetch of the whole region after it is idle (found losing every page in 6 of 8
/// rounds while the prefetch went as one range), a kernel right behind a short stage-out,
/// and three stage-out/restore cycles on the same pages.
fn staged_data_survives_every_way_back<B: Open>() {
    let size = 128 * B::MIB;
    let mut b = B::open(2048 * B::MIB, 1024 * B::MIB, 1024 * B::MIB);
    let mut wrong = Vec::new();
    for way in 0..5u64 {
        for round in 0..4u64 {
            let id = RegionId(100 + way * 10 + round);
            let whole = ByteRange::whole(id, size);
            b.allocate(id, size).unwrap();
            let data = pattern((way * 10 + round) as u32 + 7, size);
            b.prefetch(&[whole], Location::DEVICE).unwrap();
            b.kernel_store(id, 0, &data).unwrap();
            b.synchronize().unwrap();
            let acc = [RangeAccess { region: id, offset: 0, len: size, mode: AccessMode::Read }];
            let long = KernelLaunch { name: "long", dur_ns: 100_000_000, accesses: &acc };
            for _ in 0..if way == 4 { 3 } else { 1 } {
                if way != 3 {
                    b.launch(&long).unwrap();
                }
                b.stage_out(&[whole]).unwrap();
                if way == 1 || way == 2 {
                    b.synchronize().unwrap();
                }
                if way == 2 {
                    b.prefetch(&[whole], Location::DEVICE).unwrap();
                    assert_eq!(b.residency(whole).unwrap().device, size, "restored by the prefetch");
                }
                read_kernel(&mut b, id, size);
            }
            b.synchronize().unwrap();
            let mut seen = vec![0u8; size as usize];
            b.read(id, 0, &mut seen).unwrap();
            let bad = seen.chunks(4096).zip(data.chunks(4096)).filter(|(a, b)| a != b).count();
            if bad > 0 {
                wrong.push(format!("way {way} round {round}: {bad} of {} pages", size / 4096));
            }
            b.free(id).unwrap();
        }
    }
    assert!(wrong.is_empty(), "staged data lost: {wrong:?}");
}

/// Staged evictions: data the host wrote, and data written on the device, go to pinned
/// slots (their managed pages discarded) and come back intact through a prefetch, a
/// kernel, and a host read; a full staging pool falls back to migration; a freed staged
/// region's buffer is reused safely.
fn staged_evictions_keep_data_through_prefetches_kernels_and_host_reads<B: Open>() {
    let (n, size, budget) = (6u64, 256 * B::MIB, 2048 * B::MIB);
    let mut b = B::open(budget, 1024 * B::MIB, 512 * B::MIB);
    assert_eq!(b.staging_capacity(), 1024 * B::MIB);
    b.record_events(true); // staging copies are reported as events (CUPTI does not see them)
    let data: Vec<Vec<u8>> = (0..n).map(|i| pattern(100 + i as u32, size)).collect();
    for i in 0..n {
        b.allocate(RegionId(i), size).unwrap();
        if i % 2 == 0 {
            b.write(RegionId(i), 0, &data[i as usize]).unwrap();
            read_kernel(&mut b, RegionId(i), size);
        } else {
            // Written "by the device": a driver copy into device-resident pages.
            b.prefetch(&[ByteRange::whole(RegionId(i), size)], Location::DEVICE).unwrap();
            b.kernel_store(RegionId(i), 0, &data[i as usize]).unwrap();
        }
    }
    // Stage out the first four (1 GiB: the whole pool), then two more that must migrate.
    for i in 0..n {
        b.stage_out(&[ByteRange::whole(RegionId(i), size)]).unwrap();
    }
    let s = b.stats();
    assert_eq!(s.staged_out_bytes, 4 * size, "{s:?}");
    assert!(s.prefetch_d2h_bytes >= 2 * size, "the rest migrated: {s:?}");
    // A GPU times its stage-outs' parts apart (the simulator charges each call whole).
    let timed_apart = b.kind() == unimem_core::seam::BackendKind::Cuda;
    assert_eq!(s.move_parts.copies_out > 0 && s.move_parts.slots > 0, timed_apart, "{s:?}");
    assert!(s.move_parts.copies_out <= s.host.stage_out, "{s:?}");
    // Half the pool was pinned at set-up; the rest as the stage-outs took slots.
    assert_eq!(s.move_parts.pinning > 0, timed_apart, "{s:?}");
    assert_eq!(s.staging_pinned_bytes, if timed_apart { 1024 * B::MIB } else { 0 }, "{s:?}");
    assert!(s.move_parts.slots + s.move_parts.pinning <= s.host.stage_out, "{s:?}");
    for i in 0..4 {
        let r = b.residency(ByteRange::whole(RegionId(i), size)).unwrap();
        assert_eq!(r.staged, size, "region {i}: {r:?}");
    }
    assert_eq!(b.device_resident_bytes(), 0);
    // The stage-outs have ended: the prefetch restores at once (one right behind its
    // stage-out is deferred, tested below).
    b.synchronize().unwrap();
    // Back by a prefetch, by a kernel, by a host read.
    b.prefetch(&[ByteRange::whole(RegionId(0), size)], Location::DEVICE).unwrap();
    read_kernel(&mut b, RegionId(1), size);
    for i in 0..n {
        let mut seen = vec![0u8; size as usize];
        b.read(RegionId(i), 0, &mut seen).unwrap();
        assert!(seen == data[i as usize], "region {i} lost its bytes");
    }
    let s = b.stats();
    assert_eq!(s.staged_in_bytes, 4 * size);
    assert_eq!(s.move_parts.copies_in > 0, timed_apart, "{s:?}");
    // The prefetch repopulated; its stream was held first where idle (the holds' time counts
    // asking whether it was).
    assert_eq!(s.move_parts.holds > 0 && s.move_parts.repopulate > 0, timed_apart, "{s:?}");
    b.synchronize().unwrap();
    let mut events = Vec::new();
    b.drain_events(&mut events);
    let staged = |want: Direction| -> u64 {
        events
            .iter()
            .filter_map(|e| match *e {
                MemEvent::Migration {
                    bytes, dir, cause: MigrationCause::Staging, start_ns, end_ns, ..
                } if dir == want => {
                    assert!(end_ns >= start_ns);
                    Some(bytes)
                }
                _ => None,
            })
            .sum()
    };
    assert_eq!(staged(Direction::D2H), 4 * size, "staged out, as events");
    // Two of the four came back through the device (a prefetch, a kernel); two by host reads.
    assert_eq!(staged(Direction::H2D), 2 * size, "restored to the device, as events");
    // Stage again, free while the copies may be in flight, reuse the buffer.
    read_kernel(&mut b, RegionId(2), size);
    b.stage_out(&[ByteRange::whole(RegionId(2), size)]).unwrap();
    b.free(RegionId(2)).unwrap();
    b.allocate(RegionId(50), size).unwrap();
    let fresh = pattern(7, size);
    b.prefetch(&[ByteRange::whole(RegionId(50), size)], Location::DEVICE).unwrap();
    b.kernel_store(RegionId(50), 0, &fresh).unwrap();
    read_kernel(&mut b, RegionId(50), size);
    b.synchronize().unwrap();
    let mut seen = vec![0u8; size as usize];
    b.read(RegionId(50), 0, &mut seen).unwrap();
    assert!(seen == fresh, "the reused buffer lost its new bytes");
}

/// With relocation allowed, a region whose every block is staged comes back into a pooled
/// buffer of its size whose pages are on the device (a kernel's restore, and a prefetch's
/// of half of it, the kernel bringing the rest), with its data, resident, and reported
/// (`Relocated`); its old buffer, still being
/// discarded, serves the next region of that size without losing that region's data; and
/// the budget holds.
fn wholly_staged_regions_come_back_into_pooled_pages_with_their_data<B: Open>() {
    let size = 128 * B::MIB;
    let budget = 512 * B::MIB;
    let mut b = B::open(budget, 1024 * B::MIB, 1024 * B::MIB).relocating();
    b.record_events(true);
    let mut wrong = Vec::new();
    let mut relocated = 0;
    for round in 0..12u64 {
        let (x, y, z) = (RegionId(1000 + round * 3), RegionId(1001 + round * 3), RegionId(1002 + round * 3));
        let (wx, wy) = (ByteRange::whole(x, size), ByteRange::whole(y, size));
        let data = pattern(round as u32 + 11, size);
        let old = b.allocate(x, size).unwrap();
        b.prefetch(&[wx], Location::DEVICE).unwrap();
        b.kernel_store(x, 0, &data).unwrap();
        // A buffer of the same size, on the device, freed into the pool.
        let pooled = b.allocate(y, size).unwrap();
        b.prefetch(&[wy], Location::DEVICE).unwrap();
        read_kernel(&mut b, y, size);
        b.free(y).unwrap();
        if round % 2 == 0 {
            b.launch(&KernelLaunch { name: "long", dur_ns: 20_000_000, accesses: &[] }).unwrap();
        }
        b.stage_out(&[wx]).unwrap();
        if round % 3 == 0 {
            // A prefetch of half of it moves it; the other half keeps its new pages.
            b.synchronize().unwrap();
            b.prefetch(&[ByteRange { region: x, offset: 0, len: size / 2 }], Location::DEVICE).unwrap();
            let r = b.residency(wx).unwrap();
            assert_eq!((r.device, r.staged), (size / 2, size / 2), "round {round}: half back");
        }
        read_kernel(&mut b, x, size); // a kernel's restore where no prefetch brought it
        assert_eq!(b.residency(wx).unwrap().device, size, "round {round}: back on the device");
        let mut events = Vec::new();
        b.drain_events(&mut events);
        let moved: Vec<(u64, u64)> = events
            .iter()
            .filter_map(|e| match *e {
                MemEvent::Relocated { region, from, to, .. } if region == x => Some((from, to)),
                _ => None,
            })
            .collect();
        assert_eq!(moved.len(), 1, "round {round}: one Relocated event");
        assert_eq!(moved[0].0, old, "round {round}: from its buffer");
        if moved[0].1 == pooled {
            relocated += 1;
        }
        // The old buffer goes to the next region of the size: its data must survive the
        // old buffer's discard.
        let other = pattern(round as u32 + 101, size);
        b.allocate(z, size).unwrap();
        b.kernel_store(z, 0, &other).unwrap();
        read_kernel(&mut b, z, size);
        b.synchronize().unwrap();
        for (id, want) in [(x, &data), (z, &other)] {
            pages_wrong(&mut b, id, want, &mut wrong, round);
        }
        b.free(x).unwrap();
        b.free(z).unwrap();
    }
    assert!(wrong.is_empty(), "data lost: {wrong:?}");
    assert_eq!(relocated, 12, "every round relocated into the pooled buffer");
    let s = b.stats();
    assert!(s.peak_device_bytes <= budget, "{s:?}");
    // Three regions' buffers are freed into the pool every round: the pool gives pages
    // back as data needs the room, and never holds more than the data leaves free.
    assert!(s.peak_footprint_bytes <= budget, "pooled pages over the budget: {s:?}");
}

/// Reads region `id` back and notes in `wrong` how many of its 4 KiB pages differ from `want`.
fn pages_wrong<B: MemoryBackend>(b: &mut B, id: RegionId, want: &[u8], wrong: &mut Vec<String>, round: u64) {
    let mut seen = vec![0u8; want.len()];
    b.read(id, 0, &mut seen).unwrap();
    let bad = seen.chunks(4096).zip(want.chunks(4096)).filter(|(a, b)| a != b).count();
    if bad > 0 {
        wrong.push(format!("round {round}, region {id}: {bad} of {} pages", want.len() / 4096));
    }
}

/// The `Relocated` moves of `id` in `events`, as (from, to).
fn moves(events: &[MemEvent], id: RegionId) -> Vec<(u64, u64)> {
    events
        .iter()
        .filter_map(|e| match *e {
            MemEvent::Relocated { region, from, to, .. } if region == id => Some((from, to)),
            _ => None,
        })
        .collect()
}

/// With relocation allowed, a region staged whole while another of its size waits staged
/// whole swaps out: its buffer goes to the pool with its pages on the device, and it takes
/// another (`Relocated`). The waiting region then comes back into those pages, or, where
/// data needs the room first, the pages are shed and go back to their region. Every way,
/// both regions keep every byte (256 MiB each, eight rounds: 4 GiB through the swaps on the
/// GPU), and the footprint keeps to the budget.
fn a_region_swapped_out_keeps_its_data_every_way_back<B: Open>() {
    let size = 256 * B::MIB;
    let budget = 1024 * B::MIB;
    let mut b = B::open(budget, 1024 * B::MIB, 1024 * B::MIB).relocating();
    b.record_events(true);
    let mut wrong = Vec::new();
    for round in 0..8u64 {
        let (x, y, big) =
            (RegionId(2000 + round * 3), RegionId(2001 + round * 3), RegionId(2002 + round * 3));
        let (dx, dy) = (pattern(round as u32 + 31, size), pattern(round as u32 + 71, size));
        let x_at = b.allocate(x, size).unwrap();
        b.allocate(y, size).unwrap();
        b.prefetch(&[ByteRange::whole(x, size), ByteRange::whole(y, size)], Location::DEVICE).unwrap();
        b.kernel_store(x, 0, &dx).unwrap();
        b.kernel_store(y, 0, &dy).unwrap();
        b.stage_out(&[ByteRange::whole(y, size)]).unwrap();
        b.stage_out(&[ByteRange::whole(x, size)]).unwrap();
        let mut events = Vec::new();
        b.drain_events(&mut events);
        let out = moves(&events, x);
        assert_eq!(out.len(), 1, "round {round}: x swapped out once");
        assert_eq!(out[0].0, x_at, "round {round}: x left its own buffer");
        if round % 2 == 0 {
            // y comes back into x's pages.
            read_kernel(&mut b, y, size);
            b.drain_events(&mut events);
            assert!(
                moves(&events, y).iter().any(|&(_, to)| to == x_at),
                "round {round}: y relocated into x's old buffer: {:?}",
                moves(&events, y)
            );
        } else {
            // Data takes the whole device: the pooled pages are shed, back to x.
            b.allocate(big, budget).unwrap();
            b.prefetch(&[ByteRange::whole(big, budget)], Location::DEVICE).unwrap();
            read_kernel(&mut b, big, budget);
            b.drain_events(&mut events);
            assert!(
                moves(&events, x).iter().any(|&(_, to)| to == x_at),
                "round {round}: x's buffer came back to it: {:?}",
                moves(&events, x)
            );
            b.free(big).unwrap();
        }
        read_kernel(&mut b, x, size);
        read_kernel(&mut b, y, size);
        b.synchronize().unwrap();
        for (id, want) in [(x, &dx), (y, &dy)] {
            pages_wrong(&mut b, id, want, &mut wrong, round);
        }
        b.free(x).unwrap();
        b.free(y).unwrap();
    }
    assert!(wrong.is_empty(), "data lost: {wrong:?}");
    let s = b.stats();
    assert!(s.peak_footprint_bytes <= budget, "over the budget: {s:?}");
}

/// With relocation allowed, a prefetch right behind the stage-outs of the regions it asks for:
/// one staged out and settled, one whose stage-out (a swap-out) the device is still running,
/// which the prefetch leaves out; the kernel (even rounds) or the host (odd rounds) that reads
/// it next brings it back. Every byte of all three regions comes back (256 MiB each, four
/// rounds).
fn a_prefetch_behind_a_swap_out_leaves_it_and_every_byte_comes_back<B: Open>() {
    let size = 256 * B::MIB;
    let budget = 1024 * B::MIB;
    let mut b = B::open(budget, 1024 * B::MIB, 1024 * B::MIB).relocating();
    let mut wrong = Vec::new();
    for round in 0..4u64 {
        let ids = [0, 1, 2].map(|i| RegionId(3000 + round * 3 + i));
        let data = ids.map(|id| pattern(id.0 as u32, size));
        for (id, d) in ids.iter().zip(&data) {
            b.allocate(*id, size).unwrap();
            b.prefetch(&[ByteRange::whole(*id, size)], Location::DEVICE).unwrap();
            b.kernel_store(*id, 0, d).unwrap();
        }
        let [x, y, z] = ids;
        b.stage_out(&[ByteRange::whole(z, size)]).unwrap();
        b.synchronize().unwrap();
        // Each swaps out (another region of its size waits staged whole).
        b.stage_out(&[ByteRange::whole(x, size)]).unwrap();
        b.stage_out(&[ByteRange::whole(y, size)]).unwrap();
        b.prefetch(&[ByteRange::whole(y, size), ByteRange::whole(z, size)], Location::DEVICE).unwrap();
        if round % 2 == 0 {
            read_kernel(&mut b, y, size);
        }
        pages_wrong(&mut b, y, &data[1], &mut wrong, round);
        read_kernel(&mut b, x, size);
        read_kernel(&mut b, z, size);
        b.synchronize().unwrap();
        for (id, want) in ids.iter().zip(&data) {
            pages_wrong(&mut b, *id, want, &mut wrong, round);
        }
        for id in ids {
            b.free(id).unwrap();
        }
    }
    assert!(wrong.is_empty(), "data lost: {wrong:?}");
    let s = b.stats();
    assert!(s.peak_footprint_bytes <= budget, "over the budget: {s:?}");
}

/// With relocation allowed, read-mostly regions staged whole swap out and come back into
/// each other's pages like any (their advice dropped as they move): x and y (read-mostly,
/// 256 MiB each) staged out in turn, y swapping out while x waits staged; x then relocates
/// into y's old pages. Both read back as written by a kernel and by the host, and once
/// read-mostly is unset (as a policy must before a kernel writes) a kernel writes x anew and
/// it reads back (four rounds: 3 GiB through the moves on the GPU).
fn read_mostly_regions_swap_and_relocate_with_their_data<B: Open>() {
    let size = 256 * B::MIB;
    let budget = 1024 * B::MIB;
    let mut b = B::open(budget, 1024 * B::MIB, 1024 * B::MIB).relocating();
    b.record_events(true);
    let mut wrong = Vec::new();
    for round in 0..4u64 {
        let (x, y) = (RegionId(7000 + 2 * round), RegionId(7001 + 2 * round));
        let data = [pattern(x.0 as u32, size), pattern(y.0 as u32, size)];
        for (id, d) in [x, y].iter().zip(&data) {
            b.allocate(*id, size).unwrap();
            b.prefetch(&[ByteRange::whole(*id, size)], Location::DEVICE).unwrap();
            b.kernel_store(*id, 0, d).unwrap();
            b.advise(ByteRange::whole(*id, size), Advice::SetReadMostly).unwrap();
        }
        b.stage_out(&[ByteRange::whole(x, size)]).unwrap();
        b.synchronize().unwrap();
        let mut events = Vec::new();
        b.drain_events(&mut events);
        b.stage_out(&[ByteRange::whole(y, size)]).unwrap();
        b.synchronize().unwrap();
        b.prefetch(&[ByteRange::whole(x, size)], Location::DEVICE).unwrap();
        events.clear();
        b.drain_events(&mut events);
        let moved = moves(&events, x);
        assert_eq!(moved.len(), 1, "round {round}: x relocated once: {moved:?}");
        read_kernel(&mut b, x, size);
        read_kernel(&mut b, y, size);
        b.synchronize().unwrap();
        pages_wrong(&mut b, x, &data[0], &mut wrong, round);
        pages_wrong(&mut b, y, &data[1], &mut wrong, round);
        let again = pattern(x.0 as u32 + 99, size);
        b.advise(ByteRange::whole(x, size), Advice::UnsetReadMostly).unwrap();
        b.prefetch(&[ByteRange::whole(x, size)], Location::DEVICE).unwrap();
        b.kernel_store(x, 0, &again).unwrap();
        b.synchronize().unwrap();
        pages_wrong(&mut b, x, &again, &mut wrong, round);
        for id in [x, y] {
            b.free(id).unwrap();
        }
    }
    assert!(wrong.is_empty(), "data lost: {wrong:?}");
    let s = b.stats();
    assert!(s.peak_footprint_bytes <= budget, "over the budget: {s:?}");
}

/// Where regions keep their addresses (a program's), read-mostly data staged out comes back
/// into its own pages, by a prefetch and by a kernel, with its read-mostly advice unset
/// first (a copy into read-mostly pages took 7.5 ms per 2 MiB block on the H200): every
/// byte as written; a host read then moves it to the host rather than duplicating it, and a
/// kernel may write it (four rounds: 2 GiB through the restores on the GPU).
fn read_mostly_data_restored_in_place_keeps_its_bytes_and_leaves_its_advice<B: Open>() {
    let size = 256 * B::MIB;
    let mut b = B::open(1024 * B::MIB, 1024 * B::MIB, 1024 * B::MIB);
    let mut wrong = Vec::new();
    for round in 0..4u64 {
        let x = RegionId(7100 + round);
        let whole = ByteRange::whole(x, size);
        let data = pattern(x.0 as u32, size);
        b.allocate(x, size).unwrap();
        b.prefetch(&[whole], Location::DEVICE).unwrap();
        b.kernel_store(x, 0, &data).unwrap();
        b.advise(whole, Advice::SetReadMostly).unwrap();
        b.stage_out(&[whole]).unwrap();
        b.synchronize().unwrap();
        assert_eq!(b.residency(whole).unwrap().staged, size, "round {round}: staged whole");
        if round % 2 == 0 {
            b.prefetch(&[whole], Location::DEVICE).unwrap();
        }
        read_kernel(&mut b, x, size);
        b.synchronize().unwrap();
        assert_eq!(b.residency(whole).unwrap().device, size, "round {round}: back on the device");
        pages_wrong(&mut b, x, &data, &mut wrong, round);
        let r = b.residency(whole).unwrap();
        assert_eq!(
            r.duplicated, 0,
            "round {round}: the advice is gone, so a host read duplicates nothing: {r:?}"
        );
        let again = pattern(x.0 as u32 + 99, size);
        b.prefetch(&[whole], Location::DEVICE).unwrap();
        b.kernel_store(x, 0, &again).unwrap();
        b.synchronize().unwrap();
        pages_wrong(&mut b, x, &again, &mut wrong, round);
        b.free(x).unwrap();
    }
    assert!(wrong.is_empty(), "data lost: {wrong:?}");
}

/// Data restored from staging and not written since goes out again without a copy (its slot
/// still holds it); written, it is copied again; the bytes are right every time, read back
/// by the host and by a kernel.
fn clean_restored_data_is_staged_again_without_a_copy<B: Open>() {
    let size = 64 * B::MIB;
    let mut b = B::open(4 * size, 4 * size, 4 * size);
    let (id, whole) = (RegionId(1), ByteRange::whole(RegionId(1), size));
    let check = |b: &mut B, want: &[u8], what: &str| {
        let mut seen = vec![0u8; want.len()];
        b.kernel_view(id, 0, &mut seen).unwrap();
        assert!(seen == want, "{what}: a kernel sees other bytes");
    };
    b.allocate(id, size).unwrap();
    let first = pattern(21, size);
    b.prefetch(&[whole], Location::DEVICE).unwrap();
    b.kernel_store(id, 0, &first).unwrap();
    read_kernel(&mut b, id, size);
    b.stage_out(&[whole]).unwrap();
    b.synchronize().unwrap();
    b.prefetch(&[whole], Location::DEVICE).unwrap(); // restored: the slot keeps its copy
    read_kernel(&mut b, id, size);
    b.synchronize().unwrap();
    check(&mut b, &first, "restored");
    let before = b.stats();
    b.stage_out(&[whole]).unwrap();
    let after = b.stats();
    assert_eq!(after.staged_clean_bytes - before.staged_clean_bytes, size, "{after:?}");
    assert_eq!(after.d2h_bytes, before.d2h_bytes, "no copy out: {after:?}");
    assert_eq!(b.residency(whole).unwrap().staged, size);
    b.synchronize().unwrap();
    b.prefetch(&[whole], Location::DEVICE).unwrap();
    read_kernel(&mut b, id, size);
    b.synchronize().unwrap();
    check(&mut b, &first, "staged again without a copy, restored");
    // Written on the device: the slot's copy is stale, so the next stage-out copies.
    let second = pattern(22, size);
    b.kernel_store(id, 0, &second).unwrap();
    check(&mut b, &second, "written after the restore");
    let before = b.stats();
    b.stage_out(&[whole]).unwrap();
    let after = b.stats();
    assert_eq!(after.staged_clean_bytes, before.staged_clean_bytes, "{after:?}");
    assert_eq!(after.d2h_bytes - before.d2h_bytes, size, "copied out: {after:?}");
    b.synchronize().unwrap();
    let mut seen = vec![0u8; size as usize];
    b.read(id, 0, &mut seen).unwrap();
    let wrong: Vec<usize> = seen
        .chunks(4096)
        .zip(second.chunks(4096))
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, _)| i)
        .collect();
    let first_pages =
        wrong.iter().filter(|&&p| seen[p * 4096..][..4096] == first[p * 4096..][..4096]).count();
    assert!(
        wrong.is_empty(),
        "written, staged and read back by the host: {} of {} pages wrong ({first_pages} hold the first data), from page {:?}",
        wrong.len(),
        size / 4096,
        wrong.first()
    );
}

/// Device-written data staged out and read by the host with nothing else run in between
/// (on the H200 a copy into its freshly discarded pages read back as zeros), and a host read
/// that finds it staged again after a restore and a write on the device.
fn data_staged_from_the_device_is_read_straight_back_by_the_host<B: Open>() {
    let size = 64 * B::MIB;
    let mut b = B::open(4 * size, 4 * size, 4 * size);
    let (id, whole) = (RegionId(1), ByteRange::whole(RegionId(1), size));
    b.allocate(id, size).unwrap();
    let mut seen = vec![0u8; size as usize];
    for round in 0..3u32 {
        let data = pattern(30 + round, size);
        b.prefetch(&[whole], Location::DEVICE).unwrap();
        b.kernel_store(id, 0, &data).unwrap();
        if round == 1 {
            read_kernel(&mut b, id, size);
        }
        b.stage_out(&[whole]).unwrap();
        if round != 2 {
            b.synchronize().unwrap();
        }
        b.read(id, 0, &mut seen).unwrap();
        let wrong = seen.chunks(4096).zip(data.chunks(4096)).filter(|(a, b)| a != b).count();
        assert_eq!(wrong, 0, "round {round}: pages wrong of {}", size / 4096);
    }
    assert_eq!(b.stats().staged_in_bytes, 3 * size);
}
