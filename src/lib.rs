//! # unimem
//!
//! Host RAM as a fast extension of GPU memory for Rust programs. CUDA unified memory lets one
//! pointer live on either side, but left alone the driver moves data only when a kernel faults
//! on it (about 4.4 GB/s on an H200, a tenth of what PCIe carries) and evicts blind to what
//! comes next. unimem moves each region before it is needed and evicts what will not be needed
//! soon, inside a device-memory budget.
//!
//! This facade re-exports the crates:
//! - [`core`] (unimem-core): regions, the backend seam and its calibrated simulator, the
//!   access history, configuration, the trace format and the replay engine;
//! - [`tensor`] (unimem-tensor): typed, shaped tensors over managed regions;
//! - [`telemetry`] (unimem-telemetry): fault and migration telemetry.
//!
//! ```
//! use unimem::core::{backends::sim::SimBackend, MemoryBackend, MemoryBackendExt, RegionId};
//!
//! // A simulated H200 limited to 64 MiB: allocate, write on the host, read it back.
//! let mut gpu = SimBackend::new(unimem::core::CostModel::h200(), 64 << 20);
//! gpu.allocate(RegionId(1), 4096)?;
//! gpu.write(RegionId(1), 0, b"hello")?;
//! let mut back = [0u8; 5];
//! gpu.read(RegionId(1), 0, &mut back)?;
//! assert_eq!(&back, b"hello");
//! # Ok::<(), unimem::core::Error>(())
//! ```

pub use unimem_core as core;
pub use unimem_telemetry as telemetry;
pub use unimem_tensor as tensor;

/// The README's Rust example, compiled and run as a doctest so it stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
