//! Planning for the kernel about to run: its declared accesses and the forecast turned into
//! unit uses, the placement candidates, then the plan.

use super::*;

/// A live region's prediction, ranked for the order the forecast lists its units in.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ranked {
    at: u64,
    region: RegionId,
    /// Its index in the advisor's predictions.
    prediction: usize,
}

impl Advisor {
    pub(super) fn before_kernel(&mut self, acc: &[RangeAccess], hints: &mut Hints<'_>) -> Result<()> {
        let now = self.kernel;
        self.declare(acc, now);
        self.end_remote_windows(now, hints)?;
        let units = kernel_units(&self.sizes, acc);
        // The use lists are kept between kernels: a forecast can name thousands of units.
        let (mut current, mut predicted) = std::mem::take(&mut self.uses);
        current.clear();
        predicted.clear();
        current.extend(units.iter().map(|&(unit, overwrite, writes)| UnitUse {
            unit,
            at: now,
            overwrite,
            writes,
            confidence: 1.0,
            certain: true,
        }));
        if self.recording && now > 0 {
            self.record_forecast_score(now, acc);
        }
        let reserve = self.forecast(now, &mut predicted);
        self.note_writes(&units, now);
        self.reconcile(hints)?;
        let remote_now: FxHashSet<Unit> = self.remote.keys().copied().collect();
        let sizes = &self.sizes;
        let (identity, born, step) = (&self.identity, &self.born, self.step);
        let (evicted, written) = (&self.evicted_before_reuse, &self.written_last_step);
        // The candidates for a placement: units that were evicted before their reuse last
        // time, of regions that outlive a step. Setting up a placement holds the host
        // (read-mostly ~70 ms per GiB on the H200), so it pays only where it serves many
        // evictions: data kept across steps (weights), not per-step temporaries (activations),
        // which are evicted once at most. Of those, the ones written last step are not worth
        // duplicating. Asked only of the few units a plan places, not of the whole forecast.
        let known = |u: Unit| identity.key(u.region).map(|k| (k, u.block));
        let evicted_before = |u: Unit| {
            born.get(&u.region).is_some_and(|&b| b < step) && known(u).is_some_and(|k| evicted.contains(&k))
        };
        let written_last_step = |u: Unit| known(u).is_some_and(|k| written.contains(&k));
        let plan = self.planner.plan(&PlanInput {
            now,
            current: &current,
            predicted: &predicted,
            resident: &self.resident,
            reserve: &reserve,
            unit_bytes: &|u| unit_bytes(sizes, u),
            budget: self.settings.budget,
            min_prefetch_bytes: self.settings.min_prefetch_bytes,
            early_reach: self.settings.horizon / 2,
            read_mostly: &self.read_mostly,
            remote: &remote_now,
            evicted_before_reuse: &evicted_before,
            written_last_step: &written_last_step,
            placements: self.settings.placements,
            kept: &self.kept,
        });
        // Units the kernel touches end up on the device whether prefetched or faulted, except
        // what is mapped remotely.
        let remote_planned: FxHashSet<Unit> = plan.remote.iter().map(|r| r.0).collect();
        let sizes = &self.sizes;
        self.resident.insert_all(
            units
                .iter()
                .filter(|(u, _, _)| !remote_now.contains(u) && !remote_planned.contains(u))
                .map(|&(u, _, _)| (u, (unit_bytes(sizes, u), now))),
        );
        self.uses = (current, predicted);
        self.execute(plan, hints)
    }

    /// The regions kernel `now` declares (kept for late faults to be told apart from them).
    pub(super) fn declare(&mut self, acc: &[RangeAccess], now: u64) {
        self.declared.clear();
        self.declared.extend(acc.iter().map(|a| a.region));
        if self.settings.learn_from_faults {
            if self.declared_log.len() == DECLARED_KEPT {
                self.declared_log.pop_front();
            }
            self.declared_log.push_back((now, self.declared.iter().copied().collect()));
        }
        self.undeclared.clear();
    }

    /// The forecast for the kernels after `now`, mapped from step-stable keys to the regions
    /// live now, into `predicted`; returns the room to keep for regions not allocated yet, as
    /// (first predicted use, bytes).
    pub(super) fn forecast(&mut self, now: u64, predicted: &mut Vec<UnitUse>) -> Vec<(u64, u64)> {
        self.predictions.clear();
        if let Some(f) = self.future.as_mut() {
            while f.ahead.front().is_some_and(|k| k.at <= now) {
                f.ahead.pop_front();
            }
            for k in f.ahead.iter().take_while(|k| k.at <= now + self.settings.horizon + 1) {
                for a in &k.accesses {
                    // A region not allocated yet gets a key no live region has.
                    let key = self.identity.key(a.region).unwrap_or(RegionKey(!a.region.0));
                    self.predictions.push(Prediction {
                        key,
                        offset: a.offset,
                        len: a.len,
                        mode: a.mode,
                        at: k.at,
                        confidence: 1.0,
                    });
                }
            }
        } else if now > 0 {
            self.predictor.predict(now - 1, self.settings.horizon + 1, &mut self.predictions);
        }
        // Undeclared accesses learned from faults, predicted for this very kernel: nothing
        // else will bring them before it runs.
        let mut scratch = Vec::new();
        for p in self.predictions.iter().filter(|p| {
            p.at == now && p.confidence >= self.settings.min_confidence && self.learned_keys.contains(&p.key)
        }) {
            let Some(&id) = self.by_key.get(&p.key) else { continue };
            if self.declared.contains(&id) {
                continue;
            }
            scratch.clear();
            add_units(&self.sizes, id, p.offset, p.len, false, &mut scratch);
            for &(unit, _) in &scratch {
                let (overwrite, writes, certain) = (false, true, false);
                predicted.push(UnitUse {
                    unit,
                    at: now,
                    overwrite,
                    writes,
                    confidence: p.confidence,
                    certain,
                });
            }
        }
        let mut reserve = Vec::new();
        let mut unborn: FxHashSet<RegionKey> = FxHashSet::default();
        let window = self.settings.remote_window;
        // The live regions' predictions by kernel, then region (stable: one region's keep
        // their order), so that each kernel's units come sorted as the planner takes them:
        // sorting a kernel's few predictions costs less than sorting its units.
        let mut order = std::mem::take(&mut self.forecast_order);
        order.clear();
        let min = self.settings.min_confidence;
        for (i, p) in self.predictions.iter().enumerate().filter(|(_, p)| p.confidence >= min && p.at > now) {
            match self.by_key.get(&p.key) {
                Some(&region) => order.push(Ranked { at: p.at, region, prediction: i }),
                // A region not allocated yet: it will need room by its first predicted use.
                None => {
                    if unborn.insert(p.key) {
                        reserve.push((p.at, page_round(p.offset + p.len)));
                    }
                }
            }
        }
        order.sort_by_key(|r| (r.at, r.region));
        for r in &order {
            let p = &self.predictions[r.prediction];
            scratch.clear();
            add_units(&self.sizes, r.region, p.offset, p.len, !p.mode.reads(), &mut scratch);
            for &(unit, overwrite) in &scratch {
                // Uses inside a remote window are served where the data is.
                if self.remote.get(&unit).is_some_and(|&w| p.at <= w + window) {
                    continue;
                }
                predicted.push(UnitUse {
                    unit,
                    at: p.at,
                    overwrite,
                    writes: p.mode.writes(),
                    confidence: p.confidence,
                    certain: false,
                });
            }
        }
        self.forecast_order = order;
        reserve
    }

    /// Notes what kernel `now` writes, by step-stable identity (for the next step's
    /// placements), and queues for a write-back the units among them that were evicted before
    /// their reuse last time (`write_back.rs`).
    pub(super) fn note_writes(&mut self, units: &[(Unit, bool, bool)], now: u64) {
        // Only programs with steps: without markers the set would grow without end.
        for &(u, _, writes) in units.iter().filter(|_| self.step > 0) {
            if let (true, Some(key)) = (writes, self.identity.key(u.region)) {
                self.written_this_step.insert((key, u.block));
                if self.settings.write_back && self.evicted_before_reuse.contains(&(key, u.block)) {
                    self.write_backs.on_write(u, now);
                }
            }
        }
    }

    /// Scores the forecast made for kernel `now` (at the previous kernel) against its accesses.
    pub(super) fn record_forecast_score(&mut self, now: u64, acc: &[RangeAccess]) {
        let min = self.settings.min_confidence;
        let predicted: Vec<RegionKey> =
            self.predictions.iter().filter(|p| p.at == now && p.confidence >= min).map(|p| p.key).collect();
        let actual: Vec<RegionKey> = acc.iter().filter_map(|a| self.identity.key(a.region)).collect();
        let mut score = crate::policy::advisor::Score::default();
        score.add(&predicted, &actual);
        self.events.push(crate::seam::MemEvent::Forecast {
            kernel: now,
            hits: score.hits,
            misses: score.misses,
            false_alarms: score.false_alarms,
        });
    }
}
