//! CUDA events recorded again rather than created anew, for both CUDA backends and their
//! telemetry's timed events. A mark is an event after the work on a stream so far (a kernel's
//! end, a copy batch, the work before a free); creating and destroying one for every mark adds
//! two driver calls to the thread that issues the work. An event comes back here once its last
//! holder gives it back, and the next mark records it again: a stream wait issued on it
//! earlier waits for the record it saw then, so recording it again changes nothing for that
//! wait.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};

use super::cuda_err;
use crate::error::Result;

/// Spare events kept at most (more are destroyed): enough for the marks in flight of a
/// replay's busiest stretch.
const MAX_SPARE: usize = 4096;

/// Spare events of one kind, recorded again for later marks: untimed ones for ordering work,
/// timed ones (`CU_EVENT_DEFAULT`) for telemetry, which reads their times.
pub(in crate::backends::cuda) struct EventPool {
    flags: CUevent_flags,
    spare: Vec<CudaEvent>,
    /// Events created (a spare was not at hand), for the backends' logs.
    created: u64,
}

impl EventPool {
    /// A pool of events that order work and carry no time.
    pub(in crate::backends::cuda) fn untimed() -> Self {
        Self { flags: CUevent_flags::CU_EVENT_DISABLE_TIMING, spare: Vec::new(), created: 0 }
    }

    /// A pool of events whose times are read.
    pub(in crate::backends::cuda) fn timed() -> Self {
        Self { flags: CUevent_flags::CU_EVENT_DEFAULT, spare: Vec::new(), created: 0 }
    }

    /// An event after the work on `stream` so far (`what` names it in errors).
    pub(in crate::backends::cuda) fn record(&mut self, stream: &CudaStream, what: &str) -> Result<CudaEvent> {
        match self.spare.pop() {
            Some(ev) => {
                ev.record(stream).map_err(cuda_err("cuEventRecord", what))?;
                Ok(ev)
            }
            None => {
                self.created += 1;
                stream.record_event(Some(self.flags)).map_err(cuda_err("cuEventRecord", what))
            }
        }
    }

    /// Keeps `events` for later marks (up to `MAX_SPARE`; the rest are destroyed).
    pub(in crate::backends::cuda) fn put(&mut self, events: impl IntoIterator<Item = CudaEvent>) {
        let room = MAX_SPARE.saturating_sub(self.spare.len());
        self.spare.extend(events.into_iter().take(room));
    }

    /// Events created so far.
    pub(in crate::backends::cuda) fn created(&self) -> u64 {
        self.created
    }
}

/// Marks shared by the work that waits on them: an event comes back to the pool once its
/// last holder gives it back.
pub(in crate::backends::cuda) struct Marks {
    pool: EventPool,
}

impl Default for Marks {
    fn default() -> Self {
        Self { pool: EventPool::untimed() }
    }
}

impl Marks {
    /// An event after the work on `stream` so far (`what` names it in errors).
    pub(in crate::backends::cuda) fn record(
        &mut self,
        stream: &CudaStream,
        what: &str,
    ) -> Result<Arc<CudaEvent>> {
        Ok(Arc::new(self.pool.record(stream, what)?))
    }

    /// Takes `ev` back for a later mark if this was its last holder (else it goes with the
    /// last one).
    pub(in crate::backends::cuda) fn give_back(&mut self, ev: Arc<CudaEvent>) {
        if let Ok(ev) = Arc::try_unwrap(ev) {
            self.pool.put([ev]);
        }
    }

    /// Events created so far.
    pub(in crate::backends::cuda) fn created(&self) -> u64 {
        self.pool.created()
    }
}
