//! `Tensor<T>`: a typed, shaped view of a managed region. Views (narrowing, transposing,
//! reshaping) share the region; the region is freed when the last view of it goes.

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use unimem_core::{AccessMode, RangeAccess, RegionId, Runtime, WeakRuntime};

use crate::element::Element;
use crate::error::{Result, TensorError};
use crate::launch::Arg;
use crate::shape::{for_each_index, gather, scatter, Layout};

/// The managed region behind a tensor and its views.
pub(crate) struct Storage {
    pub(crate) id: RegionId,
    pub(crate) rt: WeakRuntime,
    pub(crate) name: Arc<str>,
    /// Host guards alive on this region: launches using it are refused meanwhile.
    pub(crate) host_guards: AtomicU32,
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.upgrade() {
            if let Err(e) = rt.free(self.id) {
                tracing::warn!(tensor = %self.name, error = %e, "freeing a tensor's region failed");
            }
        }
    }
}

/// A typed, shaped view of managed memory. Cloning a tensor makes another view of the same
/// data (no copy).
pub struct Tensor<T: Element> {
    pub(crate) storage: Arc<Storage>,
    pub(crate) layout: Layout,
    _t: PhantomData<T>,
}

impl<T: Element> Clone for Tensor<T> {
    fn clone(&self) -> Self {
        Self { storage: self.storage.clone(), layout: self.layout.clone(), _t: PhantomData }
    }
}

impl<T: Element> Tensor<T> {
    fn alloc(rt: &Runtime, name: &str, shape: &[u64]) -> Result<Self> {
        let layout = Layout::contiguous(shape)?;
        let bytes = layout
            .len()
            .checked_mul(T::BYTES as u64)
            .ok_or_else(|| TensorError::Shape(crate::shape::ShapeError::Overflow(shape.to_vec())))?;
        let region = rt.alloc(name, bytes.max(1))?;
        let storage =
            Storage { id: region.id, rt: rt.downgrade(), name: region.name, host_guards: AtomicU32::new(0) };
        Ok(Self { storage: Arc::new(storage), layout, _t: PhantomData })
    }

    /// A tensor of zeros.
    pub fn zeros(rt: &Runtime, name: &str, shape: &[u64]) -> Result<Self> {
        let t = Self::alloc(rt, name, shape)?;
        t.fill_from(&vec![T::zero(); t.len() as usize])?;
        Ok(t)
    }

    /// An output tensor whose contents are unspecified until written (no initialising pass:
    /// its pages are first touched by whatever writes it).
    pub fn uninit(rt: &Runtime, name: &str, shape: &[u64]) -> Result<Self> {
        Self::alloc(rt, name, shape)
    }

    /// A tensor holding `data` (row-major); its length must match the shape.
    pub fn from_slice(rt: &Runtime, name: &str, shape: &[u64], data: &[T]) -> Result<Self> {
        let layout = Layout::contiguous(shape)?;
        if layout.len() != data.len() as u64 {
            return Err(TensorError::ShapeMismatch {
                what: format!("data for tensor `{name}`"),
                expected: layout.len(),
                got: data.len() as u64,
            });
        }
        let t = Self::alloc(rt, name, shape)?;
        t.fill_from(data)?;
        Ok(t)
    }

    /// A tensor holding `data` (row-major).
    pub fn from_vec(rt: &Runtime, name: &str, shape: &[u64], data: Vec<T>) -> Result<Self> {
        Self::from_slice(rt, name, shape, &data)
    }

    /// A tensor whose element at each index is `f(index)`.
    pub fn from_fn(rt: &Runtime, name: &str, shape: &[u64], mut f: impl FnMut(&[u64]) -> T) -> Result<Self> {
        let layout = Layout::contiguous(shape)?;
        let mut data = Vec::with_capacity(layout.len() as usize);
        for_each_index(layout.shape(), |idx| data.push(f(idx)));
        Self::from_slice(rt, name, shape, &data)
    }

    fn fill_from(&self, data: &[T]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let rt = self.runtime("writing")?;
        let (offset, _) = self.byte_range();
        let mut bytes = vec![0; data.len() * T::BYTES];
        for (v, out) in data.iter().zip(bytes.chunks_mut(T::BYTES)) {
            v.write_le(out);
        }
        rt.write(self.storage.id, offset, &bytes)?;
        Ok(())
    }

    pub(crate) fn runtime(&self, what: &str) -> Result<Runtime> {
        self.storage.rt.upgrade().ok_or_else(|| TensorError::RuntimeGone {
            tensor: self.name().to_string(),
            what: what.to_string(),
        })
    }

    /// The tensor's name (shown in telemetry).
    pub fn name(&self) -> &str {
        &self.storage.name
    }

    /// The managed region holding the data.
    pub fn region(&self) -> RegionId {
        self.storage.id
    }

    /// Shape.
    pub fn shape(&self) -> &[u64] {
        self.layout.shape()
    }

    /// Strides, in elements.
    pub fn strides(&self) -> &[u64] {
        self.layout.strides()
    }

    /// Number of elements.
    pub fn len(&self) -> u64 {
        self.layout.len()
    }

    /// True with no elements.
    pub fn is_empty(&self) -> bool {
        self.layout.is_empty()
    }

    /// The layout (shape, strides, offset).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The byte range of the region the view touches: what a launch declares (`(0, 0)` for an
    /// empty view, whose offset may lie at the very end of the region).
    pub fn byte_range(&self) -> (u64, u64) {
        if self.is_empty() {
            return (0, 0);
        }
        self.layout.byte_span(T::BYTES as u64)
    }

    fn view(&self, layout: Layout) -> Self {
        Self { storage: self.storage.clone(), layout, _t: PhantomData }
    }

    /// Elements `start..end` of dimension `dim` (no copy).
    ///
    /// ```
    /// # let rt = unimem_core::Runtime::builder().simulator().budget(unimem_core::Budget::Bytes(1 << 26)).build()?;
    /// use unimem_tensor::Tensor;
    /// let t = Tensor::<i32>::from_fn(&rt, "t", &[3, 4], |i| (10 * i[0] + i[1]) as i32)?;
    /// let row = t.narrow(0, 1, 2)?; // row 1, sharing t's memory
    /// assert_eq!(row.to_vec()?, vec![10, 11, 12, 13]);
    /// assert_eq!(row.byte_range(), (16, 16)); // what a launch using it declares
    /// # Ok::<(), unimem_tensor::TensorError>(())
    /// ```
    pub fn narrow(&self, dim: usize, start: u64, end: u64) -> Result<Self> {
        Ok(self.view(self.layout.narrow(dim, start, end)?))
    }

    /// Dimensions `a` and `b` swapped (no copy).
    pub fn transpose(&self, a: usize, b: usize) -> Result<Self> {
        Ok(self.view(self.layout.transpose(a, b)?))
    }

    /// The same elements with another shape; the view must be contiguous (no copy).
    pub fn reshape(&self, shape: &[u64]) -> Result<Self> {
        let target = Layout::contiguous(shape)?;
        if target.len() != self.len() {
            return Err(TensorError::ShapeMismatch {
                what: format!("reshape of `{}` to {shape:?}", self.name()),
                expected: self.len(),
                got: target.len(),
            });
        }
        if !self.layout.is_contiguous() {
            return Err(TensorError::NotContiguous { tensor: self.name().to_string() });
        }
        Ok(self.view(target.with_offset(self.layout.offset())))
    }

    /// Declares that a launch reads this view.
    pub fn read(&self) -> Arg<'_> {
        self.arg(AccessMode::Read)
    }

    /// Declares that a launch overwrites this view (its old contents are not read).
    pub fn write(&self) -> Arg<'_> {
        self.arg(AccessMode::Write)
    }

    /// Declares that a launch reads and writes this view.
    pub fn read_write(&self) -> Arg<'_> {
        self.arg(AccessMode::ReadWrite)
    }

    pub(crate) fn range(&self, mode: AccessMode) -> RangeAccess {
        let (offset, len) = self.byte_range();
        RangeAccess { region: self.storage.id, offset, len, mode }
    }

    fn arg(&self, mode: AccessMode) -> Arg<'_> {
        let s = &self.storage;
        Arg::new(&s.name, T::NAME, self.range(mode), &s.host_guards, &s.rt, self.layout.clone())
    }

    pub(crate) fn gather(&self, span: &[u8]) -> Vec<T> {
        gather(&self.layout, span)
    }

    pub(crate) fn scatter(&self, values: &[T], span: &mut [u8]) {
        scatter(&self.layout, values, span)
    }

    fn read_span(&self, rt: &Runtime) -> Result<Vec<u8>> {
        let (offset, len) = self.byte_range();
        if len == 0 {
            return Ok(Vec::new());
        }
        let mut span = vec![0; len as usize];
        rt.read(self.storage.id, offset, &mut span)?;
        Ok(span)
    }

    /// The elements, on the host (row-major order of the view). Records a host read.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let rt = self.runtime("reading")?;
        Ok(self.gather(&self.read_span(&rt)?))
    }

    /// Read access on the host: the data is made host-valid (a host read is recorded), and
    /// launches using this tensor are refused while the guard lives.
    pub fn host(&self) -> Result<HostRef<'_, T>> {
        let rt = self.runtime("host access")?;
        let data = self.gather(&self.read_span(&rt)?);
        self.storage.host_guards.fetch_add(1, Ordering::AcqRel);
        Ok(HostRef { tensor: self, data })
    }

    /// Read-write access on the host; the changes are written back when the guard is dropped
    /// (or by [`HostMut::commit`], which reports errors). `&mut self` keeps launches using this
    /// view out at compile time; other views of the region are refused at run time.
    ///
    /// ```
    /// # let rt = unimem_core::Runtime::builder().simulator().budget(unimem_core::Budget::Bytes(1 << 26)).build()?;
    /// use unimem_tensor::{launch_cpu, Tensor, TensorError};
    /// let mut t = Tensor::<f32>::zeros(&rt, "t", &[4])?;
    /// {
    ///     let mut h = t.host_mut()?;
    ///     h[0] = 1.5;
    /// } // written back here
    /// let guard = t.host()?;
    /// // A launch while a guard lives is refused.
    /// let e = launch_cpu(&rt, "k", 1_000, &[t.read()], |_| Ok(())).unwrap_err();
    /// assert!(matches!(e, TensorError::HeldOnHost { .. }));
    /// assert_eq!(guard[0], 1.5);
    /// # Ok::<(), unimem_tensor::TensorError>(())
    /// ```
    pub fn host_mut(&mut self) -> Result<HostMut<'_, T>> {
        let rt = self.runtime("host access")?;
        let span = self.read_span(&rt)?;
        let data = self.gather(&span);
        self.storage.host_guards.fetch_add(1, Ordering::AcqRel);
        Ok(HostMut { tensor: self, data, span, committed: false })
    }
}

/// A read guard: the view's elements on the host.
pub struct HostRef<'a, T: Element> {
    tensor: &'a Tensor<T>,
    data: Vec<T>,
}

impl<T: Element> std::ops::Deref for HostRef<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data
    }
}

impl<T: Element> Drop for HostRef<'_, T> {
    fn drop(&mut self) {
        self.tensor.storage.host_guards.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A read-write guard: the view's elements on the host, written back when it goes.
pub struct HostMut<'a, T: Element> {
    tensor: &'a Tensor<T>,
    data: Vec<T>,
    span: Vec<u8>,
    committed: bool,
}

impl<T: Element> HostMut<'_, T> {
    /// Writes the changes back now and reports any error.
    pub fn commit(mut self) -> Result<()> {
        self.write_back()
    }

    fn write_back(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.committed, true) {
            return Ok(());
        }
        self.tensor.storage.host_guards.fetch_sub(1, Ordering::AcqRel);
        let rt = self.tensor.runtime("writing back a host guard")?;
        self.tensor.scatter(&self.data, &mut self.span);
        let (offset, len) = self.tensor.byte_range();
        if len == 0 {
            return Ok(());
        }
        rt.write(self.tensor.storage.id, offset, &self.span)?;
        Ok(())
    }
}

impl<T: Element> std::ops::Deref for HostMut<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data
    }
}

impl<T: Element> std::ops::DerefMut for HostMut<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.data
    }
}

impl<T: Element> Drop for HostMut<'_, T> {
    fn drop(&mut self) {
        if let Err(e) = self.write_back() {
            tracing::warn!(tensor = %self.tensor.name(), error = %e, "writing back a host guard failed");
        }
    }
}

/// Elements shown by `Debug`/`Display` before the summary cuts in.
const SHOWN: usize = 8;

impl<T: Element> fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor<{}>(`{}`, shape {:?}, strides {:?}, region {})",
            T::NAME,
            self.name(),
            self.shape(),
            self.strides(),
            self.storage.id
        )
    }
}

/// Shows up to 8 elements and, for larger tensors, their count, min, max and mean (reading
/// the data from the host); never the whole of a large tensor.
impl<T: Element> fmt::Display for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {:?}", self.name(), T::NAME, self.shape())?;
        let Ok(values) = self.to_vec() else {
            return write!(f, " <unreadable: the runtime is gone>");
        };
        let head: Vec<String> = values.iter().take(SHOWN).map(|v| format!("{v:?}")).collect();
        write!(f, " [{}{}]", head.join(", "), if values.len() > SHOWN { ", ..." } else { "" })?;
        if values.len() > SHOWN {
            let xs: Vec<f64> = values.iter().map(|v| v.to_f64()).collect();
            let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            write!(f, " ({} elements, min {min:.4}, max {max:.4}, mean {mean:.4})", xs.len())?;
        }
        Ok(())
    }
}
