//! The LM head's part of the recomputed loss, in row chunks: for a chunk of completion
//! positions, logits = h · Wᵀ with W held out of the graph, the weighted log-prob's gradient
//! G = d loss / d logits from the fused op, then d h = G · W and d W = Gᵀ · h added straight
//! into W's accumulator. At most one chunk's logits and G exist at a time, and W's gradient is
//! never built by candle's backward (which would add a zero-initialised copy and a transposed
//! product, three vocabulary × hidden buffers, per pass).
use crate::model::decoder::forward::reduce_dtype;
use crate::model::kernels::compute_dtype::{add_matmul_tn, matmul, ComputeDtype, Prepared};
use crate::model::kernels::token_logprob::{
    logprob_entropy_grad_in_place, logprob_entropy_rows, token_logprob_rows,
};
use candle_core::{Result, Tensor, Var};

/// Logit elements per chunk (f32: 64 MiB): about a hundred positions at a 150k vocabulary, a
/// whole micro-batch at small vocabularies. Larger chunks raise the update's peak memory (the
/// logits and their gradient are the largest buffers of the head) for no speed.
const CHUNK_ELEMS: usize = 1 << 24;

/// [`CHUNK_ELEMS`] under `compute_dtype: bf16`, where each chunk's d W = Gᵀ · h product is
/// bound by reading and writing W's f32 accumulator (vocabulary × hidden) rather than by its
/// arithmetic: twice the rows per chunk, half the accumulator passes.
const BF16_CHUNK_ELEMS: usize = 1 << 25;

/// What [`head_backward`] returns.
pub struct HeadGrad {
    /// Σ_r weight_r · log π(target_r) over the rows.
    pub loss: f64,
    /// d loss / d h, shaped like `h`.
    pub dh: Tensor,
    /// The entropy of each row's distribution (N), from the same logits.
    pub entropy: Vec<f32>,
    /// Σ_r entropy_weight_r · H_r: the entropy term's value (0 without one).
    pub entropy_term: f64,
}

/// `h`: (N, hidden) final hidden states (no graph needed), `head`: the (vocab, hidden) head
/// prepared for products in `dt` (one preparation serves every pass of a mini-batch),
/// `targets`: (N) u32, `weights`: (N) per-row loss weights (0 for padding), `entropy_weights`:
/// (N) per-row weights on each row's entropy (an entropy bonus; `None`: none). Adds d loss / d
/// W into `w_acc` (set to it when empty) unless `w_acc` is `None` (the head is not trained).
/// The three products (logits, d h, d W) run in `dt`; the log-softmax stays f32.
pub fn head_backward(
    h: &Tensor,
    head: &Prepared,
    targets: &Tensor,
    weights: &Tensor,
    entropy_weights: Option<&[f32]>,
    w_acc: Option<&mut Option<Tensor>>,
    dt: ComputeDtype,
) -> Result<HeadGrad> {
    chunked(
        h,
        head,
        targets,
        weights,
        entropy_weights,
        w_acc,
        chunk_elems(dt),
        dt,
    )
}

/// log π(target) and the entropy of every row of `h` under the prepared `head`, in row chunks
/// as [`head_backward`] takes them (the same products, so the same log-probs), without a
/// gradient: what per-token weights that depend on the log-probs (or on the entropy) are
/// computed from.
pub fn head_logprobs(
    h: &Tensor,
    head: &Prepared,
    targets: &Tensor,
    dt: ComputeDtype,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let (n, _) = h.dims2()?;
    let (v, _) = head.weight().dims2()?;
    let h = h.detach().contiguous()?;
    let rows = (chunk_elems(dt) / v.max(1)).max(1);
    let mut out = Vec::with_capacity(n);
    let mut ent = Vec::with_capacity(n);
    let mut start = 0;
    while start < n {
        let len = rows.min(n - start);
        let logits = head.x_wt(&h.narrow(0, start, len)?)?;
        let logits = logits.to_dtype(reduce_dtype(logits.dtype()))?;
        let (lp, e) = logprob_entropy_rows(&logits, &targets.narrow(0, start, len)?)?;
        out.extend(lp);
        ent.extend(e);
        start += len;
    }
    Ok((out, ent))
}

fn chunk_elems(dt: ComputeDtype) -> usize {
    match dt {
        ComputeDtype::F32 => CHUNK_ELEMS,
        ComputeDtype::Bf16 => BF16_CHUNK_ELEMS,
    }
}

/// Bytes one chunk of [`head_backward`] over `rows` positions at vocabulary `vocab` holds
/// besides the prepared head: its f32 logits (overwritten by G) and, in bf16, G's packed copy.
pub fn chunk_bytes(dt: ComputeDtype, rows: usize, vocab: usize) -> usize {
    let elems = chunk_elems(dt).max(vocab).min(rows * vocab);
    match dt {
        ComputeDtype::F32 => elems * 4,
        ComputeDtype::Bf16 => elems * (4 + 2),
    }
}

#[allow(clippy::too_many_arguments)]
fn chunked(
    h: &Tensor,
    head: &Prepared,
    targets: &Tensor,
    weights: &Tensor,
    entropy_weights: Option<&[f32]>,
    mut w_acc: Option<&mut Option<Tensor>>,
    chunk_elems: usize,
    dt: ComputeDtype,
) -> Result<HeadGrad> {
    let (n, _) = h.dims2()?;
    let w = head.weight();
    let (v, _) = w.dims2()?;
    if let Some(hw) = entropy_weights.filter(|hw| hw.len() != n) {
        candle_core::bail!("{} entropy weights for {n} rows", hw.len());
    }
    let h = h.detach().contiguous()?;
    let rows = (chunk_elems / v.max(1)).max(1);
    let mut loss = 0f64;
    let mut entropy_term = 0f64;
    let mut dh = Vec::with_capacity(n.div_ceil(rows));
    let mut entropy = Vec::with_capacity(n);
    let mut start = 0;
    while start < n {
        let len = rows.min(n - start);
        let hc = h.narrow(0, start, len)?;
        let logits = head.x_wt(&hc)?;
        let (t, wt) = (
            targets.narrow(0, start, len)?,
            weights.narrow(0, start, len)?,
        );
        let hw = entropy_weights.map(|hw| &hw[start..start + len]);
        let (weighted, g) = if in_place(&logits, &wt) {
            // f32 on the CPU: the gradient overwrites the logits (no second chunk-sized buffer),
            // the entropy computed from the softmax the gradient is made of.
            let (lp, e) = logprob_entropy_grad_in_place(&logits, &t, &wt.to_vec1::<f32>()?, hw)?;
            if let Some(hw) = hw {
                entropy_term += e
                    .iter()
                    .zip(hw)
                    .map(|(&e, &h)| e as f64 * h as f64)
                    .sum::<f64>();
            }
            entropy.extend(e);
            ((lp * wt)?.sum_all()?, logits)
        } else {
            let logits = Var::from_tensor(&logits.to_dtype(reduce_dtype(logits.dtype()))?)?;
            entropy.extend(logprob_entropy_rows(logits.as_tensor(), &t)?.1);
            let lp = token_logprob_rows(logits.as_tensor(), &t)?;
            let weighted = (lp * &wt)?.sum_all()?;
            let seeded = match hw {
                None => weighted.clone(),
                Some(hw) => {
                    // H = −Σ p·log p through the graph, its weight fixed.
                    let logp = candle_nn::ops::log_softmax(logits.as_tensor(), 1)?;
                    let ent = (logp.exp()? * &logp)?.sum(1)?.neg()?;
                    let hw = Tensor::from_slice(hw, len, ent.device())?.to_dtype(ent.dtype())?;
                    let term = (ent * hw)?.sum_all()?;
                    entropy_term += term.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
                    (&weighted + term)?
                }
            };
            let g = seeded
                .backward()?
                .remove(logits.as_tensor())
                .ok_or_else(|| candle_core::Error::Msg("no gradient reached the logits".into()))?;
            (weighted, g.to_dtype(w.dtype())?)
        };
        loss += weighted
            .to_dtype(candle_core::DType::F64)?
            .to_scalar::<f64>()?;
        dh.push(head.dy_w(&g)?);
        if let Some(slot) = w_acc.as_deref_mut() {
            match slot {
                Some(acc) => add_matmul_tn(acc, &g, &hc, dt)?,
                None => *slot = Some(matmul(&g.t()?, &hc, dt)?.contiguous()?),
            }
        }
        start += len;
    }
    Ok(HeadGrad {
        loss,
        dh: Tensor::cat(&dh, 0)?,
        entropy,
        entropy_term,
    })
}

/// Whether a chunk's f32 logits on the CPU (with f32 weights) take the in-place gradient.
fn in_place(logits: &Tensor, weights: &Tensor) -> bool {
    use candle_core::DType::F32;
    logits.device().is_cpu() && logits.dtype() == F32 && weights.dtype() == F32
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    /// Chunked (3 rows at a time over 7) against candle's backward through the whole head: f64
    /// takes the graph path, f32 the in-place gradient.
    #[test]
    fn chunks_match_the_whole_graph() -> Result<()> {
        check_against_graph(DType::F64, 1e-12)?;
        check_against_graph(DType::F32, 1e-5)
    }

    fn check_against_graph(dt: DType, tol: f64) -> Result<()> {
        let dev = Device::Cpu;
        let (n, hd, v) = (7, 5, 11);
        let h = Var::from_tensor(&Tensor::randn(0f64, 1.0, (n, hd), &dev)?.to_dtype(dt)?)?;
        let w = Var::from_tensor(&Tensor::randn(0f64, 1.0, (v, hd), &dev)?.to_dtype(dt)?)?;
        let t = Tensor::new(&[0u32, 10, 3, 3, 7, 1, 9], &dev)?;
        let wt = Tensor::new(&[0.5f64, -2.0, 0.0, 1.5, 3.0, 1.0, -0.25], &dev)?.to_dtype(dt)?;
        let lp = token_logprob_rows(&h.as_tensor().matmul(&w.as_tensor().t()?)?, &t)?;
        let loss = (lp * &wt)?.sum_all()?;
        let grads = loss.backward()?;
        let mut acc = Some(Tensor::ones((v, hd), dt, &dev)?);
        let got = chunked(
            h.as_tensor(),
            &Prepared::new(w.as_tensor(), ComputeDtype::F32)?,
            &t,
            &wt,
            None,
            Some(&mut acc),
            3 * v,
            ComputeDtype::F32,
        )?;
        let close = |a: &Tensor, b: &Tensor| -> Result<f64> {
            (a - b)?
                .abs()?
                .max_all()?
                .to_dtype(DType::F64)?
                .to_scalar::<f64>()
        };
        let loss = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        assert!((got.loss - loss).abs() < tol * loss.abs().max(1.0));
        assert!(close(&got.dh, grads.get(h.as_tensor()).unwrap())? < tol);
        // Added into the accumulator's ones, not written over them.
        let want_w = (grads.get(w.as_tensor()).unwrap() + 1.0)?;
        assert!(close(acc.as_ref().unwrap(), &want_w)? < tol);
        Ok(())
    }
}
