//! Prefetches each way, discards and advice, each on the link and the host clock as the
//! profile says.

use super::*;

impl SimBackend {
    pub(super) fn prefetch_ranges(&mut self, ranges: &[ByteRange], to: Location) -> Result<()> {
        self.host_timed(HostOp::prefetch(to), |this| {
            for r in ranges {
                this.checked(r.region, r.offset, r.len)?;
            }
            let settled;
            // Nothing is staged most of the time: no block to leave out.
            let ranges = if to == Location::DEVICE && this.staged_bytes > 0 {
                settled = this.settled(ranges);
                &settled[..]
            } else {
                ranges
            };
            let protect = if to == Location::DEVICE {
                this.blocks_of(ranges.iter().map(|r| (r.region, r.offset, r.len)))
            } else {
                HashSet::default()
            };
            for (i, range) in ranges.iter().enumerate() {
                let call_ns = if i == 0 { this.cost.prefetch_call_ns } else { this.cost.batch_range_ns };
                let (s, e) = this.region(range.region)?.page_range(range.offset, range.len);
                this.stats.prefetch_ranges += 1;
                match to {
                    Location::Device(_) => this.prefetch_to_device(range, (s, e), call_ns, &protect, true),
                    Location::Host => this.prefetch_to_host(range, (s, e), call_ns),
                }
            }
            Ok(())
        })
    }

    /// One range of a prefetch to the device (pages `s..e`), after making room outside
    /// `protect`: staged pages restored, the rest migrated (or duplicated, where read-mostly)
    /// or populated. `explicit`: a policy's prefetch, which the prefetch metrics count.
    pub(super) fn prefetch_to_device(
        &mut self,
        range: &ByteRange,
        (s, e): (usize, usize),
        call_ns: u64,
        protect: &HashSet<BlockId>,
        explicit: bool,
    ) {
        let id = range.region;
        if e > s && self.regions[&id].staged.count(s, e) == e - s {
            // All of it comes back from staging: the CUDA backend repopulates on a
            // stream of its own, behind a short kernel, so the call holds the host
            // neither for the link nor for the driver's work.
            self.host_now += call_ns;
            self.restore_to_device(id, s, e, protect, self.host_now, true);
            return;
        }
        self.restore_to_device(id, s, e, protect, self.host_now, true);
        let r = &self.regions[&id];
        let missing = (e - s) - r.on_device.count(s, e);
        let blocks = r.block_range(s, e);
        let read_mostly = blocks.clone().all(|b| r.blocks[b].advice & ADV_READ_MOSTLY != 0);
        let room_at = self.make_room(missing as u64 * PAGE_SIZE, protect, self.host_now);
        if explicit {
            let r = self.regions.get_mut(&id).expect("checked");
            let (prefetched, on_device) = (&mut r.prefetched, &r.on_device);
            prefetched.insert_not_in(on_device, s, e);
        }
        let m = self.move_to_device(id, s, e, read_mostly);
        if explicit {
            self.stats.prefetch_arrived_bytes += (m.transferred + m.populated) as u64 * PAGE_SIZE;
        }
        if read_mostly {
            self.stats.duplicated_bytes += m.transferred as u64 * PAGE_SIZE;
        }
        let bytes = m.transferred as u64 * PAGE_SIZE;
        let rate = if read_mostly {
            self.cost.duplicate_prefetch_rate_gbps
        } else {
            self.cost.prefetch_h2d_rate_gbps
        };
        let copy_ns = call_ns + CostModel::transfer_ns(bytes, rate);
        let populated_from = room_at.max(self.h2d_stream) + copy_ns;
        let dur = copy_ns + self.population_ns(populated_from, m.populated as u64 * PAGE_SIZE);
        let (start, end) = self.occupy_h2d_stream(room_at, dur, bytes > 0);
        if m.populated > 0 {
            let (work, bytes) = (PageWork::Populate, m.populated as u64 * PAGE_SIZE);
            self.emit(|| MemEvent::PageWork { work, bytes, start_ns: start + copy_ns, end_ns: end });
        }
        // The CUDA backend queues it behind a short kernel: the driver
        // defers the work, and the call holds the host for itself alone.
        self.host_now += self.cost.prefetch_deferred_call_ns;
        self.stats.h2d_bytes += bytes;
        self.stats.prefetch_h2d_bytes += bytes;
        let r = self.regions.get_mut(&id).expect("checked");
        for b in blocks.clone() {
            r.blocks[b].ready_ns = r.blocks[b].ready_ns.max(end);
        }
        if m.transferred + m.populated > 0 {
            self.restamp(id, blocks);
        }
        if m.populated > 0 {
            let bytes = m.populated as u64 * PAGE_SIZE;
            let offset = range.offset;
            self.emit(|| MemEvent::Populate { region: id, offset, bytes, on: Location::DEVICE });
        }
        self.emit_migration(id, range.offset, bytes, Direction::H2D, MigrationCause::Prefetch, (start, end));
    }

    /// One range of a prefetch to the host (pages `s..e`): device-only pages migrate after the
    /// kernels using them, duplicates drop.
    fn prefetch_to_host(&mut self, range: &ByteRange, (s, e): (usize, usize), call_ns: u64) {
        let id = range.region;
        let r = &self.regions[&id];
        let last_use = r.block_range(s, e).map(|b| r.blocks[b].last_use_ns).max().unwrap_or(0);
        let m = self.move_to_host(id, s, e);
        let bytes = m.transferred as u64 * PAGE_SIZE;
        let dur = call_ns
            + CostModel::transfer_ns(bytes, self.cost.prefetch_d2h_rate_gbps)
            + CostModel::transfer_ns(m.dropped as u64 * PAGE_SIZE, self.cost.duplicate_drop_rate_gbps);
        let (start, end) = self.occupy_link(Direction::D2H, self.host_now.max(last_use), dur);
        self.prefetch_to_host_hold(start, end);
        self.stats.d2h_bytes += bytes;
        self.stats.prefetch_d2h_bytes += bytes;
        self.emit_migration(id, range.offset, bytes, Direction::D2H, MigrationCause::Prefetch, (start, end));
    }

    pub(super) fn prefetch_to_host_hold(&mut self, start: u64, end: u64) {
        if start > self.host_now {
            self.host_now += self.cost.prefetch_deferred_call_ns;
        } else {
            let held = ((end - start) as f64 * self.cost.prefetch_d2h_host_fraction) as u64;
            self.host_now = self.host_now.max(start + held);
        }
    }

    pub(super) fn discard_ranges(&mut self, ranges: &[ByteRange]) -> Result<()> {
        self.host_timed(HostOp::Discard, |this| {
            for r in ranges {
                this.checked(r.region, r.offset, r.len)?;
            }
            let mut total = 0u64;
            let mut after = this.host_now;
            for range in ranges {
                let id = range.region;
                let r = this.regions.get_mut(&id).expect("checked");
                let (s, e) = r.page_range(range.offset, range.len);
                let blocks = r.block_range(s, e);
                after = after.max(blocks.clone().map(|b| r.blocks[b].last_use_ns).max().unwrap_or(0));
                // Trace replays keep no bytes: only walk pages when a side holds some.
                if !r.dev_data.is_empty() {
                    let dev_data = &mut r.dev_data;
                    r.on_device.for_each(s, e, |p| dev_data.drop_page(p));
                }
                if !r.host_data.is_empty() {
                    let host_data = &mut r.host_data;
                    r.on_host.for_each(s, e, |p| host_data.drop_page(p));
                }
                let had_copy = (e - s) - r.on_device.count_neither(&r.on_host, s, e);
                let dev = r.on_device.remove(s, e);
                let had_copy = had_copy + this.drop_staged(id, s, e);
                let r = this.regions.get_mut(&id).expect("checked");
                r.on_host.remove(s, e);
                r.prefetched.remove(s, e);
                // Discard does not return memory (h200-facts.md): the pages stay mapped, pooled.
                this.note_device_released(dev);
                this.room_freed_at(after, dev as u64 * PAGE_SIZE);
                let bytes = had_copy as u64 * PAGE_SIZE;
                total += bytes;
                this.unstamp_empty(id, blocks);
                this.emit(|| MemEvent::Drop {
                    region: id,
                    offset: range.offset,
                    bytes,
                    from: Location::DEVICE,
                });
            }
            this.discard_on_device(after, total);
            // The call itself holds the host (measured per GiB of 2 MiB ranges).
            let bytes: u64 = ranges.iter().map(|r| r.len).sum();
            this.host_now += this.discard_host_ns(bytes);
            this.stats.discarded_bytes += total;
            Ok(())
        })
    }

    /// The device's part of a discard of `bytes` from `after`: the call and the bytes at the
    /// discard rate, on the D2H side of the link, reported as page work.
    pub(super) fn discard_on_device(&mut self, after: u64, bytes: u64) {
        let dur = self.cost.discard_call_ns + CostModel::transfer_ns(bytes, self.cost.discard_rate_gbps);
        let (start_ns, end_ns) = self.occupy_link(Direction::D2H, after, dur);
        let work = PageWork::Discard;
        self.emit(|| MemEvent::PageWork { work, bytes, start_ns, end_ns });
    }

    /// Host time of a discard call over `bytes` (measured per GiB of 2 MiB ranges).
    pub(super) fn discard_host_ns(&self, bytes: u64) -> u64 {
        (bytes as f64 / (1u64 << 30) as f64 * self.cost.discard_host_ns_per_gib as f64) as u64
    }

    /// Host time of an advice call over `bytes` at `per_gib` nanoseconds per GiB.
    pub(super) fn advise_host_ns(bytes: u64, per_gib: f64) -> u64 {
        (bytes as f64 / (1u64 << 30) as f64 * per_gib).round() as u64
    }

    pub(super) fn advise_range(&mut self, range: ByteRange, advice: Advice) -> Result<()> {
        self.host_timed(HostOp::Advise, |this| {
            let (s, e) = this.checked(range.region, range.offset, range.len)?;
            // Advice calls block the calling thread (host time measured by `unimem probe`).
            let per_gib = match advice {
                Advice::SetReadMostly => this.cost.advise_read_mostly_ns_per_gib as f64,
                Advice::UnsetReadMostly => this.cost.advise_unset_read_mostly_ns_per_gib as f64,
                // Measured for the pair of calls that maps data remotely.
                Advice::SetPreferredLocation(Location::Host) | Advice::SetAccessedByDevice => {
                    this.cost.advise_remote_ns_per_gib as f64 / 2.0
                }
                _ => 0.0,
            };
            this.host_now += Self::advise_host_ns(range.len, per_gib);
            let r = this.region_mut(range.region)?;
            let blocks = r.block_range(s, e);
            for b in blocks.clone() {
                let blk = &mut r.blocks[b];
                match advice {
                    Advice::SetReadMostly => blk.advice |= ADV_READ_MOSTLY,
                    Advice::UnsetReadMostly => blk.advice &= !ADV_READ_MOSTLY,
                    Advice::SetPreferredLocation(Location::Host) => {
                        blk.advice = (blk.advice & !ADV_PREFER_DEVICE) | ADV_PREFER_HOST
                    }
                    Advice::SetPreferredLocation(Location::Device(_)) => {
                        blk.advice = (blk.advice & !ADV_PREFER_HOST) | ADV_PREFER_DEVICE
                    }
                    Advice::UnsetPreferredLocation => blk.advice &= !(ADV_PREFER_HOST | ADV_PREFER_DEVICE),
                    Advice::SetAccessedByDevice => blk.advice |= ADV_ACCESSED_BY,
                    Advice::UnsetAccessedByDevice => blk.advice &= !ADV_ACCESSED_BY,
                }
            }
            if advice == Advice::UnsetReadMostly {
                // Duplicates collapse to the host copy: on the H200 a kernel read data just collapsed
                // at 7.3 GB/s, the fault-driven rate (`unimem probe`).
                let mut freed = 0;
                for b in blocks.clone() {
                    let (bs, be) = r.block_pages(b);
                    freed += r.drop_device_duplicates(bs, be);
                }
                this.note_device_released(freed);
                this.unstamp_empty(range.region, blocks);
                if freed > 0 {
                    let (region, offset, bytes) = (range.region, range.offset, freed as u64 * PAGE_SIZE);
                    this.emit(|| MemEvent::Drop { region, offset, bytes, from: Location::DEVICE });
                }
            }
            Ok(())
        })
    }
}
