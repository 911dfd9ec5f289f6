//! Regions under 2 MiB packed in the slab's chunks, as the device arena packs them.

use super::*;

const KIB: u64 = 1 << 10;

fn arena(capacity: u64) -> SimBackend {
    sim(capacity).with_staging(64 * MIB).with_room_after_copies(true).with_small_regions_packed(true)
}

/// A packed region is on the device from its allocation, zeroed; evictions, stage-outs,
/// discards and the emulated driver leave it there with its bytes, and the host reads and
/// writes it where it is, without a transfer.
#[test]
fn a_packed_region_stays_on_the_device_with_its_bytes() {
    let mut s = arena(16 * MIB);
    let id = RegionId(1);
    s.allocate(id, 3 * KIB).unwrap();
    let r = s.residency(whole(1, 3 * KIB)).unwrap();
    assert_eq!((r.device, r.host, r.unpopulated), (4 * KIB, 0, 0), "a zeroed slot on the device");
    assert_eq!(read_back(&mut s, 1, (3 * KIB) as usize), vec![0; (3 * KIB) as usize]);
    s.kernel_write(id, 0, &pattern(7, (3 * KIB) as usize)).unwrap();
    s.prefetch(&[whole(1, 3 * KIB)], Location::Host).unwrap();
    s.stage_out(&[whole(1, 3 * KIB)]).unwrap();
    // Big data fills the device past its capacity: the driver evicts it, never the slab.
    for big in 2..5 {
        s.allocate(RegionId(big), 6 * MIB).unwrap();
        s.kernel_write(RegionId(big), 0, &pattern(big as u8, (6 * MIB) as usize)).unwrap();
    }
    assert_eq!(s.residency(whole(1, 3 * KIB)).unwrap().device, 4 * KIB);
    assert!(read_back(&mut s, 1, (3 * KIB) as usize) == pattern(7, (3 * KIB) as usize));
    let faults = s.stats().gpu_faults;
    s.write(id, 0, &pattern(9, KIB as usize)).unwrap();
    let mut back = vec![0; KIB as usize];
    s.kernel_read(id, 0, &mut back).unwrap();
    assert!(back == pattern(9, KIB as usize), "the kernel sees the host's write");
    let st = s.stats();
    assert_eq!((st.staged_out_bytes, st.cpu_faults), (0, 0), "nothing of it moved: {st:?}");
    assert_eq!(st.gpu_faults, faults, "its kernel does not fault");
    // A discard leaves its bytes (they may be anything after one; here they stay).
    s.discard(&[whole(1, 3 * KIB)]).unwrap();
    assert_eq!(s.residency(whole(1, 3 * KIB)).unwrap().device, 4 * KIB);
}

/// The slab's chunks count against the capacity whole, from the first region of a class on;
/// a freed slot serves the next region of its class without another chunk.
#[test]
fn packed_regions_take_whole_chunks_and_reuse_freed_slots() {
    let mut s = arena(16 * MIB);
    let footprint = |s: &SimBackend| s.stats().peak_footprint_bytes;
    s.allocate(RegionId(1), 100).unwrap();
    assert_eq!(footprint(&s), BLOCK_SIZE, "a chunk for the first 512-byte slot");
    assert_eq!(s.device_resident_bytes(), 100, "its data: the region's bytes");
    for id in 2..4097 {
        s.allocate(RegionId(id), 512).unwrap();
    }
    assert_eq!(footprint(&s), BLOCK_SIZE, "4,096 slots of 512 bytes in one chunk");
    s.allocate(RegionId(5000), 1 << 20).unwrap();
    assert_eq!(footprint(&s), 2 * BLOCK_SIZE, "another class, another chunk");
    s.free(RegionId(7)).unwrap();
    s.allocate(RegionId(5001), 200).unwrap();
    s.free(RegionId(5000)).unwrap();
    assert_eq!(footprint(&s), 2 * BLOCK_SIZE, "chunks stay; a freed slot served the next");
    assert_eq!(s.device_resident_bytes(), 100 + 4094 * 512 + 200);
    assert_eq!(s.stats().new_buffers, 0, "no managed buffer is allocated for a packed region");
    // Regions of a block or more are not packed.
    s.allocate(RegionId(6000), BLOCK_SIZE).unwrap();
    assert_eq!(s.residency(whole(6000, BLOCK_SIZE)).unwrap().unpopulated, BLOCK_SIZE);
    // Without packing (managed memory), a small region is a buffer of its own, populated on use.
    let mut m = sim(16 * MIB);
    m.allocate(RegionId(1), 100).unwrap();
    assert_eq!((m.device_resident_bytes(), m.stats().new_buffers), (0, 1));
}
