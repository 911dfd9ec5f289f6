//! What follows what: for each region, the regions used by the kernel right after a kernel
//! that used it, with counts. Predicting the next kernel combines the successors of the
//! current kernel's regions; further kernels follow the chain of the most likely successors.
//!
//! This runs for every kernel (learning) and for every forecast kernel of every kernel
//! (predicting), on the host path that issues the kernels, so regions are numbered densely
//! as they are first seen and the tables are indexed by number, not hashed by key.

use rustc_hash::FxHashMap;

use super::{Observation, Prediction, Predictor};
use crate::access::AccessMode;
use crate::policy::advisor::identity::RegionKey;

/// Successors kept per region (the most frequent).
const MAX_SUCCESSORS: usize = 16;
/// Regions followed from one predicted kernel to the next (the most likely). 16 kept the
/// sample traces' results and cut the advisor's host time (each kernel forecasts).
const MAX_FRONTIER: usize = 16;
/// Successors less likely than this, from the kernel before, are not emitted: no consumer acts
/// on them, and on branchy histories they would be most of the work.
const MIN_EMITTED: f32 = 0.3;
/// A successor this likely is followed further along the chain.
const MIN_FOLLOWED: f32 = 0.5;

/// A region's dense number in this predictor.
type Id = u32;

#[derive(Debug, Clone, Copy)]
struct Successor {
    id: Id,
    count: u32,
    /// The mode and length of its last use after this region.
    mode: AccessMode,
    len: u64,
}

#[derive(Debug, Default, Clone)]
struct Successors {
    total: u32,
    next: Vec<Successor>,
}

/// A candidate of one forecast step: the region, how likely, its expected mode and length.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    key: RegionKey,
    id: Id,
    p: f32,
    mode: AccessMode,
    len: u64,
}

/// Per region number, the round in which it was last marked and the index it was given then:
/// a set and a map that clear in constant time (by starting a new round).
#[derive(Debug, Default)]
struct Marks {
    round: u32,
    at: Vec<(u32, u32)>,
}

impl Marks {
    fn start(&mut self, ids: usize) {
        self.round = self.round.wrapping_add(1);
        if self.round == 0 {
            // Wrapped: old marks could read as current.
            self.at.iter_mut().for_each(|m| *m = (0, 0));
            self.round = 1;
        }
        self.at.resize(ids, (0, 0));
    }

    fn get(&self, id: Id) -> Option<u32> {
        let (round, index) = self.at[id as usize];
        (round == self.round).then_some(index)
    }

    fn set(&mut self, id: Id, index: u32) {
        self.at[id as usize] = (self.round, index);
    }

    fn unset(&mut self, id: Id) {
        self.at[id as usize].0 = self.round.wrapping_sub(1);
    }
}

/// The correlation (Markov) predictor.
#[derive(Debug, Default)]
pub struct Markov {
    /// Region numbers by key, and keys by number.
    ids: FxHashMap<RegionKey, Id>,
    keys: Vec<RegionKey>,
    /// Successors by region number.
    table: Vec<Successors>,
    /// Regions of the last kernel that ended (the rows the next one adds to, and where a
    /// forecast starts), and of the running one.
    previous: Vec<Id>,
    current: Vec<(Id, AccessMode, u64)>,
    /// Scratch: where each candidate sits in a step's output, or a successor in its row.
    marks: Marks,
    /// Scratch for `predict`.
    from: Vec<Id>,
    next: Vec<Candidate>,
}

impl Markov {
    /// A new, empty predictor.
    pub fn new() -> Self {
        Self::default()
    }

    fn id(&mut self, key: RegionKey) -> Id {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = self.keys.len() as Id;
        self.ids.insert(key, id);
        self.keys.push(key);
        self.table.push(Successors::default());
        id
    }

    /// Expected successors of `from`, with confidence: count over occurrences, each key with
    /// its largest over the regions of `from`, most likely first. Candidates that could be
    /// neither emitted (under [`MIN_EMITTED`]) nor followed are left out before sorting: on
    /// branchy histories they are most of them.
    fn step(&mut self, from: &[Id], v: &mut Vec<Candidate>) {
        v.clear();
        self.marks.start(self.keys.len());
        for &k in from {
            let s = &self.table[k as usize];
            for n in &s.next {
                let p = n.count as f32 / s.total.max(1) as f32;
                match self.marks.get(n.id) {
                    // Each key keeps its largest p (and that one's mode and length).
                    Some(i) => {
                        let e = &mut v[i as usize];
                        if p > e.p {
                            (e.p, e.mode, e.len) = (p, n.mode, n.len);
                        }
                    }
                    None => {
                        self.marks.set(n.id, v.len() as u32);
                        let key = self.keys[n.id as usize];
                        v.push(Candidate { key, id: n.id, p, mode: n.mode, len: n.len });
                    }
                }
            }
        }
        v.retain(|e| e.p >= MIN_EMITTED.min(MIN_FOLLOWED));
        // Most likely first (ties by key, for determinism).
        v.sort_unstable_by(|a, b| b.p.total_cmp(&a.p).then(a.key.cmp(&b.key)));
    }
}

impl Predictor for Markov {
    fn name(&self) -> &'static str {
        "markov"
    }

    fn observe(&mut self, o: &Observation) {
        let id = self.id(o.key);
        if !self.current.iter().any(|c| c.0 == id) {
            self.current.push((id, o.mode, o.len));
        }
    }

    fn end_kernel(&mut self, _kernel: u64) {
        for p in std::mem::take(&mut self.previous) {
            let s = &mut self.table[p as usize];
            s.total += 1;
            // Where each of the row's successors sits, so that each current region finds its
            // entry without a scan.
            self.marks.start(self.keys.len());
            for (i, n) in s.next.iter().enumerate() {
                self.marks.set(n.id, i as u32);
            }
            // The first of the rarest successors, where known: a successor just put in has the
            // lowest count there is and every one before it a higher one, so it is the next to
            // go until its count rises (a kernel with many new successors replaces one slot
            // over and over, which scanned the row every time).
            let mut rarest: Option<usize> = None;
            for &(id, mode, len) in &self.current {
                if let Some(i) = self.marks.get(id) {
                    let e = &mut s.next[i as usize];
                    e.count += 1;
                    (e.mode, e.len) = (mode, len);
                    if rarest == Some(i as usize) {
                        rarest = None;
                    }
                } else if s.next.len() < MAX_SUCCESSORS {
                    self.marks.set(id, s.next.len() as u32);
                    s.next.push(Successor { id, count: 1, mode, len });
                } else if let Some(i) = rarest.or_else(|| (0..s.next.len()).min_by_key(|&i| s.next[i].count))
                {
                    // Replace the rarest successor (the first of the rarest): recent behaviour
                    // wins over old noise.
                    self.marks.unset(s.next[i].id);
                    self.marks.set(id, i as u32);
                    s.next[i] = Successor { id, count: 1, mode, len };
                    rarest = Some(i);
                }
            }
        }
        self.previous.extend(self.current.drain(..).map(|c| c.0));
    }

    fn predict(&mut self, now: u64, horizon: u64, out: &mut Vec<Prediction>) {
        let mut from = std::mem::take(&mut self.from);
        let mut next = std::mem::take(&mut self.next);
        from.clone_from(&self.previous);
        let mut carried = 1.0f32;
        for at in now + 1..=now + horizon {
            self.step(&from, &mut next);
            if next.is_empty() {
                break;
            }
            let emitted = out.len();
            // What a step emits is judged by its own likelihood, so a chain that stays sure
            // reaches the horizon (cut short, it leaves the units used just past its end
            // unpredicted, and those are evicted first, oldest first: on a cycle, what is
            // needed next). Its confidence decays along the chain; the tournament calibrates it.
            for c in next.iter().take_while(|e| e.p >= MIN_EMITTED) {
                let (key, offset, len, mode) = (c.key, 0, c.len, c.mode);
                out.push(Prediction { key, offset, len, mode, at, confidence: c.p * carried });
            }
            if out.len() == emitted {
                break;
            }
            // Follow the likely part of the chain only (bounded); confidence decays along it.
            from.clear();
            from.extend(next.iter().filter(|e| e.p >= MIN_FOLLOWED).take(MAX_FRONTIER).map(|e| e.id));
            carried *= 0.9;
            if from.is_empty() {
                break;
            }
        }
        (self.from, self.next) = (from, next);
    }
}

#[cfg(test)]
mod reference;
