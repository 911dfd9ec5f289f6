//! # unimem-tensor
//!
//! Typed, shaped tensors over unimem's managed regions. A [`Tensor`] lives in managed memory
//! that the runtime moves between host and device; every host access and every launch says
//! what it reads and writes, which is what the prefetch advisor learns from.
//!
//! ```
//! use unimem_core::{Budget, Runtime};
//! use unimem_tensor::{launch_cpu, Tensor};
//!
//! // A simulated H200 whose working set may use 64 MiB, planned by the advisor.
//! let rt = Runtime::builder().simulator().budget(Budget::Bytes(64 << 20)).build()?;
//! let a = Tensor::<f32>::from_fn(&rt, "a", &[2, 3], |i| (i[0] * 3 + i[1]) as f32)?;
//! let b = Tensor::<f32>::uninit(&rt, "b", &[3, 2])?;
//! // b = transpose(a) * 2, as a kernel of 10 us that reads a and writes b.
//! let at = a.transpose(0, 1)?;
//! launch_cpu(&rt, "scale", 10_000, &[at.read(), b.write()], |io| {
//!     let x: Vec<f32> = io.read(0)?;
//!     io.write(1, &x.iter().map(|v| v * 2.0).collect::<Vec<_>>())
//! })?;
//! assert_eq!(b.to_vec()?, vec![0.0, 6.0, 2.0, 8.0, 4.0, 10.0]);
//! # Ok::<(), unimem_tensor::TensorError>(())
//! ```

#![warn(missing_docs)]

mod approx;
mod element;
mod error;
mod launch;
mod shape;
mod tensor;

pub use approx::{assert_close, max_abs_diff};
pub use element::Element;
pub use error::{Result, TensorError};
pub use launch::{launch, launch_cpu, launch_cuda, Arg, Io};

/// The cudarc types a CUDA launch takes (`launch_cuda`), re-exported, and a helper that
/// compiles kernels for it.
pub mod cuda {
    pub use cudarc::driver::{CudaContext, CudaFunction, LaunchConfig};
    pub use cudarc::nvrtc::compile_ptx;

    /// Compiles CUDA C `source` with NVRTC, loads it into device `ordinal`'s primary context (the
    /// one the runtime's CUDA backend uses) and returns the functions `names`, in order.
    pub fn load_kernels(ordinal: usize, source: &str, names: &[&str]) -> crate::Result<Vec<CudaFunction>> {
        let err = |call: &str, e: String| crate::TensorError::Core(unimem_core::Error::cuda(call, e));
        let ptx = compile_ptx(source).map_err(|e| err("nvrtcCompileProgram", format!("{e:?}")))?;
        let ctx = CudaContext::new(ordinal).map_err(|e| err("cuDevicePrimaryCtxRetain", format!("{e:?}")))?;
        let module = ctx.load_module(ptx).map_err(|e| err("cuModuleLoadData", format!("{e:?}")))?;
        names
            .iter()
            .map(|name| {
                module.load_function(name).map_err(|e| err("cuModuleGetFunction", format!("{name}: {e:?}")))
            })
            .collect()
    }
}
pub use shape::{Layout, ShapeError};
pub use tensor::{HostMut, HostRef, Tensor};

/// Half-precision element types.
pub use half::{bf16, f16};
