//! Copy streams for one direction of the arena's copies, taken in turn.

use std::sync::Arc;

use cudarc::driver::CudaStream;

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
}

impl Lanes {
    pub(super) fn new(dev: &CudaDevice, n: usize) -> Result<Self> {
        Ok(Self { streams: (0..n).map(|_| dev.new_stream()).collect::<Result<_>>()?, next: 0 })
    }

    /// The stream for the next call.
    pub(super) fn take(&mut self) -> Arc<CudaStream> {
        let s = self.streams[self.next].clone();
        self.next = (self.next + 1) % self.streams.len();
        s
    }

    pub(super) fn all(&self) -> &[Arc<CudaStream>] {
        &self.streams
    }
}
