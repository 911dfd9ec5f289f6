use super::*;
use crate::access::{AccessMode, RangeAccess};

const MB: u64 = 1_000_000;

fn alloc(p: &mut Program, id: u64, bytes: u64) {
    p.observe(&Op::Alloc { region: RegionId(id), bytes, name: None });
}

fn kernel(p: &mut Program, dur_ns: u64, acc: &[(u64, AccessMode)]) {
    let accesses =
        acc.iter().map(|&(id, mode)| RangeAccess { region: RegionId(id), offset: 0, len: 1, mode }).collect();
    p.observe(&Op::Kernel { name: "k".into(), dur_ns, accesses });
}

use AccessMode::{Read as R, ReadWrite as RW, Write as W};

/// Everything fits: only data from before the program (first read) comes in.
#[test]
fn at_full_budget_only_pre_existing_data_moves() {
    let mut p = Program::new();
    alloc(&mut p, 1, 100 * MB); // weights, read first
    alloc(&mut p, 2, 50 * MB); // an output, written first
    for _ in 0..3 {
        kernel(&mut p, 1_000_000, &[(1, R), (2, W)]);
        kernel(&mut p, 1_000_000, &[(2, R)]);
    }
    let b = p.bound(150 * MB, 50.0);
    assert_eq!((b.h2d_bytes, b.d2h_bytes), (100 * MB, 0));
    assert_eq!(b.compute_floor_ns, 6_000_000);
    assert_eq!(b.bound_ns, 6_000_000, "2 ms of copies hide under 6 ms of compute");
}

/// Two read-only regions alternating in a budget for one: each comes in for every use and is
/// dropped, never copied out (its host copy is valid).
#[test]
fn clean_data_is_dropped_not_copied_back() {
    let mut p = Program::new();
    alloc(&mut p, 1, 100 * MB);
    alloc(&mut p, 2, 100 * MB);
    for _ in 0..4 {
        kernel(&mut p, 10, &[(1, R)]);
        kernel(&mut p, 10, &[(2, R)]);
    }
    let b = p.bound(100 * MB, 50.0);
    assert_eq!((b.h2d_bytes, b.d2h_bytes), (800 * MB, 0));
    assert_eq!(b.bound_ns, 16_000_000, "800 MB at 50 GB/s");
}

/// Written data used again goes out once per eviction; data never used again, or freed, does
/// not; Belady evicts the region used farthest ahead.
#[test]
fn dirty_data_needed_again_is_copied_out_and_belady_picks_the_victim() {
    let mut p = Program::new();
    alloc(&mut p, 1, 60 * MB);
    alloc(&mut p, 2, 60 * MB);
    alloc(&mut p, 3, 60 * MB);
    kernel(&mut p, 10, &[(1, W)]); // 1 and 2 written on the device, both fit
    kernel(&mut p, 10, &[(2, W)]);
    kernel(&mut p, 10, &[(3, R)]); // 3 comes in: 2 is used next, 1 after: 1 goes out (dirty)
    kernel(&mut p, 10, &[(2, RW)]);
    kernel(&mut p, 10, &[(1, R)]); // 1 back; 3 (clean, never used again) dropped
    p.observe(&Op::Free { region: RegionId(2) });
    let b = p.bound(120 * MB, 50.0);
    assert_eq!(b.d2h_bytes, 60 * MB, "only 1 went out");
    assert_eq!(b.h2d_bytes, 120 * MB, "3 (pre-existing) and 1 again");
}

/// The CPU reading data the device wrote needs it on the host; a host write makes the device
/// copy stale.
#[test]
fn host_accesses_copy_out_and_invalidate() {
    let mut p = Program::new();
    alloc(&mut p, 1, 10 * MB);
    kernel(&mut p, 10, &[(1, W)]);
    let host = |mode| Op::Host {
        name: "h".into(),
        accesses: vec![RangeAccess { region: RegionId(1), offset: 0, len: 1, mode }],
    };
    p.observe(&host(R));
    kernel(&mut p, 10, &[(1, R)]); // still resident and clean: nothing moves
    p.observe(&host(W));
    kernel(&mut p, 10, &[(1, R)]); // the host's data comes in
    let b = p.bound(100 * MB, 50.0);
    assert_eq!((b.h2d_bytes, b.d2h_bytes), (10 * MB, 10 * MB));
}
