//! The CUDA side: safe wrappers of unimem's own over `cudarc::driver::{result, sys}` for what
//! unified memory needs (managed allocation, advice, single and batched prefetch, discard, range
//! attributes), a capability probe, and the NVRTC kernels that touch managed memory.
//!
//! cudarc loads the CUDA libraries at run time, so unimem builds and tests without CUDA;
//! [`CudaDevice::open`] answers "no CUDA device" as an error, never a panic, where there is no
//! driver or no device. Hints are best effort, as in RMM: a missing batch call falls back to
//! single calls.

mod backend;
mod block_backend;
mod device;
mod kernels;
mod managed;
mod marks;
pub mod probe;
mod staging;
mod timing;
mod vmm;

pub use backend::CudaBackend;
pub use block_backend::BlockBackend;
pub use device::{Capabilities, CudaDevice};
pub use kernels::{Kernels, TouchMode, MAX_TOUCH_RANGES};
pub use managed::{
    discard_and_prefetch_batch, discard_batch, prefetch_batch, FreeMemory, ManagedBuffer, RangeAttributes,
    RESERVE_BYTES,
};
pub use staging::{Run, Slot, StagingPool, SLOT_BYTES};

use crate::error::Error;

/// Wraps a driver error with the call that failed and what it was doing.
pub(crate) fn cuda_err(
    call: &str,
    what: impl std::fmt::Display,
) -> impl FnOnce(cudarc::driver::DriverError) -> Error {
    let detail = what.to_string();
    let call = call.to_string();
    move |e| Error::Cuda { call, detail: format!("{e:?} ({detail})"), source: Some(Box::new(e)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a driver (CI, development machines) opening a device is an error, not a panic.
    #[test]
    fn open_without_a_driver_is_a_clear_error() {
        // SAFETY: only tries to load the library.
        if unsafe { cudarc::driver::sys::is_culib_present() } {
            return; // a GPU machine: the gpu-tests cover opening
        }
        let e = CudaDevice::open(0).unwrap_err().to_string();
        assert!(e.contains("no CUDA device"), "{e}");
    }
}
