//! Learning from faults: accesses a kernel did not declare, seen as the backend's events
//! (at once on the simulator, late through CUPTI on a GPU), join the access history.

use super::*;

impl Advisor {
    /// Kernel index at which the current step began (0 before any step marker).
    pub(super) fn step_start(&self) -> u64 {
        self.step_starts.last().copied().unwrap_or(0)
    }

    /// Steps an access learned from faults stays believed without being seen again: none where
    /// faults are reported as they happen; where they come late (a GPU's, through CUPTI), the
    /// steps the reports lag behind plus one, since whether the access faulted this step is
    /// not known before then. Without it, an access the advisor failed to bring in time is
    /// forgotten before its fault is reported, and relearned only steps later.
    pub(super) fn grace_steps(&self) -> u64 {
        if self.late.kernels == 0 {
            return 0;
        }
        let n = self.step_starts.len();
        let step_len =
            if n >= 2 { self.step_starts[n - 1] - self.step_starts[n - 2] } else { self.kernel.max(1) };
        self.late.lag_max.div_ceil(step_len.max(1)) + 1
    }

    /// Feeds the running kernel's undeclared accesses to the predictors: those that faulted
    /// now, and those learned at this position of an earlier step whose data is resident (or
    /// that were reported late, whose faults here, if any, are not known yet).
    pub(super) fn observe_undeclared(&mut self) {
        let position = self.kernel - self.step_start();
        let mut faulted: FxHashSet<(RegionKey, u64)> = FxHashSet::default();
        let mut seen = Vec::new();
        for (key, offset, len) in self.merged_undeclared() {
            self.learned_bytes += len;
            self.learned_keys.insert(key);
            faulted.insert((key, offset));
            seen.push(Learned { key, offset, len, confirmed: self.step });
        }
        let mut kept = Vec::new();
        let grace = self.grace_steps();
        for l in self.learned.remove(&position).unwrap_or_default() {
            if faulted.contains(&(l.key, l.offset)) {
                continue;
            }
            let Some(&id) = self.by_key.get(&l.key) else {
                kept.push(l); // not allocated in this step (yet): no evidence
                continue;
            };
            let mut units = Vec::new();
            add_units(&self.sizes, id, l.offset, l.len.max(1), false, &mut units);
            let unconfirmed = self.step.saturating_sub(l.confirmed);
            if unconfirmed <= grace || units.iter().all(|(u, _)| self.resident.contains_key(u)) {
                seen.push(l);
            }
        }
        self.learned_observed += seen.len() as u64;
        for l in &seen {
            let mode = crate::AccessMode::ReadWrite;
            let (key, offset, len) = (l.key, l.offset, l.len);
            self.predictor.observe(&Observation { key, offset, len, mode, kernel: self.kernel });
        }
        kept.extend(seen);
        if !kept.is_empty() {
            self.learned.insert(position, kept);
        }
        if self.step == 0 && self.learned.len() > 2 * DECLARED_KEPT {
            // Without step markers a position is a kernel index and never comes round again:
            // keep the recent ones only (late reports may still add to them).
            let horizon = position.saturating_sub(DECLARED_KEPT as u64);
            self.learned.retain(|&p, _| p >= horizon);
        }
    }

    /// The running kernel's undeclared accesses, one range per run of touched bytes (faults,
    /// migrations and population overlap), by step-stable key.
    pub(super) fn merged_undeclared(&mut self) -> Vec<(RegionKey, u64, u64)> {
        let merged = merge_ranges(std::mem::take(&mut self.undeclared));
        merged
            .into_iter()
            .filter_map(|(region, offset, len)| Some((self.key_of(region)?, offset, len)))
            .collect()
    }

    /// The step-stable key of a live region, or of one freed recently (late faults name
    /// regions that may be gone).
    pub(super) fn key_of(&self, region: RegionId) -> Option<RegionKey> {
        self.identity.key(region).or_else(|| self.freed_keys.get(&region).map(|k| k.0))
    }

    pub(super) fn forget_region(&mut self, id: RegionId) {
        if let Some(key) = self.identity.key(id) {
            // A key names the region allocated last with it (an older live region of the same
            // size and rank in an earlier step is not named by it).
            if self.by_key.get(&key) == Some(&id) {
                self.by_key.remove(&key);
            }
            self.freed_keys.insert(id, (key, self.kernel));
            if self.freed_keys.len() > 2 * DECLARED_KEPT {
                // A program without steps frees without end: keep what late faults can name.
                let horizon = self.kernel.saturating_sub(DECLARED_KEPT as u64);
                self.freed_keys.retain(|_, k| k.1 >= horizon);
            }
        }
        for u in region_units(id, self.sizes.remove(id)) {
            self.resident.remove(&u);
            self.read_mostly.remove(&u);
            self.remote.remove(&u);
        }
        self.born.remove(&id);
        self.kept.remove(&id);
    }

    /// GPU faults (and the migrations and first-touch population they caused) on regions the
    /// running kernel did not declare are accesses it made all the same: they join its
    /// observations (as read-write, since a fault does not say whether the kernel wrote, and
    /// treating a write as a read could duplicate written data), and the pages are on the
    /// device now. CPU faults and the driver's own evictions take pages off the device.
    pub(super) fn learn_from(&mut self, events: &[crate::seam::MemEvent]) {
        use crate::seam::{Direction, Location, MemEvent, MigrationCause};
        let mut units = Vec::new();
        for e in events {
            let (region, offset, bytes, on_device) = match (e.device_access(), e) {
                (Some((region, offset, bytes, _)), _) => (region, offset, bytes, true),
                (_, &MemEvent::Populate { region, offset, bytes, on: Location::DEVICE }) => {
                    (region, offset, bytes, true)
                }
                // A CPU fault pulls the pages to the host; the driver's evictions (making room
                // for faults) take them off the device.
                (_, &MemEvent::Fault { region, offset, bytes, by: crate::Accessor::Host, .. })
                | (
                    _,
                    &MemEvent::Migration {
                        region,
                        offset,
                        bytes,
                        dir: Direction::D2H,
                        cause: MigrationCause::Eviction,
                        ..
                    },
                ) => (region, offset, bytes, false),
                _ => continue,
            };
            if !self.sizes.contains(region) || (on_device && self.declared.contains(&region)) {
                continue;
            }
            units.clear();
            add_units(&self.sizes, region, offset, bytes.max(1), false, &mut units);
            if on_device {
                self.undeclared.push((region, offset, bytes.max(1)));
                for &(u, _) in &units {
                    self.resident.insert(u, (unit_bytes(&self.sizes, u), self.kernel));
                }
            } else {
                let mut removed = false;
                for (u, _) in &units {
                    removed |= self.resident.remove(u).is_some();
                }
                // What the driver took off and the account followed: `reconcile` need not
                // look for it.
                if removed && matches!(e, MemEvent::Migration { .. }) {
                    self.driver_dropped_observed += bytes;
                }
            }
        }
    }

    /// Device accesses reported late (on a GPU, CUPTI's records of faults and the migrations
    /// they caused), on regions kernel `kernel` did not declare: learned at that kernel's
    /// position in its step, and observed there from the next step on, so the forecast brings
    /// them from the step after. Residency is left alone: by now the data may have moved again,
    /// and the backend's account says where it is.
    pub(super) fn learn_late(&mut self, kernel: u64, events: &[crate::seam::MemEvent]) {
        let lag = self.kernel.saturating_sub(kernel);
        self.late.kernels += 1;
        self.late.lag_sum += lag;
        self.late.lag_max = self.late.lag_max.max(lag);
        let at = self.declared_log.partition_point(|d| d.0 < kernel);
        let Some((_, declared)) = self.declared_log.get(at).filter(|d| d.0 == kernel) else {
            self.late.too_old += 1;
            return;
        };
        let started = self.step_starts.partition_point(|&s| s <= kernel);
        let position = kernel - started.checked_sub(1).map_or(0, |i| self.step_starts[i]);
        // The step that kernel ran in (`self.step` counts the step markers seen).
        let step = self.step - (self.step_starts.len() - started) as u64;
        let mut touched: Vec<(RegionKey, u64, u64)> = Vec::new();
        for (region, offset, bytes, _) in events.iter().filter_map(|e| e.device_access()) {
            if declared.contains(&region) {
                continue;
            }
            if let Some(key) = self.key_of(region) {
                touched.push((key, offset, bytes.max(1)));
            }
        }
        let merged = merge_ranges(touched);
        if kernel >= self.step_start() {
            // Still this step: the step-remembering predictors take it now, so the next step's
            // forecast brings it (as a fault seen on time would have).
            for &(key, offset, len) in &merged {
                let (mode, kernel) = (crate::AccessMode::ReadWrite, self.kernel);
                self.predictor.observe_past(position, &Observation { key, offset, len, mode, kernel });
            }
        }
        let list = self.learned.entry(position).or_default();
        for (key, offset, len) in merged {
            self.learned_bytes += len;
            self.learned_keys.insert(key);
            match list.iter_mut().find(|l| l.key == key && l.offset == offset) {
                Some(l) => {
                    l.len = l.len.max(len);
                    l.confirmed = l.confirmed.max(step);
                }
                None => list.push(Learned { key, offset, len, confirmed: step }),
            }
        }
    }
}
