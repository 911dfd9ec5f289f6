//! Issuing a plan: duplicates about to be written collapsed, dead data dropped, live data
//! evicted, placements advised, data coming in; and remote windows closed.

use super::*;

impl Advisor {
    pub(super) fn units_bytes<'a>(&self, units: impl Iterator<Item = &'a Unit>) -> u64 {
        units.map(|&u| unit_bytes(&self.sizes, u)).sum()
    }

    pub(super) fn advise_all(
        &self,
        hints: &mut Hints<'_>,
        units: Vec<Unit>,
        advice: &[Advice],
    ) -> Result<()> {
        for range in coalesce(&self.sizes, units) {
            for &a in advice {
                hints.advise(range, a)?;
            }
        }
        Ok(())
    }

    /// Issues the plan: duplicates about to be written collapsed, dead data dropped, live data
    /// copied back, placements advised, data coming in (after dropping host copies that are
    /// about to be overwritten).
    /// Records the plan's hints as events, each with its reason.
    pub(super) fn record_plan(&mut self, p: &Plan) {
        use crate::seam::HintKind;
        let lists: [(HintKind, Vec<(Unit, Reason)>); 6] = [
            (HintKind::Collapse, p.collapse.clone()),
            (HintKind::Discard, p.discard.clone()),
            (HintKind::Evict, p.evict.clone()),
            (HintKind::Remote, p.remote.clone()),
            (HintKind::Duplicate, p.duplicate.clone()),
            (HintKind::Prefetch, p.prefetch.iter().map(|&(u, _, r)| (u, r)).collect()),
        ];
        for (hint, units) in lists {
            for (u, reason) in units {
                self.record_hint(hint, u, reason);
            }
        }
    }

    /// Records a hint on `u` as an event, with its reason.
    pub(super) fn record_hint(&mut self, hint: crate::seam::HintKind, u: Unit, reason: Reason) {
        let r = crate::policy::units::unit_range(&self.sizes, u);
        self.events.push(crate::seam::MemEvent::Hint {
            hint,
            region: u.region,
            offset: r.offset,
            bytes: r.len,
            reason: format!("{reason:?}"),
            kernel: self.kernel,
        });
    }

    pub(super) fn execute(&mut self, p: Plan, hints: &mut Hints<'_>) -> Result<()> {
        if self.recording {
            self.record_plan(&p);
        }
        let collapse: Vec<Unit> = p.collapse.iter().map(|c| c.0).collect();
        for u in &collapse {
            self.read_mostly.remove(u);
        }
        self.advise_all(hints, collapse.clone(), &[Advice::UnsetReadMostly])?;
        for (u, reason) in p.discard.iter().chain(&p.evict) {
            self.resident.remove(u);
            if matches!(reason, Reason::FarthestNextUse(_)) && !self.read_mostly.contains(u) {
                if let Some(key) = self.identity.key(u.region) {
                    self.evicted_before_reuse.insert((key, u.block));
                }
            }
        }
        self.hints.discarded += self.units_bytes(p.discard.iter().map(|d| &d.0));
        let evicted = self.units_bytes(p.evict.iter().map(|d| &d.0));
        self.hints.evicted += evicted;
        self.write_backs.on_evict(evicted);
        // The kernel about to run needs the leading victims' room; the others make room for
        // data coming in early, which waits for the kernel's launch as well where the hints
        // for later kernels do (else all go in one call each, fewer ranges).
        let (for_discard, for_evict) = if hints.defers() {
            (p.for_now.discard, p.for_now.evict)
        } else {
            (p.discard.len(), p.evict.len())
        };
        let (discard_now, discard_ahead) = p.discard.split_at(for_discard);
        let (evict_now, evict_ahead) = p.evict.split_at(for_evict);
        let ranges =
            |units: &[(Unit, Reason)]| coalesce(&self.sizes, units.iter().map(|(u, _)| *u).collect());
        let (discard_now, discard_ahead) = (ranges(discard_now), ranges(discard_ahead));
        let (evict_now, evict_ahead) = (ranges(evict_now), ranges(evict_ahead));
        if !discard_now.is_empty() {
            hints.discard(&discard_now)?;
        }
        if !discard_ahead.is_empty() {
            hints.discard_ahead(&discard_ahead)?;
        }
        // Through the staging buffers where the backend has them (a copy at 52.3 GB/s on the
        // H200, instead of a 10-17 GB/s migration).
        if !evict_now.is_empty() {
            hints.evict(&evict_now)?;
        }
        if !evict_ahead.is_empty() {
            hints.evict_ahead(&evict_ahead)?;
        }
        let remote: Vec<Unit> = p.remote.iter().map(|r| r.0).collect();
        self.hints.remote += self.units_bytes(remote.iter());
        for &u in &remote {
            self.remote.insert(u, self.kernel);
        }
        self.advise_all(
            hints,
            remote,
            &[Advice::SetPreferredLocation(Location::Host), Advice::SetAccessedByDevice],
        )?;
        let duplicate: Vec<Unit> = p.duplicate.iter().map(|d| d.0).collect();
        self.hints.duplicated += self.units_bytes(duplicate.iter());
        self.read_mostly.extend(duplicate.iter().copied());
        self.advise_all(hints, duplicate, &[Advice::SetReadMostly])?;
        let (mut fetch, mut ahead, mut rewrite) = (Vec::new(), Vec::new(), Vec::new());
        // Collapsed duplicates went back to the host (the H200 keeps the host copy): the kernel
        // about to write them needs them back.
        let recollect = collapse.iter().map(|&u| (u, false, Reason::WrittenNow));
        for (u, overwrite, reason) in p.prefetch.iter().copied().chain(recollect) {
            let bytes = unit_bytes(&self.sizes, u);
            self.resident.insert_if_absent(u, (bytes, self.kernel));
            if let Some(discard_first) = fetch_needed(&self.sizes, hints, u, overwrite)? {
                if discard_first {
                    rewrite.push(u);
                }
                // What a later kernel uses comes in once this one is launched, where hints
                // for later kernels wait for it; its room was made above.
                match reason {
                    Reason::Predicted { at, .. } if at > self.kernel && hints.defers() => ahead.push(u),
                    _ => fetch.push(u),
                }
            }
        }
        if !rewrite.is_empty() {
            hints.discard(&coalesce(&self.sizes, rewrite))?;
        }
        self.hints.prefetched += self.units_bytes(fetch.iter().chain(&ahead));
        if !fetch.is_empty() {
            hints.prefetch(&coalesce(&self.sizes, fetch))?;
        }
        if !ahead.is_empty() {
            hints.prefetch_ahead(&coalesce(&self.sizes, ahead))?;
        }
        Ok(())
    }

    /// Remote units whose remote window has passed by kernel `at` become ordinary again:
    /// unmapped, so that the next use migrates them.
    pub(super) fn end_remote_windows(&mut self, at: u64, hints: &mut Hints<'_>) -> Result<()> {
        let window = self.settings.remote_window;
        let done: Vec<Unit> =
            self.remote.iter().filter(|(_, &written)| at > written + window).map(|(&u, _)| u).collect();
        if done.is_empty() {
            return Ok(());
        }
        for u in &done {
            self.remote.remove(u);
        }
        self.advise_all(hints, done, &[Advice::UnsetPreferredLocation, Advice::UnsetAccessedByDevice])
    }
}
