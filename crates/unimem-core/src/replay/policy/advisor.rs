//! `advisor`: the prefetch advisor as a replay policy. Unlike the oracle it never looks ahead
//! in the trace: it learns from the kernels that ran (step-stable identity, the tournament of
//! predictors), forecasts the next kernels, and lets the planner turn the forecast, the next
//! kernel's declared accesses and the residency into hints within the budget.

use rustc_hash::FxHashMap;

use super::units::{add_units, coalesce, fetch_needed, pooled_blocks, unit_bytes, Sizes};
use super::Policy;
use crate::advisor::{
    plan, Identity, Observation, PlanInput, Predictor, RegionKey, Tournament, Unit, UnitUse,
};
use crate::backend::{page_round, Location, MemoryBackend, BLOCK_SIZE};
use crate::error::Result;
use crate::region::RegionId;
use crate::trace::{TraceAccess, TraceEvent};

/// Kernels ahead the advisor plans for.
const HORIZON: u64 = 64;
/// Predictions below this confidence are not acted on.
const MIN_CONFIDENCE: f32 = 0.5;

/// The advisor policy. See the module documentation.
pub struct Advisor {
    budget: u64,
    min_prefetch_bytes: u64,
    identity: Identity,
    predictor: Tournament,
    sizes: Sizes,
    by_key: FxHashMap<RegionKey, RegionId>,
    /// Units on the device: (bytes, kernel of last use).
    resident: FxHashMap<Unit, (u64, u64)>,
    kernel: u64,
    predictions: Vec<crate::advisor::Prediction>,
}

impl std::fmt::Debug for Advisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Advisor").field("kernel", &self.kernel).field("predictor", &self.predictor).finish()
    }
}

impl Advisor {
    /// An advisor keeping within `budget` bytes, leaving units under `min_prefetch_bytes` to
    /// faults.
    pub fn new(budget: u64, min_prefetch_bytes: u64) -> Self {
        Self {
            budget,
            min_prefetch_bytes,
            identity: Identity::new(),
            predictor: Tournament::standard(),
            sizes: FxHashMap::default(),
            by_key: FxHashMap::default(),
            resident: FxHashMap::default(),
            kernel: 0,
            predictions: Vec::new(),
        }
    }

    /// Issues the plan: dead data dropped, live data copied back, data coming in (after
    /// dropping host copies that are about to be overwritten).
    fn execute(&mut self, p: crate::advisor::Plan, backend: &mut dyn MemoryBackend) -> Result<()> {
        for (u, _) in p.discard.iter().chain(&p.evict) {
            self.resident.remove(u);
        }
        let discard = coalesce(&self.sizes, p.discard.iter().map(|(u, _)| *u).collect());
        if !discard.is_empty() {
            backend.discard(&discard)?;
        }
        let evict = coalesce(&self.sizes, p.evict.iter().map(|(u, _)| *u).collect());
        if !evict.is_empty() {
            backend.prefetch(&evict, Location::Host)?;
        }
        let (mut fetch, mut rewrite) = (Vec::new(), Vec::new());
        for &(u, overwrite, _) in &p.prefetch {
            let bytes = unit_bytes(&self.sizes, u);
            self.resident.entry(u).or_insert((bytes, self.kernel));
            if let Some(discard_first) = fetch_needed(&self.sizes, backend, u, overwrite)? {
                if discard_first {
                    rewrite.push(u);
                }
                fetch.push(u);
            }
        }
        if !rewrite.is_empty() {
            backend.discard(&coalesce(&self.sizes, rewrite))?;
        }
        if !fetch.is_empty() {
            backend.prefetch(&coalesce(&self.sizes, fetch), Location::Device)?;
        }
        Ok(())
    }
}

impl Policy for Advisor {
    fn name(&self) -> &'static str {
        "advisor"
    }

    fn before(&mut self, _index: u64, event: &TraceEvent, backend: &mut dyn MemoryBackend) -> Result<()> {
        match event {
            TraceEvent::Free { id } => {
                let id = RegionId(*id);
                self.identity.on_free(id);
                let blocks = self.sizes.remove(&id).unwrap_or(0).div_ceil(BLOCK_SIZE);
                for b in 0..blocks as u32 {
                    self.resident.remove(&(id, b));
                }
                self.by_key.retain(|_, r| *r != id);
                Ok(())
            }
            TraceEvent::Step { .. } => {
                self.identity.on_step();
                self.predictor.on_step();
                Ok(())
            }
            TraceEvent::Host { acc, .. } => {
                // The CPU pulls what it touches off the device.
                let mut units = Vec::new();
                for a in acc {
                    add_units(&self.sizes, RegionId(a.id), a.offset, a.len, false, &mut units);
                }
                for (u, _) in units {
                    self.resident.remove(&u);
                }
                Ok(())
            }
            TraceEvent::Kernel { acc, .. } => self.before_kernel(acc, backend),
            TraceEvent::Alloc { .. } => Ok(()),
        }
    }

    fn after(&mut self, _index: u64, event: &TraceEvent, backend: &mut dyn MemoryBackend) -> Result<()> {
        match event {
            TraceEvent::Alloc { id, bytes, .. } => {
                let id = RegionId(*id);
                self.sizes.insert(id, *bytes);
                let key = self.identity.on_alloc(id, *bytes);
                self.by_key.insert(key, id);
                // Pages recycled from the pool are on the device already.
                for b in pooled_blocks(&self.sizes, backend, id)? {
                    self.resident.insert((id, b), (unit_bytes(&self.sizes, (id, b)), self.kernel));
                }
                Ok(())
            }
            TraceEvent::Kernel { acc, .. } => {
                for a in acc {
                    if let Some(key) = self.identity.key(RegionId(a.id)) {
                        let obs = Observation {
                            key,
                            offset: a.offset,
                            len: a.len,
                            mode: a.mode,
                            kernel: self.kernel,
                        };
                        self.predictor.observe(&obs);
                    }
                }
                self.predictor.end_kernel(self.kernel);
                self.kernel += 1;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl Advisor {
    fn before_kernel(&mut self, acc: &[TraceAccess], backend: &mut dyn MemoryBackend) -> Result<()> {
        let now = self.kernel;
        let mut units = Vec::new();
        for a in acc {
            add_units(&self.sizes, RegionId(a.id), a.offset, a.len, !a.mode.reads(), &mut units);
        }
        let current: Vec<UnitUse> = units
            .iter()
            .map(|&(unit, overwrite)| UnitUse { unit, at: now, overwrite, confidence: 1.0, certain: true })
            .collect();
        // Forecast, mapped from step-stable keys to the regions live now.
        self.predictions.clear();
        if now > 0 {
            self.predictor.predict(now - 1, HORIZON + 1, &mut self.predictions);
        }
        let mut predicted = Vec::new();
        let mut scratch = Vec::new();
        let mut reserve = Vec::new();
        let mut unborn: rustc_hash::FxHashSet<RegionKey> = rustc_hash::FxHashSet::default();
        for p in self.predictions.iter().filter(|p| p.confidence >= MIN_CONFIDENCE && p.at > now) {
            let Some(&id) = self.by_key.get(&p.key) else {
                // A region not allocated yet: it will need room by its first predicted use.
                if unborn.insert(p.key) {
                    reserve.push((p.at, page_round(p.offset + p.len)));
                }
                continue;
            };
            scratch.clear();
            add_units(&self.sizes, id, p.offset, p.len, !p.mode.reads(), &mut scratch);
            predicted.extend(scratch.iter().map(|&(unit, overwrite)| UnitUse {
                unit,
                at: p.at,
                overwrite,
                confidence: p.confidence,
                certain: false,
            }));
        }
        let sizes = &self.sizes;
        let plan = plan(&PlanInput {
            now,
            current: &current,
            predicted: &predicted,
            resident: &self.resident,
            reserve: &reserve,
            unit_bytes: &|u| unit_bytes(sizes, u),
            budget: self.budget,
            min_prefetch_bytes: self.min_prefetch_bytes,
        });
        // Units the kernel touches end up on the device whether prefetched or faulted.
        for &(u, _) in &units {
            let bytes = unit_bytes(&self.sizes, u);
            self.resident.insert(u, (bytes, now));
        }
        self.execute(plan, backend)
    }
}
