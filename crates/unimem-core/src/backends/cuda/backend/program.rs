//! Kernels the program enqueues on its own streams (see [`ProgramStreams`]): the data placed
//! as for the backend's own kernels, the program's stream made to wait for it, and the
//! backend's streams made to wait for the program's work before anything touches its data.
//!
//! Between [`ProgramStreams::launch_on`] and [`ProgramStreams::finish`] the program's kernel
//! is open: the program is still enqueueing it. A follow makes the compute stream wait for the
//! program's work so far and records the latest kernel's mark (what stage-outs of its blocks
//! wait for) again after it. Outside an open kernel the compute stream already waits for
//! everything the program enqueued through the backend (the last finish followed it). Each
//! step is as few driver calls as it can be (events recorded again, never created per
//! operator), since they are host time on every operator of the program.

use cudarc::driver::{result, sys};

use super::kernel::KernelTiming;
use super::*;
use crate::backends::cuda::timing::KernelStart;
use crate::seam::{ProgramStream, ProgramStreams};

/// What the backend keeps of the program's kernels.
#[derive(Default)]
pub(super) struct ProgramState {
    /// A kernel is open (launched, not finished).
    open: bool,
    /// The event the program's stream waits on to follow the backend (recorded again each time).
    lead: Option<CudaEvent>,
    /// The event at the end of the program's work that the compute stream waits on (likewise).
    tail: Option<CudaEvent>,
    /// The open kernel, where kernels are timed.
    timing: Option<OpenKernel>,
}

/// A kernel the program launched and has not finished, timed.
struct OpenKernel {
    name: String,
    /// Its declared time.
    dur_ns: u64,
    start: KernelStart,
}

/// `wait` waits for `ev` (both this context's).
fn wait_event(wait: sys::CUstream, ev: sys::CUevent, what: &'static str) -> Result<()> {
    // SAFETY: a live stream and event of this context (a program's stream is the caller's
    // promise, as for any stream handed to a CUDA library).
    unsafe { result::stream::wait_event(wait, ev, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
        .map_err(cuda_err("cuStreamWaitEvent", what))
}

impl CudaBackend {
    /// A reusable event of the program state, created the first time.
    fn program_event(&self, kept: Option<CudaEvent>) -> Result<CudaEvent> {
        match kept {
            Some(ev) => Ok(ev),
            None => self.dev.context().new_event(None).map_err(cuda_err("cuEventCreate", "program stream")),
        }
    }

    /// The latest kernel's mark, recorded again on the compute stream (it only moves later:
    /// whatever waits on it afterwards waits longer).
    fn remark_latest(&mut self) -> Result<()> {
        let seq = self.stats.kernels;
        match self.kernel_marks.back().filter(|m| m.0 == seq) {
            Some((_, mark)) => {
                mark.record(&self.streams.compute).map_err(cuda_err("cuEventRecord", "kernel mark"))
            }
            None => {
                let ev = self
                    .streams
                    .compute
                    .record_event(None)
                    .map_err(cuda_err("cuEventRecord", "kernel mark"))?;
                self.kernel_marks.push_back((seq, Arc::new(ev)));
                Ok(())
            }
        }
    }
}

impl ProgramStreams for CudaBackend {
    fn launch_on(&mut self, kernel: &KernelLaunch<'_>, stream: ProgramStream) -> Result<()> {
        if self.program.open {
            // A kernel its program never finished ends where this one starts.
            self.finish(stream)?;
        }
        self.run_kernel_timed(kernel, KernelTiming::Program, &mut |this| {
            // The data is placed: the program's kernel time runs from here.
            let compute = this.streams.compute.clone();
            if let Some(rec) = this.timing() {
                let start = rec.start_kernel(&compute)?;
                this.program.timing =
                    Some(OpenKernel { name: kernel.name.to_string(), dur_ns: kernel.dur_ns, start });
            }
            this.lead(stream)
        })?;
        self.program.open = true;
        Ok(())
    }

    fn follow(&mut self, stream: ProgramStream) -> Result<()> {
        if !self.program.open {
            return Ok(());
        }
        let kept = self.program.tail.take();
        let tail = self.program_event(kept)?;
        // SAFETY: as in `wait_event`; the event is ours.
        let r = unsafe { result::event::record(tail.cu_event(), stream.0 as sys::CUstream) }
            .map_err(cuda_err("cuEventRecord", "after the program's work"))
            .and_then(|()| {
                wait_event(self.streams.compute.cu_stream(), tail.cu_event(), "after the program's work")
            });
        self.program.tail = Some(tail);
        r?;
        self.remark_latest()
    }

    fn finish(&mut self, stream: ProgramStream) -> Result<()> {
        self.follow(stream)?;
        self.program.open = false;
        if let Some(OpenKernel { name, dur_ns, start }) = self.program.timing.take() {
            if let Some(rec) = self.recording.as_mut() {
                let end = rec.mark(&self.streams.compute)?;
                rec.pending.push_back(Pending::Kernel { name, dur_ns, start, end });
            }
        }
        Ok(())
    }

    fn lead(&mut self, stream: ProgramStream) -> Result<()> {
        let kept = self.program.lead.take();
        let ev = self.program_event(kept)?;
        let r = ev.record(&self.streams.compute).map_err(cuda_err("cuEventRecord", "program lead")).and_then(
            |()| {
                wait_event(stream.0 as sys::CUstream, ev.cu_event(), "the program's stream after placed data")
            },
        );
        self.program.lead = Some(ev);
        r
    }

    fn populate(&mut self, outputs: &[RangeAccess], keep: &[RangeAccess]) -> Result<()> {
        if !(self.staged_room && self.staging.capacity() > 0) {
            // The driver alone (policy `none`) faults outputs in.
            return Ok(());
        }
        let (protect, stage) = self.timed(HostOp::PrefetchToDevice, |this| {
            for a in outputs.iter().chain(keep) {
                this.checked(a.region, a.offset, a.len)?;
            }
            let (mut protect, need) = this.missing(outputs.iter().map(|a| (a.region, a.offset, a.len)));
            if need == 0 {
                return Ok((None, Vec::new()));
            }
            protect.extend(this.missing(keep.iter().map(|a| (a.region, a.offset, a.len))).0);
            // As in `wrote`, but the open kernel's data stays: where that leaves too little
            // room, its kernel faults the pages in as before.
            let victims = this.room_victims(need, &protect)?;
            if victims.short > 0 {
                return Ok((None, Vec::new()));
            }
            let stage = crate::seam::block_ranges(victims.blocks, |id| this.regions[&id].bytes);
            Ok((Some(protect), stage))
        })?;
        let Some(protect) = protect else {
            return Ok(());
        };
        if !stage.is_empty() {
            self.stage_ranges(&stage)?;
        }
        self.timed(HostOp::PrefetchToDevice, |this| {
            let ranges: Vec<ByteRange> = outputs
                .iter()
                .map(|a| ByteRange { region: a.region, offset: a.offset, len: a.len })
                .collect();
            let list = this.addresses(&ranges);
            this.bring_to_device(&ranges, &list, false, &protect)?;
            // The program's stream follows the compute stream (`lead`), which now waits for
            // the pages.
            this.streams
                .compute
                .join(&this.streams.h2d)
                .map_err(cuda_err("cuStreamWaitEvent", "outputs populated"))
        })
    }

    fn wrote(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        let staged_room = self.staged_room && self.staging.capacity() > 0;
        let (blocks, stage) = self.timed(HostOp::Launch, |this| {
            for a in accesses {
                this.checked(a.region, a.offset, a.len)?;
            }
            // The kernel that wrote them is finished (its mark covers it): room made now may
            // evict its other data.
            let (blocks, need) = this.missing(accesses.iter().map(|a| (a.region, a.offset, a.len)));
            let mut stage: Vec<ByteRange> = Vec::new();
            if staged_room {
                // Copied out on the copy engine after the victims' kernels, as a policy's
                // evictions are; the room counts as made once they are issued, as for those.
                let victims = this.room_victims(need, &blocks)?.blocks;
                stage = crate::seam::block_ranges(victims, |id| this.regions[&id].bytes);
            } else if this.make_room(need, &blocks, RoomSite::Kernel)? {
                this.streams
                    .compute
                    .join(&this.streams.d2h)
                    .map_err(cuda_err("cuStreamWaitEvent", "outputs after evict"))?;
            }
            Ok((blocks, stage))
        })?;
        if !stage.is_empty() {
            self.stage_ranges(&stage)?;
        }
        self.timed(HostOp::Launch, |this| {
            let seq = this.stats.kernels;
            this.account_kernel(accesses, blocks, seq, &FxHashSet::default());
            Ok(())
        })
    }
}
