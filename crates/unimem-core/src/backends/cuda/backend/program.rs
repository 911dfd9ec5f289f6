//! Kernels the program enqueues on its own streams (see [`ProgramStreams`]): the data placed
//! as for the backend's own kernels, the program's stream let go once it is, and the backend's
//! streams made to wait for the program's work before anything touches its data.
//!
//! Between [`ProgramStreams::launch_on`] and [`ProgramStreams::finish`] the program's kernel
//! is open: the program is still enqueueing it. A follow makes the compute stream wait for the
//! program's work so far and records the latest kernel's mark (what stage-outs of its blocks
//! wait for) again after it. Outside an open kernel the compute stream already waits for
//! everything the program enqueued through the backend (the last finish followed it). Each
//! step is as few driver calls as it can be, since they are host time on every operator.
//!
//! With tickets ([`StreamWait::Ticket`], where the device has 64-bit stream memory operations)
//! the program's thread holds its stream at a ticket on the device (`cuStreamWaitValue64`)
//! and goes on; the compute stream writes the ticket (`cuStreamWriteValue64`) once the data is
//! placed. The program's thread also marks its stream where it is; the backend never records
//! on a program's stream then, whose end may already hold a later ticket's wait.

use std::sync::Mutex;

use cudarc::driver::{result, sys, CudaContext};

use super::kernel::KernelTiming;
use super::*;
use crate::seam::{ProgramSide, ProgramStream, ProgramStreams, StreamMark, StreamWait};

/// Marks the program's thread keeps, recorded again in turn: many more than the runtime's queue
/// of commands holds, so that the backend waits on each before it is recorded again.
const MARKS: usize = 4096;

/// What the backend keeps of the program's kernels.
#[derive(Default)]
pub(super) struct ProgramState {
    /// A kernel is open (launched, not finished).
    open: bool,
    /// The event the program's stream waits on to follow the backend (recorded again each time).
    lead: Option<CudaEvent>,
    /// An event at the end of a program's stream, for a follow without the program's mark.
    tail: Option<CudaEvent>,
    /// The open kernel's name, declared time and start, where kernels are timed.
    timing: Option<(String, u64, CudaEvent)>,
    /// The program's side, once asked for.
    side: Option<Arc<CudaProgramSide>>,
    /// The last ticket released.
    released: u64,
}

/// The program's side on CUDA: the ticket word on the device, and the marks.
pub(super) struct CudaProgramSide {
    ctx: Arc<CudaContext>,
    ticket: sys::CUdeviceptr,
    marks: Mutex<(Vec<CudaEvent>, usize)>,
}

// SAFETY: the ticket word is a device address valid on any thread with the context bound (each
// call binds it); the events are used under the mutex.
unsafe impl Send for CudaProgramSide {}
unsafe impl Sync for CudaProgramSide {}

impl ProgramSide for CudaProgramSide {
    fn hold(&self, stream: ProgramStream, ticket: u64) -> Result<()> {
        self.ctx.bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "ticket wait"))?;
        // SAFETY: the stream is a live CUstream of this context (the caller's promise); the
        // word is ours, 8 bytes.
        unsafe {
            sys::cuStreamWaitValue64_v2(
                stream.0 as sys::CUstream,
                self.ticket,
                ticket,
                sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
        }
        .result()
        .map_err(cuda_err("cuStreamWaitValue64", "the program's stream at its ticket"))
    }

    fn mark(&self, stream: ProgramStream) -> Result<StreamMark> {
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        let (events, next) = &mut *marks;
        if events.len() < MARKS {
            events.push(self.ctx.new_event(None).map_err(cuda_err("cuEventCreate", "program mark"))?);
        }
        let at = *next % events.len();
        *next = (at + 1) % MARKS;
        let ev = events[at].cu_event();
        self.ctx.bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "program mark"))?;
        // SAFETY: as in `hold`; the event is ours.
        unsafe { result::event::record(ev, stream.0 as sys::CUstream) }
            .map_err(cuda_err("cuEventRecord", "program mark"))?;
        Ok(StreamMark(ev as u64))
    }
}

impl Drop for CudaProgramSide {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by `CudaBackend::program_side`; nothing waits on it any more (the
        // backend released every ticket when it closed).
        if let Err(e) = unsafe { result::free_sync(self.ticket) } {
            tracing::warn!(error = ?e, "freeing the ticket word failed");
        }
    }
}

impl CudaBackend {
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

    /// Releases tickets at the close: no program stream waits for a backend that is gone.
    /// (A wait compares cyclically, `(i64)(word - ticket) >= 0`: far ahead, not `u64::MAX`.)
    pub(super) fn release_all_tickets(&mut self) {
        if self.program.side.is_some() {
            if let Err(e) = self.release(self.program.released.wrapping_add(1 << 62)) {
                tracing::warn!(error = %e, "releasing the program's tickets failed");
            }
        }
    }
}

impl ProgramStreams for CudaBackend {
    fn launch_on(
        &mut self,
        kernel: &KernelLaunch<'_>,
        stream: ProgramStream,
        wait: StreamWait,
    ) -> Result<()> {
        if self.program.open {
            // A kernel its program never finished ends where this one starts (the runtime
            // finishes each one with a mark first where tickets are used).
            self.finish(stream, None)?;
        }
        self.run_kernel_timed(kernel, KernelTiming::Program, &mut |this| {
            // The data is placed: the program's kernel time runs from here.
            let compute = this.streams.compute.clone();
            if let Some(rec) = this.timing() {
                let start = rec.mark(&compute)?;
                this.program.timing = Some((kernel.name.to_string(), kernel.dur_ns, start));
            }
            match wait {
                StreamWait::Event => this.lead(stream),
                StreamWait::Ticket(t) => this.release(t),
            }
        })?;
        self.program.open = true;
        Ok(())
    }

    fn follow(&mut self, stream: ProgramStream, mark: Option<StreamMark>) -> Result<()> {
        if !self.program.open {
            return Ok(());
        }
        let compute = self.streams.compute.cu_stream();
        let wait = |ev: sys::CUevent| {
            // SAFETY: `ev` is a live event of this context: the program side's (valid until
            // many more marks are made) or ours.
            unsafe { result::stream::wait_event(compute, ev, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
                .map_err(cuda_err("cuStreamWaitEvent", "after the program's work"))
        };
        match mark {
            Some(m) => wait(m.0 as sys::CUevent)?,
            None => {
                let tail = match self.program.tail.take() {
                    Some(ev) => ev,
                    None => self
                        .dev
                        .context()
                        .new_event(None)
                        .map_err(cuda_err("cuEventCreate", "program tail"))?,
                };
                // SAFETY: the program's stream is a live CUstream of this context (the caller's
                // promise, as for any stream handed to a CUDA library); the event is ours.
                let recorded = unsafe { result::event::record(tail.cu_event(), stream.0 as sys::CUstream) }
                    .map_err(cuda_err("cuEventRecord", "after the program's work"))
                    .and_then(|()| wait(tail.cu_event()));
                self.program.tail = Some(tail);
                recorded?;
            }
        }
        self.remark_latest()
    }

    fn finish(&mut self, stream: ProgramStream, mark: Option<StreamMark>) -> Result<()> {
        self.follow(stream, mark)?;
        self.program.open = false;
        if let Some((name, dur_ns, start)) = self.program.timing.take() {
            if let Some(rec) = self.recording.as_mut() {
                let end = rec.mark(&self.streams.compute)?;
                rec.pending.push_back(Pending::Kernel { name, dur_ns, start, end });
            }
        }
        Ok(())
    }

    fn lead(&mut self, stream: ProgramStream) -> Result<()> {
        let ev = match self.program.lead.take() {
            Some(ev) => ev,
            None => self.dev.context().new_event(None).map_err(cuda_err("cuEventCreate", "program lead"))?,
        };
        let waited = ev
            .record(&self.streams.compute)
            .map_err(cuda_err("cuEventRecord", "program lead"))
            .and_then(|()| {
                // SAFETY: as in `follow`; the wait takes the event's work as recorded now.
                unsafe {
                    result::stream::wait_event(
                        stream.0 as sys::CUstream,
                        ev.cu_event(),
                        sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                    )
                }
                .map_err(cuda_err("cuStreamWaitEvent", "the program's stream after placed data"))
            });
        self.program.lead = Some(ev);
        waited
    }

    fn release(&mut self, ticket: u64) -> Result<()> {
        let Some(side) = self.program.side.as_ref() else { return Ok(()) };
        self.program.released = self.program.released.max(ticket);
        // SAFETY: the word is the side's, 8 bytes on this context's device.
        unsafe {
            sys::cuStreamWriteValue64_v2(
                self.streams.compute.cu_stream(),
                side.ticket,
                ticket,
                sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
            )
        }
        .result()
        .map_err(cuda_err("cuStreamWriteValue64", "releasing the program's ticket"))
    }

    fn program_side(&mut self) -> Result<Option<Arc<dyn ProgramSide>>> {
        if !self.dev.capabilities().stream_mem_ops {
            return Ok(None);
        }
        if self.program.side.is_none() {
            // A program's stream may wait at a ticket that only this thread releases, later:
            // nothing here may wait for the whole device then. Pinning host memory does (a
            // page-locked allocation synchronises implicitly), so staging is pinned in full
            // now instead of as evictions first need it.
            let t0 = Instant::now();
            self.staging.reserve(self.staging.capacity())?;
            self.excluded_ns += t0.elapsed().as_nanos() as u64;
            let ctx = self.dev.context().clone();
            ctx.bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "ticket word"))?;
            // SAFETY: 8 bytes of device memory, zeroed before any wait reads them.
            let ticket = unsafe {
                let word = result::malloc_sync(8).map_err(cuda_err("cuMemAlloc", "ticket word"))?;
                result::memset_d8_sync(word, 0, 8).map_err(cuda_err("cuMemsetD8", "ticket word"))?;
                word
            };
            self.program.side =
                Some(Arc::new(CudaProgramSide { ctx, ticket, marks: Mutex::new((Vec::new(), 0)) }));
        }
        Ok(self.program.side.clone().map(|s| s as Arc<dyn ProgramSide>))
    }

    fn wrote(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        self.timed(HostOp::Launch, |this| {
            for a in accesses {
                this.checked(a.region, a.offset, a.len)?;
            }
            // The kernel that wrote them is finished (its mark covers it): room made now may
            // evict its other data.
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
