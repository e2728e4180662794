//! Model benchmark: sampling tokens/s (batch × new tokens, KV cache, EOS ignored) and
//! forward+backward seconds of the policy-gradient loss on a batch of sequences, with GFLOP/s.
use crate::error::Result;
use crate::model::decoder::flops::{forward_flops, train_flops};
use crate::model::{completion_logprobs, generate, Mode, Policy, SamplingParams, ScoreLayout};
use candle_core::Tensor;
use rand::SeedableRng;
use serde::Serialize;
use std::time::Instant;

/// Shapes and repetitions of the model benchmark.
#[derive(Debug, Clone)]
pub struct ModelBenchOptions {
    /// Prompts sampled at once.
    pub sample_batch: usize,
    /// Tokens per prompt.
    pub prompt_tokens: usize,
    /// Tokens generated per prompt (EOS ignored).
    pub new_tokens: usize,
    /// Sequences in the loss batch.
    pub train_batch: usize,
    /// Tokens per loss sequence.
    pub train_seq: usize,
    /// Timed repetitions after one warm-up; the median is reported.
    pub repeats: usize,
    /// Sample with contiguous transposed weight copies (by model size with `Auto`).
    pub rollout_copies: crate::model::RolloutCopies,
    /// Sample with bf16 copies of the weights (f32 accumulation).
    pub sampling_bf16: bool,
}

impl ModelBenchOptions {
    /// The sampling weight copies these options ask for, for a model of `weight_bytes`.
    pub fn sampling_weights(&self, weight_bytes: usize) -> crate::model::SamplingWeights {
        use crate::model::SamplingWeights as W;
        match (self.sampling_bf16, self.rollout_copies.wanted(weight_bytes)) {
            (true, _) => W::Bf16,
            (false, true) => W::Transposed,
            (false, false) => self.rollout_copies.large(&candle_core::Device::Cpu),
        }
    }
}

impl Default for ModelBenchOptions {
    fn default() -> Self {
        Self {
            sample_batch: 8,
            prompt_tokens: 32,
            new_tokens: 128,
            train_batch: 8,
            train_seq: 160,
            repeats: 3,
            rollout_copies: crate::model::RolloutCopies::Auto,
            sampling_bf16: false,
        }
    }
}

/// The JSON report of the model benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct ModelBenchReport {
    /// The model, as its source describes itself.
    pub model: String,
    /// Parameter count.
    pub parameters: usize,
    /// Sampling speed.
    pub sampling: SamplingReport,
    /// Loss forward+backward speed.
    pub train_step: TrainReport,
    /// Peak resident memory of the process, where the platform reports it.
    pub peak_rss_bytes: Option<u64>,
}

/// Sampling speed: a batch of prompts, each extended by `new_tokens` tokens.
#[derive(Debug, Clone, Serialize)]
pub struct SamplingReport {
    /// Prompts sampled at once.
    pub batch: usize,
    /// Tokens per prompt.
    pub prompt_tokens: usize,
    /// Tokens generated per prompt.
    pub new_tokens: usize,
    /// Sampled with contiguous transposed weight copies.
    pub rollout_copies: bool,
    /// The dtype of the weights sampling read: "f32" or "bf16".
    pub sampling_dtype: &'static str,
    /// Median seconds of one batch.
    pub seconds: f64,
    /// Generated tokens per second.
    pub tokens_per_s: f64,
    /// Model GFLOP/s while sampling.
    pub gflops_per_s: f64,
}

/// Forward and backward time of the policy-gradient loss on one batch.
#[derive(Debug, Clone, Serialize)]
pub struct TrainReport {
    /// Sequences in the batch.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq: usize,
    /// Median forward seconds.
    pub forward_s: f64,
    /// Median backward seconds.
    pub backward_s: f64,
    /// Forward plus backward seconds.
    pub total_s: f64,
    /// Model GFLOP/s over forward plus backward.
    pub gflops_per_s: f64,
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// Benchmarks sampling and one loss forward+backward of `policy` with the shapes in `o`.
pub fn run(policy: &Policy, o: &ModelBenchOptions) -> Result<ModelBenchReport> {
    let cfg = &policy.config;
    let vocab = cfg.vocab_size as u32;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let ids =
        |n: usize, off: u32| -> Vec<u32> { (0..n as u32).map(|i| (i * 7 + off) % vocab).collect() };
    // Sampling: `sample_batch` distinct prompts, one completion each, EOS ignored.
    let prompts: Vec<Vec<u32>> = (0..o.sample_batch)
        .map(|r| ids(o.prompt_tokens, r as u32))
        .collect();
    let p: Vec<&[u32]> = prompts.iter().map(|v| v.as_slice()).collect();
    let params = SamplingParams {
        max_new_tokens: o.new_tokens,
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let weight_bytes = policy.num_parameters() * policy.model.dtype().size_in_bytes();
    policy.refresh_sampling_copies(o.sampling_weights(weight_bytes))?;
    let mut times = vec![];
    for rep in 0..=o.repeats {
        let t0 = Instant::now();
        generate(
            policy.sampler(),
            &p,
            1,
            &params,
            &policy.eos_ids,
            policy.pad_id,
            &mut rng,
        )?;
        if rep > 0 {
            times.push(t0.elapsed().as_secs_f64());
        }
    }
    let s_sec = median(times);
    let new = (o.sample_batch * o.new_tokens) as f64;
    // Prefill + one-token steps over a growing context (head on the last position only).
    let mut sflops = forward_flops(cfg, o.sample_batch, o.prompt_tokens, 1);
    for step in 0..o.new_tokens {
        let ctx = o.prompt_tokens + step;
        sflops += forward_flops(cfg, o.sample_batch, 1, 1)
            + 4.0
                * (o.sample_batch * ctx * cfg.num_attention_heads * cfg.head_dim()) as f64
                * cfg.num_hidden_layers as f64;
    }
    // Training: half prompt, half completion; loss = −Σ A·log π.
    let half = o.train_seq / 2;
    let tp: Vec<Vec<u32>> = (0..o.train_batch).map(|r| ids(half, r as u32)).collect();
    let tc: Vec<Vec<u32>> = (0..o.train_batch)
        .map(|r| ids(o.train_seq - half, 100 + r as u32))
        .collect();
    let tp: Vec<&[u32]> = tp.iter().map(|v| v.as_slice()).collect();
    let tc: Vec<&[u32]> = tc.iter().map(|v| v.as_slice()).collect();
    let layout = ScoreLayout::new(&policy.model, &tp, &tc, policy.pad_id)?;
    let adv: Vec<f32> = (0..o.train_batch)
        .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
        .collect();
    let adv = Tensor::from_vec(adv, o.train_batch, policy.model.device())?;
    let (mut fw, mut bw) = (vec![], vec![]);
    for rep in 0..=o.repeats {
        let t0 = Instant::now();
        let lp = completion_logprobs(&policy.model, &layout, Mode::Train)?;
        let loss = lp.sum(1)?.mul(&adv)?.sum_all()?.neg()?;
        let _ = loss.to_scalar::<f32>()?;
        let t1 = Instant::now();
        let grads = loss.backward()?;
        drop(grads);
        if rep > 0 {
            fw.push((t1 - t0).as_secs_f64());
            bw.push(t1.elapsed().as_secs_f64());
        }
    }
    let (f, b) = (median(fw), median(bw));
    let tflops = train_flops(cfg, o.train_batch, o.train_seq, o.train_seq - half);
    Ok(ModelBenchReport {
        model: policy.source.describe(),
        parameters: policy.num_parameters(),
        sampling: SamplingReport {
            batch: o.sample_batch,
            prompt_tokens: o.prompt_tokens,
            new_tokens: o.new_tokens,
            rollout_copies: o.sampling_weights(weight_bytes)
                == crate::model::SamplingWeights::Transposed,
            sampling_dtype: if o.sampling_bf16 { "bf16" } else { "f32" },
            seconds: s_sec,
            tokens_per_s: new / s_sec,
            gflops_per_s: sflops / s_sec / 1e9,
        },
        train_step: TrainReport {
            batch: o.train_batch,
            seq: o.train_seq,
            forward_s: f,
            backward_s: b,
            total_s: f + b,
            gflops_per_s: tflops / (f + b) / 1e9,
        },
        peak_rss_bytes: crate::runtime::peak_rss_bytes(),
    })
}
