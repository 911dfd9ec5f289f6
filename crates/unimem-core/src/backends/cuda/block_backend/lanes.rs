//! Copy streams for one direction of the arena's copies, taken in turn, and the marks a free
//! records after their work.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaStream};

use super::super::marks::Marks;
use super::super::CudaDevice;
use crate::error::Result;

/// Copy streams each way in the arena: a copy waiting for its chunk (a copy out, behind the
/// kernel last using it) holds back only the copies behind it on its own stream. Four, as
/// measured against one, two and eight (`docs/decisions.md`, "Replays in a device arena").
pub(super) const ARENA_LANES: usize = 4;

/// Streams for one direction of copies, taken in turn, one per call.
#[derive(Debug)]
pub(super) struct Lanes {
    streams: Vec<Arc<CudaStream>>,
    next: usize,
    /// Per stream, the mark after its work that the last free recorded, and whether it took
    /// work since.
    free_marks: Vec<Option<Arc<CudaEvent>>>,
    fresh: Vec<bool>,
}

impl Lanes {
    pub(super) fn new(dev: &CudaDevice, n: usize) -> Result<Self> {
        Ok(Self {
            streams: (0..n).map(|_| dev.new_stream()).collect::<Result<_>>()?,
            next: 0,
            free_marks: vec![None; n],
            fresh: vec![false; n],
        })
    }

    /// The stream for the next call.
    pub(super) fn take(&mut self) -> Arc<CudaStream> {
        let s = self.streams[self.next].clone();
        self.fresh[self.next] = true;
        self.next = (self.next + 1) % self.streams.len();
        s
    }

    pub(super) fn all(&self) -> &[Arc<CudaStream>] {
        &self.streams
    }

    /// Marks after all the work on these streams so far, for a free: recorded again only on a
    /// stream that took work since the last free (the mark from then covers all of an idle
    /// one's), so that a free records two or three events rather than one per stream.
    pub(super) fn free_marks(&mut self, marks: &mut Marks) -> Result<Vec<Arc<CudaEvent>>> {
        let mut out = Vec::new();
        for i in 0..self.streams.len() {
            if std::mem::take(&mut self.fresh[i]) {
                let ev = marks.record(&self.streams[i], "free")?;
                if let Some(old) = self.free_marks[i].replace(ev) {
                    marks.give_back(old);
                }
            }
            out.extend(self.free_marks[i].clone());
        }
        Ok(out)
    }
}
