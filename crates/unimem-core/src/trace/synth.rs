//! Synthetic access patterns, generated as a stream of trace events (never held whole), for
//! tests, benchmarks and `unimem trace gen`. Deterministic for a given seed.
//!
//! Every pattern allocates `regions` persistent regions (data produced before the trace, so
//! their first access reads them from the host), then launches kernels that each read one
//! chunk chosen by the pattern and write a small fresh output region, which is freed once the
//! next kernel has consumed it: alloc/free traffic as in real programs.

use std::fmt;
use std::str::FromStr;

use super::{TraceAccess, TraceEvent};
use crate::access::AccessMode;

/// Which access pattern to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pattern {
    /// Sweep all regions in order, again and again (streaming a dataset larger than memory).
    Streaming,
    /// Read chunks of one large region with a constant stride.
    Strided,
    /// Two working sets, each swept for a phase, alternating.
    Alternating,
    /// A random walk on a fixed sparse graph of regions (what follows what is learnable).
    Graph,
    /// Uniformly random regions: nothing to predict.
    Random,
}

impl Pattern {
    /// All patterns.
    pub const ALL: [Pattern; 5] =
        [Pattern::Streaming, Pattern::Strided, Pattern::Alternating, Pattern::Graph, Pattern::Random];

    /// Name as written on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::Streaming => "streaming",
            Pattern::Strided => "strided",
            Pattern::Alternating => "alternating",
            Pattern::Graph => "graph",
            Pattern::Random => "random",
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Pattern::ALL.into_iter().find(|p| p.as_str() == s).ok_or_else(|| {
            let names: Vec<_> = Pattern::ALL.iter().map(|p| p.as_str()).collect();
            format!("unknown pattern `{s}`; allowed: {}", names.join(", "))
        })
    }
}

/// Parameters of a synthetic trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SynthSpec {
    /// Access pattern.
    pub pattern: Pattern,
    /// Total events to generate (header excluded); the stream stops there.
    pub events: u64,
    /// Persistent regions (for `Strided`: chunks of the one large region).
    pub regions: u64,
    /// Bytes per region (per chunk for `Strided`).
    pub region_bytes: u64,
    /// GPU time of each kernel.
    pub kernel_ns: u64,
    /// Kernels per step.
    pub kernels_per_step: u64,
    /// Seed of the random patterns.
    pub seed: u64,
    /// Every this many kernels, the kernel updates its input in place (read-write), as an
    /// optimizer updates parameters; 0: inputs are only read.
    pub write_every: u64,
}

impl Default for SynthSpec {
    fn default() -> Self {
        Self {
            pattern: Pattern::Streaming,
            events: 100_000,
            regions: 64,
            region_bytes: 4 << 20,
            kernel_ns: 100_000,
            kernels_per_step: 64,
            seed: 1,
            write_every: 0,
        }
    }
}

/// SplitMix64: tiny, fast, and good enough for access patterns.
#[derive(Debug, Clone)]
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Output regions are small: 64 KiB.
const OUT_BYTES: u64 = 64 << 10;
const OUT_ID_BASE: u64 = 1 << 40;

/// The event stream of a [`SynthSpec`].
#[derive(Debug, Clone)]
pub struct Synth {
    spec: SynthSpec,
    rng: SplitMix,
    emitted: u64,
    pending: std::collections::VecDeque<TraceEvent>,
    kernel: u64,
    walk_at: u64,
    successors: Vec<[u64; 2]>,
    prev_out: Option<u64>,
    kernel_name: std::sync::Arc<str>,
}

impl Synth {
    /// The whole trace of `spec` as uncompressed JSON Lines, header included, for replays from
    /// memory (tests, benchmarks): `TraceReader::from_bytes` reads it back.
    pub fn encode(spec: SynthSpec) -> crate::error::Result<Vec<u8>> {
        let header = super::TraceHeader::new(&format!("unimem synthetic trace: {spec:?}"));
        let mut w = super::TraceWriter::new(Vec::new(), false, "synthetic trace", &header)?;
        for event in Synth::new(spec) {
            w.write(&event)?;
        }
        w.finish()
    }

    /// The generator for `spec` (`regions` and `region_bytes` are raised to at least 1).
    pub fn new(mut spec: SynthSpec) -> Self {
        spec.regions = spec.regions.max(1);
        spec.region_bytes = spec.region_bytes.max(1);
        spec.kernels_per_step = spec.kernels_per_step.max(1);
        let mut rng = SplitMix(spec.seed);
        let successors =
            (0..spec.regions).map(|_| [rng.below(spec.regions), rng.below(spec.regions)]).collect();
        let mut pending = std::collections::VecDeque::new();
        if spec.pattern == Pattern::Strided {
            pending.push_back(TraceEvent::Alloc {
                id: 0,
                bytes: spec.regions * spec.region_bytes,
                name: Some("strided".into()),
            });
        } else {
            for id in 0..spec.regions {
                pending.push_back(TraceEvent::Alloc {
                    id,
                    bytes: spec.region_bytes,
                    name: Some(format!("data{id}")),
                });
            }
        }
        let kernel_name = format!("{}_k", spec.pattern).into();
        Self {
            spec,
            rng,
            emitted: 0,
            pending,
            kernel: 0,
            walk_at: 0,
            successors,
            prev_out: None,
            kernel_name,
        }
    }

    /// The (region id, offset) the next kernel reads.
    fn next_input(&mut self) -> (u64, u64) {
        let (n, k) = (self.spec.regions, self.kernel);
        match self.spec.pattern {
            Pattern::Streaming => (k % n, 0),
            Pattern::Strided => {
                // Stride 3 chunks, coprime with n unless n is a multiple of 3.
                let stride = if n % 3 == 0 { 1 } else { 3 };
                (0, (k * stride % n) * self.spec.region_bytes)
            }
            Pattern::Alternating => {
                let half = (n / 2).max(1);
                let phase = (k / (2 * half)) % 2;
                let base = if phase == 0 { 0 } else { half.min(n - 1) };
                ((base + k % half).min(n - 1), 0)
            }
            Pattern::Graph => {
                let next = self.successors[self.walk_at as usize][(self.rng.next() & 1) as usize];
                self.walk_at = next;
                (next, 0)
            }
            Pattern::Random => (self.rng.below(n), 0),
        }
    }

    fn refill(&mut self) {
        if self.kernel % self.spec.kernels_per_step == 0 {
            self.pending.push_back(TraceEvent::Step { index: self.kernel / self.spec.kernels_per_step });
        }
        let out = OUT_ID_BASE + self.kernel;
        self.pending.push_back(TraceEvent::Alloc { id: out, bytes: OUT_BYTES, name: None });
        let (id, offset) = self.next_input();
        let w = self.spec.write_every;
        let mode = if w > 0 && self.kernel % w == w - 1 { AccessMode::ReadWrite } else { AccessMode::Read };
        let mut acc = vec![
            TraceAccess { id, offset, len: self.spec.region_bytes, mode },
            TraceAccess { id: out, offset: 0, len: OUT_BYTES, mode: AccessMode::Write },
        ];
        if let Some(prev) = self.prev_out {
            acc.push(TraceAccess { id: prev, offset: 0, len: OUT_BYTES, mode: AccessMode::Read });
        }
        self.pending.push_back(TraceEvent::Kernel {
            name: self.kernel_name.clone(),
            dur_ns: self.spec.kernel_ns,
            host_ns: None,
            acc,
        });
        if let Some(prev) = self.prev_out.replace(out) {
            self.pending.push_back(TraceEvent::Free { id: prev });
        }
        self.kernel += 1;
    }
}

impl Iterator for Synth {
    type Item = TraceEvent;
    fn next(&mut self) -> Option<TraceEvent> {
        if self.emitted >= self.spec.events {
            return None;
        }
        if self.pending.is_empty() {
            self.refill();
        }
        self.emitted += 1;
        self.pending.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_exactly_n_events_with_valid_references() {
        for pattern in Pattern::ALL {
            let spec =
                SynthSpec { pattern, events: 5000, regions: 10, region_bytes: 8192, ..Default::default() };
            let events: Vec<_> = Synth::new(spec).collect();
            assert_eq!(events.len(), 5000, "{pattern}");
            // Round-trip through the validating reader: every access refers to a live region.
            let mut w = crate::trace::TraceWriter::new(
                Vec::new(),
                false,
                "mem",
                &crate::trace::TraceHeader::new("s"),
            )
            .unwrap();
            events.iter().for_each(|e| w.write(e).unwrap());
            let bytes: &'static [u8] = Box::leak(w.finish().unwrap().into_boxed_slice());
            let back: Vec<_> = crate::trace::TraceReader::from_bytes("synth", bytes)
                .unwrap()
                .collect::<crate::Result<_>>()
                .unwrap();
            assert_eq!(back, events, "{pattern}");
        }
    }

    #[test]
    fn patterns_have_their_shape() {
        let inputs = |pattern, n| -> Vec<(u64, u64)> {
            let spec =
                SynthSpec { pattern, events: u64::MAX, regions: n, region_bytes: 100, ..Default::default() };
            let mut s = Synth::new(spec);
            (0..12)
                .map(|_| {
                    let input = s.next_input();
                    s.kernel += 1;
                    input
                })
                .collect()
        };
        assert_eq!(
            inputs(Pattern::Streaming, 4).iter().map(|x| x.0).collect::<Vec<_>>(),
            [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
        );
        assert_eq!(
            inputs(Pattern::Strided, 4).iter().map(|x| x.1 / 100).collect::<Vec<_>>(),
            [0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1]
        );
        assert_eq!(
            inputs(Pattern::Alternating, 4).iter().map(|x| x.0).collect::<Vec<_>>(),
            [0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1]
        );
        let random = inputs(Pattern::Random, 1000);
        assert!(random.windows(2).any(|w| w[0] != w[1]));
    }
}
