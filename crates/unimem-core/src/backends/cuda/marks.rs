//! CUDA events recorded again rather than created anew, for both CUDA backends. A mark is an
//! event after the work on a stream so far (a kernel's end, a copy batch, the work before a
//! free); creating and destroying one for every mark adds two driver calls to the thread that
//! issues the work. An event comes back here once its last holder gives it back, and the next
//! mark records it again: a stream wait issued on it earlier waits for the record it saw then,
//! so recording it again changes nothing for that wait.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaStream};

use super::cuda_err;
use crate::error::Result;

/// Spare events kept at most (more are destroyed): enough for the marks in flight of a
/// replay's busiest stretch.
const MAX_SPARE: usize = 4096;

/// Spare events, recorded again for later marks.
#[derive(Default)]
pub(in crate::backends::cuda) struct Marks {
    spare: Vec<CudaEvent>,
    /// Events created (a spare was not at hand), for the backends' logs.
    created: u64,
}

impl Marks {
    /// An event after the work on `stream` so far (`what` names it in errors).
    pub(in crate::backends::cuda) fn record(
        &mut self,
        stream: &CudaStream,
        what: &str,
    ) -> Result<Arc<CudaEvent>> {
        let ev = match self.spare.pop() {
            Some(ev) => {
                ev.record(stream).map_err(cuda_err("cuEventRecord", what))?;
                ev
            }
            None => {
                self.created += 1;
                stream.record_event(None).map_err(cuda_err("cuEventRecord", what))?
            }
        };
        Ok(Arc::new(ev))
    }

    /// Takes `ev` back for a later mark if this was its last holder (else it goes with the
    /// last one).
    pub(in crate::backends::cuda) fn give_back(&mut self, ev: Arc<CudaEvent>) {
        if let Ok(ev) = Arc::try_unwrap(ev) {
            if self.spare.len() < MAX_SPARE {
                self.spare.push(ev);
            }
        }
    }

    /// Events created so far.
    pub(in crate::backends::cuda) fn created(&self) -> u64 {
        self.created
    }
}
