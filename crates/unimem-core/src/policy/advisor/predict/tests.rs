use super::*;
use crate::policy::advisor::identity::Identity;
use crate::region::RegionId;
use crate::trace::synth::{Pattern, Synth, SynthSpec};
use crate::trace::{TraceEvent, TraceReader};

/// Replays `events` through `p`; before each kernel (from step `from_step` on) scores what was
/// predicted for it with confidence >= 0.5 against the regions it touches.
fn evaluate(p: &mut dyn Predictor, events: impl Iterator<Item = TraceEvent>, from_step: u64) -> Score {
    evaluate_at(p, events, from_step, 0.5)
}

/// [`evaluate`], scoring the predictions of confidence `min` or more.
fn evaluate_at(
    p: &mut dyn Predictor,
    events: impl Iterator<Item = TraceEvent>,
    from_step: u64,
    min: f32,
) -> Score {
    let mut idn = Identity::new();
    let mut score = Score::default();
    let (mut kernel, mut step, mut preds) = (0u64, 0u64, Vec::new());
    let mut seen_step = false;
    for e in events {
        match e {
            TraceEvent::Alloc { id, bytes, .. } => {
                idn.on_alloc(RegionId(id), bytes);
            }
            TraceEvent::Free { id } => idn.on_free(RegionId(id)),
            TraceEvent::Step { .. } => {
                if seen_step {
                    step += 1;
                }
                seen_step = true;
                idn.on_step();
                p.on_step();
            }
            TraceEvent::Kernel { acc, .. } => {
                let keys: Vec<_> = acc.iter().filter_map(|a| idn.key(RegionId(a.id))).collect();
                if step >= from_step && kernel > 0 {
                    preds.clear();
                    p.predict(kernel - 1, 1, &mut preds);
                    let predicted: Vec<_> = preds
                        .iter()
                        .filter(|x| x.at == kernel && x.confidence >= min)
                        .map(|x| x.key)
                        .collect();
                    score.add(&predicted, &keys);
                }
                for a in &acc {
                    let key = idn.key(RegionId(a.id)).unwrap();
                    p.observe(&Observation { key, offset: a.offset, len: a.len, mode: a.mode, kernel });
                }
                p.end_kernel(kernel);
                kernel += 1;
            }
            TraceEvent::Host { .. } => {}
        }
    }
    score
}

fn synth(pattern: Pattern) -> impl Iterator<Item = TraceEvent> {
    Synth::new(SynthSpec {
        pattern,
        events: 20_000,
        regions: 48,
        region_bytes: 1 << 20,
        kernels_per_step: 48,
        ..Default::default()
    })
}

fn sample(name: &str) -> impl Iterator<Item = TraceEvent> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces").join(name);
    TraceReader::open(&path).unwrap().map(|e| e.unwrap())
}

fn report(label: &str, s: &Score) {
    eprintln!("{label:<40} precision {:.3} recall {:.3}", s.precision(), s.recall());
}

fn obs(key: u64, offset: u64, kernel: u64) -> Observation {
    Observation { key: RegionKey(key), offset, len: 100, mode: crate::AccessMode::Read, kernel }
}

fn run(p: &mut dyn Predictor, kernels: &[&[(u64, u64)]]) {
    for (k, accesses) in kernels.iter().enumerate() {
        for &(key, offset) in *accesses {
            p.observe(&obs(key, offset, k as u64));
        }
        p.end_kernel(k as u64);
    }
}

#[test]
fn sequential_follows_a_stride_and_a_gap() {
    // Region 7 at offsets 0, 100, 200 every other kernel: next at kernel 6, offset 300.
    let mut p = Sequential::new();
    run(&mut p, &[&[(7, 0)], &[], &[(7, 100)], &[], &[(7, 200)], &[]]);
    let mut out = Vec::new();
    p.predict(5, 4, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].key, out[0].at, out[0].offset), (RegionKey(7), 6, 300));
    assert!(out[0].confidence >= 0.6, "confirmed twice");
}

#[test]
fn markov_learns_what_follows_what() {
    // 1 is always followed by 2, and 2 by 3.
    let mut p = Markov::new();
    run(&mut p, &[&[(1, 0)], &[(2, 0)], &[(3, 0)], &[(1, 0)], &[(2, 0)], &[(3, 0)], &[(1, 0)]]);
    let mut out = Vec::new();
    p.predict(6, 2, &mut out);
    let next: Vec<_> = out.iter().map(|x| (x.key.0, x.at)).collect();
    assert_eq!(next, vec![(2, 7), (3, 8)]);
    assert!(out[0].confidence > 0.9 && out[1].confidence < out[0].confidence, "{out:?}");
}

#[test]
fn periodic_replays_the_last_step() {
    let mut p = Periodic::new();
    p.on_step();
    run(&mut p, &[&[(1, 0)], &[(2, 0), (3, 0)], &[(4, 0)]]);
    p.on_step();
    p.observe(&obs(1, 0, 3));
    p.end_kernel(3);
    let mut out = Vec::new();
    p.predict(3, 2, &mut out);
    let next: Vec<_> = out.iter().map(|x| (x.key.0, x.at)).collect();
    assert_eq!(next, vec![(2, 4), (3, 4), (4, 5)]);
}

#[test]
fn tournament_predicts_real_traces_from_the_second_step() {
    for trace in ["resnet50-train.jsonl.gz", "transformer-decode.jsonl.gz"] {
        let s = evaluate(&mut Tournament::standard(), sample(trace), 2);
        report(trace, &s);
        assert!(s.precision() >= 0.95 && s.recall() >= 0.9, "{trace}: {s:?}");
        let periodic = evaluate(&mut Periodic::new(), sample(trace), 2);
        assert!(periodic.recall() >= 0.99, "{trace}: the steps repeat exactly: {periodic:?}");
    }
}

#[test]
fn tournament_on_synthetic_patterns() {
    for pattern in [Pattern::Streaming, Pattern::Strided] {
        let s = evaluate(&mut Tournament::standard(), synth(pattern), 2);
        assert!(s.precision() >= 0.95 && s.recall() >= 0.95, "{pattern}: {s:?}");
    }
    let s = evaluate(&mut Tournament::standard(), synth(Pattern::Alternating), 2);
    assert!(s.precision() >= 0.9, "alternating: {s:?}");
    // A random walk on a graph: what follows what is learnable, one step ahead, but never
    // sure (each region has two successors, taken alike), so scored at any confidence. Each
    // successor's 0.5 is averaged with the row of the kernel's other input, a buffer whose
    // row knows nothing of the walk, and falls to about the emission threshold: 0.72 of the
    // accesses are forecast (0.8 or more taking each key's largest p over the rows).
    let markov = evaluate_at(&mut Markov::new(), synth(Pattern::Graph), 2, 0.0);
    let seq = evaluate_at(&mut Sequential::new(), synth(Pattern::Graph), 2, 0.0);
    assert!(markov.recall() >= 0.7 && markov.recall() > 10.0 * seq.recall(), "{markov:?} vs {seq:?}");
}

#[test]
fn tournament_does_not_claim_random_data() {
    // Each kernel reads one uniformly random data region (a third of the regions it touches)
    // plus its output buffers, which repeat every step. The tournament predicts the buffers
    // and stays silent on the data: high precision, recall at most the buffers' share.
    let s = evaluate(&mut Tournament::standard(), synth(Pattern::Random), 2);
    assert!(s.precision() >= 0.95, "{s:?}");
    assert!(s.recall() <= 0.7, "claims to predict random data: {s:?}");
}

/// The accuracy of every predictor on every pattern and trace (printed; run with
/// `--nocapture`). The assertions are in the tests above.
#[test]
fn accuracy_table() {
    type Make = fn() -> Box<dyn Predictor>;
    let predictors: Vec<(&str, Make)> = vec![
        ("sequential", || Box::new(Sequential::new())),
        ("markov", || Box::new(Markov::new())),
        ("periodic", || Box::new(Periodic::new())),
        ("tournament", || Box::new(Tournament::standard())),
    ];
    for pattern in Pattern::ALL {
        for (name, make) in &predictors {
            report(&format!("{pattern} {name}"), &evaluate(make().as_mut(), synth(pattern), 2));
        }
    }
    for trace in ["resnet50-train.jsonl.gz", "transformer-decode.jsonl.gz"] {
        for (name, make) in &predictors {
            report(&format!("{trace} {name}"), &evaluate(make().as_mut(), sample(trace), 2));
        }
    }
}

#[test]
fn a_sure_markov_chain_reaches_the_horizon() {
    // A cycle of 24 regions, seen twice: every successor is certain, so a forecast of 20
    // kernels names one region for each of them (the chain's decay ranks, it does not cut).
    let mut p = Markov::new();
    let cycle: Vec<Vec<(u64, u64)>> = (0..48).map(|k| vec![(k % 24, 0)]).collect();
    let kernels: Vec<&[(u64, u64)]> = cycle.iter().map(|v| v.as_slice()).collect();
    run(&mut p, &kernels);
    let mut out = Vec::new();
    p.predict(47, 20, &mut out);
    let at: Vec<_> = out.iter().map(|x| (x.at, x.key.0)).collect();
    let want: Vec<_> = (48..68).map(|k| (k, k % 24)).collect();
    assert_eq!(at, want);
    assert!(out.windows(2).all(|w| w[1].confidence < w[0].confidence), "{out:?}");
}

#[test]
fn markov_forecasts_a_consumer_once_not_again_after_it() {
    // Layer i reads weight 100 + i and the activation 200 + i - 1 the layer before made, and
    // makes activation 200 + i: each activation runs two kernels. After two passes over 6
    // layers, the forecast after layer 2 is layer 3's regions (activation 202 goes on into
    // it), and none of layer 2's weights: learned after each use, activation 201's row held
    // layer 2's regions at 0.5 and forecast them again.
    let layer = |i: u64| vec![(100 + i, 0), (200 + i, 0), (200 + (i + 5) % 6, 0)];
    let kernels: Vec<Vec<(u64, u64)>> = (0..15).map(|k| layer(k % 6)).collect();
    let refs: Vec<&[(u64, u64)]> = kernels.iter().map(|v| v.as_slice()).collect();
    let mut p = Markov::new();
    run(&mut p, &refs);
    let mut out = Vec::new();
    p.predict(14, 1, &mut out);
    let mut next: Vec<_> = out.iter().filter(|x| x.confidence >= 0.5).map(|x| x.key.0).collect();
    next.sort_unstable();
    assert_eq!(next, vec![103, 202, 203], "{out:?}");
}
