//! Keeping the advisor's residency account true to the backend's when the driver moves data
//! on its own, or undeclared accesses fault data in.

use super::*;

impl Advisor {
    /// Drops from the residency account the units the backend no longer has on the device,
    /// whenever the backend's driver has taken data off on its own since the last look. The
    /// CUDA backend's emulated driver evicts without reporting it as events (the simulator
    /// reports them, and [`Policy::observe`] follows those), and a unit wrongly believed
    /// resident is never prefetched: the kernel faults it in, the driver evicts more to make
    /// room, and the error spreads. What events showed is not looked for again; the rest is
    /// looked for least recently used first (the driver evicts the oldest), until stale units
    /// as large as the bytes dropped are found, else through the whole account.
    pub(super) fn reconcile(&mut self, hints: &Hints<'_>) -> Result<()> {
        self.adopt_unknown(hints)?;
        let dropped = hints.driver_dropped_bytes();
        let unseen = dropped.saturating_sub(self.driver_dropped_seen);
        let observed = std::mem::take(&mut self.driver_dropped_observed);
        self.driver_dropped_seen = dropped;
        if unseen <= observed {
            return Ok(());
        }
        let missing = unseen - observed;
        let stale = stale_units(&self.sizes, hints, self.resident.by_age().map(|(u, _)| u), missing)?;
        for u in stale {
            self.resident.remove(&u);
        }
        Ok(())
    }

    /// Adds to the residency account what the backend has on the device that the account does
    /// not know of, when the difference is large: data that undeclared accesses faulted in,
    /// whose faults a GPU reports late (or never, without telemetry). A planner ignorant of it
    /// believes there is room, makes none, and leaves the evicting to the driver, which on
    /// the H200 migrates at 10-17 GB/s behind every queued kernel instead of staging at 52.
    /// The walk over the live regions runs at most once per [`ADOPT_EVERY`] kernels.
    pub(super) fn adopt_unknown(&mut self, hints: &Hints<'_>) -> Result<()> {
        if self.kernel < self.next_adopt {
            return Ok(());
        }
        let account = self.resident.bytes() + self.outside_account;
        let slack = (self.settings.budget / 32).max(8 << 20);
        if hints.resident_bytes() <= account + slack {
            return Ok(());
        }
        self.next_adopt = self.kernel + ADOPT_EVERY;
        for (id, bytes) in self.sizes.iter() {
            for u in region_units(id, bytes) {
                if !self.resident.contains_key(&u)
                    && hints.residency(unit_range(&self.sizes, u))?.on_device() > 0
                {
                    self.resident.insert(u, (unit_bytes(&self.sizes, u), self.kernel));
                }
            }
        }
        Ok(())
    }
}
