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
    /// on the compute timeline after the latest kernel. With staged room
    /// ([`SimBackend::with_staged_room`]) and staging memory, the room they need is made first
    /// by staged evictions of the least recently used blocks, as the CUDA backend makes it.
    fn wrote(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        for a in accesses {
            self.checked(a.region, a.offset, a.len)?;
        }
        if self.staged_room && self.staging_capacity > 0 {
            self.stage_room_for(accesses)?;
        }
        self.host_timed(HostOp::Launch, |this| {
            // Pages populated ahead (`populate`) are written once they are there.
            let ready = this.data_ready(accesses, 0);
            let start = this.compute_free.max(this.host_now).max(ready);
            let faults = this.fault_in_accesses(accesses, start);
            let end = this.charge_faults(&faults, start);
            this.compute_free = end;
            this.count_faults(faults.groups, faults.moved);
            this.settle(accesses, faults.touched_new, end);
            Ok(())
        })
    }

    /// Room staged as for [`ProgramStreams::wrote`], outside the open kernel's data, then the
    /// missing pages prefetched as a policy's prefetch is (populated on the `h2d` stream, after
    /// its queued work). Where the open kernel's data leaves too little room, nothing is done:
    /// its kernel faults the pages in.
    fn populate(&mut self, outputs: &[RangeAccess], keep: &[RangeAccess]) -> Result<()> {
        for a in outputs.iter().chain(keep) {
            self.checked(a.region, a.offset, a.len)?;
        }
        let (need_pages, _) = self.missing_pages(outputs);
        if !(self.staged_room && self.staging_capacity > 0) || need_pages == 0 {
            // The driver alone (policy `none`) faults outputs in.
            return Ok(());
        }
        let need = need_pages as u64 * PAGE_SIZE;
        let protect = self.blocks_of(outputs.iter().chain(keep).map(|a| (a.region, a.offset, a.len)));
        let victims = self.room_victims(need, &protect);
        if victims.short > 0 {
            return Ok(());
        }
        let ranges = crate::seam::block_ranges(victims.blocks, |id| self.regions[&id].bytes);
        self.stage_ranges(&ranges)?;
        self.host_timed(HostOp::PrefetchToDevice, |this| {
            for (i, a) in outputs.iter().enumerate() {
                let call_ns = if i == 0 { this.cost.prefetch_call_ns } else { this.cost.batch_range_ns };
                let pages = this.region(a.region)?.page_range(a.offset, a.len);
                let range = ByteRange { region: a.region, offset: a.offset, len: a.len };
                this.prefetch_to_device(&range, pages, call_ns, &protect, false);
            }
            Ok(())
        })
    }
}

impl SimBackend {
    /// Stages out the least recently used blocks outside `accesses` until the pages the
    /// accesses need on the device fit.
    fn stage_room_for(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        let (need_pages, _) = self.missing_pages(accesses);
        if need_pages == 0 {
            return Ok(());
        }
        let protect = self.blocks_of(accesses.iter().map(|a| (a.region, a.offset, a.len)));
        let victims = self.room_victims(need_pages as u64 * PAGE_SIZE, &protect).blocks;
        let ranges = crate::seam::block_ranges(victims, |id| self.regions[&id].bytes);
        self.stage_ranges(&ranges)
    }
}
