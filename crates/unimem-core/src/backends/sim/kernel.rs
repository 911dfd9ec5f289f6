//! A kernel launch: the launch queue, staged data restored, data in flight waited for, faults
//! migrated (the driver making room first), remote and duplicated pages, then the compute.

use super::*;

/// What a kernel's accesses cost before it can compute.
#[derive(Debug, Default)]
pub(super) struct KernelFaults {
    /// Fault groups (one per contiguous run of faulting units).
    pub(super) groups: u64,
    /// Pages migrated to the device by faults.
    pub(super) moved: usize,
    /// Pages populated on the device by first touch.
    populated: usize,
    /// Bytes read or written remotely (host-preferred, device-mapped).
    remote_bytes: u64,
    /// Pages of read-mostly duplicates a write collapsed.
    collapse_pages: usize,
    /// When the room the driver made for the faulting data is there.
    room_at: u64,
    /// Blocks that received device pages (restamped once the kernel is issued).
    pub(super) touched_new: Vec<(RegionId, std::ops::Range<usize>)>,
    /// (region, offset, bytes) of fault migrations, for telemetry when recording.
    moves: Vec<(RegionId, u64, u64)>,
}

/// When a kernel was issued by the host, started on the device and ended.
#[derive(Debug, Clone, Copy)]
struct KernelTimes {
    host_issued: u64,
    start: u64,
    end: u64,
}

impl SimBackend {
    pub(super) fn launch_kernel(&mut self, kernel: &KernelLaunch<'_>) -> Result<()> {
        self.host_timed(HostOp::Launch, |this| {
            for a in kernel.accesses {
                this.checked(a.region, a.offset, a.len)?;
            }
            this.issue_launch();
            let host_issued = this.host_now;
            if this.staged_bytes > 0 {
                this.restore_for_kernel(kernel.accesses);
            }
            let issued = this.compute_free.max(this.host_now);
            // Wait for data already in flight to the device rather than faulting on it.
            let start = this.data_ready(kernel.accesses, issued);
            this.count_prefetched_use(kernel.accesses, issued);
            let faults = this.fault_in_accesses(kernel.accesses, start);
            let begin = this.charge_faults(&faults, start);
            // Remote accesses cross the same link as migrations: they wait for transfers queued
            // on it (a conservative model; the hardware would share the bandwidth instead).
            let remote_ns = CostModel::transfer_ns(faults.remote_bytes, this.cost.remote_rate_gbps);
            let remote_end =
                if remote_ns > 0 { this.occupy_link(Direction::H2D, begin, remote_ns).1 } else { begin };
            let end = (begin + kernel.dur_ns).max(remote_end);
            this.compute_free = end;
            if this.cost.launch_queue_depth > 0 {
                this.launched.push_back(end);
            }
            this.finish_kernel(kernel, faults, KernelTimes { host_issued, start: issued, end });
            Ok(())
        })
    }

    /// The host issues the kernel at the end of its launch call; the device runs it when free.
    /// With a full launch queue the call waits for the oldest kernel in it to end.
    fn issue_launch(&mut self) {
        let depth = self.cost.launch_queue_depth;
        if depth > 0 && self.launched.len() as u64 >= depth {
            let oldest = self.launched.pop_front().unwrap_or(0);
            self.host_now = self.host_now.max(oldest);
        }
        self.host_now += self.cost.launch_host_ns;
    }

    /// Staged data the kernel uses comes back first (it waits for it as for a prefetch): over
    /// whole fault units, since a fault brings in the unit around a touched page.
    fn restore_for_kernel(&mut self, accesses: &[RangeAccess]) {
        let protect = self.blocks_of(accesses.iter().map(|a| (a.region, a.offset, a.len)));
        for a in accesses {
            let r = &self.regions[&a.region];
            let (s, e) = r.page_range(a.offset, a.len);
            let (us, ue) = self.unit_span(r, s, e);
            if r.staged.count(us, ue) > 0 {
                self.restore_to_device(a.region, us, ue, &protect, self.host_now, false);
            }
        }
    }

    /// When the data in flight to the kernel's blocks has landed (`issued` at the earliest).
    pub(super) fn data_ready(&self, accesses: &[RangeAccess], issued: u64) -> u64 {
        let mut start = issued;
        for a in accesses {
            let r = &self.regions[&a.region];
            let (s, e) = r.page_range(a.offset, a.len);
            for b in r.block_range(s, e) {
                start = start.max(r.blocks[b].ready_ns);
            }
        }
        start
    }

    /// Metrics: pages a prefetch brought, used now for the first time, and whether they were
    /// there before the kernel was ready to run.
    fn count_prefetched_use(&mut self, accesses: &[RangeAccess], issued: u64) {
        for a in accesses {
            let r = self.regions.get_mut(&a.region).expect("checked");
            let (s, e) = r.page_range(a.offset, a.len);
            let used = r.prefetched.remove(s, e) as u64 * PAGE_SIZE;
            if used > 0 {
                let ready = r.block_range(s, e).map(|b| r.blocks[b].ready_ns).max().unwrap_or(0);
                self.stats.prefetch_used_bytes += used;
                if ready <= issued {
                    self.stats.prefetch_timely_bytes += used;
                }
            }
        }
    }

    /// Pages the accesses need on the device that are not there, in whole fault units
    /// (remote-mapped blocks use no device memory); and whether any is missing at all.
    pub(super) fn missing_pages(&self, accesses: &[RangeAccess]) -> (usize, bool) {
        let mut need_pages = 0usize;
        let mut any_missing = false;
        for a in accesses {
            let r = &self.regions[&a.region];
            let (s, e) = r.page_range(a.offset, a.len);
            if r.on_device.count(s, e) < e - s {
                any_missing = true;
                for b in r.block_range(s, e) {
                    let adv = r.blocks[b].advice;
                    if adv & ADV_PREFER_HOST != 0 && adv & ADV_ACCESSED_BY != 0 {
                        continue;
                    }
                    let (bs, be) = r.block_pages(b);
                    let (us, ue) = self.unit_span(r, bs.max(s), be.min(e));
                    need_pages += (ue - us) - r.on_device.count(us, ue);
                }
            }
        }
        (need_pages, any_missing)
    }

    /// Brings in what the accesses fault on, after the driver makes room from `start`: each
    /// block segment migrated or populated, served remotely, or its duplicates collapsed by a
    /// write.
    pub(super) fn fault_in_accesses(&mut self, accesses: &[RangeAccess], start: u64) -> KernelFaults {
        let mut f = KernelFaults { room_at: start, ..KernelFaults::default() };
        let (need_pages, any_missing) = self.missing_pages(accesses);
        if !(any_missing || accesses.iter().any(|a| a.mode.writes())) {
            return f;
        }
        if need_pages > 0 {
            let protect = self.blocks_of(accesses.iter().map(|a| (a.region, a.offset, a.len)));
            f.room_at = self.make_room(need_pages as u64 * PAGE_SIZE, &protect, start);
        }
        for a in accesses {
            let id = a.region;
            let r = &self.regions[&id];
            let (s, e) = r.page_range(a.offset, a.len);
            let mut in_run = false;
            for b in r.block_range(s, e) {
                self.fault_in_block(a, b, (s, e), start, &mut in_run, &mut f);
            }
        }
        f
    }

    /// One block `b` of access `a` (pages `s..e` of it), for [`Self::fault_in_accesses`].
    fn fault_in_block(
        &mut self,
        a: &RangeAccess,
        b: usize,
        (s, e): (usize, usize),
        start: u64,
        in_run: &mut bool,
        f: &mut KernelFaults,
    ) {
        let id = a.region;
        let r = &self.regions[&id];
        let adv = r.blocks[b].advice;
        let (bs, be) = r.block_pages(b);
        let (ss, se) = (bs.max(s), be.min(e));
        if adv & ADV_READ_MOSTLY != 0 && a.mode.writes() {
            // A GPU write to duplicated pages collapses them: a fault storm.
            if r.on_device.count_and(&r.on_host, ss, se) > 0 {
                let r = self.regions.get_mut(&id).expect("checked");
                f.collapse_pages += r.drop_host_duplicates(ss, se);
            }
        }
        let r = &self.regions[&id];
        if r.on_device.count(ss, se) == se - ss {
            *in_run = false;
            return;
        }
        if adv & ADV_PREFER_HOST != 0 && adv & ADV_ACCESSED_BY != 0 {
            let missing = (se - ss) - r.on_device.count(ss, se);
            f.remote_bytes += missing as u64 * PAGE_SIZE;
            let r = self.regions.get_mut(&id).expect("checked");
            // First touch of pages with no copy populates them at the preferred location; pages
            // already on the device stay the only valid copy.
            let (on_host, on_device) = (&mut r.on_host, &r.on_device);
            on_host.insert_not_in(on_device, ss, se);
            *in_run = false;
            return;
        }
        let duplicate = adv & ADV_READ_MOSTLY != 0 && !a.mode.writes();
        let (g, m, p) = self.fault_in(id, ss, se, duplicate, in_run);
        if duplicate {
            self.stats.duplicated_bytes += m as u64 * PAGE_SIZE;
        }
        f.groups += g;
        f.moved += m;
        f.populated += p;
        if m + p > 0 {
            f.touched_new.push((id, b..b + 1));
        }
        if m > 0 && self.events.is_recording() {
            f.moves.push((id, ss as u64 * PAGE_SIZE, m as u64 * PAGE_SIZE));
        }
        if p > 0 {
            let (offset, bytes) = (ss as u64 * PAGE_SIZE, p as u64 * PAGE_SIZE);
            self.emit(|| MemEvent::Populate { region: id, offset, bytes, on: Location::DEVICE });
        }
        if g > 0 {
            self.emit(|| MemEvent::Fault {
                region: id,
                offset: ss as u64 * PAGE_SIZE,
                bytes: (se - ss) as u64 * PAGE_SIZE,
                by: Accessor::Device,
                at_ns: start,
            });
        }
    }

    /// Charges the faults to the migration link, where they queue behind transfers already on
    /// it and after the evictions that made their room; returns when the kernel can compute.
    /// Each faulting segment gets its share of the fault interval, in order.
    pub(super) fn charge_faults(&mut self, f: &KernelFaults, start: u64) -> u64 {
        let fault_ns = self.fault_cost_ns(f.groups, f.moved, f.populated)
            + f.collapse_pages as u64 * self.cost.duplicate_write_fault_ns_per_page;
        if fault_ns == 0 && f.room_at <= start {
            return start;
        }
        let (fs, fe) = self.occupy_link(Direction::H2D, f.room_at, fault_ns);
        let total = (f.moved as u64 * PAGE_SIZE).max(1);
        let mut at = fs;
        for &(region, offset, bytes) in &f.moves {
            let end = (at + (fe - fs) * bytes / total).min(fe);
            self.emit_migration(region, offset, bytes, Direction::H2D, MigrationCause::Fault, (at, end));
            at = end;
        }
        fe
    }

    /// The kernel is issued to end at `t.end`: its new blocks restamped, its blocks' last use
    /// set, its counters and its event.
    fn finish_kernel(&mut self, kernel: &KernelLaunch<'_>, f: KernelFaults, t: KernelTimes) {
        let KernelTimes { host_issued, start: issued, end } = t;
        self.stats.kernels += 1;
        self.settle(kernel.accesses, f.touched_new, end);
        self.count_faults(f.groups, f.moved);
        self.stats.remote_bytes += f.remote_bytes;
        let stall = end - issued - kernel.dur_ns;
        self.stats.stall_ns += stall;
        let name = kernel.name;
        self.emit(|| MemEvent::Kernel {
            name: name.to_string(),
            start_ns: issued,
            end_ns: end,
            stall_ns: stall,
            issued_ns: Some(host_issued),
        });
    }

    /// Accesses used until `end`: new blocks restamped, written pages' staging copies
    /// forgotten (they are stale), each block's last use set.
    pub(super) fn settle(
        &mut self,
        accesses: &[RangeAccess],
        touched_new: Vec<(RegionId, std::ops::Range<usize>)>,
        end: u64,
    ) {
        for (id, blocks) in touched_new {
            self.restamp(id, blocks);
        }
        for a in accesses {
            let (s, e) = self.regions[&a.region].page_range(a.offset, a.len);
            if a.mode.writes() && self.kept_bytes > 0 {
                self.forget_kept(a.region, s, e);
            }
            let r = self.regions.get_mut(&a.region).expect("checked");
            for b in r.block_range(s, e) {
                r.blocks[b].last_use_ns = end;
            }
        }
    }

    /// Counters of `groups` fault groups that moved `moved` pages in.
    pub(super) fn count_faults(&mut self, groups: u64, moved: usize) {
        let h2d = moved as u64 * PAGE_SIZE;
        self.stats.gpu_faults += groups;
        self.stats.gpu_fault_bytes += h2d;
        self.stats.h2d_bytes += h2d;
    }

    /// Fault handling for one block segment of a kernel access: returns (fault groups,
    /// transferred pages, populated pages) after migrating every faulting unit. `in_run` carries
    /// whether the previous unit of the access faulted, so one contiguous run is one group even
    /// across block boundaries.
    pub(super) fn fault_in(
        &mut self,
        id: RegionId,
        s: usize,
        e: usize,
        duplicate: bool,
        in_run: &mut bool,
    ) -> (u64, usize, usize) {
        let unit = self.unit_pages;
        let (us, ue) = self.unit_span(&self.regions[&id], s, e);
        let (mut groups, mut moved, mut populated) = (0u64, 0usize, 0usize);
        // Fast path: nothing on the device yet, so the whole span is one run (the common case
        // of streaming data in); otherwise find the runs of faulting units.
        if self.regions[&id].on_device.count(us, ue) == 0 {
            groups += u64::from(!*in_run);
            *in_run = true;
            let m = self.move_to_device(id, us, ue, duplicate);
            return (groups, m.transferred, m.populated);
        }
        let mut run_start = None;
        let mut u = us;
        while u < ue {
            let end = (u + unit).min(ue);
            let faults = self.regions[&id].on_device.count(u, end) < end - u;
            match (faults, run_start) {
                (true, None) => {
                    groups += u64::from(!*in_run);
                    run_start = Some(u);
                }
                (false, Some(start)) => {
                    let m = self.move_to_device(id, start, u, duplicate);
                    (moved, populated) = (moved + m.transferred, populated + m.populated);
                    run_start = None;
                }
                _ => {}
            }
            *in_run = faults;
            u = end;
        }
        if let Some(start) = run_start {
            let m = self.move_to_device(id, start, ue, duplicate);
            (moved, populated) = (moved + m.transferred, populated + m.populated);
        }
        (groups, moved, populated)
    }

    /// Pages `s..e` grown outward to whole fault units (units never cross a 2 MiB block).
    pub(super) fn unit_span(&self, r: &SimRegion, s: usize, e: usize) -> (usize, usize) {
        let u = self.unit_pages;
        (s / u * u, (e.div_ceil(u) * u).min(r.pages))
    }

    pub(super) fn fault_cost_ns(&self, groups: u64, moved: usize, populated: usize) -> u64 {
        groups * self.cost.gpu_fault_latency_ns
            + CostModel::transfer_ns(moved as u64 * PAGE_SIZE, self.cost.gpu_fault_rate_gbps)
            + (populated.div_ceil(self.unit_pages) as u64) * self.cost.gpu_populate_latency_ns
    }

    pub(super) fn blocks_of(&self, ranges: impl Iterator<Item = (RegionId, u64, u64)>) -> HashSet<BlockId> {
        let mut set = HashSet::default();
        for (id, offset, len) in ranges {
            if let Some(r) = self.regions.get(&id) {
                let (s, e) = r.page_range(offset, len);
                set.extend(r.block_range(s, e).map(|b| BlockId::new(id, b)));
            }
        }
        set
    }
}
