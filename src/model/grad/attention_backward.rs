//! The attention core of the hand-written layer (`layer_backward`) over one group of rows, and its
//! backward: RoPE, scaled and masked softmax of queries against keys, the weighted sum of
//! values. A layer's rows are one group, or a shared prompt's row and the rows that continue
//! it (`shared_prompt`): two groups whose projections the layer computes in the same products,
//! the second attending to the first one's keys and values before its own.
use crate::model::decoder::attention::{Attention, AttnInputs};
use crate::model::kernels::rope::{rope, rope_inverse};
use crate::model::kernels::softmax::{masked_softmax, masked_softmax_backward};
use candle_core::{Result, Tensor};

/// A group's shape: `b` rows of `s` positions each.
#[derive(Clone, Copy)]
pub(crate) struct Group {
    pub b: usize,
    pub s: usize,
}

/// What a group's backward reads.
pub(crate) struct AttnSaved {
    /// Rotated queries (b, nkv, g·s, d), keys and values (b, nkv, P + s, d): a shared
    /// prompt's P first, if any, then the group's own.
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    /// Attention probabilities (b, nkv, g·s, P + s); `None` where the backward recomputes
    /// them from q and k with the forward's kernel.
    pub p: Option<Tensor>,
}

impl AttnSaved {
    /// The tensors held.
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor> {
        [&self.q, &self.k, &self.v].into_iter().chain(&self.p)
    }

    /// The group's own rotated keys and values, for the rows that continue it.
    pub fn past(&self) -> Past {
        Past {
            k: self.k.clone(),
            v: self.v.clone(),
        }
    }
}

/// A shared prompt's rotated keys and values in one layer, (1, kv heads, P, head_dim): what the
/// rows after it attend to first. As gradients: d loss / d those, summed over the rows.
#[derive(Clone)]
pub struct Past {
    /// Rotated keys (or their gradient).
    pub k: Tensor,
    /// Values (or their gradient).
    pub v: Tensor,
}

/// (b, nkv, s, d) own keys or values after a prompt's (1, nkv, P, d): (b, nkv, P + s, d).
pub(crate) fn after_past(past: &Tensor, own: &Tensor) -> Result<Tensor> {
    let (b, nkv, _, d) = own.dims4()?;
    let p = past.dim(2)?;
    let past = past.broadcast_as((b, nkv, p, d))?.contiguous()?;
    Tensor::cat(&[&past, own], 2)
}

/// (b·s, heads·d) rows → (b, heads, s, d), contiguous.
fn split_heads(t: &Tensor, gr: Group, heads: usize, d: usize) -> Result<Tensor> {
    t.reshape((gr.b, gr.s, heads, d))?
        .transpose(1, 2)?
        .contiguous()
}

/// (b, heads, s, d) → (b·s, heads·d) rows, contiguous.
fn merge_heads(t: &Tensor) -> Result<Tensor> {
    let (b, heads, s, d) = t.dims4()?;
    t.transpose(1, 2)?.contiguous()?.reshape((b * s, heads * d))
}

fn scale(a: &Attention) -> f64 {
    1.0 / (a.head_dim as f64).sqrt()
}

/// Attention probabilities (b, nkv, g·s, P + s) of rotated q and k.
fn probs(a: &Attention, q: &Tensor, k: &Tensor, inp: &AttnInputs) -> Result<Tensor> {
    masked_softmax(&q.matmul(&k.t()?)?, inp.mask, scale(a))
}

/// The group's merged attention output (b·s, nh·d) for its projected queries (b·s, nh·d), keys
/// and values (b·s, nkv·d), after the per-head norms, before RoPE; with `past`, the rows attend
/// to a shared prompt's keys and values first (the mask is (b, 1, s, P + s)).
pub(crate) fn attend(
    a: &Attention,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    gr: Group,
    inp: &AttnInputs,
    past: Option<&Past>,
) -> Result<(Tensor, AttnSaved)> {
    let (nh, nkv, d) = (a.heads, a.kv_heads, a.head_dim);
    let rotate = |t: &Tensor| -> Result<Tensor> {
        rope(t, inp.cos, inp.sin)?
            .ok_or_else(|| candle_core::Error::Msg("rope: tables are not f32".into()))
    };
    let q = rotate(&split_heads(q, gr, nh, d)?)?.reshape((gr.b, nkv, nh / nkv * gr.s, d))?;
    let k = rotate(&split_heads(k, gr, nkv, d)?)?;
    let v = split_heads(v, gr, nkv, d)?;
    let (k, v) = match past {
        Some(pa) => (after_past(&pa.k, &k)?, after_past(&pa.v, &v)?),
        None => (k, v),
    };
    let p = probs(a, &q, &k, inp)?;
    let ya = merge_heads(&p.matmul(&v)?.reshape((gr.b, nh, gr.s, d))?)?;
    Ok((
        ya,
        AttnSaved {
            q,
            k,
            v,
            p: Some(p),
        },
    ))
}

/// The gradients of a group's attention inputs for d (its output) `dya` (b·s, nh·d): d q
/// (b·s, nh·d), d k and d v (b·s, nkv·d) before RoPE, and where it attended to a shared
/// prompt's `past_len` keys and values first, their gradients summed over the rows. `back`
/// adds the gradients that rows continuing this group sent to its keys and values.
pub(crate) fn attend_backward(
    a: &Attention,
    dya: &Tensor,
    sv: AttnSaved,
    gr: Group,
    inp: &AttnInputs,
    past_len: usize,
    back: Option<Past>,
) -> Result<(Tensor, Tensor, Tensor, Option<Past>)> {
    let (nh, nkv, d) = (a.heads, a.kv_heads, a.head_dim);
    let dyh = split_heads(dya, gr, nh, d)?.reshape((gr.b, nkv, nh / nkv * gr.s, d))?;
    let dp = dyh.matmul(&sv.v.t()?)?;
    let p = match sv.p {
        Some(p) => p,
        None => probs(a, &sv.q, &sv.k, inp)?,
    };
    let dv = p.t()?.matmul(&dyh)?; // (b, nkv, P + s, d): the group's heads summed
    drop(dyh);
    let datt = masked_softmax_backward(&p, &dp, scale(a))?;
    drop((dp, p));
    let dq = datt.matmul(&sv.k)?.reshape((gr.b, nh, gr.s, d))?;
    let dk = datt.t()?.matmul(&sv.q)?;
    drop(datt);
    let (dk, dv, dpast) = match past_len {
        0 => (dk, dv, None),
        p => {
            let own = |t: &Tensor| t.narrow(2, p, gr.s)?.contiguous();
            let summed = |t: &Tensor| t.narrow(2, 0, p)?.sum_keepdim(0);
            let dpast = Past {
                k: summed(&dk)?,
                v: summed(&dv)?,
            };
            (own(&dk)?, own(&dv)?, Some(dpast))
        }
    };
    let (dk, dv) = match back {
        Some(bk) => ((dk + bk.k)?, (dv + bk.v)?),
        None => (dk, dv),
    };
    let dq = merge_heads(&rope_inverse(&dq, inp.cos, inp.sin)?)?;
    let dk = merge_heads(&rope_inverse(&dk, inp.cos, inp.sin)?)?;
    Ok((dq, dk, merge_heads(&dv)?, dpast))
}
