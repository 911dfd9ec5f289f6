//! The phase bound: what the order of a program's uses forces on the link, where the
//! link-limit bound counts only the total of its bytes.
//!
//! Cut the program at kernel boundaries into segments. In a segment from operation `a` to `b`:
//! - every region whose first use in it reads was either resident when it began or crosses
//!   the link within it, and at most the budget was resident: `in >= read-first bytes - budget`;
//! - every region written in it and read next after it is either resident at its end or was
//!   copied out within it (after the write, before its room was taken):
//!   `out >= such bytes - budget`;
//! - its kernels run one after another within it.
//!
//! So the segment takes at least max(compute, in / rate, out / rate), and the program at least
//! the sum over the segments, for any cut: the bound is the largest such sum, found by dynamic
//! programming over up to 256 evenly spaced cut points (`POINTS`), segments of up to 128 of
//! them (`SPAN`). Where a program makes data in one phase and uses it in the next (a training step's
//! forward and backward passes), the two phases' traffic cannot overlap and this bound is
//! about twice the link-limit one. It assumes what the link-limit bound assumes (region
//! granularity, each direction at the rate, nothing else in the way) and no more.

use super::{Program, Step};

/// Cut points at most: the cost of the segments' sums is about [`SPAN`] passes over the uses.
pub(super) const POINTS: usize = 256;
/// A segment spans at most this many cut points.
pub(super) const SPAN: usize = 128;

/// One segment's totals, at region granularity.
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
        // Whether each use's region is read at its next use (false where it has none).
        let uses = &program.uses;
        let mut next_reads = vec![false; uses.len()];
        let mut later: Vec<Option<bool>> = vec![None; program.bytes.len()];
        for (i, u) in uses.iter().enumerate().rev() {
            let r = u.region as usize;
            next_reads[i] = later[r].unwrap_or(false);
            later[r] = Some(u.reads);
        }
        let points = ops.len().min(POINTS);
        let cut = |p: usize| p * ops.len() / points;
        let mut segments = vec![Segment::default(); points * SPAN];
        // Per region, stamped with the start point of the sweep: met, written, counted.
        let (mut met, mut written, mut counted) = (
            vec![usize::MAX; program.bytes.len()],
            vec![usize::MAX; program.bytes.len()],
            vec![false; program.bytes.len()],
        );
        for p in 0..points {
            let mut seg = Segment::default();
            for q in 1..=SPAN.min(points - p) {
                for &(dur_ns, start, end) in &ops[cut(p + q - 1)..cut(p + q)] {
                    seg.compute_ns = seg.compute_ns.saturating_add(dur_ns);
                    for (i, u) in uses[start as usize..end as usize].iter().enumerate() {
                        let r = u.region as usize;
                        let bytes = program.bytes[r];
                        if met[r] != p {
                            met[r] = p;
                            if u.reads {
                                seg.read_first_bytes += bytes;
                            }
                        }
                        if u.writes && written[r] != p {
                            written[r] = p;
                            counted[r] = false;
                        }
                        if written[r] == p {
                            let now = next_reads[start as usize + i];
                            match (counted[r], now) {
                                (false, true) => seg.written_read_next_bytes += bytes,
                                (true, false) => seg.written_read_next_bytes -= bytes,
                                _ => {}
                            }
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
