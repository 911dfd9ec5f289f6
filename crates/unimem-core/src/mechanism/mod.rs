//! Mechanisms both backends share, written once: what each composes with its own device
//! calls.

pub(crate) mod budget;
pub(crate) mod pace;
pub(crate) mod pool;
pub(crate) mod slab;
