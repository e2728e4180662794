//! How one forward pass runs, as the decoder sees it: its [`Mode`] (which kernels it may use)
//! and the two strategies a caller hands it, [`WeightProducts`] (how rows are multiplied by
//! each weight) and [`KvStore`] (where attention keeps the keys and values of earlier
//! positions). The decoder defines them and `Mode` is the plain strategy, on the weights as
//! the checkpoint stores them; sampling implements both with its weight copies and its KV
//! cache (`model::sample`), so the layers know nothing of either.
use super::lora::GroupAdapters;
use super::lora_dropout::LoraDropout;
use crate::model::kernels::compute_dtype::ComputeDtype;
use crate::model::kernels::{bf16_weight, f32_decode, q8_weight};
use candle_core::{DType, Result, Tensor};

/// Which kernels a forward pass may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Only ops with a backward: use for any forward whose result is differentiated.
    Train,
    /// May use kernels without a backward (candle's rope, the decode-shaped linear products):
    /// sampling and scoring only. RMSNorm, SwiGLU and the attention softmax are the same
    /// differentiable fused kernels in both modes (`model::kernels`).
    Infer,
    /// `Infer` for decoding, a few rows per product: the products may also read lower-precision
    /// copies of the weights (`agents.sampling_dtype: bf16`, see `model::sample::copies`).
    /// Scoring (KL, `comlrl score`) uses `Infer`.
    Sample,
}

impl Mode {
    /// Whether kernels without a backward may run (`Infer` and `Sample`).
    pub fn no_grad(self) -> bool {
        self != Mode::Train
    }
}

/// How a forward multiplies rows by the model's weights.
pub trait WeightProducts {
    /// Which kernels the forward may use.
    fn mode(&self) -> Mode;

    /// x (rows, in) · Wᵀ for `w` (out, in), a projection's or the LM head's weight as the
    /// checkpoint stores it.
    fn x_wt(&self, x: &Tensor, w: &Tensor) -> Result<Tensor>;

    /// The LoRA dropout masks of a training pass (PEFT's train mode); `None`, every forward
    /// but an update's, is PEFT's eval mode: no dropout.
    fn lora_dropout(&self) -> Option<&LoraDropout> {
        None
    }

    /// The low-rank terms of a forward whose rows are several adapted models' on one frozen
    /// base (their decode steps run together, `model::sample::grouped`): for the projection
    /// whose frozen weight is `w`, each row group's adapter. `None` (every other forward): the
    /// rows are the model's own, and its own adapters apply.
    fn group_adapters(&self, _w: &Tensor) -> Option<GroupAdapters<'_>> {
        None
    }
}

/// `Mode::Train` with LoRA dropout: the update's forward on the path without recompute.
#[derive(Debug, Clone, Copy)]
pub struct TrainWithDropout<'a>(pub &'a LoraDropout);

impl WeightProducts for TrainWithDropout<'_> {
    fn mode(&self) -> Mode {
        Mode::Train
    }

    fn x_wt(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        Mode::Train.x_wt(x, w)
    }

    fn lora_dropout(&self) -> Option<&LoraDropout> {
        Some(self.0)
    }
}

/// The products on the checkpoint-layout weights themselves: `Train` through a transposed view
/// of W (differentiable); `Infer` as (W · xᵀ)ᵀ, the contiguous W on the left, which gemm runs
/// without packing it (scoring's many rows); `Sample` through `f32_decode` where the CPU runs
/// it (W read once, nothing packed; a row's result does not depend on the batch), else as
/// `Infer`.
impl WeightProducts for Mode {
    fn mode(&self) -> Mode {
        *self
    }

    fn x_wt(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        // A frozen base held in bf16 (`agents.base_dtype`): no gradient reaches W. `Train` is
        // the autograd path (where the hand-written backward does not apply): W widened whole,
        // which its graph keeps until the backward; scoring and sampling widen it block by
        // block, or row by row for a decode step (`bf16_weight`).
        // A frozen base held as Q8_0 blocks: the same, W dequantized whole for `Train`, panel
        // by panel or row by row otherwise (`q8_weight`), in f32 whatever x's dtype.
        if q8_weight::is_q8_weight(w) {
            let y = match self {
                Mode::Train => x.matmul(&q8_weight::dequantize(w)?.to_dtype(x.dtype())?.t()?)?,
                Mode::Infer | Mode::Sample => q8_weight::x_wt(x, w, ComputeDtype::F32)?,
            };
            return y.to_dtype(x.dtype());
        }
        if bf16_weight::is_bf16_weight(w) && x.dtype() == DType::F32 {
            return match self {
                Mode::Train => x.matmul(&w.to_dtype(DType::F32)?.t()?),
                Mode::Infer | Mode::Sample => bf16_weight::x_wt(x, w),
            };
        }
        match self {
            Mode::Train => x.matmul(&w.t()?),
            Mode::Sample => match f32_decode::x_wt(x, w)? {
                Some(y) => Ok(y),
                None => w_xt(x, w),
            },
            Mode::Infer => w_xt(x, w),
        }
    }
}

/// For a `Mode::Sample` product of `rows` rows of f32 x by the checkpoint-layout `w` (the
/// branches of `Mode`'s `x_wt` above): `Some(c)` where it runs a kernel that computes each row
/// on its own (its sums the same whatever the other rows), which every product of at most `c`
/// rows also runs; `None` where a row's result may depend on the batch (gemm's blocking).
/// Rows of several decodes may then share one product of at most `c` rows and get the bits
/// each would get alone.
pub fn sample_row_wise(w: &Tensor, rows: usize) -> Option<usize> {
    if q8_weight::is_q8_weight(w) {
        return (rows <= q8_weight::DECODE_ROWS).then_some(q8_weight::DECODE_ROWS);
    }
    if bf16_weight::is_bf16_weight(w) {
        return (rows <= bf16_weight::DECODE_ROWS).then_some(bf16_weight::DECODE_ROWS);
    }
    (w.dtype() == DType::F32 && w.device().is_cpu() && f32_decode::usable()).then_some(usize::MAX)
}

/// x · Wᵀ computed as (W · xᵀ)ᵀ, made contiguous.
fn w_xt(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    w.matmul(&x.contiguous()?.t()?)?.t()?.contiguous()
}

/// Where attention keeps the keys and values of the positions before this forward, per layer.
pub trait KvStore {
    /// Appends this forward's keys and values (b, kv_heads, s, head_dim) of `layer` and returns
    /// every position's so far, these included: (b, kv_heads, past + s, head_dim).
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)>;

    /// Marks the `s` positions this forward appended as stored (after its last layer).
    fn advance(&mut self, s: usize);

    /// Appends this forward's keys and values of `layer` (as [`KvStore::append`]) and returns
    /// `attend(q, k, v, mask)` over every stored position: q (b, heads, s, head_dim), the
    /// result (b, s, heads · head_dim). A store that keeps several groups of rows apart (the
    /// decodes of several models on one base run together, each group with its own past:
    /// `model::sample::grouped`) attends each group's rows alone, with that group's own mask,
    /// and `mask` is not read.
    fn attend(
        &mut self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: &Tensor,
        attend: &dyn Fn(&Tensor, &Tensor, &Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let (k, v) = self.append(layer, k, v)?;
        attend(q, &k, &v, mask)
    }
}

/// The dtype reductions (norms, softmax, log-softmax) run in: f32 for half types, else unchanged
/// (so f64 models stay f64, which finite-difference checks rely on).
pub fn reduce_dtype(d: DType) -> DType {
    match d {
        DType::BF16 | DType::F16 => DType::F32,
        other => other,
    }
}
