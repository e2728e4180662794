//! The hand-written backward checked against the decoder's definition, op by op: for every
//! architecture's switches (projection biases, Qwen3's q/k norms, tied and untied heads, scaled
//! RoPE), the recomputed pass's forward runs exactly the ops the decoder's own forward runs
//! (`decoder::trace`), and its backward runs exactly their backwards in reverse, whether the
//! layers re-run, keep their activations or share a prompt. A change to the layer made in
//! `decoder` alone (a norm added, a projection moved) fails here until the backward follows.
use super::logprob::{completion_logprobs, ScoreLayout};
use super::recompute::{weighted_logprob_grads_in, PassPlan};
use crate::model::decoder::arch::Architecture;
use crate::model::decoder::causal_lm::CausalLm;
use crate::model::decoder::config::ModelConfig;
use crate::model::decoder::forward::Mode;
use crate::model::decoder::tensors::{expected_tensors, random_tensors};
use crate::model::decoder::trace::{record, Dir, Op};
use crate::model::kernels::compute_dtype::ComputeDtype;
use candle_core::{DType, Device, Result, Tensor, TensorId, Var};
use candle_nn::{VarBuilder, VarMap};
use std::collections::HashMap;

/// A model of `cfg` with seeded random weights, and its variables in checkpoint order.
fn model(cfg: &ModelConfig) -> Result<(CausalLm, Vec<(String, Var)>)> {
    let err = |e: crate::model::error::Error| candle_core::Error::Msg(e.to_string());
    let mut tensors = random_tensors(cfg, 3, DType::F32, None, &Device::Cpu).map_err(err)?;
    let varmap = VarMap::new();
    let mut vars = vec![];
    for (name, _, _) in expected_tensors(cfg).map_err(err)? {
        let v = Var::from_tensor(&tensors.remove(&name).expect("a random tensor"))?;
        varmap
            .data()
            .lock()
            .expect("var map")
            .insert(name.clone(), v.clone());
        vars.push((name, v));
    }
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    Ok((CausalLm::new(cfg, vb)?, vars))
}

/// An op with its weights' names, for a readable failure.
fn shown(op: &Op, names: &HashMap<TensorId, String>) -> String {
    let n = |id: &TensorId| names.get(id).cloned().unwrap_or_else(|| format!("{id:?}"));
    match op {
        Op::Embed(w) => format!("Embed({})", n(w)),
        Op::Norm(w) => format!("Norm({})", n(w)),
        Op::HeadNorm(w) => format!("HeadNorm({})", n(w)),
        Op::Linear { weight, bias } => {
            format!("Linear({}{})", n(weight), bias.map_or("", |_| " + bias"))
        }
        Op::Head(w) => format!("Head({})", n(w)),
        other => format!("{other:?}"),
    }
}

/// The decoder's forward and the recomputed pass of `plan` over `layout`, traced: asserts the
/// pass's forward ops equal the decoder's and its backward ops are their reverse. Returns the
/// decoder's ops.
fn check(
    cfg: &ModelConfig,
    layout_of: impl Fn(&CausalLm) -> Result<ScoreLayout>,
) -> Result<Vec<Op>> {
    let (model, named) = model(cfg)?;
    let names: HashMap<TensorId, String> = named
        .iter()
        .map(|(n, v)| (v.as_tensor().id(), n.clone()))
        .collect();
    let vars: Vec<Var> = named.into_iter().map(|(_, v)| v).collect();
    let layout = layout_of(&model)?;
    let (lp, decoder) = record(|| completion_logprobs(&model, &layout, Mode::Train));
    lp?;
    assert!(decoder.iter().all(|(d, _)| *d == Dir::Forward));
    let decoder: Vec<Op> = decoder.into_iter().map(|(_, op)| op).collect();
    let show = |ops: &[Op]| ops.iter().map(|o| shown(o, &names)).collect::<Vec<_>>();
    let rows = layout.ids.dim(0)?;
    let plans = [
        PassPlan::rerun_all(ComputeDtype::F32),
        PassPlan {
            keep_bytes: 1 << 30,
            ..PassPlan::rerun_all(ComputeDtype::F32)
        },
        PassPlan {
            share_prompt: true,
            ..PassPlan::rerun_all(ComputeDtype::Bf16)
        },
        PassPlan {
            keep_bytes: 1 << 30,
            share_prompt: true,
            ..PassPlan::rerun_all(ComputeDtype::F32)
        },
    ];
    for plan in plans {
        let mut acc: Vec<Option<Tensor>> = vec![None; vars.len()];
        let coef: Vec<f32> = (0..rows).map(|r| 1.0 - r as f32 * 0.5).collect();
        let (stats, ops) = record(|| {
            weighted_logprob_grads_in(&model, &layout, &coef, &vars, &mut acc, plan, None)
        });
        stats?;
        let forward: Vec<Op> = ops
            .iter()
            .filter(|(d, _)| *d == Dir::Forward)
            .map(|(_, o)| *o)
            .collect();
        let backward: Vec<Op> = ops
            .iter()
            .filter(|(d, _)| *d == Dir::Backward)
            .map(|(_, o)| *o)
            .collect();
        assert_eq!(
            show(&forward),
            show(&decoder),
            "{plan:?}: the hand-written forward's ops differ from the decoder's"
        );
        let mut reversed = forward.clone();
        reversed.reverse();
        assert_eq!(
            show(&backward),
            show(&reversed),
            "{plan:?}: the backward's ops are not the forward's in reverse"
        );
        // Every op's backward comes after every forward op: one forward, then one backward.
        let first_back = ops.iter().position(|(d, _)| *d == Dir::Backward);
        let last_fwd = ops.iter().rposition(|(d, _)| *d == Dir::Forward);
        assert!(
            first_back > last_fwd,
            "{plan:?}: forward and backward interleave"
        );
    }
    Ok(decoder)
}

/// Two rows continuing one prompt (so a shared prompt applies), of different completion lengths.
fn layout(model: &CausalLm) -> Result<ScoreLayout> {
    let prompt: &[u32] = &[5, 9, 2, 7];
    ScoreLayout::new(model, &[prompt, prompt], &[&[3, 4, 8], &[6]], 0)
}

fn shape(tied: bool) -> ModelConfig {
    ModelConfig::with_shape(50, 32, 48, 2, 4, 2, tied)
}

fn linears_with_bias(ops: &[Op]) -> usize {
    ops.iter()
        .filter(|o| matches!(o, Op::Linear { bias: Some(_), .. }))
        .count()
}

#[test]
fn qwen2_tied_and_untied_backward_mirrors_the_decoder() -> Result<()> {
    for tied in [true, false] {
        let ops = check(&shape(tied), layout)?;
        let embed = ops.iter().find_map(|o| match o {
            Op::Embed(w) => Some(*w),
            _ => None,
        });
        let head = ops.iter().find_map(|o| match o {
            Op::Head(w) => Some(*w),
            _ => None,
        });
        assert_eq!(embed == head, tied, "the head is the embedding iff tied");
        // q, k and v carry biases in every layer.
        assert_eq!(linears_with_bias(&ops), 3 * 2);
        assert!(!ops.iter().any(|o| matches!(o, Op::HeadNorm(_))));
    }
    Ok(())
}

/// Per-head q/k norms, and a head_dim (12) that is not hidden / heads (8).
#[test]
fn qwen3_backward_mirrors_the_decoder() -> Result<()> {
    let mut cfg = shape(false).with_arch(Architecture::Qwen3);
    cfg.head_dim = Some(12);
    let ops = check(&cfg, layout)?;
    assert_eq!(
        ops.iter().filter(|o| matches!(o, Op::HeadNorm(_))).count(),
        2 * 2
    );
    assert_eq!(linears_with_bias(&ops), 0);
    Ok(())
}

/// Every bias switched on (attention_bias, mlp_bias) and llama3 RoPE scaling.
#[test]
fn llama_with_biases_and_scaled_rope_backward_mirrors_the_decoder() -> Result<()> {
    let mut cfg = shape(true).with_arch(Architecture::Llama);
    cfg.attention_bias = Some(true);
    cfg.mlp_bias = Some(true);
    cfg.rope_theta = Some(10_000.0);
    cfg.rope_scaling = Some(serde_json::json!({"rope_type": "llama3", "factor": 4.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024}));
    let ops = check(&cfg, layout)?;
    assert_eq!(linears_with_bias(&ops), 7 * 2);
    Ok(())
}
