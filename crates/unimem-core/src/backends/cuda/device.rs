//! Opening a device and probing what it can do with managed memory.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::cuda_err;
use crate::error::{Error, Result};

/// What the device supports, probed rather than assumed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Capabilities {
    /// Device name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Total device memory in bytes.
    pub total_bytes: u64,
    /// Free device memory in bytes when probed.
    pub free_bytes: u64,
    /// `cuMemAllocManaged` works.
    pub managed_memory: bool,
    /// GPU and CPU may access managed memory concurrently (prefetch and advice are meaningful).
    pub concurrent_managed_access: bool,
    /// Plain `malloc` memory is GPU-accessible (HMM).
    pub pageable_memory_access: bool,
    /// The driver exports `cuMemPrefetchBatchAsync` (CUDA 13).
    pub prefetch_batch: bool,
    /// The driver exports `cuMemDiscardBatchAsync` (CUDA 13).
    pub discard_batch: bool,
    /// The driver exports `cuMemDiscardAndPrefetchBatchAsync` (CUDA 13).
    pub discard_and_prefetch_batch: bool,
    /// CUDA driver version, e.g. 13000.
    pub driver_version: i32,
}

/// An opened CUDA device: its primary context, a compute stream, and its capabilities.
#[derive(Debug, Clone)]
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    caps: Capabilities,
}

/// True if the driver library exports `symbol` (the dynamic loader would panic on a missing one).
fn has_symbol(symbol: &str) -> bool {
    // SAFETY: only looks the symbol up; the library is loaded (is_culib_present was checked).
    unsafe { sys::culib().get::<unsafe extern "C" fn()>(symbol.as_bytes()).is_ok() }
}

impl CudaDevice {
    /// Opens device `ordinal`. Fails with a clear error, never a panic, where there is no CUDA
    /// driver, no device, or the device cannot use managed memory.
    pub fn open(ordinal: usize) -> Result<Self> {
        let no_device = |reason: String| Error::BackendUnavailable { backend: "cuda".into(), reason };
        // SAFETY: only tries to load the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(no_device(
                "no CUDA device: the CUDA driver library (libcuda) is not installed".into(),
            ));
        }
        let count = CudaContext::device_count()
            .map_err(|e| no_device(format!("no CUDA device: the driver reports {e:?}")))?;
        if ordinal as i32 >= count {
            return Err(no_device(format!("no CUDA device {ordinal}: the driver sees {count} device(s)")));
        }
        let ctx = CudaContext::new(ordinal).map_err(cuda_err("cuCtxCreate", format!("device {ordinal}")))?;
        let attr = |a| ctx.attribute(a).map_err(cuda_err("cuDeviceGetAttribute", format!("{a:?}")));
        use sys::CUdevice_attribute as A;
        let (free, total) = ctx.mem_get_info().map_err(cuda_err("cuMemGetInfo", "device memory"))?;
        let mut driver_version = 0;
        // SAFETY: writes one int.
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }
            .result()
            .map_err(cuda_err("cuDriverGetVersion", "driver"))?;
        let caps = Capabilities {
            name: ctx.name().map_err(cuda_err("cuDeviceGetName", "device"))?,
            compute_capability: (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            total_bytes: total as u64,
            free_bytes: free as u64,
            managed_memory: attr(A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)? == 1,
            concurrent_managed_access: attr(A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)? == 1,
            pageable_memory_access: attr(A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS)? == 1,
            prefetch_batch: has_symbol("cuMemPrefetchBatchAsync"),
            discard_batch: has_symbol("cuMemDiscardBatchAsync"),
            discard_and_prefetch_batch: has_symbol("cuMemDiscardAndPrefetchBatchAsync"),
            driver_version,
        };
        if !caps.managed_memory {
            return Err(no_device(format!("{} does not support managed memory", caps.name)));
        }
        Ok(Self { ctx, caps })
    }

    /// What the device supports.
    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// The context (for streams, events, modules).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// A new stream on this device.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.ctx.new_stream().map_err(cuda_err("cuStreamCreate", "stream"))
    }

    /// Free and total device memory now.
    pub fn mem_info(&self) -> Result<(u64, u64)> {
        let (free, total) = self.ctx.mem_get_info().map_err(cuda_err("cuMemGetInfo", "device memory"))?;
        Ok((free as u64, total as u64))
    }

    /// Waits for all work on the device.
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.synchronize().map_err(cuda_err("cuCtxSynchronize", "device"))
    }
}
