//! How the probe measures: device time of enqueued work, host time of calls, rates, and the
//! buffers it measures with.

use super::*;

/// The probe's buffer size for `bytes` asked: rounded down to 2 MiB, at most
/// [`MAX_PROBE_BYTES`], at least 64 MiB.
pub(super) fn buffer_bytes(bytes: u64) -> Result<u64> {
    let bytes = bytes.min(MAX_PROBE_BYTES) / (2 << 20) * (2 << 20);
    if bytes < 64 << 20 {
        return Err(Error::InvalidArgument("the probe needs buffers of at least 64 MiB".into()));
    }
    Ok(bytes)
}

/// Times the work `f` enqueues on `stream`, with CUDA events (milliseconds -> ns).
pub(super) fn timed(stream: &CudaStream, f: impl FnOnce() -> Result<()>) -> Result<u64> {
    let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let start = stream.record_event(flags).map_err(cuda_err("cuEventRecord", "probe start"))?;
    f()?;
    let end = stream.record_event(flags).map_err(cuda_err("cuEventRecord", "probe end"))?;
    event_ns(&start, &end)
}

/// Device time between two completed events (milliseconds -> ns, at least 1).
pub(super) fn event_ns(start: &CudaEvent, end: &CudaEvent) -> Result<u64> {
    let ms = start.elapsed_ms(end).map_err(cuda_err("cuEventElapsedTime", "probe"))?;
    Ok((ms as f64 * 1e6).round().max(1.0) as u64)
}

/// Host time of the call `f` alone (not of the work it enqueues).
pub(super) fn host_timed(f: impl FnOnce() -> Result<()>) -> Result<u64> {
    let t0 = std::time::Instant::now();
    f()?;
    Ok(t0.elapsed().as_nanos() as u64)
}

/// The least-squares line through `points` (x, y): its value at 0 and its slope, neither
/// below zero.
pub(super) fn line_through(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len().max(1) as f64;
    let (mx, my) = points.iter().fold((0.0, 0.0), |(x, y), p| (x + p.0 / n, y + p.1 / n));
    let var: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let cov: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = if var > 0.0 { (cov / var).max(0.0) } else { 0.0 };
    ((my - slope * mx).max(0.0), slope)
}

pub(super) fn gbps(bytes: u64, ns: u64) -> f64 {
    bytes as f64 / ns.max(1) as f64
}

/// Moves a whole buffer to `to` (untimed set-up) and waits.
pub(super) fn place(buf: &ManagedBuffer, to: Location, stream: &CudaStream) -> Result<()> {
    buf.prefetch(0, buf.len(), to, stream)?;
    stream.synchronize().map_err(cuda_err("cuStreamSynchronize", "probe"))
}

/// Plain device memory (`cuMemAlloc`), freed on drop: the probe's control for copies that
/// involve no unified memory.
pub(super) struct DeviceMemory(pub(super) u64);

impl DeviceMemory {
    pub(super) fn alloc(bytes: u64) -> Result<Self> {
        let mut ptr = 0u64;
        // SAFETY: one out-pointer; the context is current (the probe's device is open).
        unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes as usize) }
            .result()
            .map_err(cuda_err("cuMemAlloc", format!("{bytes} bytes for the probe")))?;
        Ok(Self(ptr))
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc above; callers synchronise before dropping.
        unsafe { sys::cuMemFree_v2(self.0) };
    }
}
