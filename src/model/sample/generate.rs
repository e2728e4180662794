//! Batched sampling with a KV cache: every prompt is prefilled once, its cache shared by its K
//! generations, then all rows decode together; rows that hit EOS or `max_new_tokens` leave the
//! batch. Temperature → top-k → top-p as transformers applies them, from a seeded RNG.
use super::copies::SamplingCopies;
use super::kv_cache::KvCache;
use crate::model::decoder::batch::{causal_mask, position_ids};
use crate::model::decoder::causal_lm::CausalLm;
use crate::model::decoder::forward::Mode;
use crate::model::kernels::token_logprob::row_logprob;
use candle_core::{DType, Result, Tensor};
use rand::Rng;

/// A model and the weight copies its decoding multiplies by (see `copies`).
#[derive(Debug, Clone, Copy)]
pub struct Sampler<'a> {
    /// The network.
    pub model: &'a CausalLm,
    /// Its sampling copies.
    pub copies: &'a SamplingCopies,
}

/// Sampling settings (CoMLRL's defaults: temperature 0.6, top_p 0.6, top_k 50).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Most tokens generated per completion.
    pub max_new_tokens: usize,
    /// Logits are divided by this before sampling; 0 or less samples greedily.
    pub temperature: f64,
    /// 1.0 disables nucleus filtering.
    pub top_p: f64,
    /// 0 disables top-k filtering.
    pub top_k: usize,
    /// Argmax decoding (ties go to the lowest id, as torch's argmax).
    pub greedy: bool,
    /// Keep generating after EOS (benchmarks, reference checks).
    pub ignore_eos: bool,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            max_new_tokens: 128,
            temperature: 0.6,
            top_p: 0.6,
            top_k: 50,
            greedy: false,
            ignore_eos: false,
        }
    }
}

/// Generates `k` completions for each prompt. Returns `[prompt][k]` token ids, each ending with
/// its EOS token when it stopped there. Every row draws from the one `rng`.
pub fn generate(
    sampler: Sampler<'_>,
    prompts: &[&[u32]],
    k: usize,
    params: &SamplingParams,
    eos_ids: &[u32],
    pad_id: u32,
    rng: &mut impl Rng,
) -> Result<Vec<Vec<Vec<u32>>>> {
    decode(
        sampler,
        prompts,
        k,
        params,
        eos_ids,
        pad_id,
        std::slice::from_mut(rng),
    )
}

/// [`generate`] with one RNG stream per prompt: prompt p's rows draw only from `rngs[p]`, in
/// the same order as `generate(sampler, &[prompts[p]], k, .., &mut rngs[p])` would, so sampling
/// several prompts in one batch (the weights read once per step for all their rows) draws the
/// same tokens as sampling them one at a time, up to the last bits of the logits.
pub fn generate_streams<R: Rng>(
    sampler: Sampler<'_>,
    prompts: &[&[u32]],
    k: usize,
    params: &SamplingParams,
    eos_ids: &[u32],
    pad_id: u32,
    rngs: &mut [R],
) -> Result<Vec<Vec<Vec<u32>>>> {
    if rngs.len() != prompts.len() {
        candle_core::bail!(
            "generate_streams: {} RNG streams for {} prompts",
            rngs.len(),
            prompts.len()
        );
    }
    decode(sampler, prompts, k, params, eos_ids, pad_id, rngs)
}

/// [`generate_streams`] that also returns, per prompt and completion, each sampled token's
/// log-prob log_softmax(logit_scale · logits)[token] from the logits it was drawn from (before
/// top-k/top-p): the sampling-time log-probs a clipped ratio compares the trained policy with,
/// at no second forward. They come from the sampling copies' products (`agents.sampling_dtype`);
/// the log-softmax is the update's own kernel.
#[allow(clippy::too_many_arguments)]
pub fn generate_streams_scored<R: Rng>(
    sampler: Sampler<'_>,
    prompts: &[&[u32]],
    k: usize,
    params: &SamplingParams,
    eos_ids: &[u32],
    pad_id: u32,
    rngs: &mut [R],
    logit_scale: f64,
) -> Result<Scored> {
    if rngs.len() != prompts.len() {
        candle_core::bail!(
            "generate_streams: {} RNG streams for {} prompts",
            rngs.len(),
            prompts.len()
        );
    }
    decode_scored(
        sampler,
        prompts,
        k,
        params,
        eos_ids,
        pad_id,
        rngs,
        Some(logit_scale),
    )
}

/// Completions `[prompt][k]` and, when asked for, each token's sampling-time log-prob in the
/// same shape (else empty).
pub type Scored = (Vec<Vec<Vec<u32>>>, Vec<Vec<Vec<f32>>>);

/// log_softmax(scale · logits)[token], with the update's log-prob kernel.
fn scaled_logprob(logits: &[f32], token: u32, scale: f64) -> f32 {
    if scale == 1.0 {
        return row_logprob(logits, token as usize);
    }
    let scaled: Vec<f32> = logits.iter().map(|&l| l * scale as f32).collect();
    row_logprob(&scaled, token as usize)
}

/// Prefill + decode; row (p, j) draws from `rngs[p]`, or from `rngs[0]` when there is one.
fn decode<R: Rng>(
    sampler: Sampler<'_>,
    prompts: &[&[u32]],
    k: usize,
    params: &SamplingParams,
    eos_ids: &[u32],
    pad_id: u32,
    rngs: &mut [R],
) -> Result<Vec<Vec<Vec<u32>>>> {
    Ok(decode_scored(sampler, prompts, k, params, eos_ids, pad_id, rngs, None)?.0)
}

/// [`decode`], keeping each token's log-prob at `logprob_scale` when given.
#[allow(clippy::too_many_arguments)]
fn decode_scored<R: Rng>(
    sampler: Sampler<'_>,
    prompts: &[&[u32]],
    k: usize,
    params: &SamplingParams,
    eos_ids: &[u32],
    pad_id: u32,
    rngs: &mut [R],
    logprob_scale: Option<f64>,
) -> Result<Scored> {
    let products = sampler.copies.products(Mode::Sample);
    let job = DecodeJob {
        sampler,
        prompts,
        k,
        params,
        eos_ids,
        pad_id,
        logprob_scale,
    };
    let mut d = Decoding::start(&job)?;
    while d.pick(&job, rngs)? {
        let (ids, pos, mask) = d.step_inputs()?;
        let model = sampler.model;
        let hidden = model.hidden(&ids, &pos, &mask, Some(&mut d.cache), products)?;
        d.logits = model.logits_mode(&hidden, products)?.squeeze(1)?;
    }
    Ok(d.finish())
}

/// What one decode samples: a model, its prompts, K per prompt, its settings and special ids,
/// and whether to keep each token's log-prob (at that logit scale).
#[derive(Debug, Clone, Copy)]
pub struct DecodeJob<'a> {
    /// The model and its sampling copies.
    pub sampler: Sampler<'a>,
    /// The prompts, each sampled `k` times.
    pub prompts: &'a [&'a [u32]],
    /// Completions per prompt.
    pub k: usize,
    /// Sampling settings.
    pub params: &'a SamplingParams,
    /// Generation stops at any of these (unless `params.ignore_eos`).
    pub eos_ids: &'a [u32],
    /// The id left-padding fills with.
    pub pad_id: u32,
    /// Keep each sampled token's log-prob log_softmax(scale · logits)[token].
    pub logprob_scale: Option<f64>,
}

/// One decode in progress (prefill done): its KV cache, the logits of its active rows' next
/// tokens, which rows are still going, and what they sampled. [`Decoding::pick`] draws a token
/// per active row; the caller then runs the next forward on [`Decoding::step_inputs`] and puts
/// its logits in `logits` (alone, or in one forward with other decodes on the same base:
/// `grouped`).
pub(crate) struct Decoding {
    pub(crate) cache: KvCache,
    /// Next-token logits of the active rows, (rows, vocab).
    pub(crate) logits: Tensor,
    /// Active rows: (prompt, sample).
    active: Vec<(usize, usize)>,
    /// Each active row's token drawn last, the next forward's input.
    next: Vec<u32>,
    lens: Vec<usize>,
    /// The prompts' padded length.
    t: usize,
    /// Tokens drawn so far per row.
    step: usize,
    out: Vec<Vec<Vec<u32>>>,
    lps: Vec<Vec<Vec<f32>>>,
    done: bool,
}

impl Decoding {
    /// Checks `job` and prefills its distinct prompts once (each prompt's cache then shared by
    /// its k rows), with the job's own model and sampling copies.
    pub(crate) fn start(job: &DecodeJob<'_>) -> Result<Self> {
        let (model, prompts, k, params) = (job.sampler.model, job.prompts, job.k, job.params);
        let products = job.sampler.copies.products(Mode::Sample);
        let dev = model.device();
        let n_prompts = prompts.len();
        let out = vec![vec![Vec::new(); k]; n_prompts];
        let lps: Vec<Vec<Vec<f32>>> = match job.logprob_scale {
            Some(_) => vec![vec![Vec::new(); k]; n_prompts],
            None => Vec::new(),
        };
        let lens: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
        if n_prompts == 0 || k == 0 || params.max_new_tokens == 0 {
            return Ok(Self {
                cache: KvCache::for_model(model, 0, 0)?,
                logits: Tensor::zeros((0, 0), DType::F32, dev)?,
                active: Vec::new(),
                next: Vec::new(),
                lens,
                t: 0,
                step: 0,
                out,
                lps,
                done: true,
            });
        }
        if prompts.iter().any(|p| p.is_empty()) {
            candle_core::bail!("cannot generate from an empty prompt");
        }
        let t = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
        let capacity = t + params.max_new_tokens;
        if capacity > model.max_positions() {
            candle_core::bail!(
                "prompt ({t} tokens) + max_new_tokens ({}) exceed the model's {} positions",
                params.max_new_tokens,
                model.max_positions()
            );
        }
        // Prefill the distinct prompts once.
        let mut ids = Vec::with_capacity(n_prompts * t);
        let mut valid = Vec::with_capacity(n_prompts);
        for p in prompts {
            ids.extend(std::iter::repeat_n(job.pad_id, t - p.len()));
            ids.extend_from_slice(p);
            let mut v = vec![false; t - p.len()];
            v.extend(std::iter::repeat_n(true, p.len()));
            valid.push(v);
        }
        let ids = Tensor::from_vec(ids, (n_prompts, t), dev)?;
        let mut cache = KvCache::for_model(model, n_prompts, capacity)?;
        let hidden = model.hidden(
            &ids,
            &position_ids(&valid, t, dev)?,
            &causal_mask(&valid, t, dev)?,
            Some(&mut cache),
            products,
        )?;
        let last = model
            .logits_mode(&hidden.narrow(1, t - 1, 1)?, products)?
            .squeeze(1)?; // (P, V)
                          // Share each prompt's cache with its k rows.
        let rows: Vec<u32> = (0..n_prompts as u32)
            .flat_map(|p| std::iter::repeat_n(p, k))
            .collect();
        let rows_t = Tensor::from_vec(rows.clone(), rows.len(), dev)?;
        let cache = cache.select_rows(&rows_t)?;
        let logits = last.index_select(&rows_t, 0)?;
        let active: Vec<(usize, usize)> = (0..n_prompts)
            .flat_map(|p| (0..k).map(move |j| (p, j)))
            .collect();
        Ok(Self {
            cache,
            logits,
            active,
            next: Vec::new(),
            lens,
            t,
            step: 0,
            out,
            lps,
            done: false,
        })
    }

    /// Draws each active row's next token from `logits`, row (p, j) from `rngs[p]` (or
    /// `rngs[0]` when there is one); rows that reach EOS or `max_new_tokens` leave. Whether
    /// rows go on (then a forward of [`Decoding::step_inputs`] must set `logits`).
    pub(crate) fn pick<R: Rng>(&mut self, job: &DecodeJob<'_>, rngs: &mut [R]) -> Result<bool> {
        if self.done {
            return Ok(false);
        }
        let params = job.params;
        let step = self.step;
        let shared = rngs.len() == 1;
        let rows_logits = self.logits.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let mut next = Vec::with_capacity(self.active.len());
        let mut keep = Vec::with_capacity(self.active.len());
        for (r, &(p, j)) in self.active.iter().enumerate() {
            let Some(rng) = rngs.get_mut(if shared { 0 } else { p }) else {
                candle_core::bail!("no RNG stream for prompt {p}");
            };
            let Some(tok) = pick(&rows_logits[r], params, rng) else {
                candle_core::bail!(
                    "the next-token logits are not finite (NaN or +inf) at generated token {}: the \
                     model's weights have diverged (lower the learning rate, or set max_grad_norm)",
                    step + 1
                );
            };
            self.out[p][j].push(tok);
            if let Some(scale) = job.logprob_scale {
                self.lps[p][j].push(scaled_logprob(&rows_logits[r], tok, scale));
            }
            let stop = (!params.ignore_eos && job.eos_ids.contains(&tok))
                || step + 1 == params.max_new_tokens;
            if !stop {
                keep.push(r);
                next.push(tok);
            }
        }
        self.step += 1;
        if keep.is_empty() {
            self.done = true;
            return Ok(false);
        }
        if keep.len() < self.active.len() {
            self.cache.retain_rows(&keep)?;
            self.active = keep.iter().map(|&r| self.active[r]).collect();
        }
        self.next = next;
        Ok(true)
    }

    /// The next forward's inputs for the active rows: the tokens just drawn (b, 1), their
    /// positions (b, 1) and the mask (b, 1, 1, past + 1) over this decode's own cache.
    pub(crate) fn step_inputs(&self) -> Result<(Tensor, Tensor, Tensor)> {
        let dev = self.logits.device();
        let (t, step) = (self.t, self.step - 1);
        let b = self.active.len();
        let past = self.cache.len();
        let valid: Vec<Vec<bool>> = self
            .active
            .iter()
            .map(|&(p, _)| {
                let mut v = vec![false; t - self.lens[p]];
                v.extend(std::iter::repeat_n(true, past + 1 - (t - self.lens[p])));
                v
            })
            .collect();
        let pos: Vec<u32> = self
            .active
            .iter()
            .map(|&(p, _)| (self.lens[p] + step) as u32)
            .collect();
        Ok((
            Tensor::from_vec(self.next.clone(), (b, 1), dev)?,
            Tensor::from_vec(pos, (b, 1), dev)?,
            causal_mask(&valid, 1, dev)?,
        ))
    }

    /// The completions `[prompt][k]` and, when kept, their tokens' log-probs.
    pub(crate) fn finish(self) -> Scored {
        (self.out, self.lps)
    }
}

/// Chooses the next token from one row of logits; `None` when the row holds a NaN or +inf
/// (diverged weights: no distribution to sample from) or no token at all.
pub fn pick(logits: &[f32], params: &SamplingParams, rng: &mut impl Rng) -> Option<u32> {
    if logits.is_empty() || logits.iter().any(|x| x.is_nan() || *x == f32::INFINITY) {
        return None;
    }
    if params.greedy || params.temperature <= 0.0 {
        return Some(argmax(logits));
    }
    let inv_t = 1.0 / params.temperature as f32;
    // Candidates: top-k by logit (all when k is 0 or ≥ vocab), sorted descending.
    let mut cand = if params.top_k > 0 && params.top_k < logits.len() {
        top_k(logits, inv_t, params.top_k)
    } else {
        logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l * inv_t))
            .collect()
    };
    cand.sort_unstable_by(by_logit);
    let max = cand.first()?.1;
    let mut probs: Vec<f64> = cand.iter().map(|c| ((c.1 - max) as f64).exp()).collect();
    let total: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= total);
    if params.top_p < 1.0 {
        // Keep the smallest prefix whose mass reaches top_p (always at least one token).
        let mut mass = 0.0;
        let mut keep = probs.len();
        for (i, p) in probs.iter().enumerate() {
            mass += p;
            if mass >= params.top_p {
                keep = i + 1;
                break;
            }
        }
        probs.truncate(keep);
    }
    let total: f64 = probs.iter().sum();
    let mut u = rng.random::<f64>() * total;
    for (i, p) in probs.iter().enumerate() {
        u -= p;
        if u <= 0.0 {
            return Some(cand[i].0);
        }
    }
    cand.get(probs.len().checked_sub(1)?).map(|c| c.0)
}

/// Descending by scaled logit, ties to the lower id.
fn by_logit(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// The `k` best (id, logit · inv_t) under [`by_logit`], in no particular order. A first bar
/// comes from a strided sample of the row (its rank is chosen so that about 2k logits reach
/// it); one pass then keeps only the logits at or above the bar ([`at_or_above`]). Should fewer
/// than k reach it (a row laid out against the sample), the pass runs again from no bar.
fn top_k(logits: &[f32], inv_t: f32, k: usize) -> Vec<(u32, f32)> {
    let k = k.min(logits.len());
    if k == 0 {
        return Vec::new();
    }
    if let Some(bar) = sampled_bar(logits, inv_t, k) {
        let cand = at_or_above(logits, inv_t, k, bar);
        if cand.len() == k {
            return cand;
        }
    }
    at_or_above(logits, inv_t, k, f32::NEG_INFINITY)
}

/// A bar about 2k logits of the row reach, from every `n / s`-th logit (s = max(4k, n / 64)):
/// the sample's ⌈2k·s / n⌉-th best. `None` for rows under 8k logits, which one pass without a
/// bar serves as well.
fn sampled_bar(logits: &[f32], inv_t: f32, k: usize) -> Option<f32> {
    let n = logits.len();
    if n < 8 * k {
        return None;
    }
    let s = (4 * k).max(n / 64);
    let stride = n / s;
    let mut sample: Vec<f32> = logits.iter().step_by(stride).map(|&l| l * inv_t).collect();
    let rank = (2 * k * sample.len()).div_ceil(n).clamp(1, sample.len());
    let (_, bar, _) = sample.select_nth_unstable_by(rank - 1, |a, b| b.total_cmp(a));
    Some(*bar)
}

/// The `k` best of the logits at or above `bar` (fewer where fewer reach it), in one pass that
/// appends those logits and, when the candidates reach four times k, cuts them back to the k
/// best (a linear-time selection) and raises the bar to the worst kept. Runs of 32 logits none
/// of which reaches the bar are passed over with one vectorised test. A max-heap of k would
/// keep the bar exact but sift on every entry, which costs most where k is a sizeable fraction
/// of a small vocabulary.
fn at_or_above(logits: &[f32], inv_t: f32, k: usize, mut bar: f32) -> Vec<(u32, f32)> {
    /// Logits tested against the bar at once.
    const CHUNK: usize = 32;
    let cap = 4 * k;
    let mut cand: Vec<(u32, f32)> = Vec::with_capacity(cap + CHUNK);
    for (c, chunk) in logits.chunks(CHUNK).enumerate() {
        // A branch-free test the compiler vectorises: "not below the bar" holds for a value at
        // or above it and for a NaN (above every number in `total_cmp`'s order, sorted out by
        // the exact test below).
        let reaches = |&l: &f32| u32::from(!(l * inv_t).lt(&bar));
        if chunk.iter().map(reaches).sum::<u32>() == 0 {
            continue;
        }
        // Ties with the bar enter: `keep_best` orders them by id.
        let key = order_key(bar);
        for (j, &l) in chunk.iter().enumerate() {
            let v = l * inv_t;
            if order_key(v) >= key {
                cand.push(((c * CHUNK + j) as u32, v));
            }
        }
        if cand.len() >= cap {
            keep_best(&mut cand, k);
            bar = worst(&cand);
        }
    }
    keep_best(&mut cand, k);
    cand
}

/// Cuts `cand` to its `k` best under [`by_logit`] (in no particular order).
fn keep_best(cand: &mut Vec<(u32, f32)>, k: usize) {
    if cand.len() > k {
        cand.select_nth_unstable_by(k - 1, by_logit);
        cand.truncate(k);
    }
}

/// The worst of `cand`'s scaled logits (the lowest in `f32::total_cmp`'s order).
fn worst(cand: &[(u32, f32)]) -> f32 {
    cand.iter()
        .map(|c| c.1)
        .min_by(f32::total_cmp)
        .unwrap_or(f32::NEG_INFINITY)
}

/// `f32::total_cmp`'s order as an integer: a.total_cmp(&b) == key(a).cmp(&key(b)).
fn order_key(v: f32) -> i32 {
    let b = v.to_bits() as i32;
    b ^ (((b >> 31) as u32) >> 1) as i32
}

fn argmax(xs: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// The one-pass top-k gives the candidates a full sort does, ties (to the lower id)
    /// included, and `pick` draws the same tokens through it.
    #[test]
    fn top_k_is_the_sorted_prefix() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for case in 0..200usize {
            let n = 1 + case * 37 % 3000;
            // Few distinct values, so ties at the k-th place are common; negatives, both
            // zeros (total_cmp puts -0 below +0) and -inf (a masked token) in some rows.
            let shift = if case % 2 == 0 { 0.0 } else { 2.5 };
            let logits: Vec<f32> = (0..n)
                .map(|i| match i % 89 {
                    7 if case % 3 == 0 => -0.0,
                    8 if case % 3 == 0 => f32::NEG_INFINITY,
                    _ => (rng.random::<f32>() * 20.0).round() / 4.0 - shift,
                })
                .collect();
            for k in [1, 5, 50, n.saturating_sub(1).max(1)] {
                if k >= n {
                    continue;
                }
                let inv_t = 1.0 / 0.6f32;
                let mut all: Vec<(u32, f32)> = logits
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| (i as u32, l * inv_t))
                    .collect();
                all.sort_unstable_by(by_logit);
                all.truncate(k);
                let mut got = top_k(&logits, inv_t, k);
                got.sort_unstable_by(by_logit);
                assert_eq!(got, all, "n {n}, k {k}");
            }
        }
    }

    /// Diverged weights give NaN or +inf logits: no token (the decode loop turns that into an
    /// error), greedy or sampled; a masked -inf among finite logits is fine.
    #[test]
    fn non_finite_logits_give_no_token() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let sampled = SamplingParams::default();
        let greedy = SamplingParams {
            greedy: true,
            ..SamplingParams::default()
        };
        for params in [&sampled, &greedy] {
            for bad in [f32::NAN, f32::INFINITY] {
                let mut row = vec![0.5f32; 100];
                row[37] = bad;
                assert_eq!(pick(&row, params, &mut rng), None);
            }
            assert_eq!(pick(&[f32::NAN; 100], params, &mut rng), None);
            assert_eq!(pick(&[], params, &mut rng), None);
            let mut masked = vec![f32::NEG_INFINITY; 100];
            masked[3] = 1.0;
            assert_eq!(pick(&masked, params, &mut rng), Some(3));
        }
    }

    /// Rising logits: every logit beats the bar, so the candidates are cut back many times
    /// in one scan; falling logits: none after the first k enters; constant logits: every one
    /// ties. Against the sample: only the sampled logits are high, so fewer than k reach the
    /// sampled bar and the scan runs again without one.
    #[test]
    fn top_k_survives_every_logit_entering() {
        let n = 3000;
        let rising: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
        let falling: Vec<f32> = rising.iter().rev().copied().collect();
        let flat = vec![1.5f32; n];
        // k = 50: a sample of 200, every 15th logit; its 7th best is the bar.
        let against: Vec<f32> = (0..n)
            .map(|i| if i % 15 == 0 { 100.0 + i as f32 } else { 0.0 })
            .collect();
        let bar = sampled_bar(&against, 1.0, 50).expect("a row of 3000 is sampled");
        assert!(against.iter().filter(|&&l| l >= bar).count() < 50);
        let cases = [
            ("rising", rising),
            ("falling", falling),
            ("flat", flat),
            ("against the sample", against),
        ];
        for (name, logits) in cases {
            for k in [1, 7, 50, 2999] {
                let mut want: Vec<(u32, f32)> = logits
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| (i as u32, l))
                    .collect();
                want.sort_unstable_by(by_logit);
                want.truncate(k);
                let mut got = top_k(&logits, 1.0, k);
                got.sort_unstable_by(by_logit);
                assert_eq!(got, want, "{name}, k {k}");
            }
        }
    }
}
