//! The update's shared prompt (`trainer.share_prompt`, `model::grad::recompute::prompt_part`): a pass
//! whose rows continue one prompt computes that prompt once and the rows attend to its keys
//! and values. The loss and gradients must be those of every row computed whole (the PyTorch
//! fixture's) in every pass layout, with layers kept or re-run, on every architecture's
//! switches and in both compute dtypes, and the products must shrink.
use crate::common;
use comlrl::model::grad::recompute::{prompt_part, PassPlan};
use comlrl::model::{ComputeDtype, LoadOptions, ModelSource, Policy, ScoreLayout};
use comlrl::train::algorithms::magrpo::loss::loss_and_grads_in;
use comlrl::train::rollout::AgentRollout;
use comlrl::train::update::{LossGrads, Share};
use common::*;

fn load(name: &str) -> Policy {
    Policy::load(
        &ModelSource::Local(fixtures().join(name)),
        &LoadOptions::default(),
    )
    .unwrap()
}

/// The recomputed loss of `sample` in passes of `chunk` rows, its products in `dtype`, with
/// `keep_bytes` of kept activations, the prompt shared or not.
fn run(
    policy: &Policy,
    sample: &AgentRollout,
    chunk: usize,
    keep_bytes: usize,
    dtype: ComputeDtype,
    share_prompt: bool,
) -> LossGrads {
    let vars: Vec<candle_core::Var> = policy.vars().into_iter().map(|(_, v)| v).collect();
    let plan = PassPlan {
        keep_bytes,
        share_prompt,
        ..PassPlan::rerun_all(dtype)
    };
    loss_and_grads_in(policy, &vars, &[sample], chunk, true, Share::ALL, plan).unwrap()
}

/// The worst relative norm error ‖a − b‖ / ‖b‖ over the gradient tensors: 0 where they agree.
fn worst_relative_error(a: &LossGrads, b: &LossGrads) -> f64 {
    a.grads
        .iter()
        .zip(&b.grads)
        .map(|(x, y)| {
            let (x, y) = (f32s(x.as_ref().unwrap()), f32s(y.as_ref().unwrap()));
            let diff: f64 = x
                .iter()
                .zip(&y)
                .map(|(p, q)| ((p - q) as f64).powi(2))
                .sum();
            let norm: f64 = y.iter().map(|&q| (q as f64).powi(2)).sum();
            (diff / norm.max(1e-30)).sqrt()
        })
        .fold(0f64, f64::max)
}

#[test]
fn a_shared_prompt_gives_the_reference_loss_and_gradients() {
    let policy = load("tiny-qwen2");
    let named = policy.vars();
    let (sample, r) = common::grad::loss_sample();
    assert!(
        sample.prompt_ids.len() >= 2,
        "the fixture's prompt has a part to share"
    );
    // Kept activations (the prompt's row packed with the rows) give the re-run's numbers bit
    // for bit, as without a shared prompt (one pass: several may run heads first, which sums
    // the tied embedding/head's terms in another order).
    let rerun = run(&policy, &sample, 0, 0, ComputeDtype::F32, true);
    let kept = run(&policy, &sample, 0, 1 << 30, ComputeDtype::F32, true);
    assert!(kept.kept_layers > 0 && rerun.kept_layers == 0);
    assert_eq!(kept.loss.to_bits(), rerun.loss.to_bits());
    assert_eq!(worst_relative_error(&kept, &rerun), 0.0);
    for chunk in [0, 2, 3] {
        for keep in [0, 1 << 30] {
            let what = format!("shared prompt, micro-batch {chunk}, keep {keep}");
            let shared = run(&policy, &sample, chunk, keep, ComputeDtype::F32, true);
            common::grad::assert_matches_reference(&what, &named, &shared, &r);
            // Fewer products than the same passes with every row whole.
            let whole = run(&policy, &sample, chunk, keep, ComputeDtype::F32, false);
            assert!(
                shared.flops < whole.flops,
                "{what}: {} vs {} FLOPs",
                shared.flops,
                whole.flops
            );
            if keep > 0 {
                assert_eq!(shared.kept_layers, whole.kept_layers, "{what}: kept layers");
            }
        }
    }
}

/// Biases on every projection (Llama fixture), per-head q/k norms (Qwen3), an untied head:
/// shared and whole rows give the same f32 gradients up to float rounding. With bf16 products
/// the prompt's gradients are summed over the rows before, not after, rounding to bf16, so
/// there the shared gradients must be as close to the f32 ones as the whole rows' are.
#[test]
fn shared_and_whole_rows_agree_on_every_architecture_and_dtype() {
    let (sample, _) = common::grad::loss_sample();
    for name in ["tiny-llama", "tiny-qwen3", "tiny-qwen2-untied"] {
        let policy = load(name);
        let exact = run(&policy, &sample, 0, 0, ComputeDtype::F32, false);
        let shared = run(&policy, &sample, 0, 0, ComputeDtype::F32, true);
        assert!(shared.flops < exact.flops, "{name}: not shared");
        let rel = (shared.loss - exact.loss).abs() / exact.loss.abs().max(1e-9);
        assert!(rel < 1e-5, "{name}: loss {} vs {}", shared.loss, exact.loss);
        let err = worst_relative_error(&shared, &exact);
        assert!(err < 1e-5, "{name}: f32 gradients differ by {err}");

        let bf16_shared = run(&policy, &sample, 0, 0, ComputeDtype::Bf16, true);
        let bf16_whole = run(&policy, &sample, 0, 0, ComputeDtype::Bf16, false);
        assert!(
            bf16_shared.flops < bf16_whole.flops,
            "{name} bf16: not shared"
        );
        let (e_shared, e_whole) = (
            worst_relative_error(&bf16_shared, &exact),
            worst_relative_error(&bf16_whole, &exact),
        );
        assert!(
            e_shared > 0.0 && e_shared <= 2.0 * e_whole,
            "{name} bf16: shared {e_shared} vs whole {e_whole} from f32"
        );
    }
}

/// Where nothing can be shared the pass is computed whole: a one-token prompt, a single row,
/// rows with different prompts, and `share_prompt: false`.
#[test]
fn passes_with_nothing_to_share_are_computed_whole() {
    let policy = load("tiny-qwen2");
    let m = &policy.model;
    let layout = |prompts: &[&[u32]], comps: &[&[u32]]| {
        ScoreLayout::new(m, prompts, comps, policy.pad_id).unwrap()
    };
    let (p, c) = ([5u32, 6, 7], [8u32, 9]);
    let two_rows = layout(&[&p, &p], &[&c, &c[..1]]);
    assert!(two_rows.shared_prompt);
    assert_eq!(prompt_part(m, &two_rows, true).unwrap(), Some(2));
    assert_eq!(prompt_part(m, &two_rows, false).unwrap(), None);
    assert_eq!(prompt_part(m, &layout(&[&p], &[&c]), true).unwrap(), None);
    assert_eq!(
        prompt_part(m, &layout(&[&p[..1], &p[..1]], &[&c, &c]), true).unwrap(),
        None
    );
    let differ = layout(&[&p, &[5, 6, 8]], &[&c, &c]);
    assert!(!differ.shared_prompt);
    assert_eq!(prompt_part(m, &differ, true).unwrap(), None);
    // A prompt whose ids equal another's left-padded ones is not the same prompt.
    let padded = layout(&[&[policy.pad_id, 6], &[6]], &[&c, &c]);
    assert!(!padded.shared_prompt);

    // The trainer's path with a one-token prompt: the same loss and gradients either way.
    let (mut sample, _) = common::grad::loss_sample();
    sample.prompt_ids.truncate(1);
    let shared = run(&policy, &sample, 0, 0, ComputeDtype::F32, true);
    let whole = run(&policy, &sample, 0, 0, ComputeDtype::F32, false);
    assert_eq!(shared.flops, whole.flops);
    assert_eq!(shared.loss.to_bits(), whole.loss.to_bits());
    assert_eq!(worst_relative_error(&shared, &whole), 0.0);
}

/// The trainer takes the key: with passes of 4 completions of one prompt (a ~60-token one), a
/// run logs the same first update (loss and gradient norm, computed before any weight
/// changes) shared as whole.
#[test]
fn a_run_shares_long_prompts_and_logs_the_same_update() {
    use common::tiny_run::{load_small, tiny};
    let tmp = tempfile::tempdir().unwrap();
    let long = |topic: &str| format!("{topic}{}", " and then the story goes on".repeat(10));
    let prompts = format!(
        "dataset.prompts=[\"{}\", \"{}\"]",
        long("Tell a story about a cat"),
        long("Describe a tower of glass")
    );
    let first_update = |share: bool| {
        let out = tmp.path().join(format!("share-{share}"));
        let sets = [
            prompts.clone(),
            "trainer.micro_batch_size=4".to_string(),
            format!("trainer.share_prompt={share}"),
        ];
        let plan = comlrl::train::update::plan::pass_plan(&load_small(&out, &sets).trainer);
        assert_eq!(
            plan.share_prompt, share,
            "the key reaches the update's plan"
        );
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let (ok, _, err) = tiny(&out, &sets, &[]).output().parts();
        assert!(ok, "{err}");
        let rows = metrics(&out);
        let row = rows
            .iter()
            .find(|r| r.get("agent_0/loss").is_some())
            .unwrap_or_else(|| panic!("no update logged: {rows:?}"))
            .clone();
        let num = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("{k} in {row}"));
        (
            num("agent_0/loss"),
            num("agent_0/grad_norm"),
            num("agent_1/grad_norm"),
        )
    };
    let (shared, whole) = (first_update(true), first_update(false));
    for (what, a, b) in [
        ("agent 0 loss", shared.0, whole.0),
        ("agent 0 grad norm", shared.1, whole.1),
        ("agent 1 grad norm", shared.2, whole.2),
    ] {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1e-3),
            "{what}: shared {a} vs whole {b}"
        );
    }
}
