//! Sequences whose advantage is exactly 0 carry no gradient, so the loss path leaves them out.
//! The gradient is linear in the advantages, which gives a reference that does not depend on
//! the skipping: g(A) = g(A with A_j = 0) + g(only A_j), each side computed by the trainer's
//! loss path, and g(A) is the PyTorch fixture's. A mini-batch with no other sequence still
//! yields zero gradients (not missing ones), so the optimizer steps as torch's would.
use crate::common;
use comlrl::model::{LoadOptions, ModelSource, Policy};
use comlrl::train::algorithms::magrpo::loss::loss_and_grads;
use comlrl::train::rollout::AgentRollout;
use comlrl::train::update::{LossGrads, Share};
use common::*;

fn tiny() -> Policy {
    Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap()
}

fn run(policy: &Policy, s: &AgentRollout, chunk: usize, recompute: bool) -> LossGrads {
    let vars: Vec<candle_core::Var> = policy.vars().into_iter().map(|(_, v)| v).collect();
    loss_and_grads(policy, &vars, &[s], chunk, recompute, Share::ALL).unwrap()
}

fn with_advantages(s: &AgentRollout, f: impl Fn(usize, f32) -> f32) -> AgentRollout {
    let mut s = s.clone();
    s.advantages = s
        .advantages
        .iter()
        .enumerate()
        .map(|(j, &a)| f(j, a))
        .collect();
    s
}

#[test]
fn zero_advantage_sequences_are_left_out_without_changing_the_gradients() {
    let policy = tiny();
    let (sample, _) = common::grad::loss_sample();
    let k = sample.completions.len();
    assert!(k >= 3 && sample.advantages.iter().all(|&a| a != 0.0));
    let j = 1;
    let without_j = with_advantages(&sample, |i, a| if i == j { 0.0 } else { a });
    let only_j = with_advantages(&sample, |i, a| if i == j { a } else { 0.0 });
    for recompute in [false, true] {
        for chunk in [0, 1, 2] {
            let what = format!("recompute {recompute}, micro-batch {chunk}");
            let whole = run(&policy, &sample, chunk, recompute);
            let (rest, one) = (
                run(&policy, &without_j, chunk, recompute),
                run(&policy, &only_j, chunk, recompute),
            );
            assert_eq!(
                (whole.skipped, rest.skipped, one.skipped),
                (0, 1, k - 1),
                "{what}"
            );
            // Fewer sequences scored: fewer FLOPs (a chunk's padding width may differ).
            assert!(rest.flops < whole.flops && one.flops < rest.flops, "{what}");
            let loss = rest.loss + one.loss;
            assert!(
                (loss - whole.loss).abs() <= 1e-5 * whole.loss.abs().max(1.0),
                "{what}: loss {} + {} vs {}",
                rest.loss,
                one.loss,
                whole.loss
            );
            let mut moved = false;
            for (n, ((w, r), o)) in whole
                .grads
                .iter()
                .zip(&rest.grads)
                .zip(&one.grads)
                .enumerate()
            {
                let (w, r, o) = (
                    f32s(w.as_ref().expect("gradient")),
                    f32s(r.as_ref().expect("gradient")),
                    f32s(o.as_ref().expect("gradient")),
                );
                let scale = w.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
                for ((w, r), o) in w.iter().zip(&r).zip(&o) {
                    assert!(
                        (w - (r + o)).abs() <= 1e-4 * scale,
                        "{what}, grad {n}: {w} vs {r} + {o}"
                    );
                }
                moved |= o.iter().any(|&x| x != 0.0);
            }
            // The left-out sequence mattered: its own gradient is not zero.
            assert!(moved, "{what}");
        }
    }
}

#[test]
fn a_mini_batch_of_zero_advantages_gives_zero_gradients_for_every_parameter() {
    let policy = tiny();
    let (sample, _) = common::grad::loss_sample();
    let k = sample.completions.len();
    let zeros = with_advantages(&sample, |_, _| 0.0);
    for recompute in [false, true] {
        let lg = run(&policy, &zeros, 0, recompute);
        assert_eq!(lg.skipped, k - 1, "one sequence is still scored");
        assert!(lg.flops > 0.0);
        assert_eq!(lg.loss, 0.0);
        assert_eq!(lg.grads.len(), policy.vars().len());
        for (n, g) in lg.grads.iter().enumerate() {
            let g = g
                .as_ref()
                .unwrap_or_else(|| panic!("recompute {recompute}: parameter {n} got no gradient"));
            assert!(f32s(g).iter().all(|&x| x == 0.0), "parameter {n}");
        }
    }
    // With no tokens at all there is nothing to score, as before.
    let mut empty = zeros.clone();
    empty.completions.iter_mut().for_each(Vec::clear);
    let lg = run(&policy, &empty, 0, true);
    assert_eq!((lg.skipped, lg.flops), (0, 0.0));
    assert!(lg.grads.iter().all(Option::is_none));
}

#[test]
fn replicas_number_the_same_passes_when_sequences_are_left_out() {
    // Data-parallel replicas lay out the mini-batch alike, so each remaining pass is computed
    // once, and an all-zero mini-batch's one pass by one replica only.
    let policy = tiny();
    let vars: Vec<candle_core::Var> = policy.vars().into_iter().map(|(_, v)| v).collect();
    let (sample, _) = common::grad::loss_sample();
    for zeroed in [vec![0, 2], (0..sample.completions.len()).collect()] {
        let s = with_advantages(&sample, |i, a| if zeroed.contains(&i) { 0.0 } else { a });
        let whole = run(&policy, &s, 1, true);
        let parts: Vec<LossGrads> = (0..2)
            .map(|index| {
                let share = Share { index, of: 2 };
                loss_and_grads(&policy, &vars, &[&s], 1, true, share).unwrap()
            })
            .collect();
        let mut numbers: Vec<usize> = parts
            .iter()
            .flat_map(|p| p.passes.iter().map(|q| q.0))
            .collect();
        numbers.sort();
        assert_eq!(numbers, (0..whole.passes.len()).collect::<Vec<_>>());
        assert!(parts.iter().all(|p| p.skipped == whole.skipped));
        for (j, g) in whole.grads.iter().enumerate() {
            let want = f32s(g.as_ref().expect("gradient"));
            let mut got = vec![0f32; want.len()];
            for p in &parts {
                if let Some(g) = &p.grads[j] {
                    got.iter_mut().zip(f32s(g)).for_each(|(a, b)| *a += b);
                }
            }
            let scale = want.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
            for (a, b) in want.iter().zip(&got) {
                assert!((a - b).abs() <= 1e-4 * scale, "grad {j}: {a} vs {b}");
            }
        }
    }
}
