//! Llama and Qwen3 training: the trainer's loss path (`loss_and_grads` with and without
//! recomputation, and the recomputed pass on one left-padded batch) against the fixtures'
//! `loss_grads.safetensors`, every trainable tensor receiving a gradient, and f64 finite
//! differences on the tensors only these architectures have (q_norm, k_norm) and on the
//! projections whose outputs go through the llama3-scaled RoPE.
use crate::common;
use candle_core::{DType, Tensor, Var};
use comlrl::model::grad::recompute::weighted_logprob_grads;
use comlrl::model::{LoadOptions, ModelSource, Policy, ScoreLayout};
use comlrl::train::algorithms::magrpo::loss::loss_and_grads;
use comlrl::train::rollout::AgentRollout;
use common::grad::{central_difference, f64s};
use common::*;
use std::collections::HashMap;

fn load(name: &str, dtype: DType) -> Policy {
    let opts = LoadOptions {
        dtype,
        ..LoadOptions::default()
    };
    Policy::load(&ModelSource::Local(fixtures().join(name)), &opts).expect("load fixture")
}

/// The fixture's prompts and real completion tokens, and its advantages.
fn cases(name: &str) -> (Vec<Vec<u32>>, Vec<Vec<u32>>, Vec<f32>) {
    let dir = fixtures().join(name);
    let refj = json(&dir.join("reference.json"));
    let r = load_st(&dir.join("reference.safetensors"));
    let prompts = refj["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ids(&p["ids"]))
        .collect();
    let comps = masked_completions(&r);
    let adv = refj["loss_grads"]["advantages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_f64().unwrap() as f32)
        .collect();
    (prompts, comps, adv)
}

/// How close a result must be to the fixture.
struct Tol {
    /// Relative, on the loss and on the global gradient norm.
    rel: f64,
    /// Elementwise on the given gradients: |a − b| ≤ abs + 1e-3·|b|.
    grad_abs: f32,
}

/// The standard (tests/fixtures/README.md section 5).
const STRICT: Tol = Tol {
    rel: 1e-4,
    grad_abs: 1e-4,
};

/// tiny-qwen3's stored loss/gradients are not what transformers 5.24 computes from the stored
/// weights: in f32, eager, the loss differs by 2.5e-4 (6.5e-5 relative), the embedding
/// gradient by 1.6e-3 and q_proj's by 5.4e-4 (measured here; comlrl agrees with that
/// transformers run to ~1e-6, see arch_transformers.rs). This bound covers that gap; a dropped
/// or misplaced q/k norm moves them by orders of magnitude more.
const QWEN3_FIXTURE: Tol = Tol {
    rel: 1e-4,
    grad_abs: 3e-3,
};

fn check(
    what: &str,
    loss: f64,
    named: &[(String, Var)],
    grads: &[Option<Tensor>],
    name: &str,
    tol: &Tol,
) {
    let g = load_st(&fixtures().join(name).join("loss_grads.safetensors"));
    let want_loss = g["loss"].to_scalar::<f32>().unwrap() as f64;
    assert!(
        ((loss - want_loss) / want_loss).abs() < tol.rel,
        "{what}: loss {loss} vs {want_loss}"
    );
    let mut sq = 0f64;
    let mut compared = 0;
    for ((pname, _), grad) in named.iter().zip(grads) {
        let grad = grad
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: {pname} got no gradient"));
        let gv = f32s(grad);
        sq += gv.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>();
        if let Some(want) = g.get(&format!("grad.{pname}")) {
            compared += 1;
            for (i, (a, b)) in gv.iter().zip(f32s(want)).enumerate() {
                assert!(
                    (a - b).abs() <= tol.grad_abs + 1e-3 * b.abs(),
                    "{what}: grad.{pname}[{i}]: {a} vs {b}"
                );
            }
        }
    }
    let given = g.keys().filter(|k| k.starts_with("grad.")).count();
    assert_eq!(compared, given, "{what}: every given gradient compared");
    let want_norm = g["grad_global_norm"].to_scalar::<f32>().unwrap() as f64;
    let norm = sq.sqrt();
    assert!(
        ((norm - want_norm) / want_norm).abs() < tol.rel,
        "{what}: grad norm {norm} vs {want_norm}"
    );
}

/// Through the trainer's `loss_and_grads` (one node sample per prompt, so the mean over samples
/// is the fixture's 1/3), plain and recomputed, and through one recomputed pass over all three
/// rows left-padded into one batch.
fn loss_paths_match(name: &str, tol: &Tol) {
    let policy = load(name, DType::F32);
    let named = policy.vars();
    let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let (prompts, comps, adv) = cases(name);
    let samples: Vec<AgentRollout> = (0..prompts.len())
        .map(|k| AgentRollout {
            prompt_ids: prompts[k].clone(),
            completions: vec![comps[k].clone()],
            texts: vec![String::new()],
            returns: vec![0.0],
            kl: vec![0.0],
            sampling_logprobs: vec![],
            ref_logprobs: vec![],
            advantages: vec![adv[k]],
        })
        .collect();
    let refs: Vec<&AgentRollout> = samples.iter().collect();
    for recompute in [false, true] {
        let lg = loss_and_grads(
            &policy,
            &vars,
            &refs,
            1,
            recompute,
            comlrl::train::update::Share::ALL,
        )
        .unwrap();
        let what = format!("{name} loss_and_grads, recompute {recompute}");
        check(&what, lg.loss, &named, &lg.grads, name, tol);
    }
    let p: Vec<&[u32]> = prompts.iter().map(|v| v.as_slice()).collect();
    let c: Vec<&[u32]> = comps.iter().map(|v| v.as_slice()).collect();
    let layout = ScoreLayout::new(&policy.model, &p, &c, policy.pad_id).unwrap();
    let k = adv.len() as f32;
    let coef: Vec<f32> = adv.iter().map(|a| -a / k).collect();
    let mut acc = vec![None; vars.len()];
    let st = weighted_logprob_grads(&policy.model, &layout, &coef, &vars, &mut acc).unwrap();
    check(
        &format!("{name} padded batch"),
        st.loss,
        &named,
        &acc,
        name,
        tol,
    );
}

#[test]
fn llama_loss_and_gradients_match_reference() {
    loss_paths_match("tiny-llama", &STRICT);
}

#[test]
fn qwen3_loss_and_gradients_match_reference() {
    loss_paths_match("tiny-qwen3", &QWEN3_FIXTURE);
}

/// −Σ_b A_b Σ_t log π over two left-padded rows with unequal completions (f64).
fn pg_loss(policy: &Policy) -> Tensor {
    common::grad::pg_loss(
        policy,
        [&[10, 20, 30, 40, 50, 60, 70], &[80, 90]],
        [&[100, 110, 120], &[130, 140, 150, 160, 0]],
    )
}

/// Central differences (h = 1e-5, f64) against backprop at `probes`, after checking that every
/// trainable tensor gets a non-zero gradient.
fn finite_differences(name: &str, probes: &[(&str, usize)]) {
    let policy = load(name, DType::F64);
    let grads = pg_loss(&policy).backward().unwrap();
    let vars: HashMap<String, Var> = policy.vars().into_iter().collect();
    for (pname, var) in &vars {
        let g = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("{name} {pname}: no gradient"));
        let n = g
            .abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        assert!(n > 0.0, "{name} {pname}: zero gradient");
    }
    let h = 1e-5;
    for &(pname, idx) in probes {
        let var = vars
            .get(pname)
            .unwrap_or_else(|| panic!("{name} has no tensor {pname}"));
        let analytic = f64s(grads.get(var.as_tensor()).unwrap())[idx];
        let numeric =
            central_difference(var, idx, h, || pg_loss(&policy).to_scalar::<f64>().unwrap());
        let err = (numeric - analytic).abs();
        assert!(
            analytic != 0.0 && err < 1e-10 + 1e-5 * analytic.abs(),
            "{name} {pname}[{idx}]: numeric {numeric} vs analytic {analytic} (abs err {err})"
        );
    }
}

#[test]
fn qwen3_qk_norm_finite_differences() {
    finite_differences(
        "tiny-qwen3",
        &[
            ("model.layers.0.self_attn.q_norm.weight", 5),
            ("model.layers.0.self_attn.k_norm.weight", 40),
            ("model.layers.1.self_attn.q_norm.weight", 17),
            ("model.layers.1.self_attn.k_norm.weight", 0),
            ("model.layers.0.self_attn.q_proj.weight", 48 * 128 + 3),
            ("model.layers.1.self_attn.k_proj.weight", 700),
            ("model.embed_tokens.weight", 20 * 128 + 3),
        ],
    );
}

/// q_proj / k_proj feed the llama3-scaled rotation (all three frequency bands occur at
/// head_dim 16, θ 5e5, original context 8192); indices hit high- and low-frequency dims.
#[test]
fn llama_scaled_rope_finite_differences() {
    finite_differences(
        "tiny-llama",
        &[
            ("model.layers.0.self_attn.q_proj.weight", 96),
            ("model.layers.0.self_attn.q_proj.weight", 15 * 96 + 7),
            ("model.layers.1.self_attn.k_proj.weight", 12 * 96 + 50),
            ("model.layers.2.self_attn.k_proj.weight", 3 * 96 + 1),
            ("model.layers.2.self_attn.o_proj.weight", 129),
            ("model.layers.1.mlp.down_proj.weight", 300),
            ("lm_head.weight", 100 * 96 + 5),
        ],
    );
}
