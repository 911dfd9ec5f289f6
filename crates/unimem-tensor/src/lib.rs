//! # unimem-tensor
//!
//! Typed, shaped tensors over unimem's managed regions. This crate starts with the layout
//! arithmetic every tensor and view needs (shape, strides, the byte span a view touches, which
//! is what a launch declares to the prefetch advisor); `Tensor<T>` itself arrives with its own
//! issue.

#![warn(missing_docs)]

mod shape;

pub use shape::{Layout, ShapeError};
