//! Programs that enqueue their own kernels on their own streams (PyTorch, through its
//! allocator): the backend places an operation's data and orders its own streams with the
//! program's, but never launches the operation itself.
//!
//! What holds: the program's stream waits for the data the backend placed before it runs an
//! operation ([`ProgramStreams::launch_on`], [`ProgramStreams::lead`]), and the backend's
//! streams wait for the program's work before they copy out, discard or reuse anything that
//! work touched ([`ProgramStreams::follow`]): every later eviction waits for the latest
//! kernel's mark, which a follow moves past what the program enqueued.

use super::KernelLaunch;
use crate::access::RangeAccess;
use crate::error::Result;

/// A stream of the program's: a `CUstream` on CUDA (0 is the legacy default stream); any value
/// on the simulator, whose program has one timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProgramStream(pub u64);

/// A backend that orders its work with kernels the program launches itself.
pub trait ProgramStreams {
    /// Places `kernel`'s data as for a launch (staged data back, data in flight waited for,
    /// room made), then has `stream` wait for it: the program enqueues the kernel on `stream`
    /// next. It counts as the backend's latest kernel, open until
    /// [`ProgramStreams::finish`], its time measured from the data being placed to then.
    fn launch_on(&mut self, kernel: &KernelLaunch<'_>, stream: ProgramStream) -> Result<()>;

    /// What the program has enqueued on `stream` so far belongs to the latest kernel, still
    /// open: the backend's streams wait for it, and so does whatever waits for that kernel.
    /// Outside an open kernel there is nothing to follow.
    fn follow(&mut self, stream: ProgramStream) -> Result<()>;

    /// The latest kernel is complete on `stream`, as [`ProgramStreams::follow`]; its measured
    /// time ends here.
    fn finish(&mut self, stream: ProgramStream) -> Result<()>;

    /// `stream` waits for everything the backend has issued so far (a reused buffer's discard,
    /// room made for new pages).
    fn lead(&mut self, stream: ProgramStream) -> Result<()>;

    /// The latest kernel, finished, wrote these ranges too (outputs it allocated as it ran):
    /// their pages are on the device, and room is made for them now that evicting the kernel's
    /// other data waits for it: the least recently used blocks, staged out where the backend
    /// was built to stage this room and has staging memory, else migrated as the driver would.
    fn wrote(&mut self, accesses: &[RangeAccess]) -> Result<()>;

    /// The open kernel is about to write `outputs` (buffers it allocated as it runs): their
    /// missing pages are put on the device ahead of it, as a prefetch populates fresh pages,
    /// where the kernel's first touches would fault them in one 64 KiB unit at a time (on the
    /// H200 about 11 GB/s against 214-266). Room is made for them first, as
    /// [`ProgramStreams::wrote`] makes it, outside `keep`: the open kernel's own data, which
    /// no mark covers until it is finished; where `keep` leaves too little room, nothing is
    /// done and the kernel faults them in. The next [`ProgramStreams::lead`] waits for them.
    fn populate(&mut self, outputs: &[RangeAccess], keep: &[RangeAccess]) -> Result<()>;
}
