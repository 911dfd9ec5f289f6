//! Per-event recording, as every backend keeps it: a switch and the events recorded since the
//! caller last took them.

use super::MemEvent;

/// A backend's recorded events (see [`super::MemoryBackend::events`]).
#[derive(Debug, Default)]
pub struct Recorder {
    on: bool,
    events: Vec<MemEvent>,
}

impl Recorder {
    /// Turns recording on or off (off by default).
    pub fn set_recording(&mut self, on: bool) {
        self.on = on;
    }

    /// Whether events are recorded.
    pub fn is_recording(&self) -> bool {
        self.on
    }

    /// Moves the recorded events into `out`.
    pub fn drain(&mut self, out: &mut Vec<MemEvent>) {
        out.append(&mut self.events);
    }

    /// Records the event `make` builds, where recording is on (it is not built otherwise).
    pub(crate) fn emit(&mut self, make: impl FnOnce() -> MemEvent) {
        if self.on {
            self.events.push(make());
        }
    }

    /// Records events already built (a backend's timed events once the device reached them).
    pub(crate) fn extend(&mut self, events: impl IntoIterator<Item = MemEvent>) {
        if self.on {
            self.events.extend(events);
        }
    }
}
