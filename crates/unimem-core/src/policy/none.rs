//! `none`: no hints at all, the baseline. The driver faults data in when a kernel touches it
//! and, over capacity, evicts the least recently migrated block.

use super::{Hints, Policy};
use crate::error::Result;
use crate::op::Op;

/// The do-nothing policy.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHints;

impl Policy for NoHints {
    fn name(&self) -> &'static str {
        "none"
    }

    fn before(&mut self, _: u64, _: &Op, _: &mut Hints<'_>) -> Result<()> {
        Ok(())
    }

    fn gives_hints(&self) -> bool {
        false
    }
}
