//! What follows what: for each region, the regions used by the kernel right after the last
//! kernel of a run of consecutive kernels that used it, with counts, and how long its runs
//! last. A region one kernel makes and the next reads runs two kernels: it is forecast for
//! the second, and what follows it after that. (Learned after every use instead, its row
//! would hold the reader's regions, forecast again for the kernel after the reader, wrongly,
//! as often as rightly: a half-right predictor whose confidence stays under what is acted
//! on.) Predicting the next kernel combines the rows of the current kernel's regions;
//! further kernels follow the chain of the most likely successors.
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

/// A region's runs of consecutive kernels.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// The first and last kernel of its latest run (none before its first use).
    span: Option<(u64, u64)>,
    /// Kernels its last ended run lasted (0: none ended yet).
    len: u64,
    /// Its mode and length in its latest use.
    mode: AccessMode,
    bytes: u64,
}

impl Default for Run {
    fn default() -> Self {
        Self { span: None, len: 0, mode: AccessMode::Read, bytes: 0 }
    }
}

impl Run {
    /// Whether a run that was under way in kernel `now` is expected to go on into the next.
    fn goes_on(&self, now: u64) -> bool {
        matches!(self.span, Some((start, last)) if last == now && self.len > now - start + 1)
    }
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
    /// The largest p of one row (whose mode and length it takes).
    best: f32,
    /// A region of the kernel before whose run goes on.
    sure: bool,
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
    /// Runs by region number.
    runs: Vec<Run>,
    /// Regions of the last kernel that ended (the rows the next one adds to, and where a
    /// forecast starts), and of the running one.
    previous: Vec<Id>,
    current: Vec<(Id, AccessMode, u64)>,
    /// Scratch: where each candidate sits in a step's output, or a successor in its row.
    marks: Marks,
    /// Scratch: the regions of the kernel ending.
    running: Marks,
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
        self.runs.push(Run::default());
        id
    }

    /// Expected successors of `from`, with confidence (count over occurrences), most likely
    /// first. With `now`, `from` are the regions of kernel `now` and the step forecasts the
    /// next kernel: a region whose run is expected to go on is a candidate itself (p = 1), in
    /// place of its row, and the other rows that have any history are averaged, so that a row
    /// split between two futures (a buffer reused every step by data that alternates) is
    /// outvoted by the kernel's sure rows instead of forecasting both at 0.5. Further along
    /// the chain the regions followed are forecasts themselves, not all used in the same
    /// kernel, and each key takes its largest p over their rows. Candidates that could be
    /// neither emitted (under [`MIN_EMITTED`]) nor followed are left out before sorting: on
    /// branchy histories they are most of them.
    fn step(&mut self, from: &[Id], now: Option<u64>, v: &mut Vec<Candidate>) {
        v.clear();
        self.marks.start(self.keys.len());
        let mut rows = 0u32;
        for &k in from {
            let run = self.runs[k as usize];
            if now.is_some_and(|now| run.goes_on(now)) {
                let (mode, len) = (run.mode, run.bytes);
                match self.marks.get(k) {
                    Some(i) => {
                        let e = &mut v[i as usize];
                        (e.sure, e.mode, e.len) = (true, mode, len);
                    }
                    None => {
                        self.marks.set(k, v.len() as u32);
                        let key = self.keys[k as usize];
                        v.push(Candidate { key, id: k, p: 0.0, best: 1.0, sure: true, mode, len });
                    }
                }
                continue;
            }
            let s = &self.table[k as usize];
            if s.total == 0 {
                continue;
            }
            rows += 1;
            for n in &s.next {
                let p = n.count as f32 / s.total as f32;
                match self.marks.get(n.id) {
                    // Each key takes the mode and length of its likeliest row.
                    Some(i) => {
                        let e = &mut v[i as usize];
                        e.p = if now.is_some() { e.p + p } else { e.p.max(p) };
                        if p > e.best && !e.sure {
                            (e.best, e.mode, e.len) = (p, n.mode, n.len);
                        }
                    }
                    None => {
                        self.marks.set(n.id, v.len() as u32);
                        let key = self.keys[n.id as usize];
                        v.push(Candidate {
                            key,
                            id: n.id,
                            p,
                            best: p,
                            sure: false,
                            mode: n.mode,
                            len: n.len,
                        });
                    }
                }
            }
        }
        for e in v.iter_mut() {
            e.p = if e.sure {
                1.0
            } else if now.is_some() {
                e.p / rows.max(1) as f32
            } else {
                e.p
            };
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

    fn end_kernel(&mut self, kernel: u64) {
        self.running.start(self.keys.len());
        for &(id, mode, bytes) in &self.current {
            self.running.set(id, 0);
            let run = &mut self.runs[id as usize];
            run.span = match run.span {
                Some((start, last)) if last + 1 == kernel => Some((start, kernel)),
                _ => Some((kernel, kernel)),
            };
            (run.mode, run.bytes) = (mode, bytes);
        }
        for p in std::mem::take(&mut self.previous) {
            // A region this kernel uses again runs on: its row learns what follows its run.
            if self.running.get(p).is_some() {
                continue;
            }
            let run = &mut self.runs[p as usize];
            if let Some((start, last)) = run.span {
                run.len = last - start + 1;
            }
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
            self.step(&from, (at == now + 1).then_some(now), &mut next);
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
