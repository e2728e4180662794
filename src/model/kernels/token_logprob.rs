//! log softmax(logits)[target] as one differentiable op over (N, V) logits: the forward makes
//! one pass per row (max, Σ exp, pick) and keeps nothing but its (N) output; the backward
//! writes d logits = g · (onehot(target) − softmax) straight into one (N, V) buffer, taking
//! logsumexp back from the output (lse = logit[target] − out). The op-by-op version keeps
//! several vocabulary-sized intermediates per row, which dominate memory at a 152k vocabulary.
//! The in-place gradient also yields each row's entropy H = Σ_j p_j·(lse − x_j) from the
//! softmax it already computes (one more multiply-add per element, no second pass over the
//! logits): TRL's `entropy` metric and what its high-entropy mask selects on. A row may also
//! carry a second weight on its entropy (an entropy bonus, TRL's `entropy_coef`): d H / d x_j =
//! −p_j·(log p_j + H) needs H before the gradient, so such a row reads its logits once more
//! (the entropy first, then the gradient), still without a second buffer or head product.
use super::cpu_slices::slice;
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use num_traits::Float;
use rayon::prelude::*;

/// The op's name in errors.
const OP: &str = "token-logprob";

/// Rows per parallel task (rows are vocabulary-long, so a few already make a task worth it).
const ROWS: usize = 4;

struct Forward;
struct Backward;

fn targets(s: &CpuStorage, l: &Layout) -> Result<Vec<usize>> {
    Ok(match s {
        CpuStorage::U32(v) => slice(v, l, OP)?.iter().map(|&t| t as usize).collect(),
        CpuStorage::I64(v) => slice(v, l, OP)?.iter().map(|&t| t as usize).collect(),
        _ => candle_core::bail!("token-logprob: targets must be u32 or i64"),
    })
}

/// out[r] = x[r, t[r]] − lse(x[r]) for every row, rows split over rayon's threads.
fn forward<T, L>(x: &[T], t: &[usize], v: usize, lse: L) -> Result<Vec<T>>
where
    T: Float + Send + Sync,
    L: Fn(&[T]) -> T + Sync,
{
    if let Some(&bad) = t.iter().find(|&&t| t >= v) {
        candle_core::bail!("token-logprob: target {bad} outside the vocabulary of {v}")
    }
    let mut out = vec![T::zero(); t.len()];
    out.par_chunks_mut(ROWS)
        .zip(x.par_chunks(ROWS * v))
        .zip(t.par_chunks(ROWS))
        .for_each(|((o, x), t)| {
            for ((o, row), &t) in o.iter_mut().zip(x.chunks(v)).zip(t) {
                *o = row[t] - lse(row);
            }
        });
    Ok(out)
}

/// logsumexp of a row, any float type.
fn lse_generic<T: Float>(row: &[T]) -> T {
    let m = row.iter().fold(T::neg_infinity(), |a, &b| a.max(b));
    m + row.iter().fold(T::zero(), |a, &b| a + (b - m).exp()).ln()
}

/// logsumexp of an f32 row with the vectorised exp and reductions (the vocabulary-long rows
/// make this the head's hottest loop: 170M exps per pass at Qwen2.5's vocabulary).
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn lse_f32(row: &[f32]) -> f32 {
    use crate::model::kernels::vector_exp::{max, sum_exp};
    let m = max(row);
    m + sum_exp(row, m).ln()
}

/// log softmax(row)[target] of one f32 row with the op's own logsumexp: the sampler's kept
/// log-prob of the token it drew, computed as the update's forward computes it.
pub fn row_logprob(row: &[f32], target: usize) -> f32 {
    row[target] - lse_f32(row)
}

/// d[j] = −g · e^(x[j] − lse), any float type.
fn softmax_grad_generic<T: Float>(row: &[T], lse: T, g: T, d: &mut [T]) {
    for (d, &x) in d.iter_mut().zip(row) {
        *d = -g * (x - lse).exp();
    }
}

/// [`softmax_grad_generic`] for f32 with the vectorised exp.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn softmax_grad_f32(row: &[f32], lse: f32, g: f32, d: &mut [f32]) {
    use crate::model::kernels::vector_exp::exp;
    for (d, &x) in d.iter_mut().zip(row) {
        *d = -g * exp(x - lse);
    }
}

/// d logits = g · (onehot(t) − softmax) per row; aux holds (out, d out) per row.
fn backward<T, G>(x: &[T], t: &[usize], aux: &[T], v: usize, grad: G) -> Vec<T>
where
    T: Float + Send + Sync,
    G: Fn(&[T], T, T, &mut [T]) + Sync,
{
    let mut dx = vec![T::zero(); x.len()];
    dx.par_chunks_mut(ROWS * v)
        .zip(x.par_chunks(ROWS * v))
        .zip(t.par_chunks(ROWS))
        .zip(aux.par_chunks(ROWS * 2))
        .for_each(|(((d, x), t), aux)| {
            for (((d, row), &t), a) in d.chunks_mut(v).zip(x.chunks(v)).zip(t).zip(aux.chunks(2)) {
                let (out, g) = (a[0], a[1]);
                if g == T::zero() {
                    continue; // padding: masked out, d logits stays 0
                }
                grad(row, row[t] - out, g, d);
                d[t] = d[t] + g;
            }
        });
    dx
}

impl CustomOp2 for Forward {
    fn name(&self) -> &'static str {
        "token-logprob"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (n, v) = l1.shape().dims2()?;
        let t = targets(s2, l2)?;
        if t.len() != n {
            candle_core::bail!("token-logprob: {} targets for {n} rows", t.len())
        }
        let out = match s1 {
            CpuStorage::F32(x) => CpuStorage::F32(forward(slice(x, l1, OP)?, &t, v, lse_f32)?),
            CpuStorage::F64(x) => CpuStorage::F64(forward(slice(x, l1, OP)?, &t, v, lse_generic)?),
            _ => candle_core::bail!("token-logprob: logits must be f32 or f64"),
        };
        Ok((out, Shape::from(n)))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        targets: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let aux = Tensor::stack(&[res, grad_res], 1)?.contiguous()?;
        let d = logits.apply_op3_no_bwd(targets, &aux, &Backward)?;
        Ok((Some(d), None))
    }
}

impl CustomOp3 for Backward {
    fn name(&self) -> &'static str {
        "token-logprob-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (_, v) = l1.shape().dims2()?;
        let t = targets(s2, l2)?;
        let d = match (s1, s3) {
            (CpuStorage::F32(x), CpuStorage::F32(a)) => {
                let (x, a) = (slice(x, l1, OP)?, slice(a, l3, OP)?);
                CpuStorage::F32(backward(x, &t, a, v, softmax_grad_f32))
            }
            (CpuStorage::F64(x), CpuStorage::F64(a)) => {
                let (x, a) = (slice(x, l1, OP)?, slice(a, l3, OP)?);
                CpuStorage::F64(backward(x, &t, a, v, softmax_grad_generic))
            }
            _ => candle_core::bail!("token-logprob: logits and gradient must share f32 or f64"),
        };
        Ok((d, l1.shape().clone()))
    }
}

/// Lanes of the entropy's split sum (as `vector_exp`'s reductions).
const LANES: usize = 16;

/// [`softmax_grad_in_place`] that also returns the row's entropy Σ_j p_j·(lse − x_j), with
/// p_j = e^(x_j − lse) the very value the gradient is built from: the gradient is the same,
/// bit for bit.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn softmax_grad_entropy_in_place(row: &mut [f32], lse: f32, g: f32) -> f32 {
    use crate::model::kernels::vector_exp::exp;
    let mut acc = [0f32; LANES];
    let mut c = row.chunks_exact_mut(LANES);
    for x in &mut c {
        for i in 0..LANES {
            let p = exp(x[i] - lse);
            acc[i] += p * (lse - x[i]);
            x[i] = -g * p;
        }
    }
    let mut tail = 0f32;
    for x in c.into_remainder() {
        let p = exp(*x - lse);
        tail += p * (lse - *x);
        *x = -g * p;
    }
    acc.iter().sum::<f32>() + tail
}

/// The entropy Σ_j p_j·(lse − x_j) of one f32 row whose logsumexp is `lse`.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn entropy_f32(row: &[f32], lse: f32) -> f32 {
    use crate::model::kernels::vector_exp::exp;
    let mut acc = [0f32; LANES];
    let mut c = row.chunks_exact(LANES);
    for x in &mut c {
        for i in 0..LANES {
            acc[i] += exp(x[i] - lse) * (lse - x[i]);
        }
    }
    let tail: f32 = c
        .remainder()
        .iter()
        .map(|&x| exp(x - lse) * (lse - x))
        .sum();
    acc.iter().sum::<f32>() + tail
}

/// The entropy of an f64 row whose logsumexp is `lse`.
fn entropy_generic<T: Float>(row: &[T], lse: T) -> T {
    row.iter()
        .fold(T::zero(), |a, &x| a + (x - lse).exp() * (lse - x))
}

/// d (g·log p_t + h·H) / d x_j without the one-hot's g (added by the caller): −p_j·(g +
/// h·(x_j − lse + H)), the row overwritten; returns H. A second read of the row computes H
/// first, which the gradient needs.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn softmax_grad_with_entropy_term(row: &mut [f32], lse: f32, g: f32, h: f32) -> f32 {
    use crate::model::kernels::vector_exp::exp;
    let ent = entropy_f32(row, lse);
    let shift = ent - lse;
    for x in row.iter_mut() {
        let p = exp(*x - lse);
        *x = -p * (g + h * (*x + shift));
    }
    ent
}

/// The op of [`logprob_grad_in_place`]: each row's log-prob into `lp` (and, when asked, its
/// entropy into `entropy`), the row overwritten by its gradient.
struct GradInPlace {
    targets: Vec<usize>,
    weights: Vec<f32>,
    /// Each row's weight on its entropy (all 0 without an entropy term).
    entropy_weights: Vec<f32>,
    with_entropy: bool,
    lp: std::sync::Mutex<Vec<f32>>,
    entropy: std::sync::Mutex<Vec<f32>>,
}

impl candle_core::InplaceOp1 for GradInPlace {
    fn name(&self) -> &'static str {
        "token-logprob-grad-in-place"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> Result<()> {
        let (n, v) = l.shape().dims2()?;
        let x = super::cpu_slices::f32s_mut(s, l, OP)?;
        if let Some(&bad) = self.targets.iter().find(|&&t| t >= v) {
            candle_core::bail!("token-logprob: target {bad} outside the vocabulary of {v}")
        }
        let mut lp = vec![0f32; n];
        let mut ent = vec![0f32; n];
        let with = self.with_entropy;
        lp.par_chunks_mut(ROWS)
            .zip(x.par_chunks_mut(ROWS * v))
            .zip(self.targets.par_chunks(ROWS))
            .zip(self.weights.par_chunks(ROWS))
            .zip(ent.par_chunks_mut(ROWS))
            .zip(self.entropy_weights.par_chunks(ROWS))
            .for_each(|(((((lp, x), t), w), e), hw)| {
                for (r, ((((lp, row), &t), &g), &h)) in lp
                    .iter_mut()
                    .zip(x.chunks_mut(v))
                    .zip(t)
                    .zip(w)
                    .zip(hw)
                    .enumerate()
                {
                    // The same values, in the same order, as the forward and backward ops.
                    *lp = row[t] - lse_f32(row);
                    let lse = row[t] - *lp;
                    if h != 0.0 {
                        e[r] = softmax_grad_with_entropy_term(row, lse, g, h);
                        row[t] += g;
                        continue;
                    }
                    if g == 0.0 {
                        if with {
                            e[r] = entropy_f32(row, lse);
                        }
                        row.fill(0.0);
                        continue;
                    }
                    if with {
                        e[r] = softmax_grad_entropy_in_place(row, lse, g);
                    } else {
                        softmax_grad_in_place(row, lse, g);
                    }
                    row[t] += g;
                }
            });
        *self.lp.lock().unwrap_or_else(|e| e.into_inner()) = lp;
        if with {
            *self.entropy.lock().unwrap_or_else(|e| e.into_inner()) = ent;
        }
        Ok(())
    }
}

/// [`softmax_grad_f32`] with the row as its own output.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn softmax_grad_in_place(row: &mut [f32], lse: f32, g: f32) {
    use crate::model::kernels::vector_exp::exp;
    for x in row.iter_mut() {
        *x = -g * exp(*x - lse);
    }
}

/// For f32 logits (N, V) on the CPU: returns log softmax(logits)[target] per row (N) and
/// overwrites `logits` with d (Σ_r weights_r · logprob_r) / d logits, the values
/// [`token_logprob_rows`]'s backward gives, without its (N, V) gradient buffer. `logits` must
/// not be shared with any other tensor. (The update takes [`logprob_entropy_grad_in_place`];
/// this is its entropy-free reference in the tests.)
#[cfg(test)]
pub fn logprob_grad_in_place(logits: &Tensor, targets: &Tensor, weights: &[f32]) -> Result<Tensor> {
    Ok(grad_in_place(logits, targets, weights, None, false)?.0)
}

/// [`logprob_grad_in_place`] that also returns each row's entropy (N), computed in the same
/// pass over the row as its gradient; the log-probs and the gradient are the same bits.
/// With `entropy_weights` (N), the gradient is that of Σ_r (weights_r · logprob_r +
/// entropy_weights_r · H_r); a row whose entropy weight is 0 is computed exactly as without.
pub fn logprob_entropy_grad_in_place(
    logits: &Tensor,
    targets: &Tensor,
    weights: &[f32],
    entropy_weights: Option<&[f32]>,
) -> Result<(Tensor, Vec<f32>)> {
    grad_in_place(logits, targets, weights, entropy_weights, true)
}

fn grad_in_place(
    logits: &Tensor,
    targets: &Tensor,
    weights: &[f32],
    entropy_weights: Option<&[f32]>,
    with_entropy: bool,
) -> Result<(Tensor, Vec<f32>)> {
    let targets: Vec<usize> = targets
        .to_dtype(candle_core::DType::U32)?
        .to_vec1::<u32>()?
        .into_iter()
        .map(|t| t as usize)
        .collect();
    let (n, _) = logits.dims2()?;
    if targets.len() != n || weights.len() != n {
        candle_core::bail!(
            "token-logprob: {} targets and {} weights for {n} rows",
            targets.len(),
            weights.len()
        )
    }
    let entropy_weights = match entropy_weights {
        Some(h) if h.len() != n => {
            candle_core::bail!("token-logprob: {} entropy weights for {n} rows", h.len())
        }
        Some(h) => h.to_vec(),
        None => vec![0.0; n],
    };
    let op = GradInPlace {
        targets,
        weights: weights.to_vec(),
        entropy_weights,
        with_entropy,
        lp: std::sync::Mutex::new(Vec::new()),
        entropy: std::sync::Mutex::new(Vec::new()),
    };
    logits.inplace_op1(&op)?;
    let lp = std::mem::take(&mut *op.lp.lock().unwrap_or_else(|e| e.into_inner()));
    let ent = std::mem::take(&mut *op.entropy.lock().unwrap_or_else(|e| e.into_inner()));
    Ok((Tensor::from_vec(lp, n, logits.device())?, ent))
}

/// Each row's log softmax at its target and its entropy, without a gradient: logits (N, V)
/// f32 or f64 on the CPU, targets (N) → ((N) log-probs, (N) entropies as f32). The log-probs
/// are [`token_logprob_rows`]'s bits.
pub fn logprob_entropy_rows(logits: &Tensor, targets: &Tensor) -> Result<(Vec<f32>, Vec<f32>)> {
    let logits = logits.contiguous()?;
    let (n, v) = logits.dims2()?;
    let t: Vec<usize> = targets
        .to_dtype(candle_core::DType::U32)?
        .to_vec1::<u32>()?
        .into_iter()
        .map(|t| t as usize)
        .collect();
    if t.len() != n {
        candle_core::bail!("token-logprob: {} targets for {n} rows", t.len())
    }
    if let Some(&bad) = t.iter().find(|&&t| t >= v) {
        candle_core::bail!("token-logprob: target {bad} outside the vocabulary of {v}")
    }
    let mut lp = vec![0f32; n];
    let mut ent = vec![0f32; n];
    match logits.dtype() {
        candle_core::DType::F32 => {
            let x = logits.flatten_all()?.to_vec1::<f32>()?;
            lp.par_chunks_mut(ROWS)
                .zip(ent.par_chunks_mut(ROWS))
                .zip(x.par_chunks(ROWS * v))
                .zip(t.par_chunks(ROWS))
                .for_each(|(((lp, e), x), t)| {
                    for (((lp, e), row), &t) in lp.iter_mut().zip(e).zip(x.chunks(v)).zip(t) {
                        *lp = row[t] - lse_f32(row);
                        *e = entropy_f32(row, row[t] - *lp);
                    }
                });
        }
        candle_core::DType::F64 => {
            let x = logits.flatten_all()?.to_vec1::<f64>()?;
            for (((lp, e), row), &t) in lp.iter_mut().zip(&mut ent).zip(x.chunks(v)).zip(&t) {
                let lse = lse_generic(row);
                *lp = (row[t] - lse) as f32;
                *e = entropy_generic(row, lse) as f32;
            }
        }
        _ => candle_core::bail!("token-logprob: logits must be f32 or f64"),
    }
    Ok((lp, ent))
}

/// log softmax(logits)[target] for every row: logits (N, V) f32/f64, targets (N) u32 → (N).
pub fn token_logprob_rows(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    logits
        .contiguous()?
        .apply_op2(&targets.contiguous()?, Forward)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var, D};

    /// The op-by-op reference: logit − logsumexp.
    fn reference(x: &Tensor, t: &Tensor) -> Result<Tensor> {
        let lse = x.exp()?.sum_keepdim(D::Minus1)?.log()?;
        let picked = x.gather(&t.unsqueeze(D::Minus1)?, D::Minus1)?;
        (picked - lse)?.squeeze(D::Minus1)
    }

    #[test]
    fn values_and_gradients_match_the_op_by_op_version() -> Result<()> {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&(Tensor::randn(0f64, 3.0, (5, 11), &dev)?))?;
        let t = Tensor::new(&[0u32, 10, 3, 3, 7], &dev)?;
        let w = Tensor::new(&[0.5f64, -2.0, 0.0, 1.5, 3.0], &dev)?;
        let fused = token_logprob_rows(x.as_tensor(), &t)?;
        let plain = reference(x.as_tensor(), &t)?;
        let diff = (&fused - &plain)?.abs()?.max_all()?.to_scalar::<f64>()?;
        assert!(diff < 1e-12, "values differ by {diff}");
        let gf = (fused * &w)?.sum_all()?.backward()?;
        let gp = (plain * &w)?.sum_all()?.backward()?;
        let (a, b) = (
            gf.get(x.as_tensor()).unwrap(),
            gp.get(x.as_tensor()).unwrap(),
        );
        let diff = (a - b)?.abs()?.max_all()?.to_scalar::<f64>()?;
        assert!(diff < 1e-12, "gradients differ by {diff}");
        // A zero weight (a padded position) leaves its row's gradient exactly zero.
        assert!(a.get(2)?.abs()?.max_all()?.to_scalar::<f64>()? == 0.0);
        Ok(())
    }

    /// The f32 path (vectorised exp) against the f64 reference, on rows longer than a lane block.
    #[test]
    fn f32_values_and_gradients_match_f64() -> Result<()> {
        let dev = Device::Cpu;
        let x64 = Var::from_tensor(&(Tensor::randn(0f64, 3.0, (6, 75), &dev)?))?;
        let x32 = Var::from_tensor(&x64.to_dtype(candle_core::DType::F32)?)?;
        let t = Tensor::new(&[0u32, 74, 3, 3, 17, 60], &dev)?;
        let w = Tensor::new(&[0.5f64, -2.0, 0.0, 1.5, 3.0, -1.0], &dev)?;
        let want = reference(x64.as_tensor(), &t)?;
        let got = token_logprob_rows(x32.as_tensor(), &t)?;
        let diff = (got.to_dtype(candle_core::DType::F64)? - &want)?
            .abs()?
            .max_all()?
            .to_scalar::<f64>()?;
        assert!(diff < 1e-5, "values differ by {diff}");
        let gp = (want * &w)?.sum_all()?.backward()?;
        let gf = (got * w.to_dtype(candle_core::DType::F32)?)?
            .sum_all()?
            .backward()?;
        let a = gf.get(x32.as_tensor()).unwrap();
        let b = gp.get(x64.as_tensor()).unwrap();
        let diff = (a.to_dtype(candle_core::DType::F64)? - b)?
            .abs()?
            .max_all()?
            .to_scalar::<f64>()?;
        assert!(diff < 1e-5, "gradients differ by {diff}");
        assert!(a.get(2)?.abs()?.max_all()?.to_scalar::<f32>()? == 0.0);
        Ok(())
    }

    /// In place: the same log-probs and the same gradient as the op and its backward, bit for
    /// bit, a zero weight giving a zero row.
    #[test]
    fn in_place_gradient_is_the_backward_bit_for_bit() -> Result<()> {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&(Tensor::randn(0f32, 3.0, (7, 75), &dev)?))?;
        let t = Tensor::new(&[0u32, 74, 3, 3, 17, 60, 5], &dev)?;
        let w = [0.5f32, -2.0, 0.0, 1.5, 3.0, -1.0, 0.25];
        let lp = token_logprob_rows(x.as_tensor(), &t)?;
        let grads = (&lp * Tensor::new(&w, &dev)?)?.sum_all()?.backward()?;
        let want = grads.get(x.as_tensor()).unwrap().to_vec2::<f32>()?;
        let logits = x.as_tensor().copy()?;
        let got_lp = logprob_grad_in_place(&logits, &t, &w)?;
        assert_eq!(got_lp.to_vec1::<f32>()?, lp.to_vec1::<f32>()?);
        assert_eq!(logits.to_vec2::<f32>()?, want);
        assert!(want[2].iter().all(|&g| g == 0.0));
        let bad = Tensor::new(&[0u32, 75, 3, 3, 17, 60, 5], &dev)?;
        let err = logprob_grad_in_place(&logits, &bad, &w).unwrap_err();
        assert!(err.to_string().contains("target 75 outside"), "{err}");
        Ok(())
    }

    /// The entropy the in-place gradient yields (and the no-gradient scoring's) is
    /// −Σ p·log p computed op by op in f64, and asking for it leaves the log-probs and the
    /// gradient the same bits; a zero-weight row still gets its entropy.
    #[test]
    fn entropy_matches_f64_and_leaves_the_gradient_unchanged() -> Result<()> {
        let dev = Device::Cpu;
        let x64 = Tensor::randn(0f64, 3.0, (7, 75), &dev)?;
        let x = x64.to_dtype(candle_core::DType::F32)?;
        let t = Tensor::new(&[0u32, 74, 3, 3, 17, 60, 5], &dev)?;
        let w = [0.5f32, -2.0, 0.0, 1.5, 3.0, -1.0, 0.25];
        let logp = candle_nn::ops::log_softmax(&x64, D::Minus1)?;
        let want: Vec<f64> = (logp.exp()? * &logp)?
            .sum(D::Minus1)?
            .neg()?
            .to_vec1::<f64>()?;
        let plain = x.copy()?;
        let lp = logprob_grad_in_place(&plain, &t, &w)?;
        let fused = x.copy()?;
        let (lp2, ent) = logprob_entropy_grad_in_place(&fused, &t, &w, None)?;
        assert_eq!(lp.to_vec1::<f32>()?, lp2.to_vec1::<f32>()?);
        assert_eq!(plain.to_vec2::<f32>()?, fused.to_vec2::<f32>()?);
        let (lp3, ent3) = logprob_entropy_rows(&x, &t)?;
        assert_eq!(lp3, lp.to_vec1::<f32>()?);
        let (_, ent64) = logprob_entropy_rows(&x64, &t)?;
        for (r, &h) in want.iter().enumerate() {
            for got in [ent[r], ent3[r], ent64[r]] {
                assert!(
                    (got as f64 - h).abs() <= 1e-5 * h.abs().max(1.0),
                    "row {r}: {got} vs {h}"
                );
            }
        }
        Ok(())
    }

    /// With an entropy weight per row, the in-place gradient is that of Σ w·log p + h·H
    /// computed op by op in f64 (candle's autograd through log_softmax); a row whose entropy
    /// weight is 0 is the bits of the entropy-free gradient, and a row with a zero log-prob
    /// weight but an entropy weight gets the entropy's gradient.
    #[test]
    fn entropy_term_gradient_matches_autograd() -> Result<()> {
        let dev = Device::Cpu;
        let x64 = Var::from_tensor(&Tensor::randn(0f64, 3.0, (7, 75), &dev)?)?;
        let x = x64.to_dtype(candle_core::DType::F32)?;
        let t = Tensor::new(&[0u32, 74, 3, 3, 17, 60, 5], &dev)?;
        let w = [0.5f32, -2.0, 0.0, 1.5, 3.0, -1.0, 0.25];
        let h = [0.3f32, 0.0, -0.7, 1.1, 0.0, -0.05, 2.0];
        let lp = reference(x64.as_tensor(), &t)?;
        let logp = candle_nn::ops::log_softmax(x64.as_tensor(), D::Minus1)?;
        let ent = (logp.exp()? * &logp)?.sum(D::Minus1)?.neg()?;
        let w64 = Tensor::new(&w, &dev)?.to_dtype(candle_core::DType::F64)?;
        let h64 = Tensor::new(&h, &dev)?.to_dtype(candle_core::DType::F64)?;
        let loss = ((lp * w64)?.sum_all()? + (&ent * h64)?.sum_all()?)?;
        let want = loss
            .backward()?
            .get(x64.as_tensor())
            .unwrap()
            .to_vec2::<f64>()?;
        let fused = x.copy()?;
        let (_, got_ent) = logprob_entropy_grad_in_place(&fused, &t, &w, Some(&h))?;
        let got = fused.to_vec2::<f32>()?;
        for (r, (g, e)) in got.iter().zip(&want).enumerate() {
            for (a, b) in g.iter().zip(e) {
                assert!((*a as f64 - b).abs() < 1e-5, "row {r}: {a} vs {b}");
            }
        }
        let ent = ent.to_vec1::<f64>()?;
        for (a, b) in got_ent.iter().zip(&ent) {
            assert!((*a as f64 - b).abs() < 1e-5 * b.abs().max(1.0));
        }
        assert!(got[2].iter().any(|&g| g != 0.0));
        let plain = x.copy()?;
        logprob_grad_in_place(&plain, &t, &w)?;
        let plain = plain.to_vec2::<f32>()?;
        assert_eq!(got[1], plain[1]);
        assert_eq!(got[4], plain[4]);
        let short = [0.0f32; 3];
        let err = logprob_entropy_grad_in_place(&x.copy()?, &t, &w, Some(&short)).unwrap_err();
        assert!(
            err.to_string().contains("3 entropy weights for 7 rows"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn rejects_targets_outside_the_vocabulary() -> Result<()> {
        let dev = Device::Cpu;
        let x = Tensor::zeros((2, 4), candle_core::DType::F32, &dev)?;
        let t = Tensor::new(&[1u32, 4], &dev)?;
        let err = token_logprob_rows(&x, &t).unwrap_err().to_string();
        assert!(
            err.contains("target 4 outside the vocabulary of 4"),
            "{err}"
        );
        Ok(())
    }
}
