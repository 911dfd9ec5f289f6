//! Launches that declare what they read and write, so every launch feeds the prefetch advisor.
//!
//! [`launch_cpu`] runs a kernel's body on the host with the same declarations a GPU launch
//! makes: the runtime places and times it as a kernel (on the simulator, as on a GPU), then the
//! body computes on the declared views. It is the path that lets examples and tests run
//! anywhere.

use unimem_core::{KernelData, RangeAccess, Runtime};

use crate::element::Element;
use crate::error::{Result, TensorError};
use crate::shape::Layout;
use crate::shape::{gather, scatter};

/// One declared access of a launch: a tensor view and how the kernel uses it. Made by
/// [`crate::Tensor::read`], [`crate::Tensor::write`] and [`crate::Tensor::read_write`].
pub struct Arg<'a> {
    name: &'a str,
    dtype: &'static str,
    range: RangeAccess,
    held: &'a std::sync::atomic::AtomicU32,
    rt: &'a unimem_core::WeakRuntime,
    /// Where the view's elements lie in its span.
    layout: Layout,
}

impl<'a> Arg<'a> {
    pub(crate) fn new(
        name: &'a str,
        dtype: &'static str,
        range: RangeAccess,
        held: &'a std::sync::atomic::AtomicU32,
        rt: &'a unimem_core::WeakRuntime,
        layout: Layout,
    ) -> Self {
        Arg { name, dtype, range, held, rt, layout }
    }

    /// The byte range and mode this argument declares.
    pub fn range(&self) -> RangeAccess {
        self.range
    }
}

/// Checks the arguments and turns them into the accesses the runtime records.
fn declare(rt: &Runtime, args: &[Arg<'_>]) -> Result<Vec<RangeAccess>> {
    for a in args {
        match a.rt.upgrade() {
            None => return Err(TensorError::RuntimeGone { tensor: a.name.into(), what: "launching".into() }),
            Some(own) if !own.same_as(rt) => return Err(TensorError::OtherRuntime { tensor: a.name.into() }),
            Some(_) => {}
        }
        if a.held.load(std::sync::atomic::Ordering::Acquire) > 0 {
            return Err(TensorError::HeldOnHost { tensor: a.name.into() });
        }
    }
    Ok(args.iter().map(|a| a.range).collect())
}

/// Declares a kernel of `dur_ns` that touches `args`, without data (the GPU does the work, or
/// a trace is being replayed): the advisor sees it, the backend places and times it.
pub fn launch(rt: &Runtime, name: &str, dur_ns: u64, args: &[Arg<'_>]) -> Result<()> {
    let accesses = declare(rt, args)?;
    rt.launch(name, dur_ns, &accesses)?;
    Ok(())
}

/// Runs `body` as a kernel of `dur_ns` that touches `args`: declared, placed and timed like a
/// GPU kernel, then executed on the host over the views (see [`Io`]).
pub fn launch_cpu(
    rt: &Runtime,
    name: &str,
    dur_ns: u64,
    args: &[Arg<'_>],
    body: impl FnOnce(&mut Io<'_, '_>) -> Result<()>,
) -> Result<()> {
    let accesses = declare(rt, args)?;
    rt.launch_cpu(name, dur_ns, &accesses, |data| body(&mut Io { data, args }))?
}

/// The views of a host-executed launch, by argument position.
pub struct Io<'d, 'a> {
    data: &'d mut KernelData,
    args: &'d [Arg<'a>],
}

impl Io<'_, '_> {
    fn arg(&self, index: usize) -> Result<&Arg<'_>> {
        self.args.get(index).ok_or_else(|| TensorError::Argument {
            index,
            reason: format!("the launch has {} arguments", self.args.len()),
        })
    }

    fn check_type<T: Element>(&self, index: usize) -> Result<()> {
        let a = self.arg(index)?;
        if a.dtype != T::NAME {
            return Err(TensorError::ElementType {
                index,
                tensor: a.name.into(),
                actual: a.dtype,
                asked: T::NAME,
            });
        }
        Ok(())
    }

    /// The elements of argument `index` (row-major order of its view), as `T`.
    pub fn read<T: Element>(&self, index: usize) -> Result<Vec<T>> {
        self.check_type::<T>(index)?;
        Ok(gather(&self.arg(index)?.layout, self.data.bytes(index)))
    }

    /// Writes the elements of argument `index` (row-major order of its view); it must have been
    /// declared with `write()` or `read_write()`.
    pub fn write<T: Element>(&mut self, index: usize, values: &[T]) -> Result<()> {
        self.check_type::<T>(index)?;
        let (name, layout) = {
            let a = self.arg(index)?;
            (a.name.to_string(), a.layout.clone())
        };
        if values.len() as u64 != layout.len() {
            return Err(TensorError::ShapeMismatch {
                what: format!("launch argument {index} (tensor `{name}`)"),
                expected: layout.len(),
                got: values.len() as u64,
            });
        }
        let span = self.data.bytes_mut(index).ok_or_else(|| TensorError::Argument {
            index,
            reason: format!("tensor `{name}` was declared read-only (use write() or read_write())"),
        })?;
        scatter(&layout, values, span);
        Ok(())
    }
}

/// Launches a CUDA kernel over `args` (CUDA backend only): recorded and planned like any
/// launch; once the runtime has placed the data, `func` runs on the runtime's compute stream
/// with, as its parameters, the device address (`unsigned long long`) of each argument's first
/// element in order, then each of `scalars`. Views are passed by address only: a kernel that
/// walks a strided view takes its strides among the scalars.
///
/// # Safety
/// `func`'s signature must take `args.len() + scalars.len()` 64-bit parameters, and it must
/// touch only the elements of the views it is given, as declared (no writes to a view declared
/// `read()`), or it corrupts managed memory the runtime accounts for.
pub unsafe fn launch_cuda(
    rt: &Runtime,
    name: &str,
    func: &cudarc::driver::CudaFunction,
    cfg: cudarc::driver::LaunchConfig,
    args: &[Arg<'_>],
    scalars: &[u64],
) -> Result<()> {
    use cudarc::driver::PushKernelArg;
    let accesses = declare(rt, args)?;
    let (func, scalars) = (func.clone(), scalars.to_vec());
    let kernel = name.to_string();
    rt.launch_native(name, &accesses, move |launch| {
        let mut b = launch.stream.launch_builder(&func);
        for p in launch.ptrs {
            b.arg(p);
        }
        for s in &scalars {
            b.arg(s);
        }
        // SAFETY: the caller guarantees the signature and the accesses (see above).
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(|e| unimem_core::Error::Cuda {
            call: "cuLaunchKernel".into(),
            detail: format!("{e:?} (kernel `{kernel}`)"),
            source: Some(Box::new(e)),
        })
    })?;
    Ok(())
}
