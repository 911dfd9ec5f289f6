use proptest::prelude::*;

use super::*;
use crate::seam::MemoryBackendExt;
use crate::AccessMode;

const MIB: u64 = 1 << 20;

/// A simulator whose host costs of launches and allocations are zero: the tests of the
/// transfer model check exact times without them (they are tested on their own).
fn sim(capacity: u64) -> SimBackend {
    SimBackend::new(
        CostModel { launch_host_ns: 0, alloc_host_ns: 0, alloc_host_ns_per_gib: 0, ..CostModel::h200() },
        capacity,
    )
}

#[test]
fn launches_and_unpooled_allocations_cost_host_time() {
    let cost = CostModel::h200();
    let mut s = SimBackend::new(cost.clone(), 1 << 30);
    let id = RegionId(1);
    s.allocate(id, 4 * MIB).unwrap();
    let acc = [RangeAccess { region: id, offset: 0, len: 4 * MIB, mode: AccessMode::Write }];
    s.launch(&KernelLaunch { name: "first", dur_ns: 0, accesses: &acc }).unwrap();
    let after_first = s.synchronize().unwrap();
    // Kernels far shorter than a launch: the device waits for the host, one launch each.
    for _ in 0..100 {
        s.launch(&KernelLaunch { name: "short", dur_ns: 1_000, accesses: &acc }).unwrap();
    }
    let t = s.synchronize().unwrap();
    assert_eq!(t - after_first, 100 * cost.launch_host_ns + 1_000, "host-bound: one launch per kernel");
    // Long kernels hide their launches.
    for _ in 0..10 {
        s.launch(&KernelLaunch { name: "long", dur_ns: 1_000_000, accesses: &acc }).unwrap();
    }
    let t2 = s.synchronize().unwrap();
    assert_eq!(t2 - t, cost.launch_host_ns + 10 * 1_000_000, "device-bound after the first launch");
    // A freed buffer serves the next allocation of its size without cuMemAllocManaged.
    s.free(id).unwrap();
    let before = s.synchronize().unwrap();
    s.allocate(RegionId(2), 4 * MIB).unwrap();
    assert_eq!(s.synchronize().unwrap(), before, "pooled: no host time");
    s.allocate(RegionId(3), 4 * MIB).unwrap();
    assert_eq!(s.synchronize().unwrap(), before + cost.alloc_ns(4 * MIB), "new: one allocation");
    // The report's host time by kind of call says the same.
    let host = s.stats().host;
    assert_eq!((host.launch, host.allocate), (111 * cost.launch_host_ns, 2 * cost.alloc_ns(4 * MIB)));
    assert_eq!(host.hints(), 0, "no prefetch, discard, advice or stage-out was asked for");
    // A prefetch holds the host for its call (and, to the host, its transfer), and says so.
    s.prefetch(&[ByteRange::whole(RegionId(3), 4 * MIB)], Location::Host).unwrap();
    s.allocate(RegionId(4), 64 * MIB).unwrap();
    let t0 = s.synchronize().unwrap();
    s.prefetch(&[ByteRange::whole(RegionId(4), 64 * MIB)], Location::DEVICE).unwrap();
    let host = s.stats().host;
    assert_eq!(host.prefetch_to_device, cost.prefetch_deferred_call_ns, "{host:?}");
    assert!(host.prefetch_to_host >= cost.prefetch_call_ns, "{host:?}");
    assert_eq!(host.hints(), host.prefetch_to_device + host.prefetch_to_host);
    assert!(s.synchronize().unwrap() >= t0 + host.prefetch_to_device);
}

/// A prefetch to the device holds the host for its call alone (the CUDA backend queues it
/// behind a short kernel); one to the host holds it for its transfer on an idle link, and for
/// the call alone queued behind another, as the driver queues work on a busy stream.
#[test]
fn prefetch_calls_hold_the_host_for_the_call_where_the_driver_queues_the_work() {
    let cost = CostModel::h200();
    let mut s = SimBackend::new(cost.clone(), 1 << 30);
    for id in [1, 2] {
        s.allocate(RegionId(id), 64 * MIB).unwrap();
        s.preload_host(whole(id, 64 * MIB)).unwrap();
    }
    let t0 = s.synchronize().unwrap();
    s.prefetch(&[whole(1, 64 * MIB)], Location::DEVICE).unwrap();
    s.prefetch(&[whole(2, 64 * MIB)], Location::DEVICE).unwrap();
    assert_eq!(s.stats().host.prefetch_to_device, 2 * cost.prefetch_deferred_call_ns);
    // The link still carries both, one after the other.
    let to_device = CostModel::transfer_ns(64 * MIB, cost.prefetch_h2d_rate_gbps);
    let t1 = s.synchronize().unwrap();
    assert!(t1 >= t0 + 2 * to_device);
    // To the host: a driver that returned halfway through a transfer leaves the next queued.
    let cost = CostModel { prefetch_d2h_host_fraction: 0.5, ..cost };
    let mut s = SimBackend::new(cost.clone(), 1 << 30);
    for id in [1, 2] {
        s.allocate(RegionId(id), 64 * MIB).unwrap();
        s.kernel_write(RegionId(id), 0, &pattern(id as u8, (64 * MIB) as usize)).unwrap();
    }
    s.synchronize().unwrap();
    s.prefetch(&[whole(1, 64 * MIB)], Location::Host).unwrap();
    let first = s.stats().host.prefetch_to_host;
    let to_host = CostModel::transfer_ns(64 * MIB, cost.prefetch_d2h_rate_gbps);
    assert!(first >= (to_host as f64 * 0.5 * 0.99) as u64, "idle: {first}");
    s.prefetch(&[whole(2, 64 * MIB)], Location::Host).unwrap();
    assert_eq!(s.stats().host.prefetch_to_host - first, cost.prefetch_deferred_call_ns, "queued");
}

/// A buffer shed from the pool is freed at the next synchronisation, which then holds the
/// host for it (its pages were on the device); one that was never shed costs nothing there.
#[test]
fn shed_buffers_are_freed_at_the_next_synchronisation() {
    let cost = CostModel::h200();
    let mut s = SimBackend::new(cost.clone(), 8 * MIB);
    s.allocate(RegionId(1), 4 * MIB).unwrap();
    s.kernel_write(RegionId(1), 0, &pattern(1, (4 * MIB) as usize)).unwrap();
    s.free(RegionId(1)).unwrap(); // pooled, its pages on the device
    let t = s.synchronize().unwrap();
    assert_eq!(s.synchronize().unwrap(), t, "nothing shed yet");
    // A region of another size needs the pool's room: the pooled buffer is shed.
    s.allocate(RegionId(2), 6 * MIB).unwrap();
    s.kernel_write(RegionId(2), 0, &pattern(2, (6 * MIB) as usize)).unwrap();
    let done = s.completion_ns();
    assert_eq!(s.synchronize().unwrap(), done + cost.free_retired_ns(4 * MIB));
    let t = s.synchronize().unwrap();
    assert_eq!(s.synchronize().unwrap(), t, "freed once");
}

/// The caller's own work costs simulated time only where it is charged, less the
/// simulator's own time in the calls made meanwhile.
#[test]
fn host_work_costs_simulated_time_only_where_charged() {
    let mut free = sim(1 << 30);
    let t0 = free.synchronize().unwrap();
    free.host_work(1_000_000);
    assert_eq!(free.synchronize().unwrap(), t0, "free by default");
    let mut s = sim(1 << 30).with_host_work_charged(true);
    let t0 = s.synchronize().unwrap();
    s.host_work(1_000_000);
    assert_eq!(s.synchronize().unwrap(), t0 + 1_000_000);
    // A call's wall time is the simulator's, not the caller's: a report of no more than it
    // costs nothing.
    s.allocate(RegionId(1), 4 * MIB).unwrap();
    let t1 = s.synchronize().unwrap();
    s.host_work(0);
    assert_eq!(s.synchronize().unwrap(), t1);
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn whole(id: u64, bytes: u64) -> ByteRange {
    ByteRange::whole(RegionId(id), bytes)
}

fn read_back(s: &mut SimBackend, id: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xAA; len];
    s.read(RegionId(id), 0, &mut buf).unwrap();
    buf
}

#[test]
fn data_survives_faults_eviction_and_migration_back() {
    let mut s = sim(8 * MIB);
    let (a, b) = (RegionId(1), RegionId(2));
    s.allocate(a, 6 * MIB).unwrap();
    s.allocate(b, 6 * MIB).unwrap();
    let pa = pattern(1, (6 * MIB) as usize);
    let pb = pattern(2, (6 * MIB) as usize);
    s.write(a, 0, &pa).unwrap();
    let mut seen = vec![0; pa.len()];
    s.kernel_read(a, 0, &mut seen).unwrap();
    assert_eq!(seen, pa, "a kernel reads what the host wrote");
    assert_eq!(s.residency(whole(1, 6 * MIB)).unwrap().device, 6 * MIB);
    // Writing b on the device does not fit beside a: part of a is evicted to the host.
    s.kernel_write(b, 0, &pb).unwrap();
    assert!(s.stats().evicted_bytes >= 4 * MIB, "{:?}", s.stats());
    assert!(s.device_resident_bytes() <= 8 * MIB);
    assert_eq!(read_back(&mut s, 1, pa.len()), pa, "evicted data came back intact");
    assert_eq!(read_back(&mut s, 2, pb.len()), pb, "device-written data migrated to the host intact");
}

#[test]
fn discard_drops_data_without_transfer_and_gives_the_pages_back() {
    let mut s = sim(64 * MIB);
    s.allocate(RegionId(1), 4 * MIB).unwrap();
    s.kernel_write(RegionId(1), 0, &pattern(3, (4 * MIB) as usize)).unwrap();
    let before = s.stats();
    s.discard(&[whole(1, 4 * MIB)]).unwrap();
    let after = s.stats();
    assert_eq!(after.d2h_bytes, before.d2h_bytes, "no transfer");
    assert_eq!(after.discarded_bytes, 4 * MIB);
    assert_eq!(s.device_resident_bytes(), 0);
    assert_eq!(s.residency(whole(1, 4 * MIB)).unwrap().unpopulated, 4 * MIB);
    assert!(read_back(&mut s, 1, 4096).iter().all(|&x| x == 0), "discarded data reads as zeros");
    // The discarded pages went back to the driver: a new region populates its own.
    s.allocate(RegionId(2), 4 * MIB).unwrap();
    assert_eq!(s.residency(whole(2, 4 * MIB)).unwrap().device, 0);
}

/// A freed buffer keeps its whole blocks on the device for the next region of its size, which
/// needs no first-touch fault for them; a region of another size gets a new buffer; pooled
/// pages count against the capacity, and give way (the longest pooled first) before data is
/// evicted.
#[test]
fn freed_buffers_serve_their_size_and_give_way_to_data() {
    let mut s = sim(16 * MIB);
    let write = |s: &mut SimBackend, id: u64, bytes: u64| {
        s.allocate(RegionId(id), bytes).unwrap();
        s.kernel_write(RegionId(id), 0, &pattern(id as u8, bytes as usize)).unwrap();
    };
    write(&mut s, 1, 4 * MIB);
    write(&mut s, 2, 4 * MIB);
    s.free(RegionId(1)).unwrap();
    s.free(RegionId(2)).unwrap();
    assert_eq!(s.device_resident_bytes(), 0);
    s.allocate(RegionId(3), 4 * MIB).unwrap();
    assert_eq!(s.residency(whole(3, 4 * MIB)).unwrap().device, 4 * MIB, "a pooled buffer of its size");
    let faults = s.stats().gpu_faults;
    s.kernel_write(RegionId(3), 0, &[1; 64]).unwrap();
    assert_eq!(s.stats().gpu_faults, faults, "pooled pages need no fault");
    assert_eq!(s.device_blocks(RegionId(3), 4 * MIB).unwrap(), vec![0, 1]);
    s.allocate(RegionId(4), 6 * MIB).unwrap();
    assert_eq!(s.residency(whole(4, 6 * MIB)).unwrap().device, 0, "no pooled buffer of its size");
    assert!(s.device_blocks(RegionId(4), 6 * MIB).unwrap().is_empty());
    s.kernel_write(RegionId(4), 2 * MIB + 100, &[7; 64]).unwrap();
    assert_eq!(s.device_blocks(RegionId(4), 6 * MIB).unwrap(), vec![1], "a block with one fault unit");
    // 4 MiB of data and 4 MiB pooled: 11 MiB more data fits only once the pool gives way.
    s.kernel_write(RegionId(4), 0, &pattern(4, (6 * MIB) as usize)).unwrap();
    write(&mut s, 5, 5 * MIB);
    let st = s.stats();
    assert_eq!(st.evicted_bytes, 0, "data evicted while pooled pages held the room");
    assert!(st.peak_footprint_bytes <= 16 * MIB, "{st:?}");
    s.allocate(RegionId(6), 4 * MIB).unwrap();
    assert_eq!(s.residency(whole(6, 4 * MIB)).unwrap().device, 0, "the shed buffer is not handed out");
}

#[test]
fn read_mostly_duplicates_and_drops_cheaply() {
    let mut s = sim(64 * MIB);
    let id = RegionId(1);
    s.allocate(id, 8 * MIB).unwrap();
    let p = pattern(4, (8 * MIB) as usize);
    s.write(id, 0, &p).unwrap();
    s.advise(whole(1, 8 * MIB), Advice::SetReadMostly).unwrap();
    let mut seen = vec![0; p.len()];
    s.kernel_read(id, 0, &mut seen).unwrap();
    assert_eq!(seen, p);
    assert_eq!(s.residency(whole(1, 8 * MIB)).unwrap().duplicated, 8 * MIB);
    let d2h = s.stats().d2h_bytes;
    let t0 = s.synchronize().unwrap();
    s.prefetch(&[whole(1, 8 * MIB)], Location::Host).unwrap();
    let t1 = s.synchronize().unwrap();
    assert_eq!(s.stats().d2h_bytes, d2h, "dropping a duplicate moves nothing");
    let evict_cost = CostModel::transfer_ns(8 * MIB, s.cost().prefetch_d2h_rate_gbps);
    assert!(t1 - t0 < s.cost().prefetch_call_ns + evict_cost / 20, "{} ns", t1 - t0);
    assert_eq!(read_back(&mut s, 1, p.len()), p);
    // The host copy alone remains; a kernel read duplicates again.
    assert_eq!(s.residency(whole(1, 8 * MIB)).unwrap().host, 8 * MIB);
}

/// Unsetting read-mostly on duplicated data keeps the host copy (on the H200 a kernel read it
/// after at the fault-driven rate): the device pages are freed, the data survives, and the
/// call holds the host as measured.
#[test]
fn collapsed_duplicates_stay_on_the_host() {
    let mut s = sim(64 * MIB);
    let id = RegionId(1);
    s.allocate(id, 8 * MIB).unwrap();
    let p = pattern(9, (8 * MIB) as usize);
    s.write(id, 0, &p).unwrap();
    s.advise(whole(1, 8 * MIB), Advice::SetReadMostly).unwrap();
    s.prefetch(&[whole(1, 8 * MIB)], Location::DEVICE).unwrap();
    assert_eq!(s.residency(whole(1, 8 * MIB)).unwrap().duplicated, 8 * MIB);
    let device = s.device_resident_bytes();
    let t0 = s.synchronize().unwrap();
    s.advise(whole(1, 8 * MIB), Advice::UnsetReadMostly).unwrap();
    let t1 = s.synchronize().unwrap();
    let r = s.residency(whole(1, 8 * MIB)).unwrap();
    assert_eq!((r.host, r.on_device()), (8 * MIB, 0), "{r:?}");
    assert_eq!(s.device_resident_bytes(), device - 8 * MIB);
    let held = (s.cost().advise_unset_read_mostly_ns_per_gib as f64 * 8.0 / 1024.0).round() as u64;
    assert_eq!(t1 - t0, held);
    let mut seen = vec![0; p.len()];
    s.kernel_read(id, 0, &mut seen).unwrap();
    assert_eq!(seen, p);
    assert!(s.stats().gpu_fault_bytes >= 8 * MIB, "the kernel faulted it back in");
}

#[test]
fn gpu_write_to_duplicates_is_a_fault_storm() {
    let mut s = sim(64 * MIB);
    let id = RegionId(1);
    s.allocate(id, MIB).unwrap();
    s.write(id, 0, &pattern(5, MIB as usize)).unwrap();
    s.advise(whole(1, MIB), Advice::SetReadMostly).unwrap();
    s.kernel_read(id, 0, &mut vec![0; MIB as usize]).unwrap();
    let t0 = s.synchronize().unwrap();
    s.kernel_write(id, 0, &[7; MIB as usize]).unwrap();
    let t1 = s.synchronize().unwrap();
    let pages = MIB / PAGE_SIZE;
    assert!(t1 - t0 >= pages * s.cost().duplicate_write_fault_ns_per_page, "{} ns", t1 - t0);
    assert_eq!(s.residency(whole(1, MIB)).unwrap().duplicated, 0, "duplicates collapsed");
    let mut head = [0u8; 16];
    s.read(id, 0, &mut head).unwrap();
    assert_eq!(head, [7; 16]);
    // Only the pages a kernel writes collapse.
    let mut s = sim(64 * MIB);
    s.allocate(id, MIB).unwrap();
    s.write(id, 0, &pattern(5, MIB as usize)).unwrap();
    s.advise(whole(1, MIB), Advice::SetReadMostly).unwrap();
    s.kernel_read(id, 0, &mut vec![0; MIB as usize]).unwrap();
    s.kernel_write(id, 0, &[7; 16]).unwrap();
    assert_eq!(s.residency(whole(1, MIB)).unwrap().duplicated, MIB - PAGE_SIZE);
}

#[test]
fn remote_mapping_uses_no_device_memory() {
    let mut s = sim(64 * MIB);
    let id = RegionId(1);
    s.allocate(id, 32 * MIB).unwrap();
    let p = pattern(6, (32 * MIB) as usize);
    s.write(id, 0, &p).unwrap();
    s.advise(whole(1, 32 * MIB), Advice::SetPreferredLocation(Location::Host)).unwrap();
    s.advise(whole(1, 32 * MIB), Advice::SetAccessedByDevice).unwrap();
    let acc = [RangeAccess { region: id, offset: 0, len: 32 * MIB, mode: AccessMode::Read }];
    let t0 = s.synchronize().unwrap();
    s.launch(&KernelLaunch { name: "k", dur_ns: 10, accesses: &acc }).unwrap();
    let t1 = s.synchronize().unwrap();
    assert_eq!(s.device_resident_bytes(), 0);
    assert_eq!(s.stats().remote_bytes, 32 * MIB);
    assert_eq!(s.stats().h2d_bytes, 0);
    assert_eq!(
        t1 - t0,
        CostModel::transfer_ns(32 * MIB, s.cost().remote_rate_gbps),
        "bound by the remote rate"
    );
    let mut seen = vec![0; p.len()];
    s.kernel_read(id, 0, &mut seen).unwrap();
    assert_eq!(seen, p, "remote reads see the host data");
}

#[test]
fn remote_traffic_queues_behind_transfers_on_the_link() {
    // Without the host time of the calls, to see the link alone.
    let mut cost = CostModel::h200();
    cost.advise_remote_ns_per_gib = 0;
    cost.prefetch_deferred_call_ns = 0;
    (cost.launch_host_ns, cost.alloc_host_ns, cost.alloc_host_ns_per_gib) = (0, 0, 0);
    let mut s = SimBackend::new(cost, 1 << 30);
    let (a, b) = (RegionId(1), RegionId(2));
    for id in [a, b] {
        s.allocate(id, 64 * MIB).unwrap();
        s.preload_host(ByteRange::whole(id, 64 * MIB)).unwrap();
    }
    s.advise(whole(2, 64 * MIB), Advice::SetPreferredLocation(Location::Host)).unwrap();
    s.advise(whole(2, 64 * MIB), Advice::SetAccessedByDevice).unwrap();
    s.prefetch(&[ByteRange::whole(a, 64 * MIB)], Location::DEVICE).unwrap();
    let acc = [RangeAccess { region: b, offset: 0, len: 64 * MIB, mode: AccessMode::Read }];
    s.launch(&KernelLaunch { name: "remote", dur_ns: 10, accesses: &acc }).unwrap();
    let t = s.synchronize().unwrap();
    let c = s.cost();
    let prefetch = c.prefetch_call_ns + CostModel::transfer_ns(64 * MIB, c.prefetch_h2d_rate_gbps);
    let remote = CostModel::transfer_ns(64 * MIB, c.remote_rate_gbps);
    assert_eq!(t, prefetch + remote, "the remote read waits for the prefetch ahead of it");
    assert_eq!(s.stats().stall_ns, t - 10);
}

#[test]
fn advice_holds_the_host_as_measured() {
    let mut s = sim(4 << 30);
    let id = RegionId(1);
    s.allocate(id, 1 << 30).unwrap();
    s.preload_host(whole(1, 1 << 30)).unwrap();
    s.advise(whole(1, 1 << 30), Advice::SetReadMostly).unwrap();
    let acc = [RangeAccess { region: id, offset: 0, len: 4096, mode: AccessMode::Read }];
    s.launch(&KernelLaunch { name: "k", dur_ns: 0, accesses: &acc }).unwrap();
    let t = s.synchronize().unwrap();
    let held = s.cost().advise_read_mostly_ns_per_gib;
    assert!(t >= held && t < held + 100_000, "the kernel waited for the host: {t} ns vs {held}");
}

#[test]
fn isolated_fault_costs_the_measured_latency() {
    let mut s = sim(64 * MIB);
    let id = RegionId(1);
    s.allocate(id, 4 * MIB).unwrap();
    s.preload_host(whole(1, 4 * MIB)).unwrap();
    let acc = [RangeAccess { region: id, offset: 2 * MIB, len: 4, mode: AccessMode::Read }];
    s.launch(&KernelLaunch { name: "touch", dur_ns: 0, accesses: &acc }).unwrap();
    let t = s.synchronize().unwrap();
    assert!((15_600..16_000).contains(&t), "one 64 KiB fault took {t} ns (measured: 15.8 us)");
    assert_eq!((s.stats().gpu_faults, s.stats().h2d_bytes), (1, 64 << 10));
}

#[test]
fn prefetch_overlaps_compute_and_kernels_wait_for_data_in_flight() {
    let mut s = sim(1 << 30);
    let (a, b) = (RegionId(1), RegionId(2));
    for id in [a, b] {
        s.allocate(id, 64 * MIB).unwrap();
        s.preload_host(ByteRange::whole(id, 64 * MIB)).unwrap();
    }
    let xfer = s.cost().prefetch_call_ns + CostModel::transfer_ns(64 * MIB, s.cost().prefetch_h2d_rate_gbps);
    s.prefetch(&[ByteRange::whole(a, 64 * MIB)], Location::DEVICE).unwrap();
    let read_a = [RangeAccess { region: a, offset: 0, len: 64 * MIB, mode: AccessMode::Read }];
    s.launch(&KernelLaunch { name: "k1", dur_ns: 2_000_000, accesses: &read_a }).unwrap();
    // While k1 computes, b streams in behind a on the link.
    s.prefetch(&[ByteRange::whole(b, 64 * MIB)], Location::DEVICE).unwrap();
    let read_b = [RangeAccess { region: b, offset: 0, len: 64 * MIB, mode: AccessMode::Read }];
    s.launch(&KernelLaunch { name: "k2", dur_ns: 2_000_000, accesses: &read_b }).unwrap();
    let t = s.synchronize().unwrap();
    assert_eq!(s.stats().gpu_faults, 0, "data in flight is waited for, not faulted");
    assert_eq!(t, xfer + 4_000_000, "k1 waits for a; b's transfer hides under k1");
}

#[test]
fn um_migrations_are_not_full_duplex() {
    let mut s = sim(1 << 30);
    let (a, b) = (RegionId(1), RegionId(2));
    s.allocate(a, 64 * MIB).unwrap();
    s.allocate(b, 64 * MIB).unwrap();
    s.preload_host(ByteRange::whole(a, 64 * MIB)).unwrap();
    s.prefetch(&[ByteRange::whole(b, 64 * MIB)], Location::DEVICE).unwrap();
    let t0 = s.synchronize().unwrap();
    s.prefetch(&[ByteRange::whole(a, 64 * MIB)], Location::DEVICE).unwrap();
    s.prefetch(&[ByteRange::whole(b, 64 * MIB)], Location::Host).unwrap();
    let t1 = s.synchronize().unwrap();
    let c = s.cost();
    let serial = 2 * c.prefetch_call_ns
        + CostModel::transfer_ns(64 * MIB, c.prefetch_h2d_rate_gbps)
        + CostModel::transfer_ns(64 * MIB, c.prefetch_d2h_rate_gbps);
    assert_eq!(t1 - t0, serial);
}

#[test]
fn errors_for_unknown_regions_and_ranges() {
    let mut s = sim(MIB);
    assert!(matches!(s.free(RegionId(9)), Err(Error::UnknownRegion(_))));
    s.allocate(RegionId(1), 100).unwrap();
    assert!(s.allocate(RegionId(1), 100).is_err(), "ids are unique");
    assert!(s.allocate(RegionId(2), 0).is_err());
    let e =
        s.prefetch(&[ByteRange { region: RegionId(1), offset: 50, len: 51 }], Location::DEVICE).unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    let acc = [RangeAccess { region: RegionId(1), offset: u64::MAX, len: 2, mode: AccessMode::Read }];
    assert!(s.launch(&KernelLaunch { name: "k", dur_ns: 1, accesses: &acc }).is_err());
}

/// One step of a random workload.
#[derive(Debug, Clone)]
enum Op {
    Alloc(u64),
    Free(usize),
    HostWrite(usize, u64, u8),
    KernelWrite(usize, u64, u8),
    KernelRead(usize),
    Prefetch(usize, bool),
    ReadMostly(usize, bool),
    Remote(usize),
    StageOut(usize),
    Discard(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u64..3 * MIB).prop_map(Op::Alloc),
        any::<usize>().prop_map(Op::Free),
        (any::<usize>(), any::<u64>(), any::<u8>()).prop_map(|(r, o, v)| Op::HostWrite(r, o, v)),
        (any::<usize>(), any::<u64>(), any::<u8>()).prop_map(|(r, o, v)| Op::KernelWrite(r, o, v)),
        any::<usize>().prop_map(Op::KernelRead),
        (any::<usize>(), any::<bool>()).prop_map(|(r, d)| Op::Prefetch(r, d)),
        (any::<usize>(), any::<bool>()).prop_map(|(r, on)| Op::ReadMostly(r, on)),
        any::<usize>().prop_map(Op::Remote),
        any::<usize>().prop_map(Op::StageOut),
        any::<usize>().prop_map(Op::Discard),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Under any sequence of allocations, frees, writes on either side, prefetches, advice,
    /// staged evictions (through staging buffers smaller than the data, so that clean copies
    /// kept after restores give up their slots), discards and eviction pressure, every byte read (by the host or a kernel) equals the byte last
    /// written there, and the device never holds more than its capacity plus what the one
    /// running kernel needs: neither its data nor the pages it keeps for reuse.
    #[test]
    fn bytes_are_never_lost_and_capacity_holds(ops in prop::collection::vec(op(), 1..60)) {
        let cap = 4 * MIB;
        let mut s = sim(cap).with_staging(3 * MIB);
        let mut live: Vec<(RegionId, Vec<u8>)> = Vec::new();
        let mut next = 1;
        let mut largest = 0;
        for op in ops {
            let n = live.len().max(1);
            let pick = |i: usize| i % n;
            match op {
                Op::Alloc(bytes) => {
                    let id = RegionId(next);
                    next += 1;
                    s.allocate(id, bytes).unwrap();
                    live.push((id, vec![0; bytes as usize]));
                    largest = largest.max(bytes);
                }
                _ if live.is_empty() => {}
                Op::Free(i) => {
                    let (id, _) = live.remove(pick(i));
                    s.free(id).unwrap();
                }
                Op::HostWrite(i, off, v) | Op::KernelWrite(i, off, v) => {
                    let (id, data) = &mut live[pick(i)];
                    let off = (off % data.len() as u64) as usize;
                    let len = (data.len() - off).min(70_000);
                    data[off..off + len].fill(v);
                    if matches!(op, Op::HostWrite(..)) {
                        s.write(*id, off as u64, &data[off..off + len]).unwrap();
                    } else {
                        // Writes go to plain data: never write a read-mostly range on the GPU.
                        s.advise(ByteRange::whole(*id, data.len() as u64), Advice::UnsetReadMostly).unwrap();
                        s.kernel_write(*id, off as u64, &data[off..off + len]).unwrap();
                    }
                }
                Op::KernelRead(i) => {
                    let (id, data) = &live[pick(i)];
                    let mut seen = vec![0xEE; data.len()];
                    s.kernel_read(*id, 0, &mut seen).unwrap();
                    prop_assert!(seen == *data, "kernel read of {id} differs");
                    prop_assert!(s.device_resident_bytes() <= cap.max(data.len() as u64 + 2 * MIB));
                }
                Op::Prefetch(i, to_device) => {
                    let (id, data) = &live[pick(i)];
                    let to = if to_device { Location::DEVICE } else { Location::Host };
                    s.prefetch(&[ByteRange::whole(*id, data.len() as u64)], to).unwrap();
                }
                Op::ReadMostly(i, on) => {
                    let (id, data) = &live[pick(i)];
                    let advice = if on { Advice::SetReadMostly } else { Advice::UnsetReadMostly };
                    s.advise(ByteRange::whole(*id, data.len() as u64), advice).unwrap();
                }
                Op::Remote(i) => {
                    let (id, data) = &live[pick(i)];
                    let r = ByteRange::whole(*id, data.len() as u64);
                    s.advise(r, Advice::SetPreferredLocation(Location::Host)).unwrap();
                    s.advise(r, Advice::SetAccessedByDevice).unwrap();
                }
                Op::StageOut(i) => {
                    let (id, data) = &live[pick(i)];
                    s.stage_out(&[ByteRange::whole(*id, data.len() as u64)]).unwrap();
                }
                Op::Discard(i) => {
                    // The data is dead: what is read next is whatever was written after.
                    let (id, data) = &mut live[pick(i)];
                    s.discard(&[ByteRange::whole(*id, data.len() as u64)]).unwrap();
                    data.fill(0);
                    s.write(*id, 0, data).unwrap();
                }
            }
        }
        for (id, data) in &live {
            let mut seen = vec![0xEE; data.len()];
            s.read(*id, 0, &mut seen).unwrap();
            prop_assert!(seen == *data, "host read of {id} differs");
        }
        let st = s.stats();
        prop_assert!(st.peak_footprint_bytes >= st.peak_device_bytes, "{st:?}");
        prop_assert!(st.peak_footprint_bytes <= cap.max(largest.next_multiple_of(2 * MIB) + 2 * MIB), "{st:?}");
    }
}

mod packed;
mod staged;
