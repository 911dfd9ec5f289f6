//! The host's side: CPU touches and bytes (after the device is done with them), data from
//! before the work, synchronisation, and where data is.

use super::*;

impl CudaBackend {
    pub(super) fn touch_host(&mut self, accesses: &[RangeAccess]) -> Result<()> {
        for a in accesses {
            self.checked(a.region, a.offset, a.len)?;
        }
        self.sync_all()?;
        let t0 = Instant::now();
        for a in accesses {
            if a.len == 0 {
                continue;
            }
            self.restore_to_host(a.region, a.offset, a.len)?;
            let r = self.regions.get_mut(&a.region).expect("checked");
            // SAFETY: the device is synchronised; the range lies inside the buffer.
            let bytes = unsafe { r.buf.host_bytes() };
            let span = &mut bytes[a.offset as usize..(a.offset + a.len) as usize];
            let mut sum = 0u8;
            for page in span.chunks_mut(PAGE_SIZE as usize) {
                if a.mode.reads() {
                    // SAFETY: a valid reference; volatile so the touch is not optimised out.
                    sum = sum.wrapping_add(unsafe { std::ptr::read_volatile(&page[0]) });
                }
                if a.mode.writes() {
                    // SAFETY: as above.
                    unsafe { std::ptr::write_volatile(&mut page[0], sum) };
                }
            }
            std::hint::black_box(sum);
            self.after_host_touch(a.region, a.offset, a.len, a.mode.writes());
        }
        self.stats.host.add(HostOp::HostAccess, t0.elapsed().as_nanos() as u64);
        Ok(())
    }

    pub(super) fn sync(&mut self) -> Result<u64> {
        self.sync_all()?;
        self.sync_timing();
        if let Some(rec) = self.recording.as_mut() {
            rec.resolve_all(&mut self.recorder); // all complete now
        }
        Ok(self.clock.now())
    }

    pub(super) fn residency_of(&self, range: ByteRange) -> Result<Residency> {
        self.checked(range.region, range.offset, range.len)?;
        let r = &self.regions[&range.region];
        let mut out = Residency::default();
        for b in r.blocks_of(range.offset, range.len) {
            let lo = (b as u64 * BLOCK_SIZE).max(range.offset);
            let hi = ((b as u64 + 1) * BLOCK_SIZE).min(range.offset + range.len);
            let bytes = hi - lo;
            let blk = r.blocks[b];
            if blk.staged.is_some() {
                out.staged += bytes;
                continue;
            }
            match (blk.on_device, blk.on_host) {
                (true, true) => out.duplicated += bytes,
                (true, false) => out.device += bytes,
                (false, true) => out.host += bytes,
                (false, false) => out.unpopulated += bytes,
            }
        }
        Ok(out)
    }

    pub(super) fn preload(&mut self, range: ByteRange) -> Result<()> {
        // Waiting for the device is not set-up: the kernels queued before still run on the
        // clock. Only the host's own touching of the pages is left off it.
        self.sync_all()?;
        let t0 = Instant::now();
        self.checked(range.region, range.offset, range.len)?;
        self.drop_staged(range.region, range.offset, range.len)?;
        for page in self.host_range(range.region, range.offset, range.len)?.chunks_mut(PAGE_SIZE as usize) {
            // SAFETY: a valid reference; volatile so the page really gets populated.
            unsafe { std::ptr::write_volatile(&mut page[0], 0) };
        }
        self.after_host_touch(range.region, range.offset, range.len, true);
        self.clock.exclude_since(t0);
        Ok(())
    }

    pub(super) fn host_read(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        buf.copy_from_slice(self.host_range(id, offset, buf.len() as u64)?);
        self.after_host_touch(id, offset, buf.len() as u64, false);
        Ok(())
    }

    pub(super) fn view(&mut self, id: RegionId, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.checked(id, offset, buf.len() as u64)?;
        let (compute, ptr) = self.as_a_kernel(id, offset)?;
        // SAFETY: the range lies inside a live managed buffer; a driver copy moves no pages.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(buf, ptr, compute.cu_stream()) }
            .map_err(cuda_err("cuMemcpyDtoHAsync", format!("{} bytes of {id}", buf.len())))?;
        compute.synchronize().map_err(cuda_err("cuStreamSynchronize", "kernel view"))
    }

    pub(super) fn store(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        self.checked(id, offset, data.len() as u64)?;
        for b in self.regions[&id].blocks_of(offset, data.len() as u64) {
            self.forget_kept(BlockId::new(id, b));
        }
        let (compute, ptr) = self.as_a_kernel(id, offset)?;
        // SAFETY: as above.
        unsafe { cudarc::driver::result::memcpy_htod_async(ptr, data, compute.cu_stream()) }
            .map_err(cuda_err("cuMemcpyHtoDAsync", format!("{} bytes of {id}", data.len())))?;
        // Done when this returns: a synchronous cuMemcpyHtoD from pageable memory may return
        // before its bytes land, and the copy streams are not ordered after the null stream.
        compute.synchronize().map_err(cuda_err("cuStreamSynchronize", "kernel store"))
    }

    /// The compute stream, ordered as a kernel of region `id` would be (after the region's
    /// data arrives), and the device address of `offset` in it: the kernel views and stores
    /// of the contract run there, never on the null stream, which the backend's non-blocking
    /// streams do not wait for.
    fn as_a_kernel(&mut self, id: RegionId, offset: u64) -> Result<(Arc<CudaStream>, u64)> {
        let compute = self.streams.compute.clone();
        if let Some(ev) = self.regions[&id].ready.clone().filter(|ev| !ev.is_complete()) {
            compute.wait(&ev).map_err(cuda_err("cuStreamWaitEvent", "kernel view after its data"))?;
        }
        Ok((compute, self.regions[&id].buf.ptr() + offset))
    }

    pub(super) fn host_write(&mut self, id: RegionId, offset: u64, data: &[u8]) -> Result<()> {
        self.host_range(id, offset, data.len() as u64)?.copy_from_slice(data);
        self.after_host_touch(id, offset, data.len() as u64, true);
        Ok(())
    }

    /// A range of a region as host memory, once every stream is done with it (the caller
    /// records the touch with `after_host_touch`).
    pub(super) fn host_range(&mut self, id: RegionId, offset: u64, len: u64) -> Result<&mut [u8]> {
        self.checked(id, offset, len)?;
        self.sync_all()?;
        self.restore_to_host(id, offset, len)?;
        let r = self.regions.get_mut(&id).expect("checked");
        // SAFETY: the device is synchronised; the range lies inside the buffer.
        let bytes = unsafe { r.buf.host_bytes() };
        Ok(&mut bytes[offset as usize..(offset + len) as usize])
    }

    /// The CPU touched a range: its pages are on the host now (a read keeps read-mostly
    /// duplicates on the device).
    pub(super) fn after_host_touch(&mut self, id: RegionId, offset: u64, len: u64, wrote: bool) {
        let blocks = self.regions[&id].blocks_of(offset, len);
        for b in blocks {
            let blk = self.regions[&id].blocks[b];
            if blk.on_device && !blk.on_host {
                self.stats.cpu_faults += 1;
                self.stats.d2h_bytes += self.regions[&id].block_bytes(b);
            }
            if wrote || !blk.read_mostly {
                self.leave_device(id, b);
            }
            self.regions.get_mut(&id).expect("checked").blocks[b].on_host = true;
        }
    }
}
