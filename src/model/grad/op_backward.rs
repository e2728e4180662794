//! The hand-written layer's building blocks, without a graph: a linear map (with its low-rank
//! adapter where it has one) and an RMSNorm (over whole rows or over each head), each with its
//! backward, which writes the weights' gradients into the caller's accumulators
//! (`accumulators::GradSlots`; a frozen tensor has no slot and its gradient product is never
//! computed). Each records the decoder's op it runs (`decoder::trace`).
use super::accumulators::GradSlots;
use super::packed_weights::Products;
use crate::model::decoder::linear::Linear;
use crate::model::decoder::norm::RmsNorm;
use crate::model::decoder::trace;
use crate::model::kernels::add_in_place::add_into;
use crate::model::kernels::compute_dtype::{add_matmul_tn, matmul, matmul_tn, ComputeDtype};
use crate::model::kernels::rms_norm::{rms_norm, rms_norm_backward};
use candle_core::{Result, Tensor};

/// y = x · Wᵀ (+ b) (+ s·(x·Aᵀ)·Bᵀ) for x (rows, in), without a graph; the product by W as
/// `pr` says, the adapter's (rank-r, small) in f32.
pub(crate) fn lin(x: &Tensor, l: &Linear, pr: Products) -> Result<Tensor> {
    trace::forward(|| l.op());
    let y = pr.x_wt(x, &l.weight)?;
    let y = match &l.bias {
        Some(b) => y.broadcast_add(&b.detach())?,
        None => y,
    };
    match &l.lora {
        Some(lo) => {
            let (xd, _) = lo.branch_input(x, pr.dropout)?;
            let u = f32_mm(&xd, &lo.a.detach().t()?)?;
            y + (f32_mm(&u, &lo.b.detach().t()?)? * lo.scale)?
        }
        None => Ok(y),
    }
}

/// a · b in f32 (the adapter's products).
fn f32_mm(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    matmul(a, b, ComputeDtype::F32)
}

/// Accumulates aᵀ · b into the slot of `w` (the first one written), where `w` has one.
fn acc_tn(
    slots: &GradSlots,
    acc: &mut [Option<Tensor>],
    w: &Tensor,
    a: &Tensor,
    b: &Tensor,
    dt: ComputeDtype,
) -> Result<()> {
    match slots.slot(acc, w) {
        Some(Some(g)) => add_matmul_tn(g, a, b, dt),
        Some(empty) => {
            *empty = Some(matmul_tn(a, b, dt)?);
            Ok(())
        }
        None => Ok(()),
    }
}

/// Backward of [`lin`]: accumulates d W = dyᵀ · x (the first one written, not added to
/// zeros) and d b = Σ dy where they have slots, returns d x = dy · W (both products as `pr`
/// says). With an adapter, also d B = s·dyᵀ·(x·Aᵀ) and d A = s·(dy·B)ᵀ·x, and d x gains
/// s·(dy·B)·A (in f32): a frozen W (no slot) costs only its d x product. With LoRA dropout
/// (`pr.dropout`) x is drop(x) in d A and d B, and d x's low-rank part is masked the same way.
pub(crate) fn lin_back(
    dy: &Tensor,
    x: &Tensor,
    l: &Linear,
    slots: &GradSlots,
    acc: &mut [Option<Tensor>],
    pr: Products,
) -> Result<Tensor> {
    trace::backward(|| l.op());
    acc_tn(slots, acc, &l.weight, dy, x, pr.dt)?;
    if let Some(b) = &l.bias {
        if let Some(a) = slots.acc(acc, b)? {
            add_into(a, &dy.sum(0)?)?;
        }
    }
    let dx = pr.dy_w(dy, &l.weight)?;
    let Some(lo) = &l.lora else {
        return Ok(dx);
    };
    let f32 = ComputeDtype::F32;
    let (a, b) = (lo.a.detach(), lo.b.detach());
    // With dropout the branch read drop(x) = x ⊙ m: the same mask, drawn again (`lora_dropout`).
    let (xd, m) = lo.branch_input(x, pr.dropout)?;
    if slots.slot(acc, &lo.b).is_some() {
        let us = (f32_mm(&xd, &a.t()?)? * lo.scale)?;
        acc_tn(slots, acc, &lo.b, dy, &us, f32)?;
    }
    let gs = (f32_mm(dy, &b)? * lo.scale)?;
    acc_tn(slots, acc, &lo.a, &gs, &xd, f32)?;
    drop(xd);
    let dxd = f32_mm(&gs, &a)?;
    match m {
        Some(m) => dx + (dxd * m)?,
        None => dx + dxd,
    }
}

/// RMSNorm over the rows of x (rows, h), without a graph.
pub(crate) fn norm(x: &Tensor, n: &RmsNorm) -> Result<Tensor> {
    trace::forward(|| n.op());
    norm_rows(x, n)
}

/// [`norm`] without recording it: a recomputation of the forward's.
pub(crate) fn norm_rows(x: &Tensor, n: &RmsNorm) -> Result<Tensor> {
    rms_norm(x, &n.weight.detach(), n.eps)
}

/// Backward of [`norm`] at its input `x`: accumulates d w, returns d x.
pub(crate) fn norm_back(
    dy: &Tensor,
    x: &Tensor,
    n: &RmsNorm,
    slots: &GradSlots,
    acc: &mut [Option<Tensor>],
) -> Result<Tensor> {
    trace::backward(|| n.op());
    norm_rows_back(dy, x, n, slots, acc)
}

fn norm_rows_back(
    dy: &Tensor,
    x: &Tensor,
    n: &RmsNorm,
    slots: &GradSlots,
    acc: &mut [Option<Tensor>],
) -> Result<Tensor> {
    let (dx, dw) = rms_norm_backward(x, &n.weight.detach(), dy, n.eps)?;
    if let Some(a) = slots.acc(acc, &n.weight)? {
        add_into(a, &dw)?;
    }
    Ok(dx)
}

/// RMSNorm over each d-wide head of `t` (rows, heads·d), when the layer has one.
pub(crate) fn head_norm(t: Tensor, n: Option<&RmsNorm>, d: usize) -> Result<Tensor> {
    match n {
        Some(n) => {
            trace::forward(|| n.head_op());
            norm_rows(&t.reshape((t.elem_count() / d, d))?, n)?.reshape(t.shape())
        }
        None => Ok(t),
    }
}

/// Backward of [`head_norm`] for the pre-norm input `x` (kept only when there is a norm).
pub(crate) fn head_norm_back(
    dy: Tensor,
    x: Option<&Tensor>,
    n: Option<&RmsNorm>,
    d: usize,
    slots: &GradSlots,
    acc: &mut [Option<Tensor>],
) -> Result<Tensor> {
    match (n, x) {
        (Some(n), Some(x)) => {
            trace::backward(|| n.head_op());
            let rows = x.elem_count() / d;
            norm_rows_back(
                &dy.reshape((rows, d))?,
                &x.reshape((rows, d))?,
                n,
                slots,
                acc,
            )?
            .reshape(x.shape())
        }
        (Some(_), None) => candle_core::bail!("q/k norm backward without its input"),
        (None, _) => Ok(dy),
    }
}
