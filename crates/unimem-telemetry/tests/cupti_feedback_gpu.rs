//! The advisor learning from CUPTI's faults on a real GPU (`--features gpu-tests`): the CUDA
//! backend cannot see faults, so a replay whose accesses are hidden from the policy learns
//! them only from CUPTI's records, read during the run and placed by time against the
//! kernels' device times. A binary of its own: CUPTI starts once per process.
#![cfg(feature = "gpu-tests")]

use unimem_core::backends::cuda::CudaBackend;
use unimem_core::config::Config;
use unimem_core::policy::{Advisor, AdvisorSettings};
use unimem_core::protocol::EventSink;
use unimem_core::replay;
use unimem_core::seam::MemEvent;
use unimem_core::trace::synth::{Pattern, Synth, SynthSpec};
use unimem_core::trace::TraceReader;
use unimem_core::MemoryBackendExt;
use unimem_core::{CostModel, RegionId, Result};

const MIB: u64 = 1 << 20;

/// Counts what CUPTI delivered.
#[derive(Default)]
struct Counting {
    events: u64,
}

impl EventSink for Counting {
    fn region(&mut self, _: RegionId, _: u64, _: Option<&str>, _: u64) -> Result<()> {
        Ok(())
    }
    fn freed(&mut self, _: RegionId) -> Result<()> {
        Ok(())
    }
    fn events(&mut self, events: &[MemEvent]) -> Result<()> {
        self.events += events.len() as u64;
        Ok(())
    }
}

#[test]
fn the_advisor_learns_hidden_accesses_from_cuptis_faults() {
    // 64 regions of 16 MiB read in order, over and over, on a 512 MiB software budget.
    let spec = SynthSpec {
        pattern: Pattern::Streaming,
        events: 4000,
        regions: 64,
        region_bytes: 16 * MIB,
        kernel_ns: 200_000,
        kernels_per_step: 64,
        seed: 1,
        write_every: 0,
    };
    let bytes: &'static [u8] = Box::leak(Synth::encode(spec).unwrap().into_boxed_slice());
    let budget = 512 * MIB;
    let cost = CostModel::h200();
    let mut results = Vec::new();
    for learn in [false, true] {
        let mut gpu = CudaBackend::open(0, budget, false).unwrap().with_staging(budget, budget).unwrap();
        // After the device is open (CUPTI refuses to start without a context: NOT_READY), before
        // the replay allocates (CUPTI reports nothing on memory allocated before it started).
        let source = unimem_telemetry::cupti::shared(false).unwrap();
        assert!(!gpu.records_faults(), "the CUDA backend cannot see faults");
        let mut config = Config::default();
        config.advisor.learn_from_faults = learn;
        let settings = AdvisorSettings::from_config(budget, &cost, &config.advisor);
        let mut advisor = Advisor::new(settings);
        let origin = gpu.event_clock_origin().expect("a GPU backend has an event clock");
        let mut sink = unimem_telemetry::cupti::CuptiSink::new(Counting::default(), source, origin).unwrap();
        // Every access hidden: the policy sees the kernels, not what they touch.
        let options = replay::Options { sink: Some(&mut sink), undeclared_every: 1, ..Default::default() };
        let reader = TraceReader::from_bytes("gpu", bytes).unwrap();
        let r = replay::run_with(reader, &mut gpu, &mut advisor, &mut |_| {}, options).unwrap();
        sink.close().unwrap();
        let l = r.learning;
        eprintln!(
            "learn_from_faults = {learn}: {:.1} ms ({:.2}x floor), faults {}, prefetched {} MiB (accuracy {:.2}), \
             learned {} MiB, late faults of {} kernels ({} too old), lag {:.0} kernels (max {}), {} events",
            r.time_ns as f64 / 1e6,
            r.over_floor(),
            r.gpu_faults,
            r.prefetch.arrived_bytes >> 20,
            r.prefetch.accuracy,
            l.learned_bytes >> 20,
            l.late_kernels,
            l.late_too_old,
            l.late_lag_mean,
            l.late_lag_max,
            r.events,
        );
        results.push((r, advisor.learned_bytes()));
    }
    let ((blind, learned_off), (taught, learned)) = (&results[0], &results[1]);
    assert_eq!(*learned_off, 0);
    assert!(*learned > 64 * MIB, "CUPTI's faults taught the advisor: {learned} bytes");
    assert_eq!(blind.prefetch.arrived_bytes, 0, "blind, it has nothing to prefetch");
    // What it learned it prefetched, and used.
    assert!(taught.prefetch.arrived_bytes > 1 << 30, "{:?}", taught.prefetch);
    assert!(taught.prefetch.accuracy > 0.5, "{:?}", taught.prefetch);
    // Prefetched instead of faulted: at least a fifth fewer fault groups.
    assert!(
        taught.gpu_faults * 10 < blind.gpu_faults * 8,
        "{} against {}",
        taught.gpu_faults,
        blind.gpu_faults
    );
    assert!(taught.learning.late_kernels > 100, "{:?}", taught.learning);
}
