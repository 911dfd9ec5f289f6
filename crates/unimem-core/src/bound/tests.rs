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

/// A kernel whose accesses each cover `len` bytes from the start of their region.
fn kernel_over(p: &mut Program, dur_ns: u64, acc: &[(u64, u64, AccessMode)]) {
    let accesses = acc
        .iter()
        .map(|&(id, len, mode)| RangeAccess { region: RegionId(id), offset: 0, len, mode })
        .collect();
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

/// A program held to its host time between kernels runs no faster than that pace: its floor
/// is the kernels each issued that long after the one before, once the one before has ended.
#[test]
fn a_program_held_to_its_host_time_has_that_pace_as_its_floor() {
    let events = |host: [Option<u64>; 3]| -> Vec<TraceEvent> {
        let mut ev = vec![TraceEvent::Alloc { id: 1, bytes: 10 * MB, name: None }];
        let acc = vec![crate::trace::TraceAccess { id: 1, offset: 0, len: 10 * MB, mode: RW }];
        ev.extend(host.map(|host_ns| TraceEvent::Kernel {
            name: "k".into(),
            dur_ns: 1_000_000,
            host_ns,
            acc: acc.clone(),
        }));
        ev
    };
    let floor = |held: bool, host| {
        let mut p = Program::new().held_to_host_time(held);
        events(host).iter().for_each(|e| p.observe_event(e));
        p.bound(10 * MB, 50.0)
    };
    // Issued at 0, 3 and 3.5 ms: the third waits for the second, which ends at 4 ms.
    let b = floor(true, [None, Some(3_000_000), Some(500_000)]);
    assert_eq!((b.compute_floor_ns, b.program_floor_ns), (3_000_000, 5_000_000));
    assert_eq!((b.bound_ns, b.phase_ns), (5_000_000, 5_000_000), "both bounds include the pace");
    // Not held (or no host times): the kernels back to back.
    let b = floor(false, [None, Some(3_000_000), Some(500_000)]);
    assert_eq!((b.program_floor_ns, b.bound_ns), (3_000_000, 3_000_000));
    assert_eq!(floor(true, [None; 3]).program_floor_ns, 3_000_000);
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

/// A training step in a budget for half its activations: the forward pass makes ten of 100 MB,
/// the backward pass reads them back in reverse and frees them. 500 MB must go out before the
/// last is made and 500 MB come back after: the two phases' traffic cannot overlap, so the
/// phase bound is twice the link-limit bound, and as long as the schedule that does just that.
#[test]
fn the_phase_bound_counts_traffic_that_the_order_of_uses_keeps_apart() {
    let mut p = Program::new();
    for a in 1..=10 {
        alloc(&mut p, a, 100 * MB);
        kernel_over(&mut p, 10_000, &[(a, 100 * MB, W)]);
    }
    for a in (1..=10).rev() {
        kernel_over(&mut p, 10_000, &[(a, 100 * MB, R)]);
        p.observe(&Op::Free { region: RegionId(a) });
    }
    let b = p.bound(500 * MB, 50.0);
    assert_eq!((b.h2d_bytes, b.d2h_bytes), (500 * MB, 500 * MB));
    assert_eq!(b.bound_ns, 10_000_000, "500 MB each way at 50 GB/s, overlapped");
    // Out before the peak, in after it: 10 ms each, and the compute of the ten kernels
    // that run while no copy is forced at most.
    assert!((20_000_000..=20_100_000).contains(&b.phase_ns), "{}", b.phase_ns);
    // With room for all of it nothing crosses: the phase bound is the compute floor.
    let all = p.bound(1000 * MB, 50.0);
    assert_eq!((all.bound_ns, all.phase_ns), (200_000, 200_000));
}

/// A read-only loop streams the same bytes each pass in any stretch of it: the phase bound
/// finds no more than the total traffic says, and never more than a schedule that streams them.
#[test]
fn a_streaming_loop_has_no_phases() {
    let mut p = Program::new();
    for a in 1..=4 {
        alloc(&mut p, a, 100 * MB);
    }
    for _ in 0..50 {
        for a in 1..=4 {
            kernel_over(&mut p, 10_000, &[(a, 100 * MB, R)]);
        }
    }
    let b = p.bound(200 * MB, 50.0);
    // Belady streams 100 MB of the four every kernel after the first pass, or so: about 2 ms
    // a kernel; the phase bound can only see that per stretch, less the budget each time.
    assert!(b.phase_ns <= b.bound_ns, "{} over {}", b.phase_ns, b.bound_ns);
    assert!(b.phase_ns >= b.compute_floor_ns);
}

/// A region larger than the budget whose kernels each write, then read, a part of it: the
/// bound counts the parts, never the whole region, so it stays under what a schedule moving
/// the parts takes (320 MB out before the last part is written and 320 MB back after: 12.8
/// ms). It counts one part per stretch (a region's first use and latest write in it), so here
/// it is far below that.
#[test]
fn the_phase_bound_counts_the_bytes_accessed_not_whole_regions() {
    let mut p = Program::new();
    alloc(&mut p, 1, 640 * MB);
    let part = |p: &mut Program, i: u64, mode| {
        let a = RangeAccess { region: RegionId(1), offset: i * 40 * MB, len: 40 * MB, mode };
        p.observe(&Op::Kernel { name: "k".into(), dur_ns: 10_000, accesses: vec![a] });
    };
    for i in 0..16 {
        part(&mut p, i, W);
    }
    for i in (0..16).rev() {
        part(&mut p, i, R);
    }
    let b = p.bound(320 * MB, 50.0);
    assert!(b.phase_ns >= b.compute_floor_ns);
    assert!(b.phase_ns <= 12_800_000 + b.compute_floor_ns, "{}", b.phase_ns);
}

mod against_the_simulator {
    use super::*;
    use crate::backends::sim::SimBackend;
    use crate::config::{Config, PolicyName};
    use crate::cost::CostModel;
    use crate::trace::synth::{Pattern, Synth, SynthSpec};
    use crate::trace::{TraceAccess, TraceEvent, TraceHeader, TraceReader, TraceWriter};
    use proptest::prelude::*;

    /// Training steps of random shape: weights read by every forward kernel, activations of
    /// random sizes written in the forward pass and read back in reverse, then freed.
    fn training(sizes: &[u64], steps: usize) -> Vec<TraceEvent> {
        let acc = |id, len, mode| TraceAccess { id, offset: 0, len, mode };
        let kernel = |acc| TraceEvent::Kernel { name: "k".into(), dur_ns: 20_000, host_ns: None, acc };
        let mut ev = vec![TraceEvent::Alloc { id: 1, bytes: 8 * MB, name: None }];
        let mut id = 2;
        for _ in 0..steps {
            let first = id;
            for &s in sizes {
                ev.push(TraceEvent::Alloc { id, bytes: s, name: None });
                ev.push(kernel(vec![acc(1, 8 * MB, R), acc(id, s, W)]));
                id += 1;
            }
            let made: Vec<(u64, u64)> = (first..id).zip(sizes.iter().copied()).collect();
            for &(a, s) in made.iter().rev() {
                ev.push(kernel(vec![acc(1, 8 * MB, R), acc(a, s, R)]));
                ev.push(TraceEvent::Free { id: a });
            }
            ev.push(kernel(vec![acc(1, 8 * MB, RW)]));
        }
        ev
    }

    /// The replay's time on the simulator with `policy` at `budget`, and both bounds at the
    /// profile's link rate.
    fn replay_and_bound(events: &[TraceEvent], policy: PolicyName, budget: u64) -> (u64, LinkBound) {
        let mut w = TraceWriter::new(Vec::new(), false, "mem", &TraceHeader::new("p")).unwrap();
        // A replay holds kernels to the program's host time (`Options::default`), as does
        // the bound's program floor.
        let mut program = Program::new().held_to_host_time(true);
        for e in events {
            w.write(e).unwrap();
            program.observe_event(e);
        }
        let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
        let cost = CostModel::h200();
        let mut sim = SimBackend::new(cost.clone(), budget).with_staging(1 << 30).with_relocation(true);
        let mut policy = crate::policy::make_policy(policy, budget, &Config::default(), &cost);
        let reader = TraceReader::from_bytes("mem", bytes).unwrap();
        let report = crate::replay::run(reader, &mut sim, policy.as_mut(), &mut |_| {}).unwrap();
        (report.time_ns, program.bound(budget, cost.link_rate_gbps))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
        /// Both bounds are lower bounds: no policy on the simulator, whose transfers run at
        /// most at the link's rate, replays a program faster than either.
        #[test]
        fn no_replay_is_faster_than_either_bound(
            sizes in proptest::collection::vec(1u64..48, 4..24),
            budget_pct in 20u64..100,
            pattern in 0usize..6,
            policy in prop_oneof![Just(PolicyName::Oracle), Just(PolicyName::Advisor), Just(PolicyName::None)],
            host_scale in 0u64..4,
        ) {
            let mut events: Vec<TraceEvent> = if pattern == 5 {
                training(&sizes.iter().map(|s| s * MB).collect::<Vec<_>>(), 3)
            } else {
                let patterns = [Pattern::Streaming, Pattern::Strided, Pattern::Alternating, Pattern::Graph, Pattern::Random];
                let spec = SynthSpec {
                    pattern: patterns[pattern],
                    events: 600,
                    regions: 16,
                    region_bytes: 4 << 20,
                    kernel_ns: 20_000,
                    write_every: sizes[0] % 3,
                    ..SynthSpec::default()
                };
                Synth::new(spec).collect()
            };
            // The program's host time between kernels, up to 3x their 20 us where it is held.
            for (i, e) in events.iter_mut().enumerate() {
                if let TraceEvent::Kernel { host_ns, .. } = e {
                    *host_ns = (host_scale > 0).then_some((i as u64 * 7919) % 20_000 * host_scale);
                }
            }
            let peak: u64 = if pattern == 5 { 8 * MB + sizes.iter().sum::<u64>() * MB } else { 16 * (4 << 20) + (1 << 20) };
            let budget = peak * budget_pct / 100;
            let (time_ns, bound) = replay_and_bound(&events, policy, budget);
            prop_assert!(time_ns >= bound.bound_ns, "{time_ns} under the link-limit bound {bound:?}");
            prop_assert!(time_ns >= bound.phase_ns, "{time_ns} under the phase bound {bound:?}");
        }
    }
}
