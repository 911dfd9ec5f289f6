//! Kernel launches: staged data brought back, data in flight waited for, room made as the
//! driver would, the kernel enqueued, and the account of where its data is.

use super::*;

/// Who times a kernel on the device, where kernels are timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KernelTiming {
    /// The backend, around the kernel on its compute stream, its waits for data included.
    Backend,
    /// The program's stream, around what the program enqueues there (see `program.rs`).
    Program,
}

impl CudaBackend {
    /// Runs one kernel on the compute stream: waits for its data in flight, makes room as the
    /// driver would, lets `exec` enqueue the kernel itself, then accounts where its data is.
    pub(super) fn run_kernel(
        &mut self,
        kernel: &KernelLaunch<'_>,
        exec: &mut dyn FnMut(&mut Self) -> Result<()>,
    ) -> Result<()> {
        self.run_kernel_timed(kernel, KernelTiming::Backend, exec)
    }

    /// [`Self::run_kernel`], timed by `timing`.
    pub(super) fn run_kernel_timed(
        &mut self,
        kernel: &KernelLaunch<'_>,
        timing: KernelTiming,
        exec: &mut dyn FnMut(&mut Self) -> Result<()>,
    ) -> Result<()> {
        self.timed(HostOp::Launch, |this| {
            for a in kernel.accesses {
                this.checked(a.region, a.offset, a.len)?;
            }
            this.issue_discards(false)?;
            if this.staging.in_use() > 0 {
                this.restore_for_kernel(kernel.accesses)?;
            }
            // The kernel's slice starts before its waits: the wait for data is part of its stall.
            let compute = this.streams.compute.clone();
            let start = match this.timing().filter(|_| timing == KernelTiming::Backend) {
                Some(rec) => Some(rec.start_kernel(&compute)?),
                None => None,
            };
            let late = this.wait_for_prefetches(kernel.accesses)?;
            // The emulated driver makes room before the kernel faults its data in.
            let (blocks, need) = this.missing(kernel.accesses.iter().map(|a| (a.region, a.offset, a.len)));
            if this.make_room(need, &blocks, RoomSite::Kernel)? {
                this.streams
                    .compute
                    .join(&this.streams.d2h)
                    .map_err(cuda_err("cuStreamWaitEvent", "kernel after evict"))?;
            }
            exec(this)?;
            let seq = this.stats.kernels + 1;
            let mark = this.kernel_mark()?;
            this.kernel_marks.push_back((seq, mark));
            if this.kernel_marks.len() > KERNEL_MARKS {
                if let Some((_, old)) = this.kernel_marks.pop_front() {
                    this.marks.give_back(old);
                }
            }
            if let (Some(start), Some(rec)) = (start, this.recording.as_mut()) {
                let end = rec.mark(&compute)?;
                let (name, dur_ns) = (kernel.name.to_string(), kernel.dur_ns);
                rec.pending.push_back(Pending::Kernel { name, dur_ns, start, end });
            }
            this.account_kernel(kernel.accesses, blocks, seq, &late);
            this.stats.kernels += 1;
            Ok(())
        })
    }

    /// An event after the work on the compute stream so far.
    fn kernel_mark(&mut self) -> Result<Arc<CudaEvent>> {
        self.marks.record(&self.streams.compute, "kernel mark")
    }

    /// Staged data the kernel uses comes back first, as a prefetch the kernel then waits for.
    fn restore_for_kernel(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        let mut back: Vec<ByteRange> = Vec::new();
        for a in accesses {
            let r = &self.regions[&a.region];
            for b in r.blocks_of(a.offset, a.len) {
                if r.blocks[b].staged.is_some() {
                    let (offset, len) = (b as u64 * BLOCK_SIZE, r.block_bytes(b));
                    back.push(ByteRange { region: a.region, offset, len });
                }
            }
        }
        if back.is_empty() {
            return Ok(());
        }
        back.sort_unstable_by_key(|r| (r.region, r.offset));
        back.dedup();
        let list = self.addresses(&back);
        let (keep, _) = self.missing(accesses.iter().map(|a| (a.region, a.offset, a.len)));
        self.bring_to_device(&back, &list, false, &keep)
    }

    /// Makes the compute stream wait for the data in flight to the accesses' regions; returns
    /// the regions whose prefetch had not landed when the kernel was issued (the others count
    /// as on time).
    fn wait_for_prefetches(&mut self, accesses: &[RangeAccess]) -> Result<FxHashSet<RegionId>> {
        let mut waited: FxHashSet<RegionId> = FxHashSet::default();
        let mut late: FxHashSet<RegionId> = FxHashSet::default();
        for a in accesses {
            if !waited.insert(a.region) {
                continue;
            }
            if let Some(ev) = self.regions.get_mut(&a.region).expect("checked").ready.take() {
                if !ev.is_complete() {
                    late.insert(a.region);
                }
                self.streams
                    .compute
                    .wait(&ev)
                    .map_err(cuda_err("cuStreamWaitEvent", "kernel after prefetch"))?;
                self.log.kernel_waits += 1;
            }
        }
        Ok(late)
    }

    /// Accounts kernel `seq`'s blocks: what was off the device came in by faults (remote data
    /// stays where it is), and prefetched blocks used now for the first time count as used (on
    /// time unless their region's prefetch was `late`).
    pub(super) fn account_kernel(
        &mut self,
        accesses: &[RangeAccess],
        blocks: FxHashSet<BlockId>,
        seq: u64,
        late: &FxHashSet<RegionId>,
    ) {
        let mut writes: FxHashSet<BlockId> = FxHashSet::default();
        for a in accesses.iter().filter(|a| a.mode.writes()) {
            let r = &self.regions[&a.region];
            writes.extend(r.blocks_of(a.offset, a.len).map(|b| BlockId::new(a.region, b)));
        }
        // Written blocks' staging copies are stale.
        if !self.kept.is_empty() {
            for &block in &writes {
                self.forget_kept(block);
            }
        }
        for block in blocks {
            let (id, b) = (block.region, block.block as usize);
            self.regions.get_mut(&id).expect("checked").blocks[b].last_kernel = seq;
            let r = &self.regions[&id];
            let blk = r.blocks[b];
            let bytes = r.block_bytes(b);
            let written = writes.contains(&block);
            if blk.remote && !blk.on_device {
                self.stats.remote_bytes += bytes;
                self.regions.get_mut(&id).expect("checked").blocks[b].on_host = true;
                continue;
            }
            if !blk.on_device {
                self.stats.gpu_faults += 1;
                if blk.on_host {
                    self.stats.gpu_fault_bytes += bytes;
                    self.stats.h2d_bytes += bytes;
                    if blk.read_mostly && !written {
                        self.stats.duplicated_bytes += bytes;
                    }
                }
            }
            let keep_host = blk.on_host && blk.read_mostly && !written;
            self.regions.get_mut(&id).expect("checked").blocks[b].on_host = keep_host;
            self.touch_block(id, b);
        }
        for a in accesses {
            let r = self.regions.get_mut(&a.region).expect("checked");
            for b in r.blocks_of(a.offset, a.len) {
                if std::mem::take(&mut r.blocks[b].prefetched) {
                    let bytes = r.block_bytes(b);
                    self.stats.prefetch_used_bytes += bytes;
                    if !late.contains(&a.region) {
                        self.stats.prefetch_timely_bytes += bytes;
                    }
                }
            }
        }
    }

    pub(super) fn launch_kernel(&mut self, kernel: &KernelLaunch<'_>) -> Result<()> {
        self.run_kernel(kernel, &mut |this| {
            let ranges: Vec<(u64, u64, TouchMode)> = kernel
                .accesses
                .iter()
                .filter(|a| a.len > 0)
                .map(|a| (this.regions[&a.region].buf.ptr() + a.offset, a.len, TouchMode::from(a.mode)))
                .collect();
            this.kernels.touch(&this.streams.compute, &ranges, PAGE_SIZE as u32, kernel.dur_ns)
        })
    }

    pub(super) fn run_native(
        &mut self,
        kernel: &KernelLaunch<'_>,
        native: &mut dyn FnMut(&NativeLaunch<'_>) -> Result<()>,
    ) -> Result<()> {
        self.run_kernel(kernel, &mut |this| {
            let ptrs: Vec<u64> =
                kernel.accesses.iter().map(|a| this.regions[&a.region].buf.ptr() + a.offset).collect();
            this.dev.context().bind_to_thread().map_err(cuda_err("cuCtxSetCurrent", "native launch"))?;
            native(&NativeLaunch { stream: &this.streams.compute, ptrs: &ptrs })
        })
    }
}
