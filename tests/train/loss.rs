//! The trainer's loss path (`loss_and_grads`) against the PyTorch MAGRPO loss fixture, for
//! every way of running it: all K sequences in one pass or in micro-batches, with and without
//! activation recomputation. All must give the reference loss, gradient norm and gradients.
use crate::common;
use comlrl::model::{LoadOptions, ModelSource, Policy};
use comlrl::train::algorithms::magrpo::loss::loss_and_grads;
use comlrl::train::rollout::AgentRollout;
use common::*;

/// A fixture model, f32.
fn load(name: &str) -> Policy {
    Policy::load(
        &ModelSource::Local(fixtures().join(name)),
        &LoadOptions::default(),
    )
    .unwrap()
}

#[test]
fn every_loss_path_matches_the_reference() {
    let policy = load("tiny-qwen2");
    let named = policy.vars();
    let vars: Vec<candle_core::Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let (sample, r) = common::grad::loss_sample();
    assert!(
        sample.completions.len() >= 3,
        "the fixture has several completions"
    );
    for recompute in [false, true] {
        for chunk in [0, 1, 3] {
            let lg = loss_and_grads(
                &policy,
                &vars,
                &[&sample],
                chunk,
                recompute,
                comlrl::train::update::Share::ALL,
            )
            .unwrap();
            let what = format!("recompute {recompute}, micro-batch {chunk}");
            common::grad::assert_matches_reference(&what, &named, &lg, &r);
            assert!(lg.flops > 0.0 && lg.forward_s > 0.0 && lg.backward_s > 0.0);
        }
    }
}

#[test]
fn two_samples_average_and_accumulate_in_place() {
    // Two node samples in one mini-batch: the loss and gradients are the mean of each
    // sample's own, whatever the pass layout.
    let policy = load("tiny-qwen2");
    let vars: Vec<candle_core::Var> = policy.vars().into_iter().map(|(_, v)| v).collect();
    let (a, _) = common::grad::loss_sample();
    let mut b = a.clone();
    b.prompt_ids.truncate(b.prompt_ids.len().div_ceil(2));
    b.advantages.iter_mut().for_each(|x| *x = -*x * 0.5);
    let one = |s: &AgentRollout| {
        loss_and_grads(
            &policy,
            &vars,
            &[s],
            0,
            false,
            comlrl::train::update::Share::ALL,
        )
        .unwrap()
    };
    let (la, lb) = (one(&a), one(&b));
    let both = loss_and_grads(
        &policy,
        &vars,
        &[&a, &b],
        2,
        true,
        comlrl::train::update::Share::ALL,
    )
    .unwrap();
    assert!((both.loss - (la.loss + lb.loss) / 2.0).abs() < 1e-5);
    for ((ga, gb), g) in la.grads.iter().zip(&lb.grads).zip(&both.grads) {
        let (ga, gb, g) = (
            f32s(ga.as_ref().unwrap()),
            f32s(gb.as_ref().unwrap()),
            f32s(g.as_ref().unwrap()),
        );
        for ((x, y), z) in ga.iter().zip(&gb).zip(&g) {
            let want = (x + y) / 2.0;
            assert!(
                (z - want).abs() <= 1e-5 + 1e-3 * want.abs(),
                "{z} vs {want}"
            );
        }
    }
}

/// Data-parallel shares: each replica computes its passes (round-robin), their pass losses add
/// up to the one-process loss bit for bit (in pass order) and their gradients sum to the
/// one-process gradients up to rounding; with micro-batch 0 the K sequences are split into one
/// pass per replica.
#[test]
fn replica_shares_add_up_to_the_whole_mini_batch() {
    use comlrl::train::update::Share;
    let policy = load("tiny-qwen2");
    let vars: Vec<candle_core::Var> = policy.vars().into_iter().map(|(_, v)| v).collect();
    let (sample, _) = common::grad::loss_sample();
    for chunk in [0, 1] {
        let whole = loss_and_grads(
            &policy,
            &vars,
            &[&sample, &sample],
            chunk,
            false,
            Share::ALL,
        )
        .unwrap();
        let parts: Vec<_> = (0..2)
            .map(|index| {
                let share = Share { index, of: 2 };
                loss_and_grads(&policy, &vars, &[&sample, &sample], chunk, false, share).unwrap()
            })
            .collect();
        let mut passes: Vec<(usize, f64)> = parts.iter().flat_map(|p| p.passes.clone()).collect();
        passes.sort_by_key(|p| p.0);
        let numbers: Vec<usize> = passes.iter().map(|p| p.0).collect();
        assert_eq!(
            numbers,
            (0..numbers.len()).collect::<Vec<_>>(),
            "each pass once"
        );
        assert!(
            parts.iter().all(|p| !p.passes.is_empty()),
            "micro-batch {chunk}: idle replica"
        );
        if chunk == 1 {
            assert_eq!(passes, whole.passes, "the same passes as one process");
            let sum = passes.iter().fold(0f64, |a, p| a + p.1);
            assert_eq!(sum.to_bits(), whole.loss.to_bits());
        }
        for (j, g) in whole.grads.iter().enumerate() {
            let Some(g) = g else { continue };
            let want = f32s(g);
            let got: Vec<f32> = parts
                .iter()
                .map(|p| p.grads[j].as_ref().map_or(vec![0.0; want.len()], f32s))
                .fold(vec![0.0; want.len()], |acc, x| {
                    acc.iter().zip(&x).map(|(a, b)| a + b).collect()
                });
            let scale = want.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
            for (a, b) in want.iter().zip(&got) {
                assert!(
                    (a - b).abs() <= 1e-4 * scale,
                    "micro-batch {chunk}, grad {j}: {a} vs {b}"
                );
            }
        }
    }
}

/// Keeping layer activations from the first forward (`trainer.activation_budget_mb`) instead
/// of re-running the layers gives the same loss and gradients, bit for bit, whether every
/// layer, only the bottom one (the pass's budget), only the top one (the first pass's top
/// budget) or none is kept, in f32 and bf16 (kept activations leave out what the backward
/// recomputes: two norms, the attention probabilities and the SwiGLU).
#[test]
fn kept_activations_give_the_rerun_gradients_exactly() {
    use comlrl::model::grad::recompute::{forward_and_head, PassPlan};
    use comlrl::model::kernels::compute_dtype::Prepared;
    use comlrl::model::ComputeDtype;
    use comlrl::train::algorithms::magrpo::loss::loss_and_grads_in;
    use comlrl::train::update::Share;
    let policy = load("tiny-qwen2");
    let vars: Vec<candle_core::Var> = policy.vars().into_iter().map(|(_, v)| v).collect();
    let (sample, _) = common::grad::loss_sample();
    let layers = policy.config.num_hidden_layers;
    let run = |keep_bytes: usize| {
        let plan = PassPlan {
            keep_bytes,
            ..PassPlan::rerun_all(ComputeDtype::F32)
        };
        loss_and_grads_in(&policy, &vars, &[&sample], 0, true, Share::ALL, plan).unwrap()
    };
    // A budget of 0 re-runs every layer (no top budget either); a large one keeps them all.
    let rerun = run(0);
    assert_eq!(rerun.kept_layers, 0);
    let all = run(1 << 30);
    assert_eq!(all.kept_layers, layers, "one pass keeps every layer");
    assert_eq!(all.loss.to_bits(), rerun.loss.to_bits(), "loss");
    for (i, (a, b)) in all.grads.iter().zip(&rerun.grads).enumerate() {
        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
        assert_eq!(f32s(a), f32s(b), "every layer kept: gradient {i} differs");
    }

    // One pass with each budget: the layers have equal shapes, so one layer's bytes keep the
    // bottom layer (`keep_bytes`) or the top one (`keep_top_bytes`).
    let layer = all.kept_bytes_max / layers;
    let (prompt, completions, _) = common::grad::loss_fixture();
    let p: Vec<&[u32]> = vec![prompt.as_slice(); completions.len()];
    let c: Vec<&[u32]> = completions.iter().map(|v| v.as_slice()).collect();
    let layout = comlrl::model::ScoreLayout::new(&policy.model, &p, &c, policy.pad_id).unwrap();
    let coef: Vec<f32> = sample
        .advantages
        .iter()
        .map(|a| -a / c.len() as f32)
        .collect();
    for dtype in [ComputeDtype::F32, ComputeDtype::Bf16] {
        let head = Prepared::new(policy.model.lm_head(), dtype).unwrap();
        let pass = |keep_bytes: usize, keep_top_bytes: usize| {
            let plan = PassPlan {
                keep_bytes,
                keep_top_bytes,
                dtype,
                share_prompt: false,
                pack_bytes: 0,
                logit_scale: 1.0,
            };
            let mut acc = vec![None; vars.len()];
            let pending = forward_and_head(
                &policy.model,
                &layout,
                &coef,
                &vars,
                &mut acc,
                plan,
                &head,
                None,
            )
            .unwrap();
            let kept = pending.kept_layers();
            let stats = pending.backward(&policy.model, &vars, &mut acc).unwrap();
            (kept, stats.loss, acc)
        };
        let (none, loss, want) = pass(0, 0);
        assert!(none.iter().all(|k| !k));
        let mut bottom = vec![false; layers];
        bottom[0] = true;
        let mut top = vec![false; layers];
        top[layers - 1] = true;
        for (budgets, which) in [((layer, 0), bottom), ((0, layer), top)] {
            let (kept, got_loss, got) = pass(budgets.0, budgets.1);
            assert_eq!(kept, which, "{dtype}: budgets {budgets:?}");
            assert_eq!(got_loss.to_bits(), loss.to_bits(), "{dtype}: loss");
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    f32s(a.as_ref().unwrap()),
                    f32s(b.as_ref().unwrap()),
                    "{dtype}: layers {kept:?} kept: gradient {i} differs"
                );
            }
        }
    }
}

/// The two orders of a mini-batch's recomputed passes (`model::pass_order`) compute the same
/// thing: the loss bit for bit, every gradient bit for bit where the LM head and the embedding
/// do not share an accumulator (an untied model, and every layer of a tied one), the tied
/// accumulator up to float rounding (its terms are added in another order); in f32 and bf16.
/// Each waiting pass holds no more than the order's estimate of it.
#[test]
fn heads_first_gives_the_one_by_one_gradients() {
    use comlrl::model::grad::pass_order::{run_passes_in, waiting_bytes, Order, Pass};
    use comlrl::model::grad::recompute::{forward_and_head, PassPlan};
    use comlrl::model::{kernels::compute_dtype::Prepared, ComputeDtype, ScoreLayout};
    let (prompt, completions, _) = common::grad::loss_fixture();
    for (name, dtype) in [
        ("tiny-qwen2", ComputeDtype::F32),
        ("tiny-qwen2", ComputeDtype::Bf16),
        ("tiny-qwen2-untied", ComputeDtype::F32),
    ] {
        let policy = load(name);
        let named = policy.vars();
        let vars: Vec<candle_core::Var> = named.iter().map(|(_, v)| v.clone()).collect();
        // Three passes: two sequences, then one each (the fixture has several completions).
        let n = completions.len();
        let layouts: Vec<ScoreLayout> = [vec![0, 1], vec![2 % n], vec![3 % n]]
            .iter()
            .map(|part| {
                let p: Vec<&[u32]> = vec![prompt.as_slice(); part.len()];
                let c: Vec<&[u32]> = part.iter().map(|&j| completions[j].as_slice()).collect();
                ScoreLayout::new(&policy.model, &p, &c, policy.pad_id).unwrap()
            })
            .collect();
        let passes: Vec<Pass> = layouts
            .iter()
            .enumerate()
            .map(|(i, layout)| Pass {
                layout,
                coef: (0..layout.ids.dims()[0])
                    .map(|r| if (i + r) % 2 == 0 { 0.75 } else { -0.5 })
                    .collect(),
                tokens: None,
                entropy: None,
                value: None,
            })
            .collect();
        let run = |order, plan| {
            let mut acc = vec![None; vars.len()];
            let stats =
                run_passes_in(order, &policy.model, &passes, &vars, &mut acc, plan).unwrap();
            (stats, acc)
        };
        // A budget of one layer of the first (two-sequence) pass: some layers keep their
        // activations, some re-run.
        let all = run(
            Order::OneByOne,
            PassPlan {
                keep_bytes: 1 << 30,
                ..PassPlan::rerun_all(dtype)
            },
        )
        .0;
        let layers = policy.config.num_hidden_layers;
        let plan = PassPlan {
            keep_bytes: all[0].kept_bytes / layers,
            ..PassPlan::rerun_all(dtype)
        };
        let run = |order| run(order, plan);
        let (one, one_acc) = run(Order::OneByOne);
        let (first, first_acc) = run(Order::HeadsFirst);
        let kept: usize = one.iter().map(|s| s.kept_layers).sum();
        assert!(kept > 0 && kept < 3 * layers, "{name}: {kept} layers kept");
        let what = format!("{name}, {dtype}");
        for (a, b) in one.iter().zip(&first) {
            assert_eq!(a.loss.to_bits(), b.loss.to_bits(), "{what}: a pass's loss");
            assert_eq!(a.kept_layers, b.kept_layers, "{what}: kept layers");
        }
        let tied = named.iter().all(|(n, _)| !n.starts_with("lm_head"));
        assert_eq!(tied, name == "tiny-qwen2", "{what}: tied embeddings");
        for (((n, v), a), b) in named.iter().zip(&one_acc).zip(&first_acc) {
            let (a, b) = (f32s(a.as_ref().unwrap()), f32s(b.as_ref().unwrap()));
            if tied && v.as_tensor().id() == policy.model.lm_head().id() {
                let scale = a.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
                for (x, y) in a.iter().zip(&b) {
                    assert!((x - y).abs() <= 1e-5 * scale, "{what}: {n}: {x} vs {y}");
                }
            } else {
                assert_eq!(a, b, "{what}: {n} differs");
            }
        }
        // The estimate of a waiting pass bounds what it holds.
        let head = Prepared::new(policy.model.lm_head(), dtype).unwrap();
        let mut acc = vec![None; vars.len()];
        let p = &passes[0];
        let pending = forward_and_head(
            &policy.model,
            p.layout,
            &p.coef,
            &vars,
            &mut acc,
            plan,
            &head,
            None,
        )
        .unwrap();
        let bound = waiting_bytes(&policy.model, p.layout, plan).unwrap();
        assert!(
            pending.bytes() > 0 && pending.bytes() <= bound,
            "{what}: {} > {bound}",
            pending.bytes()
        );
    }
}

/// The order is heads first where waiting costs less than the LM head's phase (bf16, whose
/// packed head copies dwarf a tiny model's layer inputs) and one by one where the waiting
/// passes could hold more (a large activation budget each).
#[test]
fn the_pass_order_follows_the_estimated_peak() {
    use comlrl::model::grad::pass_order::{choose, Order, Pass};
    use comlrl::model::grad::recompute::PassPlan;
    use comlrl::model::{ComputeDtype, ScoreLayout};
    let policy = load("tiny-qwen2");
    let (prompt, completions, _) = common::grad::loss_fixture();
    let p: Vec<&[u32]> = vec![prompt.as_slice(); 2];
    let c: Vec<&[u32]> = completions.iter().take(2).map(|v| v.as_slice()).collect();
    let layout = ScoreLayout::new(&policy.model, &p, &c, policy.pad_id).unwrap();
    let pass = || Pass {
        layout: &layout,
        coef: vec![1.0, -1.0],
        tokens: None,
        entropy: None,
        value: None,
    };
    let passes = [pass(), pass(), pass()];
    let plan = |keep_mb: usize| PassPlan {
        keep_bytes: keep_mb << 20,
        ..PassPlan::rerun_all(ComputeDtype::Bf16)
    };
    let order = |keep_mb| choose(&policy.model, &passes, plan(keep_mb)).unwrap();
    assert_eq!(order(0), Order::HeadsFirst);
    assert_eq!(order(1024), Order::OneByOne);
    // One pass waits for nothing.
    let one = choose(&policy.model, &passes[..1], plan(1024)).unwrap();
    assert_eq!(one, Order::HeadsFirst);
}
