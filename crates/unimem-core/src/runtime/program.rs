//! A program that runs its own kernels on its own streams (PyTorch through its allocator):
//! unimem allocates its memory, places each operation's data before the program enqueues the
//! operation, and orders its own transfers with the program's streams (see
//! [`crate::seam::ProgramStreams`]). Each call names the stream the program works on.

use std::sync::Arc;

use crossbeam_channel::bounded;

use super::engine::Command;
use super::Runtime;
use crate::access::{Accessor, RangeAccess};
use crate::error::{Error, Result};
use crate::region::{Region, RegionId};
use crate::seam::ProgramStream;

impl Runtime {
    /// Places the data of an operation the program enqueues itself on `stream` next: recorded
    /// and planned like any launch; returns once `stream` waits for its data (not once the
    /// data has moved). The operation is the runtime's latest kernel until
    /// [`Runtime::finish_on`].
    pub fn launch_on(&self, name: &str, accesses: &[RangeAccess], stream: ProgramStream) -> Result<()> {
        self.check_and_record(accesses, Accessor::Device)?;
        let (reply, rx) = bounded(1);
        let (acc, issued) = (accesses.to_vec(), std::time::Instant::now());
        let command = Command::ProgramLaunch { name: name.into(), acc, stream, issued, reply };
        self.send(command, "launching")?;
        super::recv_soon(&rx).map_err(|_| Error::Stopped("launching".into()))?
    }

    /// Allocates a region for the program's `stream`, which then waits for its buffer to be
    /// ready (a reused buffer's pending work). `written`: the operation open on it writes it
    /// (an output allocated as it runs), so its pages count on the device once it finishes.
    pub fn alloc_on(&self, name: &str, bytes: u64, stream: ProgramStream, written: bool) -> Result<Region> {
        if bytes == 0 {
            return Err(Error::Allocation { bytes, reason: "regions must be at least 1 byte".into() });
        }
        let id = self.shared.registry.next_id();
        let name: Arc<str> = if name.is_empty() { format!("region{id}").into() } else { name.into() };
        let (reply, rx) = bounded(1);
        let command = Command::ProgramAlloc { id, bytes, name: name.clone(), stream, written, reply };
        self.send(command, "allocating")?;
        let addr = super::recv_soon(&rx).map_err(|_| Error::Stopped("allocating".into()))??;
        let region = Region { id, addr, bytes, name };
        self.shared.registry.insert(region.clone())?;
        Ok(region)
    }

    /// Frees a region once the work the program enqueued on `stream` so far is done with it.
    pub fn free_on(&self, id: RegionId, stream: ProgramStream) -> Result<()> {
        self.shared.registry.remove(id)?;
        self.send(Command::ProgramFree { id, stream }, "freeing")
    }

    /// The latest operation launched with [`Runtime::launch_on`] is enqueued in full on
    /// `stream`: transfers that touch its data wait for it, and its measured time ends there.
    pub fn finish_on(&self, stream: ProgramStream) -> Result<()> {
        self.send(Command::ProgramFinish { stream }, "finishing an operation")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::sim::{CostModel, SimBackend};
    use crate::config::PolicyName;
    use crate::trace::{TraceEvent, TraceReader};
    use crate::AccessMode;

    const MIB: u64 = 1 << 20;

    fn whole(r: &Region, mode: AccessMode) -> RangeAccess {
        RangeAccess { region: r.id, offset: 0, len: r.bytes, mode }
    }

    /// A program on its own stream, as PyTorch runs: weights written once; each step an
    /// operation reading them allocates its output and a workspace it frees as it runs, and
    /// a second reads the output, which is freed after it.
    fn program(rt: &Runtime, steps: usize) {
        let s = ProgramStream(7);
        let w = rt.alloc_on("w", 8 * MIB, s, false).unwrap();
        rt.launch_on("init", &[whole(&w, AccessMode::Write)], s).unwrap();
        rt.finish_on(s).unwrap();
        for _ in 0..steps {
            rt.launch_on("matmul", &[whole(&w, AccessMode::Read)], s).unwrap();
            let out = rt.alloc_on("out", 16 * MIB, s, true).unwrap();
            let ws = rt.alloc_on("workspace", MIB, s, true).unwrap();
            rt.free_on(ws.id, s).unwrap();
            rt.finish_on(s).unwrap();
            rt.launch_on("loss", &[whole(&out, AccessMode::Read)], s).unwrap();
            rt.finish_on(s).unwrap();
            rt.free_on(out.id, s).unwrap();
            rt.step().unwrap();
        }
    }

    #[test]
    fn outputs_allocated_by_an_operation_count_on_the_device_within_the_budget() {
        let budget = 20 * MIB;
        let sim = SimBackend::new(CostModel::h200(), budget);
        let rt = Runtime::builder().backend(Box::new(sim)).policy(PolicyName::Advisor).build().unwrap();
        program(&rt, 3);
        let stats = rt.synchronize().unwrap();
        let b = &stats.backend_stats;
        assert_eq!(b.kernels, 1 + 3 * 2);
        // 8 MiB of weights and a 16 MiB output do not fit 20 MiB together: the output's pages
        // count, so the weights made room for them.
        assert!(b.evicted_bytes >= 8 * MIB, "{b:?}");
        assert!(b.peak_footprint_bytes <= budget, "peak {} over {budget}", b.peak_footprint_bytes);
        assert_eq!(stats.live_regions, 1);
    }

    /// Each of 4 steps an operation reads `input` and allocates an output of `out_mib` (and
    /// 2 MiB more each step, so that no pooled buffer serves it) as it runs, which the next
    /// reads and which is freed after it. Returns the runtime's stats.
    fn outputs_program(policy: PolicyName, budget: u64, out_mib: u64) -> crate::runtime::RuntimeStats {
        let rt = Runtime::builder()
            .simulator()
            .budget(crate::Budget::Bytes(budget))
            .policy(policy)
            .build()
            .unwrap();
        let s = ProgramStream(1);
        let input = rt.alloc_on("input", 8 * MIB, s, false).unwrap();
        rt.launch_on("init", &[whole(&input, AccessMode::Write)], s).unwrap();
        rt.finish_on(s).unwrap();
        for i in 0..4 {
            rt.launch_on("conv", &[whole(&input, AccessMode::Read)], s).unwrap();
            let out = rt.alloc_on("out", (out_mib + 2 * i) * MIB, s, true).unwrap();
            rt.finish_on(s).unwrap();
            rt.launch_on("relu", &[whole(&out, AccessMode::Read)], s).unwrap();
            rt.finish_on(s).unwrap();
            rt.free_on(out.id, s).unwrap();
            rt.step().unwrap();
        }
        rt.synchronize().unwrap()
    }

    #[test]
    fn outputs_are_populated_ahead_of_their_kernel_where_room_can_be_made() {
        let advisor = outputs_program(PolicyName::Advisor, 64 * MIB, 32);
        let b = &advisor.backend_stats;
        // The advisor prefetches the input ahead of its first write; the outputs are
        // populated ahead of theirs.
        assert_eq!(b.gpu_faults, 0, "populated ahead, not faulted: {b:?}");
        assert!(b.peak_footprint_bytes <= 64 * MIB, "{b:?}");
        // The driver alone faults the input and each output in (512-560 fault units of 6 us
        // each output).
        let none = outputs_program(PolicyName::None, 64 * MIB, 32);
        assert_eq!(none.backend_stats.gpu_faults, 1 + 4, "{:?}", none.backend_stats);
        assert!(
            advisor.elapsed_ns * 2 < none.elapsed_ns,
            "{} against {}",
            advisor.elapsed_ns,
            none.elapsed_ns
        );
    }

    #[test]
    fn an_output_that_cannot_fit_beside_its_kernels_data_is_left_to_its_faults() {
        // 8 MiB of input and a 40-46 MiB output in 48 MiB: from the second step on, room for
        // the output would have to come out of the open kernel's input, so its kernel faults
        // it in.
        let st = outputs_program(PolicyName::Advisor, 48 * MIB, 40);
        let b = &st.backend_stats;
        assert_eq!(b.gpu_faults, 3, "{b:?}");
        // Once it is finished the input makes room: the account stays within the budget.
        assert!(b.peak_footprint_bytes <= 48 * MIB, "{b:?}");
    }

    #[test]
    fn a_recorded_program_has_its_outputs_as_writes_after_their_allocations() {
        let dir = std::env::temp_dir().join(format!("unimem-program-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("program.jsonl");
        let sim = SimBackend::new(CostModel::h200(), 64 * MIB);
        let rt = Runtime::builder().backend(Box::new(sim)).record_trace(&path).build().unwrap();
        program(&rt, 2);
        drop(rt);
        let events: Vec<TraceEvent> = TraceReader::open(&path).unwrap().map(|e| e.unwrap()).collect();
        let mut names: std::collections::HashMap<u64, String> = Default::default();
        let mut kernels = Vec::new();
        for e in &events {
            match e {
                TraceEvent::Alloc { id, name, .. } => {
                    names.insert(*id, name.clone().unwrap_or_default());
                }
                TraceEvent::Kernel { name, acc, .. } => {
                    let touched: Vec<(String, bool)> =
                        acc.iter().map(|a| (names[&a.id].clone(), a.mode.writes())).collect();
                    kernels.push((name.to_string(), touched));
                }
                _ => {}
            }
        }
        let matmul = ("matmul".to_string(), vec![("w".to_string(), false), ("out".to_string(), true)]);
        assert_eq!(kernels.len(), 5, "{kernels:?}");
        assert_eq!(kernels[1], matmul, "the workspace freed within the operation is not among its accesses");
        assert_eq!(kernels[3], matmul);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_operation_left_open_is_finished_by_the_next_command() {
        let sim = SimBackend::new(CostModel::h200(), 64 * MIB);
        let rt = Runtime::builder().backend(Box::new(sim)).build().unwrap();
        let s = ProgramStream(3);
        let a = rt.alloc_on("a", MIB, s, false).unwrap();
        rt.launch_on("first", &[whole(&a, AccessMode::Write)], s).unwrap();
        let out = rt.alloc_on("out", MIB, s, true).unwrap();
        // no finish_on: a step, a second launch and a synchronize still see it done
        rt.step().unwrap();
        rt.launch_on("second", &[whole(&out, AccessMode::Read)], s).unwrap();
        rt.launch_on("third", &[whole(&a, AccessMode::Read)], s).unwrap();
        let st = rt.synchronize().unwrap();
        assert_eq!(st.backend_stats.kernels, 3);
        assert_eq!(st.device_resident_bytes, 2 * MIB, "the output written by the first counts");
    }

    /// A program looping over more data than the budget holds: the advisor's hints for later
    /// kernels (evictions making room, prefetches) come after each launch's reply, and the
    /// data and the budget hold as when they came before it.
    #[test]
    fn hints_for_later_kernels_after_the_reply_keep_the_data_and_the_budget() {
        let budget = 40 * MIB;
        let rt = Runtime::builder()
            .simulator()
            .budget(crate::Budget::Bytes(budget))
            .policy(PolicyName::Advisor)
            .build()
            .unwrap();
        let s = ProgramStream(5);
        let fill = |i: usize| -> Vec<u8> { (0..8 * MIB).map(|b| (b as usize * 31 + i * 7) as u8).collect() };
        let weights: Vec<Region> =
            (0..8).map(|i| rt.alloc_on(&format!("w{i}"), 8 * MIB, s, false).unwrap()).collect();
        for (i, w) in weights.iter().enumerate() {
            rt.write(w.id, 0, &fill(i)).unwrap();
        }
        for _ in 0..6 {
            for w in &weights {
                rt.launch_on("layer", &[whole(w, AccessMode::Read)], s).unwrap();
                rt.finish_on(s).unwrap();
            }
            rt.step().unwrap();
        }
        let stats = rt.synchronize().unwrap();
        let b = &stats.backend_stats;
        assert!(b.prefetch_h2d_bytes > 0 && b.staged_out_bytes > 0, "the advisor moved data ahead: {b:?}");
        assert!(b.peak_footprint_bytes <= budget, "peak {} over {budget}", b.peak_footprint_bytes);
        for (i, w) in weights.iter().enumerate() {
            let mut seen = vec![0; (8 * MIB) as usize];
            rt.read(w.id, 0, &mut seen).unwrap();
            assert!(seen == fill(i), "weight {i} came back changed");
        }
    }

    #[test]
    fn a_freed_buffer_serves_the_next_allocation_of_its_size() {
        let sim = SimBackend::new(CostModel::h200(), 64 * MIB);
        let rt = Runtime::builder().backend(Box::new(sim)).build().unwrap();
        let s = ProgramStream(2);
        for _ in 0..3 {
            let r = rt.alloc_on("x", 4 * MIB, s, false).unwrap();
            rt.free_on(r.id, s).unwrap();
        }
        assert_eq!(rt.synchronize().unwrap().backend_stats.new_buffers, 1, "one buffer, pooled twice");
        rt.alloc_on("y", 6 * MIB, s, false).unwrap();
        assert_eq!(
            rt.synchronize().unwrap().backend_stats.new_buffers,
            2,
            "no buffer of that size was pooled"
        );
    }

    #[test]
    fn a_backend_error_names_the_call_and_a_freed_region_is_refused() {
        let sim = SimBackend::new(CostModel::h200(), 64 * MIB);
        let rt = Runtime::builder().backend(Box::new(sim)).build().unwrap();
        let s = ProgramStream(0);
        let r = rt.alloc_on("x", MIB, s, false).unwrap();
        rt.free_on(r.id, s).unwrap();
        let e = rt.launch_on("op", &[whole(&r, AccessMode::Read)], s).unwrap_err();
        assert!(matches!(e, Error::UnknownRegion(_)), "{e}");
        assert!(rt.free_on(r.id, s).is_err());
        assert!(rt.alloc_on("empty", 0, s, false).is_err());
    }
}
