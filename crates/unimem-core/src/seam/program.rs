//! Programs that enqueue their own kernels on their own streams (PyTorch, through its
//! allocator): the backend places an operation's data and orders its own streams with the
//! program's, but never launches the operation itself.
//!
//! What holds: the program's stream waits for the data the backend placed before it runs an
//! operation ([`StreamWait`]), and the backend's streams wait for the program's work before
//! they copy out, discard or reuse anything that work touched ([`ProgramStreams::follow`]):
//! every later eviction waits for the latest kernel's mark, which a follow moves past what the
//! program enqueued.

use std::sync::Arc;

use super::KernelLaunch;
use crate::access::RangeAccess;
use crate::error::Result;

/// A stream of the program's: a `CUstream` on CUDA (0 is the legacy default stream); any value
/// on the simulator, whose program has one timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProgramStream(pub u64);

/// A point of a program's stream, marked on the program's own thread ([`ProgramSide::mark`]):
/// what the stream held then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamMark(pub u64);

/// How the program's stream waits for an operation's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamWait {
    /// On an event the backend records once the data is placed, before the launch returns:
    /// the program's thread waits for the backend.
    Event,
    /// On the device, for this ticket ([`ProgramSide::hold`]), which the backend releases once
    /// the data is placed: the program's thread goes on at once.
    Ticket(u64),
}

/// The calls a program's own thread makes on the device, so that declaring an operation
/// waits for nothing: the stream is held at a ticket, and points of it are marked, where they
/// are, for the backend to wait on later.
pub trait ProgramSide: Send + Sync {
    /// `stream` waits, on the device, until the backend releases `ticket`
    /// ([`ProgramStreams::release`]).
    fn hold(&self, stream: ProgramStream, ticket: u64) -> Result<()>;

    /// Marks what `stream` holds now. A mark stays valid until many more are made (more than
    /// the runtime's queue holds), which the backend uses long before.
    fn mark(&self, stream: ProgramStream) -> Result<StreamMark>;
}

/// A backend that orders its work with kernels the program launches itself.
pub trait ProgramStreams {
    /// Places `kernel`'s data as for a launch (staged data back, data in flight waited for,
    /// room made), then lets `stream` go on as `wait` says: the program enqueues the kernel on
    /// `stream` next. It counts as the backend's latest kernel, open until
    /// [`ProgramStreams::finish`], its time measured from the data being placed to then.
    fn launch_on(&mut self, kernel: &KernelLaunch<'_>, stream: ProgramStream, wait: StreamWait)
        -> Result<()>;

    /// What the program has enqueued on `stream` so far (up to `mark`, where the program's
    /// thread marked it) belongs to the latest kernel, still open: the backend's streams wait
    /// for it, and so does whatever waits for that kernel. Outside an open kernel there is
    /// nothing to follow.
    fn follow(&mut self, stream: ProgramStream, mark: Option<StreamMark>) -> Result<()>;

    /// The latest kernel is complete on `stream` (up to `mark`), as
    /// [`ProgramStreams::follow`]; its measured time ends here.
    fn finish(&mut self, stream: ProgramStream, mark: Option<StreamMark>) -> Result<()>;

    /// `stream` waits for everything the backend has issued so far (a reused buffer's discard,
    /// room made for new pages).
    fn lead(&mut self, stream: ProgramStream) -> Result<()>;

    /// Releases every ticket up to `ticket` once what the backend has issued so far is done.
    /// Released on every path (an operation whose placement failed too), so that no program
    /// stream waits for ever.
    fn release(&mut self, ticket: u64) -> Result<()>;

    /// The program's side of the ordering, where the device has one (CUDA with stream memory
    /// operations; the simulator, whose program has one timeline); without it, only
    /// [`StreamWait::Event`].
    fn program_side(&mut self) -> Result<Option<Arc<dyn ProgramSide>>>;

    /// The latest kernel, finished, wrote these ranges too (outputs it allocated as it ran):
    /// their pages are on the device, and room is made for them as the driver would, now that
    /// evicting the kernel's other data waits for it.
    fn wrote(&mut self, accesses: &[RangeAccess]) -> Result<()>;
}
