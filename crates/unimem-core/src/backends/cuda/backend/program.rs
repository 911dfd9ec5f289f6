//! Kernels the program enqueues on its own streams (see [`ProgramStreams`]): the data placed
//! as for the backend's own kernels, the program's stream made to wait for it, and the
//! backend's streams made to wait for the program's work before anything touches its data.

use super::kernel::{KernelEnd, OpenKernel};
use super::*;
use crate::seam::{ProgramStream, ProgramStreams};
use cudarc::driver::sys;

impl CudaBackend {
    /// An event after the work the program has enqueued on `stream` so far.
    fn program_mark(&self, stream: ProgramStream) -> Result<CudaEvent> {
        let ev =
            self.dev.context().new_event(None).map_err(cuda_err("cuEventCreate", "program stream mark"))?;
        // SAFETY: the program's stream is a live CUstream of this context (the caller's
        // promise, as for any stream handed to a CUDA library); the event is ours.
        unsafe { cudarc::driver::result::event::record(ev.cu_event(), stream.0 as sys::CUstream) }
            .map_err(cuda_err("cuEventRecord", "program stream mark"))?;
        Ok(ev)
    }

    /// The latest kernel's mark (what stage-outs of its blocks wait for) moves to `mark`.
    fn move_latest_mark(&mut self, mark: Arc<CudaEvent>) {
        let seq = self.stats.kernels;
        if let Some(last) = self.kernel_marks.back_mut().filter(|m| m.0 == seq) {
            last.1 = mark;
        }
    }
}

impl ProgramStreams for CudaBackend {
    fn launch_on(&mut self, kernel: &KernelLaunch<'_>, stream: ProgramStream) -> Result<()> {
        // A kernel left open (its program never finished it) ends where this one starts.
        self.finish(stream)?;
        self.run_kernel_until(kernel, KernelEnd::Finished, &mut |this| this.lead(stream))
    }

    fn follow(&mut self, stream: ProgramStream) -> Result<()> {
        let mark = Arc::new(self.program_mark(stream)?);
        self.streams
            .compute
            .wait(&mark)
            .map_err(cuda_err("cuStreamWaitEvent", "after the program's work"))?;
        self.move_latest_mark(mark);
        Ok(())
    }

    fn finish(&mut self, stream: ProgramStream) -> Result<()> {
        self.follow(stream)?;
        if let Some(OpenKernel { name, dur_ns, start }) = self.open_kernel.take() {
            if let Some(rec) = self.recording.as_mut() {
                let end = rec.mark(&self.streams.compute)?;
                rec.pending.push_back(Pending::Kernel { name, dur_ns, start, end });
            }
        }
        Ok(())
    }

    fn lead(&mut self, stream: ProgramStream) -> Result<()> {
        let ev =
            self.streams.compute.record_event(None).map_err(cuda_err("cuEventRecord", "program lead"))?;
        // SAFETY: as in `program_mark`; the wait holds its own reference to the event's work.
        unsafe {
            cudarc::driver::result::stream::wait_event(
                stream.0 as sys::CUstream,
                ev.cu_event(),
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(cuda_err("cuStreamWaitEvent", "the program's stream after placed data"))
    }

    fn wrote(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        self.timed(HostOp::Launch, |this| {
            for a in accesses {
                this.checked(a.region, a.offset, a.len)?;
            }
            let (blocks, need) = this.missing(accesses.iter().map(|a| (a.region, a.offset, a.len)));
            if this.make_room(need, &blocks, RoomSite::Kernel)? {
                this.streams
                    .compute
                    .join(&this.streams.d2h)
                    .map_err(cuda_err("cuStreamWaitEvent", "outputs after evict"))?;
            }
            let seq = this.stats.kernels;
            this.account_kernel(accesses, blocks, seq, &FxHashSet::default());
            Ok(())
        })
    }
}
