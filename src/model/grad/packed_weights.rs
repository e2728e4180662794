//! The products of one recomputed pass ([`Products`]): their dtype and the model's weights
//! prepared once for a whole mini-batch ([`PackedWeights`]). In bf16 every x·Wᵀ and dy·W
//! otherwise packs W (rounding it to bf16 and laying it out in the kernel's panels) for each
//! product of each pass: two or three times per weight per pass while the weights stay the
//! same. In f32 each x·Wᵀ otherwise reads Wᵀ as a strided view of W, which gemm multiplies
//! slowly where the rows are few and W is out of the core's cache: the mini-batch keeps a
//! contiguous Wᵀ instead. Either way the copies take 4 bytes a parameter (Wᵀ and W in bf16,
//! Wᵀ in f32), so they are kept only within `trainer.packed_weights_mb`; the products are the
//! same bit for bit with and without them.
use crate::model::decoder::causal_lm::CausalLm;
use crate::model::decoder::lora_dropout::LoraDropout;
use crate::model::kernels::compute_dtype::{matmul, ComputeDtype, Prepared};
use crate::model::kernels::{bf16_weight, q8_weight};
use candle_core::{Result, Tensor, TensorId};
use std::collections::HashMap;

/// Every projection's weight and the LM head of a model, prepared for a mini-batch's products.
pub struct PackedWeights {
    by_id: HashMap<TensorId, Prepared>,
    head: TensorId,
}

impl PackedWeights {
    /// Bytes the copies of `model`'s matrices take: 4 a parameter (two bf16 copies of each,
    /// or one f32 copy).
    pub fn bytes(model: &CausalLm) -> usize {
        matrices(model).map(|w| w.elem_count() * 4).sum()
    }

    /// Prepares `model`'s matrices once when a mini-batch of `passes` runs its products in
    /// `dt` and the copies fit in `budget` bytes; `None` where that gains nothing (a single
    /// pass) or does not fit.
    pub fn for_passes(
        model: &CausalLm,
        passes: usize,
        dt: ComputeDtype,
        budget: usize,
    ) -> Result<Option<Self>> {
        if passes < 2 || Self::bytes(model) > budget {
            return Ok(None);
        }
        let by_id = matrices(model)
            .map(|w| Ok((w.id(), Prepared::kept(w, dt)?)))
            .collect::<Result<HashMap<_, _>>>()?;
        Ok(Some(Self {
            by_id,
            head: model.lm_head().id(),
        }))
    }

    /// The prepared LM head.
    pub fn head(&self) -> &Prepared {
        &self.by_id[&self.head]
    }

    fn get(&self, w: &Tensor) -> Option<&Prepared> {
        self.by_id.get(&w.id())
    }
}

/// The LM head a pass multiplies by: the mini-batch's prepared one, or one of its own (packed
/// for this pass alone in bf16), dropped with it.
pub enum Head<'a> {
    /// The mini-batch's.
    Shared(&'a Prepared),
    /// This pass's.
    Own(Prepared),
}

impl<'a> Head<'a> {
    /// `packed`'s head, else `model`'s prepared for products in `dt`.
    pub fn new(
        model: &CausalLm,
        dt: ComputeDtype,
        packed: Option<&'a PackedWeights>,
    ) -> Result<Self> {
        Ok(match packed {
            Some(p) => Head::Shared(p.head()),
            None => Head::Own(Prepared::new(model.lm_head(), dt)?),
        })
    }
}

impl std::ops::Deref for Head<'_> {
    type Target = Prepared;

    fn deref(&self) -> &Prepared {
        match self {
            Head::Shared(p) => p,
            Head::Own(p) => p,
        }
    }
}

/// The matrices a pass multiplies by: each layer's projections, then the LM head; a frozen
/// base held in bf16 (`agents.base_dtype: bf16`) is left out: its prepared copies would take
/// twice its own bytes (an f32 Wᵀ, or two bf16 panels), the memory that base is for; so is
/// one held as Q8_0 blocks (`q8_0`), for the same reason at four times the bytes.
fn matrices(model: &CausalLm) -> impl Iterator<Item = &Tensor> {
    model
        .layers
        .iter()
        .flat_map(|l| l.linears().map(|l| &l.weight))
        .chain(std::iter::once(model.lm_head()))
        .filter(|w| !bf16_weight::is_bf16_weight(w) && !q8_weight::is_q8_weight(w))
}

/// How a pass's weight products run: in `dt`, with the mini-batch's packed weights where
/// there are some.
#[derive(Clone, Copy)]
pub struct Products<'a> {
    /// The operand type.
    pub dt: ComputeDtype,
    packed: Option<&'a PackedWeights>,
    /// The pass's LoRA dropout masks (a training pass of an adapter with dropout).
    pub dropout: Option<&'a LoraDropout>,
}

impl<'a> Products<'a> {
    /// Products in `dt`, each packing its weight (bf16) itself.
    pub fn new(dt: ComputeDtype) -> Self {
        Self {
            dt,
            packed: None,
            dropout: None,
        }
    }

    /// Products in `dt` that take their weights from `packed` (where it has them).
    pub fn with(dt: ComputeDtype, packed: Option<&'a PackedWeights>) -> Self {
        Self {
            dt,
            packed,
            dropout: None,
        }
    }

    /// These products with the pass's LoRA dropout masks.
    pub fn dropping(self, dropout: Option<&'a LoraDropout>) -> Self {
        Self { dropout, ..self }
    }

    /// The packed LM head, if the mini-batch packed one.
    pub fn packed_head(&self) -> Option<&'a Prepared> {
        self.packed.map(PackedWeights::head)
    }

    /// x (m, in) · Wᵀ for a weight W (out, in).
    pub fn x_wt(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        match self.packed.and_then(|p| p.get(w)) {
            Some(p) => p.x_wt(x),
            None if q8_weight::is_q8_weight(w) => q8_weight::x_wt(x, w, self.dt),
            None if self.widens(w) => bf16_weight::x_wt(x, w),
            None => matmul(x, &w.detach().t()?, self.dt),
        }
    }

    /// dy (m, out) · W for a weight W (out, in).
    pub fn dy_w(&self, dy: &Tensor, w: &Tensor) -> Result<Tensor> {
        match self.packed.and_then(|p| p.get(w)) {
            Some(p) => p.dy_w(dy),
            None if q8_weight::is_q8_weight(w) => q8_weight::dy_w(dy, w, self.dt),
            None if self.widens(w) => bf16_weight::dy_w(dy, w),
            None => matmul(dy, &w.detach(), self.dt),
        }
    }

    /// Whether `w` is a frozen bf16 base weight multiplied in f32 (widened block by block);
    /// in bf16 the bf16 GEMM reads it as it is.
    fn widens(&self, w: &Tensor) -> bool {
        self.dt == ComputeDtype::F32 && bf16_weight::is_bf16_weight(w)
    }
}

impl From<ComputeDtype> for Products<'_> {
    fn from(dt: ComputeDtype) -> Self {
        Self::new(dt)
    }
}
