//! unimem as PyTorch's CUDA allocator.
//!
//! `libunimem_torch.so` exports the two functions `torch.cuda.memory.CUDAPluggableAllocator`
//! loads, [`unimem_malloc`] and [`unimem_free`]: every PyTorch allocation becomes a unimem
//! region under the budget (freed buffers are pooled by size, so the steady state of a training
//! loop allocates nothing new and synchronises nothing). Further entry points declare each
//! operator's accesses before PyTorch enqueues it ([`unimem_op_begin`], [`unimem_op_end`]),
//! mark steps and return the counters as JSON. The Python package `unimem_torch` (in
//! `python/`) loads them; `docs/pytorch.md` says what is declared and what is not.
//!
//! One runtime per process: each rank of a `torch.distributed` job has its own budget.
//! Every entry point returns an error code (or a null pointer) and keeps the message for
//! [`unimem_last_error`]; none unwinds into its caller.

pub mod bridge;
mod ffi;

pub use bridge::{Bridge, Options, Stats, TouchedRange};
pub use ffi::*;
