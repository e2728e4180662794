//! One decoder layer's forward and hand-written backward for the recomputed loss (f32, CPU):
//! the forward keeps exactly the activations the backward reads, and the backward writes each
//! weight's gradient straight into its accumulator (gemm's accumulate mode for the matrices).
//! Through candle's autograd the same layer cost a zero tensor and an add per op input (views
//! and reshapes included), a fresh buffer for every gradient and a graph per pass; here the
//! only passes are the products, the fused kernels' backwards and the head-layout copies.
//! Covers every architecture's switches: biases on any projection, Qwen3's per-head q/k
//! RMSNorm (the fused norm over rows of head_dim) and scaled RoPE (only the tables differ).
//! Rows that continue a shared prompt ([`LayerInput::prompt`], see `shared_prompt`) go through
//! every projection packed with the prompt's row, and attend to its keys and values before
//! their own (`attention_backward`).
//!
//! The forward runs the ops of the decoder's layer (`decoder::layer`) in its order and the
//! backward runs their backwards in exactly the reverse order, each recorded in the trace that
//! `trace_check` compares with the decoder's own (a gradient reaching a value from several ops
//! is summed in the forward's order of those ops).
use super::accumulators::GradSlots;
use super::attention_backward::{attend, attend_backward, AttnSaved, Group};
use super::op_backward::{head_norm, head_norm_back, lin, lin_back, norm, norm_back, norm_rows};
use super::packed_weights::Products;
use crate::model::decoder::attention::AttnInputs;
use crate::model::decoder::layer::DecoderLayer;
use crate::model::decoder::norm::RmsNorm;
use crate::model::decoder::trace::{self, Op};
use crate::model::kernels::swiglu::{swiglu, swiglu_backward};
use crate::model::kernels::{bf16_weight, fusable, q8_weight};
use candle_core::{Result, Tensor};

/// Whether `layer` can take the hand-written path for input `x` (f32 weights and input, CPU;
/// a projection's W may also be a frozen base held in bf16 or as Q8_0 blocks, which its products
/// widen or dequantize).
pub fn supported(layer: &DecoderLayer, x: &Tensor) -> bool {
    let a = &layer.self_attn;
    let norms = [
        Some(&layer.input_layernorm),
        Some(&layer.post_attention_layernorm),
        a.q_norm.as_ref(),
        a.k_norm.as_ref(),
    ];
    let mut ws = vec![x];
    for l in layer.linears() {
        if !bf16_weight::is_bf16_weight(&l.weight) && !q8_weight::is_q8_weight(&l.weight) {
            ws.push(&l.weight);
        }
        ws.extend(l.bias.as_ref());
        if let Some(lo) = &l.lora {
            ws.extend([&lo.a, &lo.b]);
        }
    }
    ws.extend(norms.into_iter().flatten().map(|n| &n.weight));
    fusable(&ws)
}

/// A layer's input: rows x (b, s, h) with their attention inputs and, where every row
/// continues one shared prompt, that prompt's row (1, P, h) with its own. The prompt's
/// positions go through each projection in the same product as the rows' (prompt rows first);
/// the rows attend to its keys and values before their own.
pub struct LayerInput<'a> {
    pub x: &'a Tensor,
    pub inp: &'a AttnInputs<'a>,
    pub prompt: Option<(&'a Tensor, &'a AttnInputs<'a>)>,
}

impl LayerInput<'_> {
    /// The rows' group and the prompt's length P (0 without one).
    fn shape(&self) -> Result<(Group, usize)> {
        let (b, s, _) = self.x.dims3()?;
        let p = match self.prompt {
            Some((xp, _)) => xp.dim(1)?,
            None => 0,
        };
        Ok((Group { b, s }, p))
    }

    /// The packed rows (P + b·s, h): the prompt's positions first.
    fn packed(&self) -> Result<Tensor> {
        pack(self.x, self.prompt.map(|(xp, _)| xp))
    }
}

/// A tensor over the rows (b, s, h) and, with a shared prompt, over its row (1, P, h) as
/// packed rows (P + b·s, h).
fn pack(x: &Tensor, prompt: Option<&Tensor>) -> Result<Tensor> {
    let (b, s, h) = x.dims3()?;
    let x = x.reshape((b * s, h))?;
    match prompt {
        Some(xp) => Tensor::cat(&[&xp.reshape((xp.dim(1)?, h))?, &x], 0),
        None => Ok(x),
    }
}

/// Packed rows (P + b·s, h) back into the rows (b, s, h) and the prompt's row (1, P, h).
fn unpack(t: &Tensor, gr: Group, p: usize) -> Result<(Tensor, Option<Tensor>)> {
    let h = t.dim(1)?;
    let rows = t.narrow(0, p, gr.b * gr.s)?.reshape((gr.b, gr.s, h))?;
    let prompt = (p > 0)
        .then(|| t.narrow(0, 0, p)?.reshape((1, p, h)))
        .transpose()?;
    Ok((rows, prompt))
}

/// The layer's activations that its backward reads, over the packed rows. Those in `Option`s
/// are cheap to recompute from the others (two norms, the attention probabilities, the
/// SwiGLU): a re-run passes them on, kept activations drop them ([`Saved::slim`]) and the
/// backward recomputes them with the forward's own kernels, bit for bit.
struct Saved {
    /// Layer input and the residual stream after attention, (rows, h).
    x: Tensor,
    x2: Tensor,
    /// Normed inputs of the attention and of the MLP, (rows, h).
    h1: Option<Tensor>,
    h2: Option<Tensor>,
    /// Projected queries and keys before the per-head norms (rows, heads·d), when there are
    /// such norms.
    q_pre: Option<Tensor>,
    k_pre: Option<Tensor>,
    /// The rows' attention, and the shared prompt's.
    attn: AttnSaved,
    prompt_attn: Option<AttnSaved>,
    /// The heads' merged output (rows, nh·d).
    ya: Tensor,
    /// MLP gate and up projections and their SwiGLU, (rows, i).
    gate: Tensor,
    up: Tensor,
    m: Option<Tensor>,
}

impl Saved {
    /// Without the activations the backward can recompute cheaply (two norms, the attention
    /// probabilities, the SwiGLU), so an activation budget keeps more layers.
    fn slim(self) -> Self {
        let slim = |a: AttnSaved| AttnSaved { p: None, ..a };
        Self {
            h1: None,
            h2: None,
            m: None,
            attn: slim(self.attn),
            prompt_attn: self.prompt_attn.map(slim),
            ..self
        }
    }
}

/// `t`, or `f()` where it was not kept.
fn or_recompute(t: Option<Tensor>, f: impl FnOnce() -> Result<Tensor>) -> Result<Tensor> {
    t.map_or_else(f, Ok)
}

/// What the layer's backward reads for `input`, without a graph, its projections as `pr` says:
/// everything the forward computes except the output's down projection and residual add,
/// which nothing downstream of the backward needs (a re-run stops here, skipping one of the
/// layer's three largest products). `keep_pre`: also keep the pre-norm queries and keys where
/// the layer has per-head norms (only a backward reads them).
fn activations(
    layer: &DecoderLayer,
    input: &LayerInput,
    keep_pre: bool,
    pr: Products,
) -> Result<Saved> {
    let (gr, p) = input.shape()?;
    let a = &layer.self_attn;
    let d = a.head_dim;
    let x = input.packed()?;
    let h1 = norm(&x, &layer.input_layernorm)?;
    let pre = |t: &Tensor, n: &Option<RmsNorm>| (keep_pre && n.is_some()).then(|| t.clone());
    let qp = lin(&h1, &a.q_proj, pr)?;
    let q_pre = pre(&qp, &a.q_norm);
    let q = head_norm(qp, a.q_norm.as_ref(), d)?;
    let kp = lin(&h1, &a.k_proj, pr)?;
    let k_pre = pre(&kp, &a.k_norm);
    let k = head_norm(kp, a.k_norm.as_ref(), d)?;
    let v = lin(&h1, &a.v_proj, pr)?;
    trace::forward(|| Op::Attention);
    let (ya, attn, prompt_attn) = match input.prompt {
        None => {
            let (ya, attn) = attend(a, (&q, &k, &v), gr, input.inp, None)?;
            (ya, attn, None)
        }
        Some((_, pinp)) => {
            let part = |t: &Tensor, from: usize, n: usize| t.narrow(0, from, n);
            let n = gr.b * gr.s;
            let (qv, kv, vv) = (part(&q, 0, p)?, part(&k, 0, p)?, part(&v, 0, p)?);
            let one = Group { b: 1, s: p };
            let (yp, pa) = attend(a, (&qv, &kv, &vv), one, pinp, None)?;
            let (qv, kv, vv) = (part(&q, p, n)?, part(&k, p, n)?, part(&v, p, n)?);
            let (ya, attn) = attend(a, (&qv, &kv, &vv), gr, input.inp, Some(&pa.past()))?;
            (Tensor::cat(&[&yp, &ya], 0)?, attn, Some(pa))
        }
    };
    let o = lin(&ya, &a.o_proj, pr)?;
    trace::forward(|| Op::Residual);
    let x2 = (&x + o)?;
    let h2 = norm(&x2, &layer.post_attention_layernorm)?;
    let mlp = &layer.mlp;
    let gate = lin(&h2, &mlp.gate_proj, pr)?;
    let up = lin(&h2, &mlp.up_proj, pr)?;
    trace::forward(|| Op::SwiGlu);
    let m = swiglu(&gate, &up)?;
    Ok(Saved {
        x,
        x2,
        h1: Some(h1),
        h2: Some(h2),
        q_pre,
        k_pre,
        attn,
        prompt_attn,
        ya,
        gate,
        up,
        m: Some(m),
    })
}

/// The layer's output from its activations, x2 + down(SwiGLU): over the rows (b, s, h) and the
/// shared prompt's row (1, P, h).
fn output(
    layer: &DecoderLayer,
    sv: &Saved,
    input: &LayerInput,
    pr: Products,
) -> Result<(Tensor, Option<Tensor>)> {
    let m =
        sv.m.as_ref()
            .ok_or_else(|| candle_core::Error::Msg("layer output without its SwiGLU".into()))?;
    let down = lin(m, &layer.mlp.down_proj, pr)?;
    trace::forward(|| Op::Residual);
    let y = (&sv.x2 + down)?;
    let (gr, p) = input.shape()?;
    unpack(&y, gr, p)
}

/// The activations one layer's forward kept for its backward (see [`layer_forward_keep`]).
pub struct Kept(Saved);

impl Kept {
    /// Bytes held by the kept tensors.
    pub fn bytes(&self) -> usize {
        let s = &self.0;
        [&s.x, &s.x2, &s.ya, &s.gate, &s.up]
            .into_iter()
            .chain(
                [&s.h1, &s.h2, &s.m, &s.q_pre, &s.k_pre]
                    .into_iter()
                    .flatten(),
            )
            .chain(s.attn.tensors())
            .chain(s.prompt_attn.iter().flat_map(AttnSaved::tensors))
            .map(|t| t.elem_count() * t.dtype().size_in_bytes())
            .sum()
    }
}

/// The layer's output for `input` without a graph (the recomputed loss's first pass), its
/// projections as `pr` says: over the rows (b, s, h) and a shared prompt's row (1, P, h).
pub fn layer_forward(
    layer: &DecoderLayer,
    input: &LayerInput,
    pr: Products,
) -> Result<(Tensor, Option<Tensor>)> {
    let sv = activations(layer, input, false, pr)?;
    output(layer, &sv, input, pr)
}

/// [`layer_forward`] that also returns what the layer's backward reads, so that
/// [`layer_backward`] can skip re-running it. The same computation: the output is bit for bit
/// the one `layer_forward` gives, and a backward from kept activations equals one that re-runs.
pub fn layer_forward_keep(
    layer: &DecoderLayer,
    input: &LayerInput,
    pr: Products,
) -> Result<(Tensor, Option<Tensor>, Kept)> {
    let sv = activations(layer, input, true, pr)?;
    let (y, yp) = output(layer, &sv, input, pr)?;
    Ok((y, yp, Kept(sv.slim())))
}

/// Back-propagates dy (b, s, h) and, with a shared prompt, its row's dy (1, P, h) through the
/// layer at `input`, from `kept` activations or else by re-running the layer (up to its
/// SwiGLU): the weights' gradients are added into `acc` (see [`GradSlots`]); returns d x for
/// the rows and the prompt's row. Every projection's products (forward and backward) run in
/// `pr`; attention, norms, RoPE and SwiGLU stay f32.
#[allow(clippy::too_many_arguments)]
pub fn layer_backward(
    layer: &DecoderLayer,
    input: &LayerInput,
    dy: &Tensor,
    dy_prompt: Option<&Tensor>,
    slots: &GradSlots,
    acc: &mut [Option<Tensor>],
    pr: Products,
    kept: Option<Kept>,
) -> Result<(Tensor, Option<Tensor>)> {
    let (gr, p) = input.shape()?;
    let sv = match kept {
        Some(Kept(sv)) => sv,
        None => trace::paused(|| activations(layer, input, true, pr))?,
    };
    let a = &layer.self_attn;
    let mlp = &layer.mlp;
    let dy = match (input.prompt, dy_prompt) {
        (Some(_), Some(dyp)) => pack(dy, Some(dyp))?,
        (None, None) => pack(dy, None)?,
        _ => candle_core::bail!("a shared prompt's rows and their gradient go together"),
    };

    // MLP: y = x2 + down(swiglu(gate(h2), up(h2))), h2 = norm(x2).
    trace::backward(|| Op::Residual);
    let m = or_recompute(sv.m, || swiglu(&sv.gate, &sv.up))?;
    let dm = lin_back(&dy, &m, &mlp.down_proj, slots, acc, pr)?;
    drop(m);
    trace::backward(|| Op::SwiGlu);
    let (dgate, dup) = swiglu_backward(&sv.gate, &sv.up, &dm)?;
    drop(dm);
    let h2 = or_recompute(sv.h2, || norm_rows(&sv.x2, &layer.post_attention_layernorm))?;
    let dh2_up = lin_back(&dup, &h2, &mlp.up_proj, slots, acc, pr)?;
    let dh2_gate = lin_back(&dgate, &h2, &mlp.gate_proj, slots, acc, pr)?;
    let dh2 = (dh2_gate + dh2_up)?;
    drop((dgate, dup, h2));
    let dn = norm_back(&dh2, &sv.x2, &layer.post_attention_layernorm, slots, acc)?;
    drop(dh2);
    trace::backward(|| Op::Residual);
    let dx2 = (&dy + dn)?;

    // Attention: x2 = x + o(attn(q, k, v)), q/k/v = proj(h1), h1 = norm(x). The rows after a
    // shared prompt first: they send its keys and values their gradients.
    let dya = lin_back(&dx2, &sv.ya, &a.o_proj, slots, acc, pr)?;
    trace::backward(|| Op::Attention);
    let (dq, dk, dv) = match (sv.prompt_attn, input.prompt) {
        (None, _) => {
            let (dq, dk, dv, _) = attend_backward(a, &dya, sv.attn, gr, input.inp, 0, None)?;
            (dq, dk, dv)
        }
        (Some(pa), Some((_, pinp))) => {
            let rows = dya.narrow(0, p, gr.b * gr.s)?;
            let (dq, dk, dv, back) = attend_backward(a, &rows, sv.attn, gr, input.inp, p, None)?;
            let one = Group { b: 1, s: p };
            let prompt = dya.narrow(0, 0, p)?;
            let (dqp, dkp, dvp, _) = attend_backward(a, &prompt, pa, one, pinp, 0, back)?;
            let cat = |a: &Tensor, b: &Tensor| Tensor::cat(&[a, b], 0);
            (cat(&dqp, &dq)?, cat(&dkp, &dk)?, cat(&dvp, &dv)?)
        }
        (Some(_), None) => candle_core::bail!("a shared prompt's activations without its row"),
    };
    drop(dya);
    let d = a.head_dim;
    let h1 = or_recompute(sv.h1, || norm_rows(&sv.x, &layer.input_layernorm))?;
    let dh1_v = lin_back(&dv, &h1, &a.v_proj, slots, acc, pr)?;
    let dk = head_norm_back(dk, sv.k_pre.as_ref(), a.k_norm.as_ref(), d, slots, acc)?;
    let dh1_k = lin_back(&dk, &h1, &a.k_proj, slots, acc, pr)?;
    let dq = head_norm_back(dq, sv.q_pre.as_ref(), a.q_norm.as_ref(), d, slots, acc)?;
    let dh1_q = lin_back(&dq, &h1, &a.q_proj, slots, acc, pr)?;
    drop((dq, dk, dv, h1));
    let dh1 = ((dh1_q + dh1_k)? + dh1_v)?;
    let dx = (dx2 + norm_back(&dh1, &sv.x, &layer.input_layernorm, slots, acc)?)?;
    unpack(&dx, gr, p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::decoder::arch::Architecture;
    use crate::model::decoder::batch::causal_mask;
    use crate::model::decoder::config::ModelConfig;
    use crate::model::decoder::forward::Mode;
    use crate::model::decoder::rope::Rope;
    use crate::model::decoder::tensors::expected_tensors;
    use crate::model::kernels::compute_dtype::ComputeDtype;
    use crate::model::kernels::max_diff;
    use candle_core::{DType, Device, Var};
    use candle_nn::VarBuilder;

    /// Layer 0's weights as f32 variables and f64 copies, from one seed's random values.
    fn weights(cfg: &ModelConfig, dev: &Device) -> Result<Vec<(String, Var, Var)>> {
        let all = expected_tensors(cfg).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        all.into_iter()
            .filter_map(|(n, s, _)| Some((n.strip_prefix("model.layers.0.")?.to_string(), s)))
            .map(|(n, s)| {
                let mean = if n.contains("norm") { 1.0 } else { 0.0 };
                let t = Tensor::randn(mean, 0.2f32, s, dev)?;
                let v32 = Var::from_tensor(&t)?;
                let v64 = Var::from_tensor(&t.to_dtype(DType::F64)?)?;
                Ok((n, v32, v64))
            })
            .collect()
    }

    fn layer(cfg: &ModelConfig, ws: &[(String, Var, Var)], f64s: bool) -> Result<DecoderLayer> {
        let map = ws
            .iter()
            .map(|(n, a, b)| (n.clone(), if f64s { b } else { a }.as_tensor().clone()))
            .collect();
        let dtype = if f64s { DType::F64 } else { DType::F32 };
        let f = cfg.features().map_err(candle_core::Error::Msg)?;
        DecoderLayer::new(cfg, &f, VarBuilder::from_tensors(map, dtype, &Device::Cpu))
    }

    /// Every weight's gradient and d x, by hand in f32, against candle's autograd in f64, on a
    /// left-padded batch with grouped-query heads.
    fn hand_written_backward_matches_autograd(cfg: &ModelConfig) -> Result<()> {
        let dev = Device::Cpu;
        let f = cfg.features().map_err(candle_core::Error::Msg)?;
        let ws = weights(cfg, &dev)?;
        let (l32, l64) = (layer(cfg, &ws, false)?, layer(cfg, &ws, true)?);
        let (b, s) = (2, 6);
        let valid = vec![vec![true; s], [vec![false; 2], vec![true; s - 2]].concat()];
        let mask = causal_mask(&valid, s, &dev)?;
        let pos = Tensor::new(&[[0u32, 1, 2, 3, 4, 5], [0, 0, 0, 1, 2, 3]], &dev)?;
        let x = Tensor::randn(0f32, 1.0, (b, s, cfg.hidden_size), &dev)?;
        // Pad rows attend to nothing: f32 gives them uniform attention, f64 does not (the
        // mask's finite minimum absorbs the scores only in f32). They get no gradient in
        // training, so compare real rows only and give pad rows a zero output gradient.
        let real: Vec<f32> = valid.iter().flatten().map(|&v| v as u8 as f32).collect();
        let real = Tensor::from_vec(real, (b, s, 1), &dev)?;
        let dy = Tensor::randn(0f32, 1.0, (b, s, cfg.hidden_size), &dev)?.broadcast_mul(&real)?;

        // Reference: autograd through the op-by-op f64 layer.
        let rope64 = Rope::from_spec(&f.rope, cfg.head_dim(), 64, DType::F64, &dev)?;
        let (c64, s64) = rope64.tables(&pos)?;
        let m64 = mask.to_dtype(DType::F64)?;
        let inp64 = AttnInputs {
            cos: &c64,
            sin: &s64,
            mask: &m64,
        };
        let x64 = Var::from_tensor(&x.to_dtype(DType::F64)?)?;
        let y64 = l64.forward(x64.as_tensor(), &rope64, &inp64, None, &Mode::Train)?;
        let grads = (y64 * dy.to_dtype(DType::F64)?)?.sum_all()?.backward()?;

        // Hand-written f32, accumulated onto ones (so "added into" is checked too).
        let rope32 = Rope::from_spec(&f.rope, cfg.head_dim(), 64, DType::F32, &dev)?;
        let (c32, s32) = rope32.tables(&pos)?;
        let m32 = mask.to_dtype(DType::F32)?;
        let inp32 = AttnInputs {
            cos: &c32,
            sin: &s32,
            mask: &m32,
        };
        assert!(
            supported(&l32, &x),
            "{:?} must take the hand-written path",
            f.arch
        );
        let y = layer_forward(
            &l32,
            &LayerInput {
                x: &x,
                inp: &inp32,
                prompt: None,
            },
            ComputeDtype::F32.into(),
        )?
        .0;
        let want_y = l64.forward(
            &x.to_dtype(DType::F64)?,
            &rope64,
            &inp64,
            None,
            &Mode::Train,
        )?;
        let real64 = real.to_dtype(DType::F64)?;
        let y_err = max_diff(&y.broadcast_mul(&real)?, &want_y.broadcast_mul(&real64)?)?;
        assert!(y_err < 1e-4, "outputs differ by {y_err}");
        let vars: Vec<Var> = ws.iter().map(|(_, v, _)| v.clone()).collect();
        let mut acc: Vec<Option<Tensor>> = vars
            .iter()
            .map(|v| v.as_tensor().ones_like().map(Some))
            .collect::<Result<_>>()?;
        let slots = GradSlots::new(&vars);
        let input = LayerInput {
            x: &x,
            inp: &inp32,
            prompt: None,
        };
        let (dx, _) = layer_backward(
            &l32,
            &input,
            &dy,
            None,
            &slots,
            &mut acc,
            ComputeDtype::F32.into(),
            None,
        )?;
        let want_dx = grads
            .get(x64.as_tensor())
            .expect("d x")
            .broadcast_mul(&real64)?;
        let dx_err = max_diff(&dx.broadcast_mul(&real)?, &want_dx)?;
        assert!(dx_err < 1e-4, "d x differs by {dx_err}");
        for ((name, _, v64), a) in ws.iter().zip(&acc) {
            let want = (grads.get(v64.as_tensor()).expect("a gradient") + 1.0)?;
            let err = max_diff(a.as_ref().expect("accumulated"), &want)?;
            assert!(err < 1e-4, "{:?} {name}: differs by {err}", f.arch);
        }
        Ok(())
    }

    fn shape() -> ModelConfig {
        ModelConfig::with_shape(50, 32, 48, 1, 4, 2, true)
    }

    #[test]
    fn qwen2_layer_backward_matches_autograd() -> Result<()> {
        hand_written_backward_matches_autograd(&shape())
    }

    /// Per-head q/k norms, and a head_dim (12) that is not hidden / heads (8).
    #[test]
    fn qwen3_layer_backward_matches_autograd() -> Result<()> {
        let mut cfg = shape().with_arch(Architecture::Qwen3);
        cfg.head_dim = Some(12);
        let ws = weights(&cfg, &Device::Cpu)?;
        assert!(ws.iter().any(|(n, _, _)| n == "self_attn.q_norm.weight"));
        assert!(!ws.iter().any(|(n, _, _)| n.ends_with("bias")));
        hand_written_backward_matches_autograd(&cfg)
    }

    /// Every bias switched on (attention_bias, mlp_bias) and llama3 RoPE scaling whose three
    /// bands all occur at head_dim 8, θ 1e4 (wavelengths 6.3, 63, 628, 6283 against 256…1024).
    #[test]
    fn llama_layer_backward_with_biases_and_scaled_rope_matches_autograd() -> Result<()> {
        let mut cfg = shape().with_arch(Architecture::Llama);
        cfg.attention_bias = Some(true);
        cfg.mlp_bias = Some(true);
        cfg.rope_theta = Some(10_000.0);
        cfg.rope_scaling = Some(serde_json::json!({"rope_type": "llama3", "factor": 4.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 1024}));
        let ws = weights(&cfg, &Device::Cpu)?;
        assert_eq!(ws.iter().filter(|(n, _, _)| n.ends_with("bias")).count(), 7);
        hand_written_backward_matches_autograd(&cfg)
    }
}
