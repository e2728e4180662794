//! A model with LoRA adapters on its projections (`lora`), over the same base tensors as the
//! model it came from: [`attach`] (every base tensor detached, so frozen: shared storage, no
//! gradient), [`frozen`], and the projections' weights ([`projection_weights`]).
use super::causal_lm::CausalLm;
use super::linear::Linear;
use super::lora::{Lora, LoraKey, LoraSpec};
use candle_core::{Result, Tensor, Var};
use std::collections::HashMap;

/// A copy of `model` with adapters on the projections `spec` targets, A and B from `vars` (by
/// [`LoraKey`], every tensor of [`LoraSpec::tensors`]): the base's tensors are the same tensors
/// (shared storage), so any number of adapted copies cost one base. `dropout` is PEFT's
/// `lora_dropout`, applied only in training passes (`lora_dropout`).
pub fn attach(
    model: &CausalLm,
    spec: &LoraSpec,
    vars: &HashMap<LoraKey, Var>,
    dropout: f64,
) -> Result<CausalLm> {
    if !(0.0..1.0).contains(&dropout) {
        candle_core::bail!("lora dropout {dropout} is outside [0, 1)");
    }
    let mut out = frozen(model);
    let scale = spec.scale();
    for (l, layer) in out.layers.iter_mut().enumerate() {
        let a = &mut layer.self_attn;
        let m = &mut layer.mlp;
        let linears: [(&'static str, &mut Linear); 7] = [
            ("q_proj", &mut a.q_proj),
            ("k_proj", &mut a.k_proj),
            ("v_proj", &mut a.v_proj),
            ("o_proj", &mut a.o_proj),
            ("gate_proj", &mut m.gate_proj),
            ("up_proj", &mut m.up_proj),
            ("down_proj", &mut m.down_proj),
        ];
        for (name, lin) in linears {
            lin.lora = None;
            if !spec.targets.iter().any(|t| t == name) {
                continue;
            }
            let get = |ab: &'static str| -> Result<Tensor> {
                vars.get(&(l, name, ab))
                    .map(|v| v.as_tensor().clone())
                    .ok_or_else(|| {
                        candle_core::Error::Msg(format!("layer {l} {name}: no {ab} tensor"))
                    })
            };
            let (ta, tb) = (get("lora_A")?, get("lora_B")?);
            let (out_dim, in_dim) = lin.dims()?;
            if ta.dims() != [spec.rank, in_dim] || tb.dims() != [out_dim, spec.rank] {
                candle_core::bail!(
                    "layer {l} {name}: lora_A {:?} / lora_B {:?} do not fit W {:?} at rank {}",
                    ta.dims(),
                    tb.dims(),
                    (out_dim, in_dim),
                    spec.rank
                );
            }
            lin.lora = Some(Lora {
                a: ta,
                b: tb,
                scale,
                dropout,
                site: (l, name),
            });
        }
    }
    Ok(out)
}

/// `model` with every tensor detached: the same storage (nothing copied), but no tensor is a
/// variable, so autograd computes no gradient for the base and no base tensor has a slot.
pub fn frozen(model: &CausalLm) -> CausalLm {
    let mut out = model.clone();
    let tied = model.lm_head.id() == model.embed_tokens.id();
    out.embed_tokens = model.embed_tokens.detach();
    out.lm_head = match tied {
        true => out.embed_tokens.clone(),
        false => model.lm_head.detach(),
    };
    out.norm.weight = model.norm.weight.detach();
    for layer in out.layers.iter_mut() {
        let a = &mut layer.self_attn;
        let m = &mut layer.mlp;
        for lin in [
            &mut a.q_proj,
            &mut a.k_proj,
            &mut a.v_proj,
            &mut a.o_proj,
            &mut m.gate_proj,
            &mut m.up_proj,
            &mut m.down_proj,
        ] {
            lin.weight = lin.weight.detach();
            lin.bias = lin.bias.as_ref().map(Tensor::detach);
        }
        for n in [
            Some(&mut layer.input_layernorm),
            Some(&mut layer.post_attention_layernorm),
            a.q_norm.as_mut(),
            a.k_norm.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            n.weight = n.weight.detach();
        }
    }
    out
}

/// Every projection's W of `model`, layers bottom first (what adapted copies share).
pub fn projection_weights(model: &CausalLm) -> Vec<Tensor> {
    model
        .layers
        .iter()
        .flat_map(|l| l.linears().map(|l| l.weight.clone()))
        .collect()
}

/// Whether `a` and `b` are one base (the same tensors, not equal copies: every weight, bias and
/// norm but the adapters'), as the adapted copies of one model [`attach`] makes are: their
/// decode steps may then read the base once for both (`model::sample::grouped`).
pub fn same_base(a: &CausalLm, b: &CausalLm) -> bool {
    let ids = |m: &CausalLm| {
        let mut ids = vec![m.embed_tokens.id(), m.lm_head.id(), m.norm.weight.id()];
        for layer in &m.layers {
            for lin in layer.linears() {
                ids.push(lin.weight.id());
                ids.extend(lin.bias.as_ref().map(Tensor::id));
            }
            let at = &layer.self_attn;
            for n in [
                Some(&layer.input_layernorm),
                Some(&layer.post_attention_layernorm),
                at.q_norm.as_ref(),
                at.k_norm.as_ref(),
            ]
            .into_iter()
            .flatten()
            {
                ids.push(n.weight.id());
            }
        }
        ids
    };
    a.layers.len() == b.layers.len() && ids(a) == ids(b)
}
