//! What each step keeps of its read-only data ([`crate::policy::keep`]), chosen from the step
//! before it: the advisor sees no future, so a step's kernels are recorded as they run (by
//! step-stable identity) and the next step keeps what they would have.
//! The first step keeps nothing.

use super::*;
use crate::policy::keep::Runs;

impl Advisor {
    /// Records a kernel that ran, for the next step's choice.
    pub(super) fn record_for_loop(&mut self, dur_ns: u64, acc: &[RangeAccess]) {
        if self.settings.keep_loops.is_none() {
            return;
        }
        let identity = &self.identity;
        self.step_record.accesses(dur_ns, acc, &self.sizes, |id| identity.key(id));
    }

    /// Records that a region is freed (before it is forgotten).
    pub(super) fn record_free_for_loop(&mut self, id: RegionId) {
        if let Some(key) = self.identity.key(id) {
            self.step_record.freed(key);
        }
    }

    /// A step ends: the next keeps what [`crate::policy::keep::keep_set`] chooses from the one
    /// that ended.
    pub(super) fn choose_kept(&mut self) {
        let Some(rate) = self.settings.keep_loops else { return };
        let record = std::mem::take(&mut self.step_record);
        self.kept_keys = record.keep_set(
            self.settings.budget,
            rate,
            self.settings.min_prefetch_bytes,
            Runs::Beyond(self.settings.horizon),
        );
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
