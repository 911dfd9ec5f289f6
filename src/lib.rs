//! # unimem
//!
//! Host RAM as a fast extension of GPU memory for Rust programs. CUDA unified memory lets one
//! pointer live on either side, but left alone the driver moves data only when a kernel faults
//! on it (about 4.4 GB/s on an H200, a tenth of what PCIe carries) and evicts blind to what
//! comes next. unimem moves each region before it is needed and evicts what will not be needed
//! soon, inside a device-memory budget.
//!
//! This facade re-exports the crates: unimem-core at its root (the [`Runtime`], regions, the
//! backend seam and its calibrated simulator, configuration, the trace format and the
//! [`replay`] engine), [`tensor`] (typed, shaped tensors over managed regions) and
//! [`telemetry`] (fault and migration telemetry). [`prelude`] has what a program needs.
//!
//! ```
//! use unimem::prelude::*;
//!
//! // A simulated H200 whose working set may use 64 MiB, planned by the advisor.
//! let rt = Runtime::builder().simulator().budget(Budget::Bytes(64 << 20)).build()?;
//! let x = Tensor::<f32>::from_fn(&rt, "x", &[1024], |i| i[0] as f32)?;
//! let y = Tensor::<f32>::uninit(&rt, "y", &[1024])?;
//! // y = 2x, as a kernel of 10 us that reads x and writes y (run on the host here).
//! launch_cpu(&rt, "scale", 10_000, &[x.read(), y.write()], |io| {
//!     let v: Vec<f32> = io.read(0)?;
//!     io.write(1, &v.iter().map(|a| a * 2.0).collect::<Vec<_>>())
//! })?;
//! assert_eq!(y.to_vec()?[3], 6.0);
//! # Ok::<(), unimem::tensor::TensorError>(())
//! ```

pub use unimem_core::*;
pub use unimem_telemetry as telemetry;
pub use unimem_tensor as tensor;

/// What a program that allocates managed tensors needs, in one import.
pub mod prelude {
    pub use unimem_core::config::PolicyName;
    pub use unimem_core::{AccessMode, Budget, RangeAccess, RegionId, Runtime};
    pub use unimem_tensor::{launch, launch_cpu, Element, Tensor, TensorError};
}

/// The README's Rust example, compiled and run as a doctest so it stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
