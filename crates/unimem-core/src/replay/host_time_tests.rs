//! A trace that carries the program's host time between its kernels replays at the program's
//! pace (`replay.program_host_time`).

use super::*;
use crate::backends::sim::SimBackend;
use crate::cost::CostModel;
use crate::policy::NoHints;
use crate::trace::{TraceAccess, TraceEvent, TraceHeader, TraceWriter};

const KERNELS: u64 = 20;
const KERNEL_NS: u64 = 10_000;
const HOST_NS: u64 = 200_000;

/// 20 kernels of 10 us over one resident 1 MiB region, each issued 200 us of the program's
/// host time after the one before (the first has none).
fn host_bound_program() -> TraceReader {
    let mut w = TraceWriter::new(Vec::new(), false, "mem", &TraceHeader::new("test")).unwrap();
    let acc = |mode| vec![TraceAccess { id: 1, offset: 0, len: 1 << 20, mode }];
    w.write(&TraceEvent::Alloc { id: 1, bytes: 1 << 20, name: None }).unwrap();
    for k in 0..KERNELS {
        let mode = if k == 0 { crate::AccessMode::Write } else { crate::AccessMode::ReadWrite };
        let host_ns = (k > 0).then_some(HOST_NS);
        w.write(&TraceEvent::Kernel { name: "k".into(), dur_ns: KERNEL_NS, host_ns, acc: acc(mode) })
            .unwrap();
    }
    let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
    TraceReader::from_bytes("mem", bytes).unwrap()
}

fn replay(program_host_time: bool) -> ReplayReport {
    let mut backend = SimBackend::new(CostModel::h200(), 1 << 30);
    let options = Options { program_host_time, ..Options::default() };
    run_with(host_bound_program(), &mut backend, &mut NoHints, &mut |_| {}, options).unwrap()
}

#[test]
fn kernels_are_issued_at_the_programs_recorded_pace() {
    let paced = replay(true);
    let host = (KERNELS - 1) * HOST_NS;
    assert_eq!(paced.program_host_ns, host);
    assert_eq!(paced.compute_floor_ns, KERNELS * KERNEL_NS);
    // The last kernel is issued 19 x 200 us after the first, then runs: the launch call's
    // host time and the kernel's own at most on top (the first issued after its allocation).
    let cost = CostModel::h200();
    let tail = cost.alloc_ns(1 << 20) + cost.launch_host_ns + KERNEL_NS;
    assert!(paced.time_ns >= host + KERNEL_NS, "{} under the program's {host}", paced.time_ns);
    assert!(paced.time_ns <= host + tail, "{} over {} ", paced.time_ns, host + tail);
    // Not held to it, the kernels follow each other at the launch call's pace.
    let free = replay(false);
    assert_eq!(free.program_host_ns, 0);
    assert!(free.time_ns < host / 4, "{}", free.time_ns);
    assert_eq!((free.h2d_bytes, free.gpu_faults), (paced.h2d_bytes, paced.gpu_faults));
}

#[test]
fn the_backends_own_host_time_counts_toward_the_programs() {
    // A program whose host issued its kernels faster than the replay's launch calls take is
    // paced by the launch calls alone: the recorded time is a floor, not added on top.
    let cost = CostModel::h200();
    let mut w = TraceWriter::new(Vec::new(), false, "mem", &TraceHeader::new("test")).unwrap();
    w.write(&TraceEvent::Alloc { id: 1, bytes: 1 << 20, name: None }).unwrap();
    let acc = vec![TraceAccess { id: 1, offset: 0, len: 1 << 20, mode: crate::AccessMode::Write }];
    for k in 0..KERNELS {
        let host_ns = (k > 0).then_some(1);
        w.write(&TraceEvent::Kernel { name: "k".into(), dur_ns: 0, host_ns, acc: acc.clone() }).unwrap();
    }
    let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
    let mut paced = SimBackend::new(cost.clone(), 1 << 30);
    let reader = TraceReader::from_bytes("mem", bytes).unwrap();
    let a = run_with(reader, &mut paced, &mut NoHints, &mut |_| {}, Options::default()).unwrap();
    let mut free = SimBackend::new(cost, 1 << 30);
    let reader = TraceReader::from_bytes("mem", bytes).unwrap();
    let options = Options { program_host_time: false, ..Options::default() };
    let b = run_with(reader, &mut free, &mut NoHints, &mut |_| {}, options).unwrap();
    assert_eq!(a.time_ns, b.time_ns);
}
