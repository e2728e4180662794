//! The hand-written layer's building blocks, without a graph: a linear map and an RMSNorm (over
//! whole rows or over each head), each with its backward, which writes the weights' gradients
//! into the caller's accumulators (`accumulators::GradSlots`). Each records the decoder's op it
//! runs (`decoder::trace`).
use super::accumulators::GradSlots;
use super::packed_weights::Products;
use crate::model::decoder::linear::Linear;
use crate::model::decoder::norm::RmsNorm;
use crate::model::decoder::trace;
use crate::model::kernels::add_in_place::add_into;
use crate::model::kernels::compute_dtype::{add_matmul_tn, matmul_tn};
use crate::model::kernels::rms_norm::{rms_norm, rms_norm_backward};
use candle_core::{Result, Tensor};

/// y = x · Wᵀ (+ b) for x (rows, in), without a graph; the product as `pr` says.
pub(crate) fn lin(x: &Tensor, l: &Linear, pr: Products) -> Result<Tensor> {
    trace::forward(|| l.op());
    let y = pr.x_wt(x, &l.weight)?;
    match &l.bias {
        Some(b) => y.broadcast_add(&b.detach()),
        None => Ok(y),
    }
}

/// Backward of [`lin`]: accumulates d W = dyᵀ · x (the first one written, not added to
/// zeros) and d b = Σ dy, returns d x = dy · W (both products as `pr` says).
pub(crate) fn lin_back(
    dy: &Tensor,
    x: &Tensor,
    l: &Linear,
    slots: &GradSlots,
    acc: &mut [Option<Tensor>],
    pr: Products,
) -> Result<Tensor> {
    trace::backward(|| l.op());
    match slots.slot(acc, &l.weight) {
        Some(Some(a)) => add_matmul_tn(a, dy, x, pr.dt)?,
        Some(empty) => *empty = Some(matmul_tn(dy, x, pr.dt)?),
        None => {}
    }
    if let Some(b) = &l.bias {
        if let Some(a) = slots.acc(acc, b)? {
            add_into(a, &dy.sum(0)?)?;
        }
    }
    pr.dy_w(dy, &l.weight)
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
