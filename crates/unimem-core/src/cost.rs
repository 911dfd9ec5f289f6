//! The simulator's cost model: a calibration profile (TOML) of measured rates and latencies.
//! The embedded default carries the numbers of `design/h200-facts.md`; `unimem probe` writes
//! one from a real device.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The embedded default profile (NVIDIA H200, measured 2026-11-30).
pub const H200_PROFILE: &str = include_str!("../profiles/h200.toml");

/// Bounds on a profile's values, so that no time the simulator derives from them overflows.
const MAX_MEMORY_BYTES: u64 = 1 << 48;
const MAX_TIME_NS: u64 = 1_000_000_000_000;
const MAX_LAUNCH_QUEUE: u64 = 1 << 20;
const MIN_RATE_GBPS: f64 = 0.001;
const MAX_RATE_GBPS: f64 = 100_000.0;

/// Measured costs of unified memory on one device. Rates are GB/s (bytes per nanosecond),
/// times nanoseconds. Each field is documented in `profiles/h200.toml` with its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    /// Human-readable name of the device and calibration run.
    pub name: String,
    /// Device memory in bytes.
    pub device_memory_bytes: u64,
    /// Host memory of the machine in bytes. Managed data lives on one side or the other, so
    /// the simulator holds at most `device_memory_bytes + host_memory_bytes` of it. Profiles
    /// written before it was recorded take the H200 machine's.
    #[serde(default = "h200_host_memory")]
    pub host_memory_bytes: u64,
    /// Fault-driven H2D rate.
    pub gpu_fault_rate_gbps: f64,
    /// Fixed cost of one GPU fault group.
    pub gpu_fault_latency_ns: u64,
    /// Bytes a GPU fault is grown to (power of two, multiple of 4 KiB).
    pub fault_unit_bytes: u64,
    /// Cost per fault unit of first-touch population on the GPU (measured on fresh 2 MiB
    /// allocations, one kernel each).
    pub gpu_populate_latency_ns: u64,
    /// CPU-fault migration rate (D2H).
    pub cpu_fault_rate_gbps: f64,
    /// Fixed cost of one prefetch call.
    pub prefetch_call_ns: u64,
    /// Host time of a prefetch call on a stream still busy with earlier work: the driver
    /// queues the migration and returns, holding the host for none of it. (On an idle stream
    /// the call holds the host for `prefetch_h2d_host_fraction` of its transfer.) Profiles
    /// written before it was measured take the H200's.
    #[serde(default = "h200_prefetch_deferred_call")]
    pub prefetch_deferred_call_ns: u64,
    /// Prefetch H2D rate.
    pub prefetch_h2d_rate_gbps: f64,
    /// Prefetch D2H rate.
    pub prefetch_d2h_rate_gbps: f64,
    /// Extra fixed cost per range of a batch prefetch, after the first.
    pub batch_range_ns: u64,
    /// Rate at which a prefetch populates pages that have no copy.
    pub prefetch_populate_rate_gbps: f64,
    /// Rate of that population while staged evictions (copies out, then the discard of their
    /// pages) are under way: on the H200 the driver's population slows to a crawl beside
    /// discards, where beside a copy alone it keeps its rate. Profiles written before it was
    /// measured take the H200's.
    #[serde(default = "h200_populate_beside_stage_out")]
    pub populate_beside_stage_out_rate_gbps: f64,
    /// Rate of the driver's own eviction (D2H).
    pub evict_d2h_rate_gbps: f64,
    /// Whether H2D and D2H migrations can run at the same time.
    pub um_full_duplex: bool,
    /// Rate of dropping read-mostly duplicates.
    pub duplicate_drop_rate_gbps: f64,
    /// H2D rate of a prefetch that creates read-mostly duplicates (the host copy stays).
    pub duplicate_prefetch_rate_gbps: f64,
    /// Host time of setting read-mostly on host-resident data, per GiB (the call blocks).
    pub advise_read_mostly_ns_per_gib: u64,
    /// Host time of unsetting read-mostly on data with duplicates on the device (collapsing
    /// them), per GiB. Profiles written before it was measured take the H200 figure.
    #[serde(default = "h200_unset_read_mostly")]
    pub advise_unset_read_mostly_ns_per_gib: u64,
    /// Host time of setting preferred location host and accessed-by-device, per GiB.
    pub advise_remote_ns_per_gib: u64,
    /// Share (0 to 1) of an H2D prefetch's transfer during which the calling thread is blocked.
    pub prefetch_h2d_host_fraction: f64,
    /// Share (0 to 1) of a D2H prefetch's transfer during which the calling thread is blocked.
    pub prefetch_d2h_host_fraction: f64,
    /// Host time of a discard call, per GiB discarded in 2 MiB ranges.
    pub discard_host_ns_per_gib: u64,
    /// Cost per 4 KiB page of a GPU write collapsing duplicates.
    pub duplicate_write_fault_ns_per_page: u64,
    /// Rate of GPU remote access to host-resident mapped data.
    pub remote_rate_gbps: f64,
    /// Rate of discarding.
    pub discard_rate_gbps: f64,
    /// Fixed cost of one discard call.
    pub discard_call_ns: u64,
    /// Host time of launching one kernel (the call and its bookkeeping): the host cannot issue
    /// the next one before, so kernels shorter than this leave the device waiting.
    pub launch_host_ns: u64,
    /// Host time of a managed allocation the memory pool cannot serve (`cuMemAllocManaged`):
    /// this much per call ...
    pub alloc_host_ns: u64,
    /// ... plus this much per GiB allocated. Profiles written before it was measured take 0.
    #[serde(default)]
    pub alloc_host_ns_per_gib: u64,
    /// Kernels the host can launch ahead of the device: a launch with this many kernels
    /// queued and unfinished waits for the oldest to end (the driver's launch queue), so a host
    /// never runs arbitrarily far ahead, nor do the hints it gives. 0: no limit (profiles
    /// written before it was measured).
    #[serde(default)]
    pub launch_queue_depth: u64,
    /// Host time of freeing (`cuMemFree`) a buffer whose pages were populated on the device
    /// and then discarded, as the backends free the buffers they shed from their pool at a
    /// synchronisation. Profiles written before it was measured take the H200's.
    #[serde(default = "h200_free_retired")]
    pub free_retired_host_ns: u64,
    /// ... plus this much per GiB of the buffer. Profiles written before it was measured
    /// take 0.
    #[serde(default)]
    pub free_retired_host_ns_per_gib: u64,
    /// Copy rate of device-resident managed data into pinned staging buffers and discard of
    /// its pages (a staged eviction). Profiles written before staging take the H200 figures.
    #[serde(default = "h200_stage_d2h")]
    pub stage_d2h_rate_gbps: f64,
    /// Rate of bringing staged data back to the device, end to end: copied into the host's
    /// managed pages, then migrated.
    #[serde(default = "h200_stage_h2d")]
    pub stage_h2d_rate_gbps: f64,
    /// Rate of bringing staged data back to the host (the copy engine's copy into the managed
    /// pages).
    #[serde(default = "h200_stage_host")]
    pub stage_host_rate_gbps: f64,
    /// Extra time per 2 MiB block of bringing staged data back to the device, which the CUDA
    /// backend repopulates one prefetch range per block (one larger range lost the data on the
    /// H200): the driver's work, which on the H200 runs between the copies (`unimem probe`), so
    /// the simulator charges it to the link. Profiles written before it was measured take the
    /// H200 figure.
    #[serde(default = "h200_stage_h2d_block")]
    pub stage_h2d_block_ns: u64,
    /// Rate of copying staged data into device-resident pages of another buffer (the CUDA
    /// backend's restore of a wholly staged region into a pooled buffer: no repopulation).
    /// Profiles written before it was measured take the H200 figure.
    #[serde(default = "h200_stage_h2d_resident")]
    pub stage_h2d_resident_rate_gbps: f64,
    /// The link's rate each way for copies between device memory and pinned host memory: the
    /// rate of the link-limit bound (`crate::bound`). Profiles written before it was
    /// recorded take the H200 figure.
    #[serde(default = "h200_link")]
    pub link_rate_gbps: f64,
}

fn h200_link() -> f64 {
    CostModel::h200().link_rate_gbps
}

fn h200_host_memory() -> u64 {
    CostModel::h200().host_memory_bytes
}

fn h200_free_retired() -> u64 {
    CostModel::h200().free_retired_host_ns
}

fn h200_populate_beside_stage_out() -> f64 {
    CostModel::h200().populate_beside_stage_out_rate_gbps
}

fn h200_prefetch_deferred_call() -> u64 {
    CostModel::h200().prefetch_deferred_call_ns
}

fn h200_unset_read_mostly() -> u64 {
    CostModel::h200().advise_unset_read_mostly_ns_per_gib
}

fn h200_stage_d2h() -> f64 {
    CostModel::h200().stage_d2h_rate_gbps
}

fn h200_stage_h2d() -> f64 {
    CostModel::h200().stage_h2d_rate_gbps
}

fn h200_stage_host() -> f64 {
    CostModel::h200().stage_host_rate_gbps
}

fn h200_stage_h2d_block() -> u64 {
    CostModel::h200().stage_h2d_block_ns
}

fn h200_stage_h2d_resident() -> f64 {
    CostModel::h200().stage_h2d_resident_rate_gbps
}

/// Host time of one of the device arena's calls (bookkeeping and a copy or two issued).
pub const ARENA_CALL_NS: u64 = 5_000;

impl Default for CostModel {
    fn default() -> Self {
        Self::h200()
    }
}

impl CostModel {
    /// The embedded H200 profile.
    pub fn h200() -> Self {
        // The embedded profile is validated by a unit test, so this cannot fail at run time.
        Self::from_toml(H200_PROFILE, "<embedded h200 profile>").expect("embedded profile is valid")
    }

    /// Parses and validates a profile from TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self> {
        let model: CostModel =
            toml::from_str(text).map_err(|e| Error::File { path: origin.into(), reason: e.to_string() })?;
        model.validate(origin)?;
        Ok(model)
    }

    /// Loads a profile file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path.display(), e))?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// The field-by-field median of several profiles of one device (the mean of the middle two
    /// for an even count; the majority for a flag, ties to the first profile), named for them.
    /// One probe's figures for faults and population move by up to 30% between processes on
    /// the H200; the median of a few probes is steady enough to calibrate on.
    pub fn median(profiles: &[CostModel]) -> Result<Self> {
        let Some(first) = profiles.first() else {
            return Err(Error::InvalidArgument("a median of profiles needs at least one".into()));
        };
        let tables = profiles
            .iter()
            .map(|p| toml::Table::try_from(p).map_err(|e| Error::InvalidArgument(e.to_string())))
            .collect::<Result<Vec<_>>>()?;
        let mut out = tables[0].clone();
        for (key, value) in out.iter_mut() {
            let column = tables.iter().filter_map(|t| t.get(key));
            *value = match &*value {
                toml::Value::Integer(_) => {
                    let mut v: Vec<i64> = column.filter_map(toml::Value::as_integer).collect();
                    v.sort_unstable();
                    let n = v.len();
                    toml::Value::Integer(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2 })
                }
                toml::Value::Float(_) => {
                    let mut v: Vec<f64> = column.filter_map(toml::Value::as_float).collect();
                    v.sort_by(f64::total_cmp);
                    let n = v.len();
                    toml::Value::Float(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
                }
                toml::Value::Boolean(b) => {
                    let yes = column.filter(|v| v.as_bool() == Some(true)).count();
                    toml::Value::Boolean(if 2 * yes == profiles.len() {
                        *b
                    } else {
                        2 * yes > profiles.len()
                    })
                }
                other => other.clone(),
            };
        }
        out.insert(
            "name".into(),
            toml::Value::String(format!("{} (median of {} profiles)", first.name, profiles.len())),
        );
        let model: CostModel =
            out.try_into().map_err(|e: toml::de::Error| Error::InvalidArgument(e.to_string()))?;
        model.validate("median of profiles")?;
        Ok(model)
    }

    /// Every rate of the profile, by its key.
    fn rates_mut(&mut self) -> [(&'static str, &mut f64); 16] {
        [
            ("gpu_fault_rate_gbps", &mut self.gpu_fault_rate_gbps),
            ("cpu_fault_rate_gbps", &mut self.cpu_fault_rate_gbps),
            ("prefetch_h2d_rate_gbps", &mut self.prefetch_h2d_rate_gbps),
            ("prefetch_d2h_rate_gbps", &mut self.prefetch_d2h_rate_gbps),
            ("prefetch_populate_rate_gbps", &mut self.prefetch_populate_rate_gbps),
            ("populate_beside_stage_out_rate_gbps", &mut self.populate_beside_stage_out_rate_gbps),
            ("evict_d2h_rate_gbps", &mut self.evict_d2h_rate_gbps),
            ("duplicate_drop_rate_gbps", &mut self.duplicate_drop_rate_gbps),
            ("duplicate_prefetch_rate_gbps", &mut self.duplicate_prefetch_rate_gbps),
            ("remote_rate_gbps", &mut self.remote_rate_gbps),
            ("discard_rate_gbps", &mut self.discard_rate_gbps),
            ("stage_d2h_rate_gbps", &mut self.stage_d2h_rate_gbps),
            ("stage_h2d_rate_gbps", &mut self.stage_h2d_rate_gbps),
            ("stage_host_rate_gbps", &mut self.stage_host_rate_gbps),
            ("stage_h2d_resident_rate_gbps", &mut self.stage_h2d_resident_rate_gbps),
            ("link_rate_gbps", &mut self.link_rate_gbps),
        ]
    }

    /// Brings measured rates within what a profile may hold (0.001 to 100000 GB/s): a step the
    /// device did in next to no time (a discard of pages nothing holds) measures as a rate past
    /// any bound, and means "free" either way. Returns the keys it changed, with what was
    /// measured; a rate that is not a number is left for [`CostModel::validate`] to refuse.
    pub fn clamp_measured_rates(&mut self) -> Vec<(&'static str, f64)> {
        let mut changed = Vec::new();
        for (key, v) in self.rates_mut() {
            if v.is_finite() && !(MIN_RATE_GBPS..=MAX_RATE_GBPS).contains(v) {
                changed.push((key, *v));
                *v = v.clamp(MIN_RATE_GBPS, MAX_RATE_GBPS);
            }
        }
        changed
    }

    /// Checks every rate is positive and finite and the fault unit is a sane power of two.
    pub fn validate(&self, origin: &str) -> Result<()> {
        let mut copy = self.clone();
        for (key, &mut v) in copy.rates_mut() {
            if !(v.is_finite() && (MIN_RATE_GBPS..=MAX_RATE_GBPS).contains(&v)) {
                return Err(Error::config(
                    key,
                    format!("must be a positive rate from 0.001 to 100000 GB/s, got {v}"),
                    origin,
                ));
            }
        }
        for (key, v) in [
            ("prefetch_h2d_host_fraction", self.prefetch_h2d_host_fraction),
            ("prefetch_d2h_host_fraction", self.prefetch_d2h_host_fraction),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(Error::config(key, format!("must be a share from 0 to 1, got {v}"), origin));
            }
        }
        for (key, v) in
            [("device_memory_bytes", self.device_memory_bytes), ("host_memory_bytes", self.host_memory_bytes)]
        {
            if !(1..=MAX_MEMORY_BYTES).contains(&v) {
                return Err(Error::config(
                    key,
                    format!("must be from 1 to 2^48 bytes (256 TiB), got {v}"),
                    origin,
                ));
            }
        }
        for (key, v) in self.times() {
            if v > MAX_TIME_NS {
                return Err(Error::config(
                    key,
                    format!("must be at most 10^12 ns (1000 s), got {v}"),
                    origin,
                ));
            }
        }
        if self.launch_queue_depth > MAX_LAUNCH_QUEUE {
            let depth = self.launch_queue_depth;
            return Err(Error::config(
                "launch_queue_depth",
                format!("must be from 0 (no limit) to {MAX_LAUNCH_QUEUE} kernels, got {depth}"),
                origin,
            ));
        }
        let u = self.fault_unit_bytes;
        if !u.is_power_of_two() || !(4096..=2 << 20).contains(&u) {
            return Err(Error::config(
                "fault_unit_bytes",
                format!("must be a power of two from 4096 to 2097152, got {u}"),
                origin,
            ));
        }
        Ok(())
    }

    /// The profile's times (ns, or ns per GiB) with their keys.
    fn times(&self) -> [(&'static str, u64); 16] {
        [
            ("gpu_fault_latency_ns", self.gpu_fault_latency_ns),
            ("gpu_populate_latency_ns", self.gpu_populate_latency_ns),
            ("prefetch_call_ns", self.prefetch_call_ns),
            ("prefetch_deferred_call_ns", self.prefetch_deferred_call_ns),
            ("batch_range_ns", self.batch_range_ns),
            ("advise_read_mostly_ns_per_gib", self.advise_read_mostly_ns_per_gib),
            ("advise_unset_read_mostly_ns_per_gib", self.advise_unset_read_mostly_ns_per_gib),
            ("advise_remote_ns_per_gib", self.advise_remote_ns_per_gib),
            ("discard_host_ns_per_gib", self.discard_host_ns_per_gib),
            ("duplicate_write_fault_ns_per_page", self.duplicate_write_fault_ns_per_page),
            ("discard_call_ns", self.discard_call_ns),
            ("launch_host_ns", self.launch_host_ns),
            ("alloc_host_ns", self.alloc_host_ns),
            ("alloc_host_ns_per_gib", self.alloc_host_ns_per_gib),
            ("free_retired_host_ns", self.free_retired_host_ns),
            ("free_retired_host_ns_per_gib", self.free_retired_host_ns_per_gib),
        ]
    }

    /// Most managed memory the simulated machine holds: its device and host memory together.
    pub fn machine_memory_bytes(&self) -> u64 {
        self.device_memory_bytes + self.host_memory_bytes
    }

    /// The size below which letting a range fault in costs less than one more range of a batch
    /// prefetch: fault latency + bytes at the fault rate = range overhead + bytes at the
    /// prefetch rate. Smaller ranges are better left to faults.
    pub fn prefetch_break_even_bytes(&self) -> u64 {
        let per_byte_saving = 1.0 / self.gpu_fault_rate_gbps - 1.0 / self.prefetch_h2d_rate_gbps;
        let overhead = self.batch_range_ns.saturating_sub(self.gpu_fault_latency_ns) as f64;
        if per_byte_saving <= 0.0 {
            // Faults move bytes as fast as prefetches: a call pays where it costs no more
            // than a fault's latency (the device arena's restores at launch), else never.
            return if self.batch_range_ns <= self.gpu_fault_latency_ns { 0 } else { u64::MAX };
        }
        (overhead / per_byte_saving).ceil() as u64
    }

    /// Host time of freeing a shed buffer of `bytes`.
    pub fn free_retired_ns(&self, bytes: u64) -> u64 {
        self.free_retired_host_ns
            + (bytes as f64 / (1u64 << 30) as f64 * self.free_retired_host_ns_per_gib as f64).round() as u64
    }

    /// Host time of a new managed allocation of `bytes`.
    pub fn alloc_ns(&self, bytes: u64) -> u64 {
        self.alloc_host_ns
            + (bytes as f64 / (1u64 << 30) as f64 * self.alloc_host_ns_per_gib as f64).round() as u64
    }

    /// The costs of `memory = "device"` (a replay's regions in an arena of device memory and
    /// pinned host slots), derived from this profile: every move of data is a copy between
    /// device and pinned memory at the link's rate (`link_rate_gbps`), both ways at once,
    /// and nothing else costs the device. What the managed model charges that the arena does
    /// not have:
    /// - page work: populations, repopulations and discards (a new block is a slot and no copy, a
    ///   restore a copy into a free slot, a discard bookkeeping);
    /// - faults: a kernel's data off the device is copied in before it runs, at the link's
    ///   rate, after one call's worth of latency;
    /// - read-mostly duplicates and remote mappings: clean data is dropped without a copy
    ///   (its host slot stays valid), and the advice calls are bookkeeping;
    /// - allocation and the pool's frees: slots are carved from memory allocated once.
    ///
    /// Host costs per call stay the profile's where the arena makes the same number of driver
    /// calls (launches), and are the arena's per-block copy calls elsewhere
    /// (`ARENA_CALL_NS`). The model frees a stage-out's room when it is issued, where the
    /// arena lends it to the next restore, whose copy waits for the copy out: where restores
    /// wait on evictions, it is optimistic.
    pub fn device_arena(&self) -> Self {
        let link = self.link_rate_gbps;
        // Zeroing a fresh slot runs at device-memory speed: far past any link.
        let zeroing = 1000.0;
        Self {
            name: format!("{} (device arena)", self.name),
            gpu_fault_rate_gbps: link,
            gpu_fault_latency_ns: ARENA_CALL_NS,
            gpu_populate_latency_ns: 0,
            prefetch_call_ns: ARENA_CALL_NS,
            prefetch_deferred_call_ns: ARENA_CALL_NS,
            batch_range_ns: ARENA_CALL_NS,
            prefetch_h2d_rate_gbps: link,
            prefetch_d2h_rate_gbps: link,
            prefetch_populate_rate_gbps: zeroing,
            populate_beside_stage_out_rate_gbps: zeroing,
            evict_d2h_rate_gbps: link,
            um_full_duplex: true,
            duplicate_drop_rate_gbps: zeroing,
            duplicate_prefetch_rate_gbps: link,
            advise_read_mostly_ns_per_gib: 0,
            advise_unset_read_mostly_ns_per_gib: 0,
            advise_remote_ns_per_gib: 0,
            prefetch_h2d_host_fraction: 0.0,
            prefetch_d2h_host_fraction: 0.0,
            discard_host_ns_per_gib: 0,
            duplicate_write_fault_ns_per_page: 0,
            remote_rate_gbps: link,
            discard_rate_gbps: zeroing,
            discard_call_ns: 0,
            alloc_host_ns: ARENA_CALL_NS,
            alloc_host_ns_per_gib: 0,
            free_retired_host_ns: 0,
            free_retired_host_ns_per_gib: 0,
            stage_d2h_rate_gbps: link,
            stage_h2d_rate_gbps: link,
            stage_host_rate_gbps: link,
            stage_h2d_block_ns: 0,
            stage_h2d_resident_rate_gbps: link,
            ..self.clone()
        }
    }

    /// Nanoseconds to move `bytes` at `rate_gbps`.
    pub fn transfer_ns(bytes: u64, rate_gbps: f64) -> u64 {
        (bytes as f64 / rate_gbps).ceil() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_profile_is_valid_and_matches_facts() {
        let m = CostModel::h200();
        assert_eq!(m.gpu_fault_rate_gbps, 4.41);
        // An isolated fault of one 64 KiB unit costs the measured 15.8 us (within 1%).
        let isolated =
            m.gpu_fault_latency_ns + CostModel::transfer_ns(m.fault_unit_bytes, m.gpu_fault_rate_gbps);
        assert!((isolated as f64 - 15_800.0).abs() < 158.0, "{isolated}");
        // A 2 MiB prefetch call lands near the measured 18.5 GB/s.
        let t = m.prefetch_call_ns + CostModel::transfer_ns(2 << 20, m.prefetch_h2d_rate_gbps);
        let rate = (2u64 << 20) as f64 / t as f64;
        assert!((rate - 18.5).abs() / 18.5 < 0.1, "{rate}");
    }

    #[test]
    fn measured_rates_past_the_bounds_are_kept_at_them_and_nothing_else_changes() {
        // A discard of pages nothing held, timed at 17 us for 2 GiB on an H100.
        let mut m =
            CostModel { discard_rate_gbps: 126_382.04, cpu_fault_rate_gbps: 0.0001, ..CostModel::h200() };
        assert!(m.validate("probe").is_err());
        let changed = m.clamp_measured_rates();
        assert_eq!(changed, vec![("cpu_fault_rate_gbps", 0.0001), ("discard_rate_gbps", 126_382.04)]);
        assert_eq!((m.discard_rate_gbps, m.cpu_fault_rate_gbps), (MAX_RATE_GBPS, MIN_RATE_GBPS));
        m.validate("probe").unwrap();
        assert_eq!(
            CostModel {
                discard_rate_gbps: MAX_RATE_GBPS,
                cpu_fault_rate_gbps: MIN_RATE_GBPS,
                ..CostModel::h200()
            },
            m
        );
        // What is not a rate at all stays refused.
        let mut bad = CostModel { link_rate_gbps: f64::NAN, ..CostModel::h200() };
        assert!(bad.clamp_measured_rates().is_empty());
        let e = bad.validate("probe").unwrap_err().to_string();
        assert!(e.contains("link_rate_gbps") && e.contains("probe"), "{e}");
    }

    #[test]
    fn the_median_of_profiles_takes_each_field_alone() {
        let with = |rate: f64, populate: u64, duplex: bool| CostModel {
            gpu_fault_rate_gbps: rate,
            gpu_populate_latency_ns: populate,
            um_full_duplex: duplex,
            ..CostModel::h200()
        };
        let odd = CostModel::median(&[with(6.0, 8000, true), with(9.0, 4000, false), with(7.0, 6000, false)])
            .unwrap();
        assert_eq!(odd.gpu_fault_rate_gbps, 7.0);
        assert_eq!(odd.gpu_populate_latency_ns, 6000);
        assert!(!odd.um_full_duplex, "two of three say half duplex");
        assert!(odd.name.contains("median of 3 profiles"), "{}", odd.name);
        // Fields alike in every profile stay as they are.
        assert_eq!(odd.prefetch_h2d_rate_gbps, CostModel::h200().prefetch_h2d_rate_gbps);
        let even = CostModel::median(&[with(6.0, 8000, true), with(9.0, 4000, false)]).unwrap();
        assert_eq!((even.gpu_fault_rate_gbps, even.gpu_populate_latency_ns), (7.5, 6000));
        assert!(even.um_full_duplex, "a tie goes to the first profile");
        let one = CostModel::median(&[CostModel::h200()]).unwrap();
        assert_eq!(CostModel { name: CostModel::h200().name, ..one }, CostModel::h200());
        let e = CostModel::median(&[]).unwrap_err().to_string();
        assert!(e.contains("at least one"), "{e}");
    }

    #[test]
    fn the_device_arena_moves_everything_at_the_link_rate_without_page_work() {
        let h = CostModel::h200();
        let a = h.device_arena();
        assert!(a.name.contains("device arena"), "{}", a.name);
        for rate in
            [a.stage_d2h_rate_gbps, a.stage_h2d_rate_gbps, a.prefetch_h2d_rate_gbps, a.gpu_fault_rate_gbps]
        {
            assert_eq!(rate, h.link_rate_gbps);
        }
        assert!(a.um_full_duplex);
        assert_eq!((a.stage_h2d_block_ns, a.discard_call_ns, a.gpu_populate_latency_ns), (0, 0, 0));
        // Faults cost what a prefetch does: any prefetch that hides one pays.
        assert_eq!(a.prefetch_break_even_bytes(), 0);
        // What the arena does not change stays the profile's.
        assert_eq!((a.launch_host_ns, a.link_rate_gbps), (h.launch_host_ns, h.link_rate_gbps));
    }

    #[test]
    fn break_even_is_a_few_hundred_kib_on_h200() {
        // (57 us - 0.94 us) / (1/4.41 - 1/48.9) ns per byte = about 272 KB.
        let b = CostModel::h200().prefetch_break_even_bytes();
        assert!((260_000..290_000).contains(&b), "{b}");
    }

    #[test]
    fn rejects_bad_profiles() {
        let bad = H200_PROFILE.replace("gpu_fault_rate_gbps = 4.41", "gpu_fault_rate_gbps = -1.0");
        let e = CostModel::from_toml(&bad, "p.toml").unwrap_err().to_string();
        assert!(e.contains("gpu_fault_rate_gbps") && e.contains("positive"), "{e}");
        let bad = H200_PROFILE.replace("fault_unit_bytes = 65536", "fault_unit_bytes = 1000");
        assert!(CostModel::from_toml(&bad, "p.toml").unwrap_err().to_string().contains("power of two"));
        let bad = format!("{H200_PROFILE}\nwarp_speed = 9\n");
        let e = CostModel::from_toml(&bad, "p.toml").unwrap_err().to_string();
        assert!(e.contains("p.toml") && e.contains("warp_speed"), "{e}");
    }
}
