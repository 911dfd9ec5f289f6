use super::*;

const MIB: u64 = 1 << 20;
/// The H200's link, bytes per nanosecond.
const RATE: f64 = 52.6;

/// A decoder pass: `layers` kernels of `dur_ns` each, reading four weight matrices (32, 32, 24
/// and 8 MiB) and touching 1 MiB of activations.
fn decoder(layers: u32, dur_ns: u64) -> Vec<LoopKernel<u32>> {
    (0..layers)
        .map(|l| LoopKernel {
            dur_ns,
            read_only: vec![
                (4 * l, 24 * MIB),
                (4 * l + 1, 8 * MIB),
                (4 * l + 2, 32 * MIB),
                (4 * l + 3, 32 * MIB),
            ],
            other: MIB,
        })
        .collect()
}

fn sizes(kernels: &[LoopKernel<u32>]) -> FxHashMap<u32, u64> {
    kernels.iter().flat_map(|k| k.read_only.iter().copied()).collect()
}

fn kept_per_layer(kernels: &[LoopKernel<u32>], kept: &FxHashSet<u32>) -> Vec<u64> {
    kernels
        .iter()
        .map(|k| k.read_only.iter().filter(|(r, _)| kept.contains(r)).map(|r| r.1 / MIB).sum())
        .collect()
}

/// The first `layers` layers kept whole: what Belady's rule converges to in a loop.
fn run_of(kernels: &[LoopKernel<u32>], layers: usize) -> FxHashSet<u32> {
    kernels[..layers].iter().flat_map(|k| k.read_only.iter().map(|r| r.0)).collect()
}

#[test]
fn a_decoder_streaming_its_weights_keeps_a_share_of_every_layer() {
    let k = decoder(16, 430_000);
    for budget in [384 * MIB, 768 * MIB, 1152 * MIB] {
        let kept = keep_set(&k, budget, RATE, Runs::Belady);
        let per_layer = kept_per_layer(&k, &kept);
        assert!(per_layer.iter().all(|&m| m > 0 && m < 96), "{budget}: some of every layer: {per_layer:?}");
        let bytes = sizes(&k);
        let share = pass_time(&k, &kept, &bytes, budget, RATE).expect("fits");
        // Against every run of whole layers that fits.
        let best_run = (0..16)
            .filter_map(|n| pass_time(&k, &run_of(&k, n), &bytes, budget, RATE))
            .fold(f64::INFINITY, f64::min);
        assert!(share < best_run * (1.0 - MIN_GAIN), "{budget}: {share} against {best_run}");
    }
}

#[test]
fn nothing_is_kept_when_the_loop_fits_or_no_share_pays() {
    let k = decoder(4, 430_000);
    assert!(keep_set(&k, 4 * 97 * MIB, RATE, Runs::Belady).is_empty(), "fits: Belady keeps it all");
    // A layer's data alone exceeds the budget: nothing fits beside it.
    assert!(keep_set(&k, 90 * MIB, RATE, Runs::Belady).is_empty());
    // Kernels far longer than their data's transfer: any schedule hides the link.
    let slow = decoder(16, 50_000_000);
    assert!(keep_set(&slow, 768 * MIB, RATE, Runs::Belady).is_empty());
}

#[test]
fn a_pattern_that_is_not_a_loop_keeps_nothing() {
    // Kernels reading 64 regions of 4 MiB in a scrambled order, each region several times: no
    // fixed set does as well as Belady's rule, which the bytes test catches.
    let mut state = 12345u64;
    let k: Vec<LoopKernel<u32>> = (0..512)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            LoopKernel { dur_ns: 20_000, read_only: vec![((state >> 33) as u32 % 64, 4 * MIB)], other: 0 }
        })
        .collect();
    assert!(keep_set(&k, 128 * MIB, RATE, Runs::Belady).is_empty());
}

#[test]
fn the_model_times_a_pass_by_its_compute_or_its_link() {
    let k = decoder(4, 1_000_000);
    let bytes = sizes(&k);
    let all: FxHashSet<u32> = bytes.keys().copied().collect();
    let t = pass_time(&k, &all, &bytes, 1 << 40, RATE).unwrap();
    assert!((t - 4_000_000.0).abs() < 1.0, "everything resident: the compute, {t}");
    // Nothing kept, room for two layers: the link carries 4 x 96 MiB a pass, and the compute
    // of the last layer cannot overlap the first's transfer (no room yet).
    let t = pass_time(&k, &FxHashSet::default(), &bytes, 2 * 97 * MIB, RATE).unwrap();
    let link = 4.0 * 96.0 * MIB as f64 / RATE;
    assert!(t >= link && t <= link + 2_000_000.0, "{t} against {link}");
    // A layer alone does not fit: no time.
    assert!(pass_time(&k, &FxHashSet::default(), &bytes, 90 * MIB, RATE).is_none());
}

#[test]
fn belady_moves_what_does_not_fit_of_a_loop() {
    // Four regions of 10 in a loop: with room for three, Belady's rule refetches one a pass
    // (N - C), with room for two, two.
    let k: Vec<LoopKernel<u32>> =
        (0..4).map(|r| LoopKernel { dur_ns: 1, read_only: vec![(r, 10)], other: 0 }).collect();
    let bytes = sizes(&k);
    assert_eq!(belady_bytes(&k, &bytes, 30), 10);
    assert_eq!(belady_bytes(&k, &bytes, 20), 20);
    assert_eq!(belady_bytes(&k, &bytes, 40), 0);
}

#[test]
fn a_recorded_step_offers_only_what_it_never_writes_or_frees() {
    // The decoder's step, recorded: its weights are candidates; a written region, a freed one
    // and one too small to prefetch count as other data and are never kept.
    let mut step = StepKernels::default();
    for k in decoder(16, 430_000) {
        let weights = k.read_only.iter().map(|&(r, b)| (r, b, false));
        step.kernel(
            k.dur_ns,
            weights.chain([(900, 4 * MIB, true), (901, 4 * MIB, false), (902, 64 << 10, false)]),
        );
    }
    step.freed(901);
    let kept = step.keep_set(768 * MIB, RATE, 256 << 10, Runs::Belady);
    assert!(!kept.is_empty() && kept.iter().all(|&r| r < 64), "{kept:?}");
    // The same weights, every one written somewhere in the step: nothing to keep.
    let mut written = StepKernels::default();
    for k in decoder(16, 430_000) {
        written.kernel(k.dur_ns, k.read_only.iter().map(|&(r, b)| (r, b, true)));
    }
    assert!(written.keep_set(768 * MIB, RATE, 256 << 10, Runs::Belady).is_empty());
}

#[test]
fn a_policy_that_cannot_see_a_loops_length_keeps_a_run_where_no_share_pays() {
    // 64 kernels of one 4 MiB region each, long beside their data's transfer: no share beats a
    // run of whole kernels, so for the oracle (Belady itself) nothing is kept. A forecast of 16
    // kernels sees none of the loop's reuse (64 kernels apart), so the advisor keeps the run
    // Belady would settle into rather than rank it least recently used first.
    let k: Vec<LoopKernel<u32>> =
        (0..64).map(|r| LoopKernel { dur_ns: 5_000_000, read_only: vec![(r, 4 * MIB)], other: 0 }).collect();
    assert!(keep_set(&k, 128 * MIB, RATE, Runs::Belady).is_empty());
    let run = keep_set(&k, 128 * MIB, RATE, Runs::Beyond(16));
    assert!(!run.is_empty() && run.len() < 32, "{} regions", run.len());
    assert!(keep_set(&k, 128 * MIB, RATE, Runs::Beyond(64)).is_empty(), "a forecast as long as the loop");
    assert_eq!(reuse_distance(&k), 64);
}

#[test]
fn a_step_longer_than_the_record_keeps_nothing_and_stops_growing() {
    let mut step = StepKernels::default();
    for i in 0..MAX_STEP_KERNELS as u32 {
        step.kernel(1000, [(i % 64, 4 * MIB, false)]);
    }
    assert_eq!(step.len(), MAX_STEP_KERNELS);
    step.kernel(1000, [(0, 4 * MIB, false)]);
    step.freed(7);
    assert!(step.is_empty(), "the record is dropped, not grown");
    assert_eq!(step.longest_reuse(), 0);
    assert!(step.keep_set(8 * MIB, RATE, 0, Runs::Beyond(0)).is_empty());
}

#[test]
fn a_loop_longer_than_the_budget_shows_itself_when_its_second_pass_begins() {
    // The decoder's weights (1.5 GiB) read in a loop: no reuse through the first pass; the
    // second pass's first kernel reads layer 0 again after the other 15 layers (and the rest
    // of its own), at least 1440 MiB later.
    let mut step = StepKernels::default();
    let pass = decoder(16, 430_000);
    for k in &pass {
        step.kernel(k.dur_ns, k.read_only.iter().map(|&(r, b)| (r, b, false)));
    }
    assert_eq!(step.longest_reuse(), 0);
    step.kernel(430_000, pass[0].read_only.iter().map(|&(r, b)| (r, b, false)));
    let reuse = step.longest_reuse();
    assert!((1440 * MIB..=1536 * MIB).contains(&reuse), "{} MiB", reuse / MIB);
    // Data the step writes is not kept, so its reuse does not count.
    let mut written = StepKernels::default();
    for k in pass.iter().chain(&pass[..1]) {
        written.kernel(k.dur_ns, k.read_only.iter().map(|&(r, b)| (r, b, true)));
    }
    assert_eq!(written.longest_reuse(), 0);
}

#[test]
fn steps_recording_alike_choose_alike_and_a_change_is_seen() {
    let record = |dur_ns: u64, freed: Option<u32>| {
        let mut step = StepKernels::default();
        for r in 0..8u32 {
            step.kernel(dur_ns, [(r, 4 * MIB, false), (100 + r, MIB, r == 3)]);
        }
        if let Some(key) = freed {
            step.freed(key);
        }
        step
    };
    let a = record(1000, None);
    assert!(a.same_choice(&record(1000, None)));
    let same = |s: &StepKernels<u32>| s.keep_set(24 * MIB, RATE, 0, Runs::Beyond(0));
    assert!(!same(&a).is_empty(), "the loop keeps a run");
    assert_eq!(same(&a), same(&record(1000, None)));
    assert!(!a.same_choice(&record(2000, None)), "kernel times differ");
    assert!(!a.same_choice(&record(1000, Some(5))), "a region freed");
    let mut longer = record(1000, None);
    longer.kernel(1000, [(0, 4 * MIB, false)]);
    assert!(!a.same_choice(&longer), "one more kernel");
    assert!(!a.same_choice(&StepKernels::default()));
}
