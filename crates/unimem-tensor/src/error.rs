//! What can go wrong with tensors, each with what and which tensor.

use crate::shape::ShapeError;

/// A tensor operation that cannot be done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TensorError {
    /// A shape that cannot be laid out, or a view outside its tensor.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// Element counts that do not match.
    #[error("{what}: expected {expected} elements, got {got}")]
    ShapeMismatch {
        /// What was being done.
        what: String,
        /// Elements expected.
        expected: u64,
        /// Elements given.
        got: u64,
    },
    /// Reshaping a strided view.
    #[error("tensor `{tensor}`: only a contiguous view can be reshaped without a copy")]
    NotContiguous {
        /// The tensor.
        tensor: String,
    },
    /// A launch using a tensor while a host guard of its data lives.
    #[error(
        "tensor `{tensor}` is held on the host (a host() or host_mut() guard of its data is alive); \
         drop the guard before launching"
    )]
    HeldOnHost {
        /// The tensor.
        tensor: String,
    },
    /// Reading or writing a launch argument as another element type.
    #[error("launch argument {index} (tensor `{tensor}`) holds {actual}, not {asked}")]
    ElementType {
        /// Argument position.
        index: usize,
        /// The tensor.
        tensor: String,
        /// Its element type.
        actual: &'static str,
        /// The type asked for.
        asked: &'static str,
    },
    /// Writing a launch argument declared as read-only, or an argument that does not exist.
    #[error("launch argument {index}: {reason}")]
    Argument {
        /// Argument position.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A tensor used with another runtime than its own.
    #[error("tensor `{tensor}` belongs to another runtime")]
    OtherRuntime {
        /// The tensor.
        tensor: String,
    },
    /// A tensor used after its runtime was dropped.
    #[error("tensor `{tensor}`: {what} after the runtime was dropped")]
    RuntimeGone {
        /// The tensor.
        tensor: String,
        /// What was being done.
        what: String,
    },
    /// An error of the runtime or its backend.
    #[error(transparent)]
    Core(#[from] unimem_core::Error),
}

/// Tensor results.
pub type Result<T, E = TensorError> = std::result::Result<T, E>;
