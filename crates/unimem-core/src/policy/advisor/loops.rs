//! What each step keeps of its read-only data ([`crate::policy::keep`]), chosen from the step
//! before it: the advisor sees no future, so a step's kernels are recorded as they run (by
//! step-stable identity) and the next step keeps what they would have.
//! The first step keeps nothing.

use super::*;
use crate::policy::keep::{keep_set, LoopKernel};

/// The running step's kernels, for choosing what the next one keeps.
#[derive(Debug, Default)]
pub(super) struct StepRecord {
    /// Each kernel's compute time and regions (by step-stable key, with their device bytes).
    kernels: Vec<(u64, Vec<(RegionKey, u64)>)>,
    /// Regions the step wrote or freed: not kept.
    changed: FxHashSet<RegionKey>,
}

impl Advisor {
    /// Records a kernel that ran, for the next step's choice.
    pub(super) fn record_for_loop(&mut self, dur_ns: u64, acc: &[RangeAccess]) {
        if self.settings.keep_loops.is_none() {
            return;
        }
        let mut regions: Vec<(RegionKey, u64)> = Vec::new();
        for a in acc {
            let Some(key) = self.identity.key(a.region) else { continue };
            if a.mode.writes() {
                self.step_record.changed.insert(key);
            }
            if !regions.iter().any(|r| r.0 == key) {
                regions.push((key, page_round(self.sizes.get(&a.region).copied().unwrap_or(0))));
            }
        }
        self.step_record.kernels.push((dur_ns, regions));
    }

    /// Records that a region is freed (before it is forgotten).
    pub(super) fn record_free_for_loop(&mut self, id: RegionId) {
        if let Some(key) = self.identity.key(id) {
            self.step_record.changed.insert(key);
        }
        self.kept.remove(&id);
    }

    /// A step ends: the next keeps what [`keep_set`] chooses from the one that ended.
    pub(super) fn choose_kept(&mut self) {
        let Some(rate) = self.settings.keep_loops else { return };
        let record = std::mem::take(&mut self.step_record);
        let kernels = loop_kernels(&record.kernels, &record.changed, self.settings.min_prefetch_bytes);
        self.keep(keep_set(&kernels, self.settings.budget, rate));
    }

    /// Keeps the regions of `keys` from here on.
    fn keep(&mut self, keys: FxHashSet<RegionKey>) {
        self.kept_keys = keys;
        self.kept =
            self.by_key.iter().filter(|(k, _)| self.kept_keys.contains(k)).map(|(_, &id)| id).collect();
    }

    /// A region is allocated: kept if its key is.
    pub(super) fn keep_if_kept(&mut self, id: RegionId, key: RegionKey) {
        if self.kept_keys.contains(&key) {
            self.kept.insert(id);
        }
    }
}

/// Recorded kernels as [`keep_set`] sees them: regions written or freed (`changed`), and
/// those too small to prefetch, count as other data.
fn loop_kernels(
    kernels: &[(u64, Vec<(RegionKey, u64)>)],
    changed: &FxHashSet<RegionKey>,
    min_prefetch_bytes: u64,
) -> Vec<LoopKernel<RegionKey>> {
    kernels
        .iter()
        .map(|(dur_ns, regions)| {
            let mut k = LoopKernel { dur_ns: *dur_ns, read_only: Vec::new(), other: 0 };
            for &(key, bytes) in regions {
                if changed.contains(&key) || bytes < min_prefetch_bytes {
                    k.other += bytes;
                } else {
                    k.read_only.push((key, bytes));
                }
            }
            k
        })
        .collect()
}
