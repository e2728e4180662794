//! Gradients of completion log-probs: the MAGRPO loss fixture (loss, global norm, per-tensor
//! grads incl. the tied embedding), every tensor receiving a gradient, and finite differences.
use crate::common;
use candle_core::{DType, Device, Tensor};
use comlrl::model::{completion_logprobs, LoadOptions, Mode, ModelSource, Policy, ScoreLayout};
use common::grad::{central_difference, f64s};
use common::*;

#[test]
fn loss_and_gradients_match_reference() {
    let policy = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let (prompt, comps, r) = common::grad::loss_fixture();
    let k = comps.len();
    let prompts: Vec<&[u32]> = vec![prompt.as_slice(); k];
    let c: Vec<&[u32]> = comps.iter().map(|v| v.as_slice()).collect();
    let layout = ScoreLayout::new(&policy.model, &prompts, &c, policy.pad_id).unwrap();
    let lp = completion_logprobs(&policy.model, &layout, Mode::Train).unwrap();
    let want_lp = r["token_logprobs"].to_vec2::<f32>().unwrap();
    let got_lp = lp.to_vec2::<f32>().unwrap();
    for (g, w) in got_lp.iter().flatten().zip(want_lp.iter().flatten()) {
        assert!((g - w).abs() < 1e-4, "token logprob {g} vs {w}");
    }
    let adv = r["advantages"].clone();
    let seq = lp.sum(1).unwrap();
    let loss = ((seq * adv).unwrap().sum_all().unwrap().neg().unwrap() / k as f64).unwrap();
    let want_loss = r["loss"].to_scalar::<f32>().unwrap();
    let got_loss = loss.to_scalar::<f32>().unwrap();
    assert!(
        (got_loss - want_loss).abs() < 1e-4 + 1e-5 * want_loss.abs(),
        "loss {got_loss} vs {want_loss}"
    );

    let grads = loss.backward().unwrap();
    let mut sq = 0f64;
    let mut compared = 0;
    for (name, var) in policy.vars() {
        let g = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("{name} got no gradient"));
        sq += g
            .sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        let key = format!("grad.{name}");
        if let Some(want) = r.get(&key) {
            compared += 1;
            let (gv, wv) = (f32s(g), f32s(want));
            assert_eq!(gv.len(), wv.len(), "{key}: size");
            for (i, (a, b)) in gv.iter().zip(&wv).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 + 1e-3 * b.abs(),
                    "{key}[{i}]: {a} vs {b}"
                );
            }
        }
    }
    let given = r.keys().filter(|k| k.starts_with("grad.")).count();
    assert_eq!(compared, given, "every given gradient compared");
    let want_norm = r["grad_global_norm"].to_scalar::<f32>().unwrap() as f64;
    let got_norm = sq.sqrt();
    assert!(
        ((got_norm - want_norm) / want_norm).abs() < 1e-4,
        "grad norm {got_norm} vs {want_norm}"
    );
}

fn tiny_f64() -> Policy {
    let opts = LoadOptions {
        dtype: DType::F64,
        device: Device::Cpu,
        seed: 7,
        ..LoadOptions::default()
    };
    Policy::load(&ModelSource::Builtin("tiny".into()), &opts).unwrap()
}

/// A loss over two left-padded rows with unequal completions, as the trainer builds it.
fn pg_loss(policy: &Policy) -> Tensor {
    common::grad::pg_loss(
        policy,
        [&[10, 20, 30, 40], &[50, 60]],
        [&[70, 80, 90], &[100, 110, 120, 130, 256]],
    )
}

#[test]
fn every_trainable_tensor_gets_a_nonzero_gradient() {
    let policy = tiny_f64();
    let grads = pg_loss(&policy).backward().unwrap();
    let vars = policy.vars();
    assert_eq!(vars.len(), 2 + 12 * policy.config.num_hidden_layers);
    for (name, var) in vars {
        let g = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("{name}: no gradient"));
        let n = g
            .abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        assert!(n > 0.0, "{name}: zero gradient");
    }
}

#[test]
fn finite_differences_agree_with_backprop() {
    let policy = tiny_f64();
    let grads = pg_loss(&policy).backward().unwrap();
    let vars: std::collections::HashMap<String, candle_core::Var> =
        policy.vars().into_iter().collect();
    let probes = [
        ("model.embed_tokens.weight", 20 * 64 + 3),
        ("model.layers.0.self_attn.q_proj.bias", 5),
        ("model.layers.1.self_attn.k_proj.bias", 7),
        ("model.layers.0.self_attn.v_proj.bias", 1),
        ("model.layers.1.input_layernorm.weight", 11),
        ("model.norm.weight", 2),
        ("model.layers.0.mlp.down_proj.weight", 300),
        ("model.layers.1.self_attn.o_proj.weight", 129),
    ];
    let h = 1e-5;
    for (name, idx) in probes {
        let var = &vars[name];
        let analytic = f64s(grads.get(var.as_tensor()).unwrap())[idx];
        let numeric =
            central_difference(var, idx, h, || pg_loss(&policy).to_scalar::<f64>().unwrap());
        let err = (numeric - analytic).abs();
        assert!(
            err < 1e-10 + 1e-5 * analytic.abs(),
            "{name}[{idx}]: numeric {numeric} vs analytic {analytic} (abs err {err})"
        );
    }
}
