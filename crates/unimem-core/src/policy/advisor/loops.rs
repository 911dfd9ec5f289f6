//! What each step keeps of its read-only data ([`crate::policy::keep`]), chosen from the step
//! before it: the advisor sees no future, so a step's kernels are recorded as they run (by
//! step-stable identity) and the next step keeps what they would have.
//! Until a step has ended (the first step, or a program that never marks one), the choice is
//! made once, within the step, as soon as a loop that does not fit shows itself: a region
//! read again after more than the budget of other data ([`crate::policy::keep::StepKernels::longest_reuse`]),
//! from what the step has run so far (the loop's first pass, at least).

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
        if !self.kept_chosen && self.step_record.longest_reuse() > self.settings.budget {
            self.kept_chosen = true;
            // The step goes on recording for its end's choice.
            if self.keep_from_record() {
                self.kept_from = self.step_record.clone();
            }
            tracing::debug!(
                kept = self.kept.len(),
                kernels = self.step_record.len(),
                "a loop longer than the budget: kept set chosen within the step"
            );
        }
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
        if self.settings.keep_loops.is_none() {
            return;
        }
        self.kept_chosen |= !self.step_record.is_empty();
        if self.keep_from_record() {
            self.kept_from = std::mem::take(&mut self.step_record);
        } else {
            self.step_record = Default::default();
        }
    }

    /// Keeps what the kernels recorded so far would have kept. Returns whether it chose anew
    /// (the record differs from the one the kept set was chosen from); the caller keeps the
    /// record as `kept_from` then.
    fn keep_from_record(&mut self) -> bool {
        let Some(rate) = self.settings.keep_loops else { return false };
        let anew = !self.step_record.same_choice(&self.kept_from);
        if anew {
            self.kept_keys = self.step_record.keep_set(
                self.settings.budget,
                rate,
                self.settings.min_prefetch_bytes,
                Runs::Beyond(self.settings.horizon),
            );
        }
        self.kept =
            self.by_key.iter().filter(|(k, _)| self.kept_keys.contains(k)).map(|(_, &id)| id).collect();
        anew
    }

    /// A region is allocated: kept if its key is.
    pub(super) fn keep_if_kept(&mut self, id: RegionId, key: RegionKey) {
        if self.kept_keys.contains(&key) {
            self.kept.insert(id);
        }
    }
}
