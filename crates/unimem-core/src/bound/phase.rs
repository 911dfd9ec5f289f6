//! The phase bound: what the order of a program's uses forces on the link, where the
//! link-limit bound counts only the total of its bytes.
//!
//! Cut the program at kernel boundaries into segments. In a segment from operation `a` to `b`:
//! - what the first use in it of each region reads was either resident when it began or
//!   crosses the link within it, and at most the budget was resident:
//!   `in >= read-first bytes - budget`;
//! - what the latest write in it to each region wrote, where the region's next use after it
//!   reads it again, is either resident at its end or was copied out within it (after the
//!   write, before its room was taken): `out >= such bytes - budget`;
//! - its kernels run one after another within it.
//!
//! So the segment takes at least max(compute, in / rate, out / rate), and the program at least
//! the sum over the segments, for any cut: the bound is the largest such sum, found by dynamic
//! programming over up to 256 evenly spaced cut points (`POINTS`), segments of up to 128 of
//! them (`SPAN`). Where a program makes data in one phase and uses it in the next (a training step's
//! forward and backward passes), the two phases' traffic cannot overlap and this bound is
//! about twice the link-limit one. It counts the bytes the accesses name (of a use's reads,
//! the longest; of its writes, the longest), each direction of the link at the rate with
//! nothing else in the way, and assumes no more. Per region and stretch it counts one use's
//! reads and one write, so a program that touches many parts of one region in a stretch gets
//! a weaker bound, never a wrong one.

use super::{Program, Step, NEVER};

/// Cut points at most: the cost of the segments' sums is about [`SPAN`] passes over the uses.
pub(super) const POINTS: usize = 256;
/// A segment spans at most this many cut points.
pub(super) const SPAN: usize = 128;

/// The bytes two `(offset, len)` ranges share.
fn overlap(a: (u64, u64), b: (u64, u64)) -> u64 {
    (a.0 + a.1).min(b.0 + b.1).saturating_sub(a.0.max(b.0))
}

/// One segment's totals.
#[derive(Debug, Clone, Copy, Default)]
struct Segment {
    compute_ns: u64,
    read_first_bytes: u64,
    written_read_next_bytes: u64,
}

/// Every segment between cut points (`SPAN` per start point, those past the end empty).
#[derive(Debug, Default)]
pub(super) struct Segments {
    points: usize,
    segments: Vec<Segment>,
}

impl Segments {
    /// The segments of `program`'s kernels and host operations.
    pub(super) fn of(program: &Program) -> Self {
        // Operations (kernels and host accesses) with their durations and uses.
        let ops: Vec<(u64, u32, u32)> = program
            .steps
            .iter()
            .filter_map(|s| match *s {
                Step::Kernel { start, end, dur_ns } => Some((dur_ns, start, end)),
                Step::Host { start, end } => Some((0, start, end)),
                Step::Free { .. } => None,
            })
            .collect();
        if ops.is_empty() {
            return Self::default();
        }
        // Each use's region's next use (`NEVER`: none).
        let uses = &program.uses;
        let spans = &program.spans;
        let mut next = vec![NEVER; uses.len()];
        let mut later = vec![NEVER; program.bytes.len()];
        for (i, u) in uses.iter().enumerate().rev() {
            next[i] = later[u.region as usize];
            later[u.region as usize] = i as u32;
        }
        // The bytes of `write` the use after `i` reads again.
        let read_next = |i: usize, write: (u64, u64)| match next[i] {
            NEVER => 0,
            n => overlap(write, spans[n as usize].read),
        };
        let points = ops.len().min(POINTS);
        let cut = |p: usize| p * ops.len() / points;
        let mut segments = vec![Segment::default(); points * SPAN];
        let n = program.bytes.len();
        // Per region, for the sweep from start point `p` (stamped with it): met yet; written
        // yet, its latest write, and the bytes of it counted as read next.
        let (mut met, mut written) = (vec![usize::MAX; n], vec![usize::MAX; n]);
        let (mut last_write, mut counted) = (vec![(0u64, 0u64); n], vec![0u64; n]);
        for p in 0..points {
            let mut seg = Segment::default();
            for q in 1..=SPAN.min(points - p) {
                for &(dur_ns, start, end) in &ops[cut(p + q - 1)..cut(p + q)] {
                    seg.compute_ns = seg.compute_ns.saturating_add(dur_ns);
                    for i in start as usize..end as usize {
                        let (u, span) = (uses[i], spans[i]);
                        let r = u.region as usize;
                        if met[r] != p {
                            met[r] = p;
                            seg.read_first_bytes += span.read.1;
                        }
                        if u.writes {
                            if written[r] != p {
                                written[r] = p;
                                counted[r] = 0;
                            }
                            last_write[r] = span.write;
                        }
                        if written[r] == p {
                            let now = read_next(i, last_write[r]);
                            seg.written_read_next_bytes = seg.written_read_next_bytes - counted[r] + now;
                            counted[r] = now;
                        }
                    }
                }
                segments[p * SPAN + q - 1] = seg;
            }
        }
        Self { points, segments }
    }

    /// The bound at `budget` bytes, each direction at `rate_gbps` (bytes per ns).
    pub(super) fn bound_ns(&self, budget: u64, rate_gbps: f64) -> u64 {
        if self.points == 0 {
            return 0;
        }
        let over = |bytes: u64| (bytes.saturating_sub(budget) as f64 / rate_gbps).ceil() as u64;
        // best[j]: the largest sum over cuts of the operations before point j.
        let mut best = vec![0u64; self.points + 1];
        for j in 1..=self.points {
            best[j] = (j.saturating_sub(SPAN)..j)
                .map(|i| {
                    let s = self.segments[i * SPAN + (j - i - 1)];
                    let t = s.compute_ns.max(over(s.read_first_bytes)).max(over(s.written_read_next_bytes));
                    best[i].saturating_add(t)
                })
                .max()
                .unwrap_or(0);
        }
        best[self.points]
    }
}
