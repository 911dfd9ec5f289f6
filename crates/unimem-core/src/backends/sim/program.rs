//! The program's own kernels (see [`ProgramStreams`]) on the simulator's one timeline: placed
//! and timed as launches (their time is the one declared); there is no other stream to order
//! with, so following and leading order nothing.

use super::*;
use crate::seam::{ProgramStream, ProgramStreams};

impl ProgramStreams for SimBackend {
    fn launch_on(&mut self, kernel: &KernelLaunch<'_>, _stream: ProgramStream) -> Result<()> {
        self.launch_kernel(kernel)
    }

    fn follow(&mut self, _stream: ProgramStream) -> Result<()> {
        Ok(())
    }

    fn finish(&mut self, _stream: ProgramStream) -> Result<()> {
        Ok(())
    }

    fn lead(&mut self, _stream: ProgramStream) -> Result<()> {
        Ok(())
    }

    /// The written pages are populated (or brought in) as the kernel's own faults would be,
    /// on the compute timeline after the latest kernel.
    fn wrote(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        self.host_timed(HostOp::Launch, |this| {
            for a in accesses {
                this.checked(a.region, a.offset, a.len)?;
            }
            let start = this.compute_free.max(this.host_now);
            let faults = this.fault_in_accesses(accesses, start);
            let end = this.charge_faults(&faults, start);
            this.compute_free = end;
            this.count_faults(faults.groups, faults.moved);
            this.settle(accesses, faults.touched_new, end);
            Ok(())
        })
    }
}
