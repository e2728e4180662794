//! `trainer.compute_dtype: bf16` against the f32 update on the fixture models: the loss and
//! every parameter's gradient of the trainer's recomputed loss (`loss_and_grads_in`), as the
//! relative norm error ‖g_bf16 − g_f32‖ / ‖g_f32‖ per tensor (table with `--nocapture`); and
//! `F32` through the new entry point is the default path bit for bit; bf16 where it has no
//! path (the plain autograd loss, bf16 weights) is an error.
use crate::common;
use candle_core::{DType, Tensor, Var};
use comlrl::model::grad::recompute::PassPlan;
use comlrl::model::{ComputeDtype, LoadOptions, ModelSource, Policy};
use comlrl::train::algorithms::magrpo::loss::{loss_and_grads, loss_and_grads_in};
use comlrl::train::rollout::AgentRollout;
use comlrl::train::update::{LossGrads, Share};
use common::*;

/// Bound on each tensor's relative gradient error. bf16 keeps 8 significant bits, so rounding
/// one operand moves it by at most 2⁻⁹ ≈ 2e-3 relative (about 2⁻⁹/√3 ≈ 1.1e-3 RMS); a product
/// of two rounded operands is off by ~1.6e-3 RMS, and a gradient passes through a few such
/// products per layer (forward re-run, d x, d W) and through every layer above it, whose
/// errors add up roughly in quadrature. Measured here: 2e-3 to 1.3e-2 per tensor, 3e-3 to
/// 6.4e-3 over all tensors (docs/performance.md); 3e-2 leaves room for other CPUs' summation order and still fails at
/// once if a product used the wrong operand (errors of order 1).
const GRAD_REL: f64 = 3e-2;
/// Bound on the relative loss error: the loss is a sum of log-probs whose logits come from
/// bf16 products (measured 2e-5 to 2.1e-3).
const LOSS_REL: f64 = 1e-2;

fn load(name: &str) -> Policy {
    let opts = LoadOptions {
        dtype: DType::F32,
        ..LoadOptions::default()
    };
    Policy::load(&ModelSource::Local(fixtures().join(name)), &opts).expect("load fixture")
}

/// One node sample per case: the MAGRPO loss fixture (tiny tokenizer, vocabulary 3000) for the
/// Qwen2 models, the reference prompts/completions/advantages for tiny-llama and tiny-qwen3.
fn samples(name: &str) -> Vec<AgentRollout> {
    let sample = common::grad::rollout;
    if name.starts_with("tiny-qwen2") {
        let (prompt, completions, r) = common::grad::loss_fixture();
        let adv = r["advantages"]
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1()
            .unwrap();
        return vec![sample(prompt, completions, adv)];
    }
    let dir = fixtures().join(name);
    let refj = json(&dir.join("reference.json"));
    let r = load_st(&dir.join("reference.safetensors"));
    let comps = masked_completions(&r);
    let adv = refj["loss_grads"]["advantages"].as_array().unwrap();
    refj["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let a = adv[k].as_f64().unwrap() as f32;
            // Two completions per sample (the second with the opposite advantage), so that
            // each pass has a padded row.
            let other = comps[(k + 1) % comps.len()].clone();
            sample(ids(&p["ids"]), vec![comps[k].clone(), other], vec![a, -a])
        })
        .collect()
}

fn run(policy: &Policy, vars: &[Var], samples: &[AgentRollout], dt: ComputeDtype) -> LossGrads {
    let refs: Vec<&AgentRollout> = samples.iter().collect();
    let plan = PassPlan::rerun_all(dt);
    loss_and_grads_in(policy, vars, &refs, 0, true, Share::ALL, plan).expect("loss and gradients")
}

fn norm(t: &Tensor) -> f64 {
    f32s(t)
        .iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt()
}

/// The bf16 update's loss and gradients against the f32 ones for `name`: prints the table and
/// returns the largest relative gradient error.
fn compare(name: &str) -> f64 {
    let policy = load(name);
    let named = policy.vars();
    let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let samples = samples(name);
    let refs: Vec<&AgentRollout> = samples.iter().collect();
    let f32_run = run(&policy, &vars, &samples, ComputeDtype::F32);
    let old = loss_and_grads(&policy, &vars, &refs, 0, true, Share::ALL).unwrap();
    assert_eq!(
        f32_run.loss.to_bits(),
        old.loss.to_bits(),
        "{name}: f32 loss"
    );
    for ((pname, _), (a, b)) in named.iter().zip(f32_run.grads.iter().zip(&old.grads)) {
        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
        assert_eq!(f32s(a), f32s(b), "{name}: f32 gradient of {pname} changed");
    }
    let bf = run(&policy, &vars, &samples, ComputeDtype::Bf16);
    let loss_rel = ((bf.loss - f32_run.loss) / f32_run.loss).abs();
    println!(
        "\n{name}: loss f32 {:.6} bf16 {:.6} (relative error {loss_rel:.2e})",
        f32_run.loss, bf.loss
    );
    println!("| tensor | ‖g_f32‖ | ‖g_bf16 − g_f32‖ / ‖g_f32‖ |");
    println!("|---|---|---|");
    assert!(loss_rel < LOSS_REL, "{name}: loss error {loss_rel:.2e}");
    assert!(bf.loss != f32_run.loss, "{name}: bf16 loss equals f32's");
    let (mut worst, mut diff_sq, mut ref_sq) = (0f64, 0f64, 0f64);
    for ((pname, _), (g16, g32)) in named.iter().zip(bf.grads.iter().zip(&f32_run.grads)) {
        let g32 = g32
            .as_ref()
            .unwrap_or_else(|| panic!("{pname}: no f32 gradient"));
        let g16 = g16
            .as_ref()
            .unwrap_or_else(|| panic!("{pname}: no bf16 gradient"));
        let (d, r) = (norm(&(g16 - g32).unwrap()), norm(g32));
        assert!(d.is_finite() && r > 0.0, "{name} {pname}: {d} / {r}");
        let rel = d / r;
        println!("| {pname} | {r:.4e} | {rel:.2e} |");
        assert!(
            rel < GRAD_REL,
            "{name} {pname}: relative error {rel:.2e} ≥ {GRAD_REL}"
        );
        worst = worst.max(rel);
        diff_sq += d * d;
        ref_sq += r * r;
    }
    println!(
        "{name}: all tensors {:.2e}, worst tensor {worst:.2e}",
        (diff_sq / ref_sq).sqrt()
    );
    worst
}

#[test]
fn bf16_gradients_are_close_to_f32_and_f32_is_unchanged() {
    let mut worst = Vec::new();
    for name in [
        "tiny-qwen2",
        "tiny-qwen2-untied",
        "tiny-llama",
        "tiny-qwen3",
    ] {
        worst.push(compare(name));
    }
    // Not a no-op: rounding to bf16 moves every model's gradients well beyond f32 rounding
    // (the f32 path's own run-to-run differences are 0: same summation order).
    for (w, name) in worst.iter().zip(["qwen2", "untied", "llama", "qwen3"]) {
        assert!(*w > 1e-4, "{name}: bf16 gradients within {w:.1e} of f32");
    }
}

/// The plain (autograd) loss has no bf16 path: asking for one is an error, not an f32 update.
#[test]
fn bf16_without_recomputation_is_an_error() {
    let policy = load("tiny-qwen2");
    let vars: Vec<Var> = policy.vars().into_iter().map(|(_, v)| v).collect();
    let samples = samples("tiny-qwen2");
    let refs: Vec<&AgentRollout> = samples.iter().collect();
    let err = loss_and_grads_in(
        &policy,
        &vars,
        &refs,
        0,
        false,
        Share::ALL,
        PassPlan::rerun_all(ComputeDtype::Bf16),
    )
    .err()
    .expect("bf16 without recomputation must fail")
    .to_string();
    assert!(err.contains("gradient_checkpointing: true"), "{err}");
}

/// bf16 products need the hand-written f32 layers: a bf16-weight model (the autograd layer
/// path) is refused instead of silently updating through other products.
#[test]
fn bf16_products_need_f32_weights() {
    let opts = LoadOptions {
        dtype: DType::BF16,
        ..LoadOptions::default()
    };
    let policy = Policy::load(&ModelSource::Local(fixtures().join("tiny-qwen2")), &opts).unwrap();
    let vars: Vec<Var> = policy.vars().into_iter().map(|(_, v)| v).collect();
    let (prompt, completions, _) = common::grad::loss_fixture();
    let p: Vec<&[u32]> = vec![prompt.as_slice(); completions.len()];
    let c: Vec<&[u32]> = completions.iter().map(|v| v.as_slice()).collect();
    let layout = comlrl::model::ScoreLayout::new(&policy.model, &p, &c, policy.pad_id).unwrap();
    let coef = vec![0.5f32; c.len()];
    let mut acc = vec![None; vars.len()];
    let err = comlrl::model::grad::recompute::weighted_logprob_grads_in(
        &policy.model,
        &layout,
        &coef,
        &vars,
        &mut acc,
        PassPlan::rerun_all(ComputeDtype::Bf16),
        None,
    )
    .expect_err("bf16 products on bf16 weights must fail")
    .to_string();
    assert!(err.contains("needs f32 weights"), "{err}");
}

/// Weights prepared once for a mini-batch's passes (`trainer.packed_weights_mb`: bf16 packed,
/// f32 transposed) give the same loss and gradients bit for bit as products straight from the
/// weights, whatever the pass order, the kept activations and the shared prompt; and they are
/// prepared only where that gains: several passes, within the budget.
#[test]
fn weights_packed_once_per_mini_batch_change_no_bit() {
    use comlrl::model::grad::packed_weights::PackedWeights;
    for name in ["tiny-qwen2", "tiny-llama", "tiny-qwen3"] {
        let policy = load(name);
        let vars: Vec<Var> = policy.vars().into_iter().map(|(_, v)| v).collect();
        let samples = samples(name);
        let refs: Vec<&AgentRollout> = samples.iter().collect();
        let bytes = PackedWeights::bytes(&policy.model);
        let packs = |dt, passes, budget| {
            PackedWeights::for_passes(&policy.model, passes, dt, budget)
                .unwrap()
                .is_some()
        };
        for dt in [ComputeDtype::Bf16, ComputeDtype::F32] {
            assert!(packs(dt, 2, bytes), "{name} {dt}: fits, 2 passes");
            assert!(!packs(dt, 2, bytes - 1), "{name} {dt}: over budget");
            assert!(!packs(dt, 1, bytes), "{name} {dt}: one pass");
        }
        let settings = [(0, false), (1 << 26, true)];
        for (dt, (keep_bytes, share_prompt)) in [ComputeDtype::Bf16, ComputeDtype::F32]
            .into_iter()
            .flat_map(|dt| settings.map(|s| (dt, s)))
        {
            let plan = |pack_bytes| PassPlan {
                keep_bytes,
                share_prompt,
                pack_bytes,
                ..PassPlan::rerun_all(dt)
            };
            // Passes of one completion: several per mini-batch.
            let run = |pack_bytes| {
                loss_and_grads_in(&policy, &vars, &refs, 1, true, Share::ALL, plan(pack_bytes))
                    .expect("loss and gradients")
            };
            let (each, once) = (run(0), run(bytes));
            assert_eq!(
                each.loss.to_bits(),
                once.loss.to_bits(),
                "{name} {dt}: loss"
            );
            for (i, (a, b)) in each.grads.iter().zip(&once.grads).enumerate() {
                let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
                assert_eq!(f32s(a), f32s(b), "{name} {dt}: gradient {i}");
            }
        }
    }
}
