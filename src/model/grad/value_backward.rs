//! The value head's backward, by hand: for values v = head(h) at N rows and seeds
//! g = d loss / d v, the head's weight gradients go into their accumulators and d loss / d h
//! is returned for the final norm's and the layers' backward (`recompute::ValuePass`).
//!
//! Linear head v = h·wᵀ + b: dw = gᵀ·h, db = Σ g, dh = g·w.
//! With the tanh layer, a = tanh(h·W₁ᵀ + b₁), v = a·wᵀ + b: dw = gᵀ·a, db = Σ g,
//! dz = (g·w) ⊙ (1 − a²), dW₁ = dzᵀ·h, db₁ = Σ_rows dz, dh = dz·W₁.
use super::accumulators::GradSlots;
use crate::model::decoder::value_head::ValueHead;
use crate::model::kernels::add_in_place::add_into;
use candle_core::{Result, Tensor, Var};

/// Adds `g` into the accumulator of `w` (a private copy on first use); nothing when `w` is
/// frozen (not among the slots).
fn add(slots: &GradSlots, acc: &mut [Option<Tensor>], w: &Var, g: Tensor) -> Result<()> {
    let Some(slot) = slots.slot(acc, w.as_tensor()) else {
        return Ok(());
    };
    let g = g.to_dtype(w.dtype())?.reshape(w.shape())?;
    match slot {
        Some(prev) => add_into(prev, &g),
        None => {
            *slot = Some(g.contiguous()?.copy()?);
            Ok(())
        }
    }
}

/// d loss / d h (N, H) for rows `h` (N, H) and seeds `dv` (N) = d loss / d v; the head's
/// gradients added into `acc` at their slots.
pub fn value_head_backward(
    head: &ValueHead,
    h: &Tensor,
    dv: &Tensor,
    slots: &GradSlots,
    acc: &mut [Option<Tensor>],
) -> Result<Tensor> {
    let h = h.detach();
    let (n, _) = h.dims2()?;
    let g = dv.to_dtype(h.dtype())?.reshape((n, 1))?;
    // Without a graph: the gradients are computed here, and d h must not carry the head's
    // weights into the final norm's backward (they would get their gradient twice).
    let a = head.pre_activation(&h)?.map(|a| a.detach());
    let x = a.as_ref().unwrap_or(&h);
    let w = head.weight.as_tensor().detach();
    add(slots, acc, &head.weight, g.t()?.matmul(x)?)?;
    add(slots, acc, &head.bias, g.sum(0)?)?;
    // d loss / d x (N, d or H).
    let dx = g.matmul(&w)?;
    let Some((w1, b1)) = &head.pre else {
        return Ok(dx);
    };
    let a = a.expect("the head has a tanh layer");
    // tanh' = 1 − a².
    let dz = (dx * a.sqr()?.affine(-1.0, 1.0)?)?;
    add(slots, acc, w1, dz.t()?.matmul(&h)?)?;
    add(slots, acc, b1, dz.sum(0)?)?;
    dz.matmul(&w1.as_tensor().detach())
}
