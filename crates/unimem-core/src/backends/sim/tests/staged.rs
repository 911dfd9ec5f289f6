//! Staged evictions: copies out, clean copies, restores and their costs.

use super::*;

/// Staged evictions: device-written data goes to the staging buffers (not the host's managed
/// pages), comes back intact by a prefetch, a kernel or a host read, and what the buffers
/// cannot hold migrates as before.
#[test]
fn staged_evictions_keep_data_and_fall_back_to_migration_when_full() {
    let mut s = sim(64 * MIB).with_staging(8 * MIB);
    assert_eq!(s.staging_capacity(), 8 * MIB);
    let data: Vec<Vec<u8>> = (0..3).map(|i| pattern(i as u8 + 1, (4 * MIB) as usize)).collect();
    for (i, d) in data.iter().enumerate() {
        s.allocate(RegionId(i as u64), 4 * MIB).unwrap();
        s.kernel_write(RegionId(i as u64), 0, d).unwrap();
    }
    let all: Vec<ByteRange> = (0..3).map(|i| whole(i, 4 * MIB)).collect();
    s.stage_out(&all).unwrap();
    let st = s.stats();
    assert_eq!(st.staged_out_bytes, 8 * MIB, "two regions fit: {st:?}");
    assert_eq!(st.prefetch_d2h_bytes, 4 * MIB, "the third migrated: {st:?}");
    assert_eq!(s.residency(whole(0, 4 * MIB)).unwrap().staged, 4 * MIB);
    assert_eq!(s.residency(whole(2, 4 * MIB)).unwrap().host, 4 * MIB);
    assert_eq!(s.device_resident_bytes(), 0);
    // Back by a prefetch and by a kernel; the third by a host read. (The copies out are done
    // first: the migration's call returned before them, and a prefetch right behind its
    // stage-out leaves the restore to the kernel.)
    s.synchronize().unwrap();
    s.prefetch(&[whole(0, 4 * MIB)], Location::DEVICE).unwrap();
    assert_eq!(s.residency(whole(0, 4 * MIB)).unwrap().device, 4 * MIB);
    let mut seen = vec![0; (4 * MIB) as usize];
    s.kernel_read(RegionId(1), 0, &mut seen).unwrap();
    assert!(seen == data[1], "a kernel sees the staged bytes");
    assert_eq!(s.stats().gpu_faults, 3, "no faults beyond the first writes: restored, not faulted");
    for (i, d) in data.iter().enumerate() {
        assert!(read_back(&mut s, i as u64, d.len()) == *d, "region {i}");
    }
    assert_eq!(s.stats().staged_in_bytes, 8 * MIB);
    // Staged data read by the host first comes back to the host.
    s.kernel_write(RegionId(0), 0, &data[2]).unwrap();
    s.stage_out(&[whole(0, 4 * MIB)]).unwrap();
    assert!(read_back(&mut s, 0, data[2].len()) == data[2]);
    assert_eq!(s.residency(whole(0, 4 * MIB)).unwrap().host, 4 * MIB);
    // Freeing or discarding staged data gives its room back.
    s.kernel_write(RegionId(1), 0, &data[0]).unwrap();
    s.kernel_write(RegionId(2), 0, &data[0]).unwrap();
    s.stage_out(&all[1..]).unwrap();
    s.free(RegionId(1)).unwrap();
    s.discard(&[whole(2, 4 * MIB)]).unwrap();
    assert_eq!(s.residency(whole(2, 4 * MIB)).unwrap().staged, 0);
    s.kernel_write(RegionId(0), 0, &data[1]).unwrap();
    let before = s.stats().staged_out_bytes;
    s.stage_out(&[whole(0, 4 * MIB)]).unwrap();
    assert_eq!(s.stats().staged_out_bytes - before, 4 * MIB, "room again");
}

/// A staged eviction costs the copy rate (52.3 GB/s) instead of the migration rate (16.8 GB/s),
/// and shares the link with a prefetch coming in: on the H200 the two ran one after the other.
#[test]
fn staged_evictions_copy_at_the_copy_rate_on_the_shared_link() {
    let cost = CostModel::h200();
    let time = |staging: u64| {
        let mut s = sim(1 << 30).with_staging(staging);
        s.allocate(RegionId(1), 256 * MIB).unwrap();
        s.allocate(RegionId(2), 256 * MIB).unwrap();
        s.preload_host(whole(2, 256 * MIB)).unwrap();
        let acc = [RangeAccess { region: RegionId(1), offset: 0, len: 256 * MIB, mode: AccessMode::Write }];
        s.prefetch(&[whole(1, 256 * MIB)], Location::DEVICE).unwrap();
        s.launch(&KernelLaunch { name: "w", dur_ns: 0, accesses: &acc }).unwrap();
        let t0 = s.synchronize().unwrap();
        s.stage_out(&[whole(1, 256 * MIB)]).unwrap();
        s.prefetch(&[whole(2, 256 * MIB)], Location::DEVICE).unwrap();
        s.synchronize().unwrap() - t0
    };
    let (migrated, staged) = (time(0), time(1 << 30));
    let copy = CostModel::transfer_ns(256 * MIB, cost.stage_d2h_rate_gbps);
    let fetch = CostModel::transfer_ns(256 * MIB, cost.prefetch_h2d_rate_gbps);
    assert!(staged >= fetch + copy, "one after the other: {staged} ns");
    assert!(staged < fetch + copy + 2 * cost.prefetch_call_ns, "{staged} ns");
    assert!(migrated * 10 > 18 * staged, "migration {migrated} ns vs staged {staged} ns");
}

/// A first prefetch of fresh pages populates them without a transfer: beside a stage-out it
/// takes no link time, but runs at `populate_beside_stage_out_rate_gbps` while the stage-out
/// lasts (on the H200 the driver's population crawls beside the stage-outs' discards), and on
/// the `h2d` stream, where the CUDA backend queues it, it waits for the restore queued before it.
#[test]
fn a_population_runs_slowly_beside_a_stage_out_and_behind_a_restore_on_its_stream() {
    let cost = CostModel::h200();
    let populate =
        cost.prefetch_call_ns + CostModel::transfer_ns(256 * MIB, cost.prefetch_populate_rate_gbps);
    let copy_out = CostModel::transfer_ns(256 * MIB, cost.stage_d2h_rate_gbps);
    let written = |s: &mut SimBackend, id: u64| {
        s.allocate(RegionId(id), 256 * MIB).unwrap();
        let acc = [RangeAccess { region: RegionId(id), offset: 0, len: 256 * MIB, mode: AccessMode::Write }];
        s.prefetch(&[whole(id, 256 * MIB)], Location::DEVICE).unwrap();
        s.launch(&KernelLaunch { name: "w", dur_ns: 0, accesses: &acc }).unwrap();
    };
    // Beside a stage-out: slowly while the stage-out runs, then at its own rate; the link
    // carries the stage-out alone.
    let mut s = sim(1 << 30).with_staging(1 << 30);
    written(&mut s, 1);
    s.allocate(RegionId(2), 256 * MIB).unwrap();
    let t0 = s.synchronize().unwrap();
    s.stage_out(&[whole(1, 256 * MIB)]).unwrap();
    s.prefetch(&[whole(2, 256 * MIB)], Location::DEVICE).unwrap();
    let t = s.synchronize().unwrap() - t0;
    let slow_bytes = (copy_out as f64 * cost.populate_beside_stage_out_rate_gbps) as u64;
    let expected =
        copy_out + CostModel::transfer_ns(256 * MIB - slow_bytes, cost.prefetch_populate_rate_gbps);
    assert!(
        t * 10 >= expected * 9 && t * 10 <= expected * 11,
        "beside: {t} ns, expected about {expected} (copy {copy_out}, population alone {populate})"
    );
    assert!(t < copy_out + CostModel::transfer_ns(256 * MIB, cost.populate_beside_stage_out_rate_gbps));
    // Behind a restore on the stream: one after the other.
    written(&mut s, 3);
    s.stage_out(&[whole(3, 256 * MIB)]).unwrap();
    s.allocate(RegionId(4), 256 * MIB).unwrap();
    let t0 = s.synchronize().unwrap();
    s.prefetch(&[whole(3, 256 * MIB)], Location::DEVICE).unwrap();
    let restored = s.synchronize().unwrap() - t0;
    s.stage_out(&[whole(3, 256 * MIB)]).unwrap();
    let t0 = s.synchronize().unwrap();
    s.prefetch(&[whole(3, 256 * MIB)], Location::DEVICE).unwrap();
    s.prefetch(&[whole(4, 256 * MIB)], Location::DEVICE).unwrap();
    let t = s.synchronize().unwrap() - t0;
    assert!(
        t >= restored + populate - cost.prefetch_call_ns,
        "behind: {t} ns, restore {restored}, population {populate}"
    );
}

/// Staged data a kernel needs that no prefetch brought back is restored for the kernel: the
/// CUDA backend repopulates the discarded pages with a prefetch call, one range per 2 MiB block
/// (`stage_h2d_block_ns` each, the driver's work), and copies the slots in, so the kernel waits for
/// the call's cost and the blocks' as well as the copy.
#[test]
fn a_kernel_waits_for_the_restore_of_staged_data_with_its_call() {
    let cost = CostModel::h200();
    let mut s = sim(1 << 30).with_staging(1 << 30);
    s.allocate(RegionId(1), 64 * MIB).unwrap();
    let acc = [RangeAccess { region: RegionId(1), offset: 0, len: 64 * MIB, mode: AccessMode::Read }];
    s.kernel_write(RegionId(1), 0, &pattern(3, (64 * MIB) as usize)).unwrap();
    s.stage_out(&[whole(1, 64 * MIB)]).unwrap();
    let t0 = s.synchronize().unwrap();
    s.launch(&KernelLaunch { name: "r", dur_ns: 0, accesses: &acc }).unwrap();
    let t = s.synchronize().unwrap() - t0;
    let copy = CostModel::transfer_ns(64 * MIB, cost.stage_h2d_rate_gbps);
    assert_eq!(t, cost.batch_range_ns + 32 * cost.stage_h2d_block_ns + copy, "one call, 32 blocks, the copy");
}

/// With relocation allowed, a wholly staged region that a kernel needs back comes into a pooled
/// buffer of its size with pages on the device, as the CUDA backend's: no repopulation per
/// block, the copy at the rate into resident pages; without a pooled buffer of the size, or
/// with relocation off, the restore repopulates as before.
#[test]
fn a_wholly_staged_region_comes_back_into_pooled_pages_without_repopulation() {
    let cost = CostModel::h200();
    let restore_time = |relocate: bool, same_size: bool| {
        let mut s = sim(1 << 30).with_staging(1 << 30).with_relocation(relocate);
        s.allocate(RegionId(1), 64 * MIB).unwrap();
        s.kernel_write(RegionId(1), 0, &pattern(3, (64 * MIB) as usize)).unwrap();
        let other = if same_size { 64 * MIB } else { 96 * MIB };
        s.allocate(RegionId(2), other).unwrap();
        s.kernel_write(RegionId(2), 0, &pattern(4, other as usize)).unwrap();
        s.free(RegionId(2)).unwrap();
        s.stage_out(&[whole(1, 64 * MIB)]).unwrap();
        let t0 = s.synchronize().unwrap();
        let acc = [RangeAccess { region: RegionId(1), offset: 0, len: 64 * MIB, mode: AccessMode::Read }];
        s.launch(&KernelLaunch { name: "r", dur_ns: 0, accesses: &acc }).unwrap();
        let t = s.synchronize().unwrap() - t0;
        assert_eq!(s.residency(whole(1, 64 * MIB)).unwrap().device, 64 * MIB);
        assert!(read_back(&mut s, 1, (64 * MIB) as usize) == pattern(3, (64 * MIB) as usize));
        t
    };
    let repopulated = cost.batch_range_ns
        + 32 * cost.stage_h2d_block_ns
        + CostModel::transfer_ns(64 * MIB, cost.stage_h2d_rate_gbps);
    let relocated = cost.batch_range_ns + CostModel::transfer_ns(64 * MIB, cost.stage_h2d_resident_rate_gbps);
    assert_eq!(restore_time(true, true), relocated);
    assert_eq!(restore_time(false, true), repopulated, "relocation off");
    assert_eq!(restore_time(true, false), repopulated, "no pooled buffer of its size");
}

/// A relocated region brought back in two parts (a prefetch of half of it, then a kernel
/// needing the rest) copies both into the pooled buffer's pages: no repopulation for either.
#[test]
fn the_rest_of_a_relocated_region_comes_back_into_its_new_pages() {
    let cost = CostModel::h200();
    let mut s = sim(1 << 30).with_staging(1 << 30).with_relocation(true);
    for id in [1, 2] {
        s.allocate(RegionId(id), 64 * MIB).unwrap();
        s.kernel_write(RegionId(id), 0, &pattern(id as u8, (64 * MIB) as usize)).unwrap();
    }
    s.free(RegionId(2)).unwrap();
    s.stage_out(&[whole(1, 64 * MIB)]).unwrap();
    let t0 = s.synchronize().unwrap();
    let half = ByteRange { region: RegionId(1), offset: 0, len: 32 * MIB };
    s.prefetch(&[half], Location::DEVICE).unwrap();
    assert_eq!(s.residency(whole(1, 64 * MIB)).unwrap().staged, 32 * MIB);
    let acc = [RangeAccess { region: RegionId(1), offset: 0, len: 64 * MIB, mode: AccessMode::Read }];
    s.launch(&KernelLaunch { name: "r", dur_ns: 0, accesses: &acc }).unwrap();
    let t = s.synchronize().unwrap() - t0;
    let copy = CostModel::transfer_ns(32 * MIB, cost.stage_h2d_resident_rate_gbps);
    assert_eq!(
        t,
        cost.prefetch_call_ns + copy + cost.batch_range_ns + copy,
        "two calls, two copies, no blocks"
    );
    assert!(read_back(&mut s, 1, (64 * MIB) as usize) == pattern(1, (64 * MIB) as usize));
}

/// Prefetches of staged data hold the host only for their calls: the CUDA backend repopulates
/// on a stream of its own behind a short kernel, so the driver does that work later, between
/// the copies (on the H200 about 30 us per block after the copy before, whichever stream),
/// and the second call is issued while the first restore is still on the link.
#[test]
fn prefetches_of_staged_data_repopulate_between_the_copies_without_holding_the_host() {
    let cost = CostModel::h200();
    let mut s = sim(1 << 30).with_staging(1 << 30);
    for id in [1, 2] {
        s.allocate(RegionId(id), 128 * MIB).unwrap();
        s.kernel_write(RegionId(id), 0, &pattern(id as u8, (128 * MIB) as usize)).unwrap();
    }
    s.stage_out(&[whole(1, 128 * MIB), whole(2, 128 * MIB)]).unwrap();
    let t0 = s.synchronize().unwrap();
    s.prefetch(&[whole(1, 128 * MIB)], Location::DEVICE).unwrap();
    s.prefetch(&[whole(2, 128 * MIB)], Location::DEVICE).unwrap();
    let restore = 64 * cost.stage_h2d_block_ns + CostModel::transfer_ns(128 * MIB, cost.stage_h2d_rate_gbps);
    assert!(s.host_now - t0 == 2 * cost.prefetch_call_ns, "the host: two calls, no waiting");
    let t = s.synchronize().unwrap() - t0;
    assert_eq!(t, cost.prefetch_call_ns + 2 * restore, "the restores back to back on the link");
    assert_eq!(s.residency(whole(2, 128 * MIB)).unwrap().device, 128 * MIB);
    assert!(read_back(&mut s, 2, (128 * MIB) as usize) == pattern(2, (128 * MIB) as usize));
}

/// A prefetch leaves out staged data whose stage-out has not ended yet (the CUDA backend does
/// the same: on the H200, repopulating pages soon after their discard and copying into them
/// fell to 0.6-1 GB/s); a prefetch after the end restores it, counted as prefetched, and a
/// kernel needing it first restores it itself.
#[test]
fn a_prefetch_leaves_staged_data_whose_stage_out_has_not_ended() {
    let mut s = sim(1 << 30).with_staging(1 << 30);
    let data = pattern(5, (64 * MIB) as usize);
    for id in [1, 2] {
        s.allocate(RegionId(id), 64 * MIB).unwrap();
        s.kernel_write(RegionId(id), 0, &data).unwrap();
    }
    s.synchronize().unwrap();
    // Region 2's copies queue behind region 1's: none has ended when the prefetch comes.
    s.stage_out(&[whole(1, 64 * MIB), whole(2, 64 * MIB)]).unwrap();
    s.prefetch(&[whole(2, 64 * MIB)], Location::DEVICE).unwrap();
    assert_eq!(s.residency(whole(2, 64 * MIB)).unwrap().staged, 64 * MIB, "left out");
    assert_eq!(s.stats().prefetch_arrived_bytes, 0);
    // After the end, a prefetch restores it.
    s.synchronize().unwrap();
    s.prefetch(&[whole(2, 64 * MIB)], Location::DEVICE).unwrap();
    assert_eq!(s.residency(whole(2, 64 * MIB)).unwrap().device, 64 * MIB);
    assert_eq!(s.stats().prefetch_arrived_bytes, 64 * MIB);
    // A kernel needing data a prefetch left out restores it.
    s.kernel_write(RegionId(2), 0, &data).unwrap();
    s.synchronize().unwrap();
    s.stage_out(&[whole(2, 64 * MIB)]).unwrap();
    // Its last block: copied last.
    let last = ByteRange { region: RegionId(2), offset: 62 * MIB, len: 2 * MIB };
    s.prefetch(&[last], Location::DEVICE).unwrap();
    assert_eq!(s.residency(last).unwrap().staged, 2 * MIB, "left out again");
    let mut seen = vec![0; data.len()];
    s.kernel_read(RegionId(2), 0, &mut seen).unwrap();
    assert!(seen == data, "the kernel restored it");
    assert!(read_back(&mut s, 1, data.len()) == data, "the other staged region");
    assert_eq!(s.stats().prefetch_arrived_bytes, 64 * MIB, "the kernel's restore is not a prefetch's");
}

/// Found by the property test: a kernel touching part of a staged block faults in whole 64 KiB
/// units, so the pages around its range must come back from staging too, or the fault would
/// populate them with zeros while their data sat in the staging buffers.
#[test]
fn a_partial_touch_of_staged_data_brings_back_its_whole_fault_units() {
    let mut s = sim(64 * MIB).with_staging(8 * MIB);
    let data = pattern(9, (2 * MIB) as usize);
    s.allocate(RegionId(1), 2 * MIB).unwrap();
    s.kernel_write(RegionId(1), 0, &data).unwrap();
    s.stage_out(&[whole(1, 2 * MIB)]).unwrap();
    // One page in the middle of a 64 KiB unit.
    let mut page = vec![0; 4096];
    s.kernel_read(RegionId(1), 40960, &mut page).unwrap();
    assert!(page[..] == data[40960..45056]);
    let r = s.residency(whole(1, 2 * MIB)).unwrap();
    assert_eq!(r.device, 64 << 10, "the fault unit around the page: {r:?}");
    assert_eq!(r.staged, 2 * MIB - (64 << 10), "{r:?}");
    assert!(read_back(&mut s, 1, data.len()) == data, "no byte lost around the touched page");
}

/// Found by comparing the sample tables before and after staging: without staging memory,
/// `stage_out` migrated block by block, a prefetch range (57-70 us on the H200) per 2 MiB
/// block, where `prefetch` to the host takes the caller's ranges whole. The blocks it migrates
/// go as the ranges they came in.
#[test]
fn stage_out_without_room_migrates_the_ranges_it_was_given_whole() {
    let mut s = sim(64 * MIB);
    s.allocate(RegionId(1), 6 * MIB).unwrap();
    let acc = [RangeAccess { region: RegionId(1), offset: 0, len: 6 * MIB, mode: AccessMode::Write }];
    s.launch(&KernelLaunch { name: "w", dur_ns: 0, accesses: &acc }).unwrap();
    let before = s.stats().prefetch_ranges;
    s.stage_out(&[whole(1, 6 * MIB)]).unwrap();
    let st = s.stats();
    assert_eq!(st.prefetch_ranges - before, 1, "one range, not one per block: {st:?}");
    assert_eq!(st.prefetch_d2h_bytes, 6 * MIB);
    // Its host time is the prefetch's, as the CUDA backend counts it: nothing was staged.
    assert!(st.host.prefetch_to_host > 0 && st.host.stage_out == 0, "{:?}", st.host);
}

/// A stage-out of data restored and not written since copies nothing, and its end waits for
/// the block's kernels only, not for the link: a restore of other data still on the link does
/// not make a prefetch right behind it leave the clean data out (the CUDA backend's discard
/// runs on a stream of its own).
#[test]
fn a_clean_stage_out_waits_for_its_kernels_not_for_the_link() {
    let mut s = sim(1 << 30).with_staging(1 << 30);
    for id in [1, 2] {
        s.allocate(RegionId(id), 64 * MIB).unwrap();
        s.kernel_write(RegionId(id), 0, &pattern(id as u8, (64 * MIB) as usize)).unwrap();
    }
    s.stage_out(&[whole(1, 64 * MIB), whole(2, 64 * MIB)]).unwrap();
    s.synchronize().unwrap();
    s.prefetch(&[whole(1, 64 * MIB)], Location::DEVICE).unwrap();
    s.synchronize().unwrap();
    // Region 2 comes back on the link while region 1, clean, goes out again.
    s.prefetch(&[whole(2, 64 * MIB)], Location::DEVICE).unwrap();
    let before = s.stats();
    s.stage_out(&[whole(1, 64 * MIB)]).unwrap();
    assert_eq!(s.stats().d2h_bytes, before.d2h_bytes, "nothing copied");
    assert_eq!(s.stats().staged_clean_bytes - before.staged_clean_bytes, 64 * MIB);
    s.prefetch(&[whole(1, 64 * MIB)], Location::DEVICE).unwrap();
    assert_eq!(s.residency(whole(1, 64 * MIB)).unwrap().device, 64 * MIB, "restored, not left out");
    assert!(read_back(&mut s, 1, (64 * MIB) as usize) == pattern(1, (64 * MIB) as usize));
}

/// In the device arena's model, room given up by a stage-out is there once its copy out is
/// done: a restore into a full device starts after it, where the managed model starts it at
/// once. Both copy the same bytes.
#[test]
fn room_after_copies_makes_a_restore_wait_for_the_copy_out() {
    let run = |after_copies: bool| {
        let cost = CostModel::h200().device_arena();
        let mut s = SimBackend::new(CostModel { launch_host_ns: 0, alloc_host_ns: 0, ..cost }, 64 * MIB)
            .with_staging(1 << 30)
            .with_room_after_copies(after_copies);
        for id in [1, 2] {
            s.allocate(RegionId(id), 64 * MIB).unwrap();
        }
        s.kernel_write(RegionId(2), 0, &pattern(2, (64 * MIB) as usize)).unwrap();
        s.stage_out(&[whole(2, 64 * MIB)]).unwrap();
        s.synchronize().unwrap();
        s.kernel_write(RegionId(1), 0, &pattern(1, (64 * MIB) as usize)).unwrap();
        // Region 1 fills the device: it goes out, region 2 comes back into its room.
        s.stage_out(&[whole(1, 64 * MIB)]).unwrap();
        s.prefetch(&[whole(2, 64 * MIB)], Location::DEVICE).unwrap();
        let t = s.synchronize().unwrap();
        assert!(read_back(&mut s, 2, (64 * MIB) as usize) == pattern(2, (64 * MIB) as usize));
        (t, s.stats().h2d_bytes)
    };
    let (at_issue, bytes_at_issue) = run(false);
    let (after, bytes_after) = run(true);
    assert_eq!(bytes_at_issue, bytes_after);
    // 64 MiB out at the link's rate (52.6 GB/s) comes first: about 1.3 ms more.
    let copy_out = CostModel::transfer_ns(64 * MIB, CostModel::h200().link_rate_gbps);
    assert!(after >= at_issue + copy_out * 9 / 10, "{after} vs {at_issue} + {copy_out}");
}

/// The arena's room: a restore takes the room free now, then that of the evictions ending
/// first, and what it took is not the next restore's.
#[test]
fn a_restore_takes_the_room_of_the_evictions_ending_first_and_keeps_it() {
    let mut s = sim(64 * MIB).with_room_after_copies(true);
    s.freeing = vec![(1_000_000, 32 * MIB), (500_000, 32 * MIB)];
    assert_eq!(s.room_free_at(16 * MIB), 500_000, "the earlier eviction's room");
    s.budget.add_data(16 * MIB);
    assert_eq!(s.room_free_at(16 * MIB), 500_000, "the rest of it");
    s.budget.add_data(16 * MIB);
    assert_eq!(s.room_free_at(32 * MIB), 1_000_000, "then the later one's");
    s.budget.add_data(32 * MIB);
    assert!(s.freeing.is_empty());
}

/// A write-back, as the device arena makes it: queued until the device is done with the
/// block's kernels by the host's clock, then copied into a kept staging copy with the data
/// left on the device; its eviction then copies nothing, one issued before the write-back is
/// due copies the data itself, a kernel writing after it makes the eviction copy again, and
/// every byte reads back as last written. Without write-backs (managed memory) it does nothing.
#[test]
fn a_write_back_keeps_a_copy_that_its_eviction_drops() {
    let size = 4 * MIB;
    let data: Vec<Vec<u8>> = (0..3).map(|i| pattern(i as u8 + 7, size as usize)).collect();
    let mut s = sim(64 * MIB).with_staging(64 * MIB).with_write_back(true);
    for (i, d) in data.iter().enumerate() {
        s.allocate(RegionId(i as u64), size).unwrap();
        s.kernel_write(RegionId(i as u64), 0, d).unwrap();
    }
    // Region 0 is written back once the host's clock has passed its kernel; region 1's
    // write-back is not due yet when it is evicted (a 10 ms kernel uses it).
    let d2h = |s: &SimBackend| s.stats().d2h_bytes;
    s.program_host_time(1_000_000_000);
    s.write_back(&[whole(0, size)]).unwrap();
    let acc = [RangeAccess { region: RegionId(1), offset: 0, len: size, mode: AccessMode::ReadWrite }];
    s.launch(&KernelLaunch { name: "k", dur_ns: 10_000_000, accesses: &acc }).unwrap();
    s.write_back(&[whole(1, size)]).unwrap();
    assert_eq!(s.residency(whole(0, size)).unwrap().device, size, "it stays on the device");
    let before = d2h(&s);
    s.stage_out(&[whole(0, size), whole(1, size)]).unwrap();
    let st = s.stats();
    assert_eq!(st.written_back_bytes, size, "region 0 only: {st:?}");
    assert_eq!(st.staged_clean_bytes, size, "its eviction copied nothing: {st:?}");
    assert_eq!(st.d2h_bytes - before, size, "region 1's eviction copied it: {st:?}");
    // Written again after its write-back, region 2's eviction copies the new bytes.
    s.program_host_time(2_000_000_000);
    s.write_back(&[whole(2, size)]).unwrap();
    s.synchronize().unwrap();
    assert_eq!(s.stats().written_back_bytes, size, "a synchronize drops what is not due yet");
    s.program_host_time(3_000_000_000);
    let before = s.stats();
    s.write_back(&[whole(2, size)]).unwrap();
    s.kernel_write(RegionId(2), 0, &data[0]).unwrap();
    s.stage_out(&[whole(2, size)]).unwrap();
    let st = s.stats();
    assert_eq!(st.written_back_bytes - before.written_back_bytes, size, "written back, then written");
    assert_eq!(st.staged_clean_bytes, before.staged_clean_bytes, "so its eviction copies: {st:?}");
    for (i, want) in [&data[0], &data[1], &data[0]].into_iter().enumerate() {
        assert!(read_back(&mut s, i as u64, size as usize) == *want, "region {i}");
    }
    // Managed memory keeps no copy of data on the device: nothing happens.
    let mut m = sim(64 * MIB).with_staging(64 * MIB);
    m.allocate(RegionId(0), size).unwrap();
    m.kernel_write(RegionId(0), 0, &data[0]).unwrap();
    m.program_host_time(1_000_000_000);
    m.write_back(&[whole(0, size)]).unwrap();
    m.stage_out(&[whole(0, size)]).unwrap();
    assert_eq!((m.stats().written_back_bytes, m.stats().staged_clean_bytes), (0, 0));
}
