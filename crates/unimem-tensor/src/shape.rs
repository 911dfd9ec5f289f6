//! Shapes, strides and the bytes a view touches.

use crate::element::Element;

/// A shape that cannot be laid out as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// The element count overflows `u64` bytes.
    #[error("shape {0:?} is too large to address")]
    Overflow(Vec<u64>),
    /// A narrowing that leaves the dimension.
    #[error("dimension {dim} has {len} elements; cannot narrow to {start}..{end}")]
    OutOfRange {
        /// The dimension.
        dim: usize,
        /// Its length.
        len: u64,
        /// Requested start.
        start: u64,
        /// Requested end.
        end: u64,
    },
    /// A dimension index past the rank.
    #[error("dimension {dim} does not exist in a tensor of rank {rank}")]
    NoSuchDim {
        /// The dimension asked for.
        dim: usize,
        /// The rank.
        rank: usize,
    },
}

/// Where the elements of a (possibly strided) view lie: shape, strides in elements, offset in
/// elements from the start of the region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    shape: Vec<u64>,
    strides: Vec<u64>,
    offset: u64,
}

impl Layout {
    /// A contiguous row-major layout of `shape`.
    pub fn contiguous(shape: &[u64]) -> Result<Self, ShapeError> {
        let mut strides = vec![0; shape.len()];
        let mut acc: u64 = 1;
        for (s, &d) in strides.iter_mut().zip(shape).rev() {
            *s = acc;
            acc = acc.checked_mul(d).ok_or_else(|| ShapeError::Overflow(shape.to_vec()))?;
        }
        Ok(Self { shape: shape.to_vec(), strides, offset: 0 })
    }

    /// The shape.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Strides in elements.
    pub fn strides(&self) -> &[u64] {
        &self.strides
    }

    /// Offset of the first element from the region start, in elements.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The same layout starting `offset` elements into the region.
    pub fn with_offset(mut self, offset: u64) -> Self {
        self.offset = offset;
        self
    }

    /// Number of elements.
    pub fn len(&self) -> u64 {
        self.shape.iter().product()
    }

    /// True if the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if the elements are dense and in row-major order.
    pub fn is_contiguous(&self) -> bool {
        Layout::contiguous(&self.shape).is_ok_and(|c| {
            self.shape.iter().zip(self.strides.iter().zip(&c.strides)).all(|(&d, (s, cs))| d <= 1 || s == cs)
        })
    }

    /// The view of elements `start..end` of dimension `dim` (no copy).
    pub fn narrow(&self, dim: usize, start: u64, end: u64) -> Result<Self, ShapeError> {
        let len = *self.shape.get(dim).ok_or(ShapeError::NoSuchDim { dim, rank: self.shape.len() })?;
        if start > end || end > len {
            return Err(ShapeError::OutOfRange { dim, len, start, end });
        }
        let mut out = self.clone();
        out.shape[dim] = end - start;
        out.offset += start * self.strides[dim];
        Ok(out)
    }

    /// The view with dimensions `a` and `b` swapped (no copy).
    pub fn transpose(&self, a: usize, b: usize) -> Result<Self, ShapeError> {
        let rank = self.shape.len();
        for dim in [a, b] {
            if dim >= rank {
                return Err(ShapeError::NoSuchDim { dim, rank });
            }
        }
        let mut out = self.clone();
        out.shape.swap(a, b);
        out.strides.swap(a, b);
        Ok(out)
    }

    /// Element offset (from the region start) of the element at `index`.
    pub fn offset_of(&self, index: &[u64]) -> u64 {
        self.offset + index.iter().zip(&self.strides).map(|(i, s)| i * s).sum::<u64>()
    }

    /// The smallest byte range `(offset, len)` of the region holding every element of the view,
    /// for elements of `elem_bytes` bytes: what a launch declares it touches.
    pub fn byte_span(&self, elem_bytes: u64) -> (u64, u64) {
        if self.is_empty() {
            return (self.offset * elem_bytes, 0);
        }
        let last: u64 = self.shape.iter().zip(&self.strides).map(|(d, s)| (d - 1) * s).sum();
        (self.offset * elem_bytes, (last + 1) * elem_bytes)
    }
}

/// The elements of a view (row-major order of the view) from the bytes of its span.
pub(crate) fn gather<T: Element>(layout: &Layout, span: &[u8]) -> Vec<T> {
    let base = layout.offset();
    let mut out = Vec::with_capacity(layout.len() as usize);
    for_each_index(layout.shape(), |idx| {
        let at = ((layout.offset_of(idx) - base) as usize) * T::BYTES;
        out.push(T::read_le(&span[at..at + T::BYTES]));
    });
    out
}

/// Writes the elements of a view (row-major order of the view) into the bytes of its span.
pub(crate) fn scatter<T: Element>(layout: &Layout, values: &[T], span: &mut [u8]) {
    let base = layout.offset();
    let mut it = values.iter();
    for_each_index(layout.shape(), |idx| {
        let at = ((layout.offset_of(idx) - base) as usize) * T::BYTES;
        if let Some(v) = it.next() {
            v.write_le(&mut span[at..at + T::BYTES]);
        }
    });
}

/// Calls `f` with every index of `shape`, in row-major order.
pub(crate) fn for_each_index(shape: &[u64], mut f: impl FnMut(&[u64])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0u64; shape.len()];
    loop {
        f(&idx);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn contiguous_strides_and_views() {
        let l = Layout::contiguous(&[2, 3, 4]).unwrap();
        assert_eq!(l.strides(), &[12, 4, 1]);
        assert!(l.is_contiguous());
        let t = l.transpose(0, 2).unwrap();
        assert!(!t.is_contiguous());
        assert_eq!(t.offset_of(&[3, 2, 1]), l.offset_of(&[1, 2, 3]));
        let n = l.narrow(1, 1, 3).unwrap();
        assert_eq!(n.shape(), &[2, 2, 4]);
        assert_eq!(n.byte_span(4), (4 * 4, (12 + 4 + 3 + 1) * 4));
        assert!(matches!(l.narrow(1, 2, 4), Err(ShapeError::OutOfRange { .. })));
        assert!(matches!(l.transpose(0, 3), Err(ShapeError::NoSuchDim { .. })));
        assert!(Layout::contiguous(&[u64::MAX, 2]).is_err());
    }

    proptest! {
        /// Every element of any narrowed, transposed view lies inside the view's byte span and
        /// matches the row-major index of the same element in the full tensor.
        #[test]
        fn views_agree_with_a_reference(
            shape in prop::collection::vec(1u64..6, 1..4),
            cut in (0u64..6, 0u64..6),
            dims in (0usize..4, 0usize..4),
        ) {
            let full = Layout::contiguous(&shape).unwrap();
            let d = dims.0 % shape.len();
            let (lo, hi) = (cut.0.min(cut.1) % (shape[d] + 1), cut.0.max(cut.1).min(shape[d]));
            let (lo, hi) = (lo.min(hi), hi);
            let view = full.narrow(d, lo, hi).unwrap();
            let (a, b) = (dims.0 % shape.len(), dims.1 % shape.len());
            let view_t = view.transpose(a, b).unwrap();
            let (start, len) = view_t.byte_span(1);
            // Walk every index of the transposed view.
            let vshape = view_t.shape().to_vec();
            let mut idx = vec![0u64; vshape.len()];
            if vshape.iter().all(|&x| x > 0) {
                loop {
                    let off = view_t.offset_of(&idx);
                    prop_assert!(off >= start && off < start + len);
                    // The same element in the full tensor: undo the transpose and narrowing.
                    let mut orig = idx.clone();
                    orig.swap(a, b);
                    orig[d] += lo;
                    let reference: u64 = orig.iter().zip(full.strides()).map(|(i, s)| i * s).sum();
                    prop_assert_eq!(off, reference);
                    let mut k = vshape.len();
                    loop {
                        if k == 0 { break; }
                        k -= 1;
                        idx[k] += 1;
                        if idx[k] < vshape[k] { break; }
                        idx[k] = 0;
                        if k == 0 { k = usize::MAX; break; }
                    }
                    if k == usize::MAX { break; }
                }
            }
        }
    }
}
