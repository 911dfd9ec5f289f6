//! The host's side: CPU touches (faulting device-only pages back), data from before the work,
//! the bytes a test or a host-executed kernel reads and writes, and synchronisation.

use super::*;

impl SimBackend {
    pub(super) fn touch_host(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        for a in accesses {
            self.checked(a.region, a.offset, a.len)?;
        }
        // The CPU reads results after the device is done with them: as the CUDA backend, the
        // host waits for all the device's work (transfers in flight too), outside the call's
        // own host time.
        self.sync_all();
        self.host_timed(HostOp::HostAccess, |this| {
            let t = this.host_now;
            let mut cost = 0;
            for a in accesses {
                let id = a.region;
                let r = &this.regions[&id];
                if r.packed.is_some() {
                    continue; // read and written where it is, on the device
                }
                let (s, e) = r.page_range(a.offset, a.len);
                cost = this.restore_to_host(id, s, e, t + cost) - t;
                if a.mode.writes() {
                    // Writing invalidates device duplicates: drop them, no transfer.
                    let r = this.regions.get_mut(&id).expect("checked");
                    let dropped = r.drop_device_duplicates(s, e);
                    let blocks = r.block_range(s, e);
                    this.note_device_released(dropped);
                    this.unstamp_empty(id, blocks);
                }
                let r = &this.regions[&id];
                let dev_only = r.on_device.count(s, e) - r.on_device.count_and(&r.on_host, s, e);
                if dev_only > 0 {
                    let moved = this.move_to_host(id, s, e);
                    let bytes = moved.transferred as u64 * PAGE_SIZE;
                    let dur = CostModel::transfer_ns(bytes, this.cost.cpu_fault_rate_gbps);
                    let (start, end) = this.occupy_link(Direction::D2H, t + cost, dur);
                    cost = end - t;
                    this.stats.cpu_faults += moved.transferred as u64;
                    this.stats.d2h_bytes += bytes;
                    this.emit_migration(
                        id,
                        a.offset,
                        bytes,
                        Direction::D2H,
                        MigrationCause::Fault,
                        (start, end),
                    );
                }
                let r = this.regions.get_mut(&id).expect("checked");
                // A CPU touch of pages with no copy populates them on the host.
                r.on_host.insert_not_in(&r.on_device, s, e);
            }
            this.host_now = t + cost;
            Ok(())
        })
    }

    pub(super) fn preload(&mut self, range: ByteRange) -> Result<()> {
        let (s, e) = self.checked(range.region, range.offset, range.len)?;
        if self.regions[&range.region].packed.is_some() {
            return Ok(()); // its bytes stay on the device
        }
        self.drop_staged(range.region, s, e);
        let r = self.region_mut(range.region)?;
        let mut dev_pages = Vec::new();
        r.on_device.for_each(s, e, |p| dev_pages.push(p));
        for &p in &dev_pages {
            let page = r.dev_data.take(p);
            r.host_data.put(p, page);
        }
        r.on_host.insert(s, e);
        let removed = r.on_device.remove(s, e);
        let blocks = r.block_range(s, e);
        self.note_device_released(removed);
        self.unstamp_empty(range.region, blocks);
        Ok(())
    }

    pub(super) fn host_read(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let acc = [RangeAccess { region: id, offset, len: buf.len() as u64, mode: crate::AccessMode::Read }];
        self.touch_host(&acc)?;
        if self.region(id)?.packed.is_some() {
            // Read where they are: a packed region's bytes stay on the device.
            return self.view_bytes(id, offset, buf);
        }
        self.region(id)?.host_data.read(offset, buf);
        Ok(())
    }

    pub(super) fn host_write(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        let acc =
            [RangeAccess { region: id, offset, len: data.len() as u64, mode: crate::AccessMode::Write }];
        self.touch_host(&acc)?;
        if self.region(id)?.packed.is_some() {
            return self.store_bytes(id, offset, data);
        }
        self.region_mut(id)?.host_data.write(offset, data);
        Ok(())
    }

    pub(super) fn view(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.checked(id, offset, buf.len() as u64)?;
        self.view_bytes(id, offset, buf)
    }

    pub(super) fn store(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        self.checked(id, offset, data.len() as u64)?;
        self.store_bytes(id, offset, data)
    }

    /// Host write that a GPU kernel performs: the pages are made device-valid (faulting as a
    /// kernel would) and the bytes land in the device copy. Lets tests prove that data written
    /// on the device survives eviction and migration.
    pub fn kernel_write(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        // Declared as a write, as a trace records a kernel that only stores to the range.
        let acc =
            [RangeAccess { region: id, offset, len: data.len() as u64, mode: crate::AccessMode::Write }];
        self.launch_kernel(&KernelLaunch { name: "kernel_write", dur_ns: 0, accesses: &acc })?;
        self.store_bytes(id, offset, data)
    }

    /// Reads bytes as a GPU kernel would see them (pages made device-valid first).
    pub fn kernel_read(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let acc = [RangeAccess { region: id, offset, len: buf.len() as u64, mode: crate::AccessMode::Read }];
        self.launch_kernel(&KernelLaunch { name: "kernel_read", dur_ns: 0, accesses: &acc })?;
        self.view_bytes(id, offset, buf)
    }

    /// Writes bytes where each page is valid now (the device copy if there is one).
    pub(super) fn store_bytes(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        let (s, e) = self.region(id)?.page_range(offset, data.len() as u64);
        self.forget_kept(id, s, e);
        let r = self.region_mut(id)?;
        let (on_device, dev_data, host_data) = (&r.on_device, &mut r.dev_data, &mut r.host_data);
        for_each_page_chunk(offset, data.len(), |p, at, lo, hi| {
            let side = if on_device.contains(p) { &mut *dev_data } else { &mut *host_data };
            side.write(at, &data[lo..hi]);
        });
        Ok(())
    }

    /// Reads bytes where each page is valid now (remote-mapped pages in place on the host, the
    /// rest from the device copy if there is one).
    pub(super) fn view_bytes(&self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.region(id)?;
        for_each_page_chunk(offset, buf.len(), |p, at, lo, hi| {
            let side = if r.on_device.contains(p) { &r.dev_data } else { &r.host_data };
            side.read(at, &mut buf[lo..hi]);
        });
        Ok(())
    }

    pub(super) fn sync(&mut self) -> Result<u64> {
        self.sync_all();
        Ok(self.host_now)
    }

    /// Waits for all the device's work, then frees the buffers shed from the pool since the
    /// last time, as the CUDA backend does once the device is idle (`free_retired_host_ns`
    /// and so on: their pages, discarded, are still mapped).
    pub(super) fn sync_all(&mut self) {
        // The device is idle and stays so: an eviction copies what is left to write back.
        self.write_backs.clear();
        self.host_now = self.completion_ns() + std::mem::take(&mut self.retired_free_ns);
    }

    pub(super) fn residency_of(&self, range: ByteRange) -> Result<Residency> {
        let (s, e) = self.checked(range.region, range.offset, range.len)?;
        let r = self.region(range.region)?;
        let t = r.on_device.tally(&r.on_host, &r.staged, s, e);
        let bytes = |pages: usize| pages as u64 * PAGE_SIZE;
        Ok(Residency {
            device: bytes(t.device),
            host: bytes(t.host),
            duplicated: bytes(t.both),
            unpopulated: bytes(t.neither - t.staged),
            staged: bytes(t.staged),
        })
    }
}
