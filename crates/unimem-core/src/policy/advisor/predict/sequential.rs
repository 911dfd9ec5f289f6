//! Stride within a region: a region used every `gap` kernels at an offset that moves by
//! `stride` bytes is predicted to continue so. Whole-region reuse is the stride-0 case.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use super::{Observation, Prediction, Predictor};
use crate::access::AccessMode;
use crate::policy::advisor::identity::RegionKey;

#[derive(Debug, Clone, Copy)]
struct Track {
    kernel: u64,
    offset: u64,
    len: u64,
    mode: AccessMode,
    gap: u64,
    stride: i64,
    /// Consecutive uses that confirmed (gap, stride).
    confirmed: u32,
    /// Where it sits in `schedule` (the kernel it is predicted for), if anywhere.
    scheduled: Option<u64>,
}

/// The stride predictor. Keeps one track per region key and a schedule of the next predicted
/// use of each, so predicting costs a range query, not a scan of every region.
#[derive(Debug, Default)]
pub struct Sequential {
    tracks: FxHashMap<RegionKey, Track>,
    schedule: BTreeMap<u64, Vec<RegionKey>>,
}

impl Sequential {
    /// A new, empty predictor.
    pub fn new() -> Self {
        Self::default()
    }

    fn unschedule(&mut self, key: RegionKey, at: u64) {
        if let Some(v) = self.schedule.get_mut(&at) {
            v.retain(|k| *k != key);
            if v.is_empty() {
                self.schedule.remove(&at);
            }
        }
    }
}

impl Predictor for Sequential {
    fn name(&self) -> &'static str {
        "sequential"
    }

    fn observe(&mut self, o: &Observation) {
        let prev = self.tracks.get(&o.key).copied();
        if let Some(at) = prev.and_then(|t| t.scheduled) {
            self.unschedule(o.key, at);
        }
        let mut t = Track {
            kernel: o.kernel,
            offset: o.offset,
            len: o.len,
            mode: o.mode,
            gap: 0,
            stride: 0,
            confirmed: 0,
            scheduled: None,
        };
        if let Some(p) = prev {
            if p.kernel == o.kernel {
                // Another range of the region in the same kernel: keep the first one's track.
                self.tracks.insert(o.key, p);
                return;
            }
            t.gap = o.kernel - p.kernel;
            t.stride = o.offset as i64 - p.offset as i64;
            t.confirmed = if (t.gap, t.stride) == (p.gap, p.stride) { p.confirmed + 1 } else { 0 };
            let at = o.kernel + t.gap;
            self.schedule.entry(at).or_default().push(o.key);
            t.scheduled = Some(at);
        }
        self.tracks.insert(o.key, t);
    }

    fn end_kernel(&mut self, _kernel: u64) {}

    fn predict(&mut self, now: u64, horizon: u64, out: &mut Vec<Prediction>) {
        for (&at, keys) in self.schedule.range(now + 1..=now + horizon) {
            for key in keys {
                let t = &self.tracks[key];
                let offset = t.offset.checked_add_signed(t.stride).unwrap_or(t.offset);
                let confidence = match t.confirmed {
                    0 => 0.3,
                    1 => 0.6,
                    _ => 0.9,
                };
                out.push(Prediction { key: *key, offset, len: t.len, mode: t.mode, at, confidence });
            }
        }
    }
}
