//! The tensors a config implies: every weight the decoder reads, under its checkpoint name,
//! with its shape and its initialisation (the one list of checkpoint names, derived from the
//! architecture's switches), and seeded random weights for built-in models.
use super::config::ModelConfig;
use crate::model::error::{Error, Result};
use crate::model::kernels::q8_weight;
use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

/// How a freshly initialised tensor is filled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Normal with mean 0 and this standard deviation.
    Normal(f64),
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
}

/// Every tensor the model reads, with its shape and initialisation (HF names, HF init): the
/// one list of checkpoint names, derived from the config's architecture and switches. Fails,
/// naming the key, for a config that `validate` refuses.
pub fn expected_tensors(cfg: &ModelConfig) -> Result<Vec<(String, Vec<usize>, Init)>> {
    let f = cfg.features().map_err(Error::Invalid)?;
    let (h, i, v, d) = (
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.vocab_size,
        cfg.head_dim(),
    );
    let q = cfg.num_attention_heads * d;
    let kv = cfg.kv_heads() * d;
    let std = Init::Normal(0.02);
    let mut out = vec![("model.embed_tokens.weight".to_string(), vec![v, h], std)];
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        let mut push = |name: &str, shape: Vec<usize>, init| {
            out.push((format!("{p}.{name}"), shape, init));
        };
        let mut linear = |name: &str, out_dim: usize, in_dim: usize, bias: bool| {
            push(&format!("{name}.weight"), vec![out_dim, in_dim], std);
            if bias {
                push(&format!("{name}.bias"), vec![out_dim], Init::Zeros);
            }
        };
        linear("self_attn.q_proj", q, h, f.qkv_bias);
        linear("self_attn.k_proj", kv, h, f.qkv_bias);
        linear("self_attn.v_proj", kv, h, f.qkv_bias);
        linear("self_attn.o_proj", h, q, f.o_bias);
        linear("mlp.gate_proj", i, h, f.mlp_bias);
        linear("mlp.up_proj", i, h, f.mlp_bias);
        linear("mlp.down_proj", h, i, f.mlp_bias);
        if f.qk_norm {
            push("self_attn.q_norm.weight", vec![d], Init::Ones);
            push("self_attn.k_norm.weight", vec![d], Init::Ones);
        }
        push("input_layernorm.weight", vec![h], Init::Ones);
        push("post_attention_layernorm.weight", vec![h], Init::Ones);
    }
    out.push(("model.norm.weight".to_string(), vec![h], Init::Ones));
    if !cfg.tie_word_embeddings {
        out.push(("lm_head.weight".to_string(), vec![v, h], std));
    }
    Ok(out)
}

/// Whether `name` is a decoder projection's weight: the frozen base's tensors that
/// `agents.base_dtype` holds in another dtype (norms, biases, embeddings and the LM head stay
/// in the model's dtype).
pub fn is_projection_weight(name: &str) -> bool {
    name.starts_with("model.layers.") && name.ends_with("_proj.weight")
}

/// The dtype tensor `name` is held in: `base` (where set; `q8_weight::HELD` for Q8_0 blocks)
/// for a projection's weight, else `dtype`.
pub fn held_dtype(name: &str, dtype: DType, base: Option<DType>) -> DType {
    match (is_projection_weight(name), base) {
        (true, Some(b)) => b,
        _ => dtype,
    }
}

/// `t` in the form `held` names: Q8_0 blocks (`q8_weight::HELD`, quantized at load; a Q8_0
/// matrix stays as it is), else `held`'s dtype (a Q8_0 matrix dequantized, never its bytes
/// reinterpreted).
pub fn hold(t: &Tensor, held: DType) -> candle_core::Result<Tensor> {
    match (q8_weight::is_q8_weight(t), held == q8_weight::HELD) {
        (true, true) => Ok(t.clone()),
        (false, true) => q8_weight::quantize(t),
        (true, false) => q8_weight::dequantize(t)?.to_dtype(held),
        (false, false) if t.dtype() == held => Ok(t.clone()),
        (false, false) => t.to_dtype(held),
    }
}

/// Seeded random weights with transformers' initialisation (N(0, 0.02²), zero biases, unit
/// norms), in `dtype`, with the projections' weights in `base` where set (each converted as it is drawn, so no f32 copy of
/// the whole base exists at any time).
pub fn random_tensors(
    cfg: &ModelConfig,
    seed: u64,
    dtype: DType,
    base: Option<DType>,
    dev: &Device,
) -> Result<HashMap<String, Tensor>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut out = HashMap::new();
    for (name, shape, init) in expected_tensors(cfg)? {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = match init {
            Init::Zeros => vec![0.0; n],
            Init::Ones => vec![1.0; n],
            Init::Normal(std) => (0..n).map(|_| (normal(&mut rng) * std) as f32).collect(),
        };
        let held = held_dtype(&name, dtype, base);
        out.insert(name, hold(&Tensor::from_vec(data, shape, dev)?, held)?);
    }
    Ok(out)
}

/// One standard normal draw (Box–Muller).
pub(crate) fn normal(rng: &mut impl Rng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}
