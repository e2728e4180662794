//! The sampling-time log-probs a clipped ratio keeps (`generate_streams_scored`): the same
//! completions as `generate_streams` from the same RNG streams, and each token's log-prob equal
//! to what the update scores for it (`completion_logprobs_scaled`) — to float rounding with f32
//! sampling copies, to bf16's precision with bf16 ones (what the docs say about π_old).
use crate::common;
use candle_core::DType;
use comlrl::model::{
    completion_logprobs_scaled, generate_streams, generate_streams_scored, LoadOptions, Mode,
    ModelSource, Policy, SamplingParams, ScoreLayout,
};
use common::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn load(sampling_dtype: DType) -> Policy {
    let opts = LoadOptions {
        sampling_dtype,
        ..LoadOptions::default()
    };
    Policy::load(&ModelSource::Local(fixtures().join("tiny-qwen2")), &opts).expect("load model")
}

/// Largest |sampling-time − scored| log-prob over every token of 2 prompts × 3 completions
/// sampled at `temperature`, scored at logit scale `scale`.
fn max_gap(p: &Policy, temperature: f64, scale: f64) -> f64 {
    let prompts: Vec<Vec<u32>> = vec![(1..9).collect(), (20..26).collect()];
    let refs: Vec<&[u32]> = prompts.iter().map(|v| v.as_slice()).collect();
    let params = SamplingParams {
        max_new_tokens: 16,
        temperature,
        top_p: 0.9,
        top_k: 20,
        ..SamplingParams::default()
    };
    let rngs = || -> Vec<ChaCha8Rng> { (0..2).map(ChaCha8Rng::seed_from_u64).collect() };
    let (comps, lps) = generate_streams_scored(
        p.sampler(),
        &refs,
        3,
        &params,
        &p.eos_ids,
        p.pad_id,
        &mut rngs(),
        scale,
    )
    .unwrap();
    let plain = generate_streams(
        p.sampler(),
        &refs,
        3,
        &params,
        &p.eos_ids,
        p.pad_id,
        &mut rngs(),
    )
    .unwrap();
    assert_eq!(comps, plain, "keeping log-probs changes no token");
    let mut gap = 0f64;
    for (g, prompt) in prompts.iter().enumerate() {
        for (c, lp) in comps[g].iter().zip(&lps[g]) {
            assert_eq!(c.len(), lp.len());
            let layout = ScoreLayout::new(&p.model, &[prompt], &[c], p.pad_id).unwrap();
            let scored = completion_logprobs_scaled(&p.model, &layout, Mode::Infer, scale).unwrap();
            let scored = f32s(&scored);
            for (a, b) in lp.iter().zip(&scored) {
                gap = gap.max((a - b).abs() as f64);
            }
        }
    }
    gap
}

#[test]
fn sampling_logprobs_are_the_updates_log_probs() {
    let f32_copies = load(DType::F32);
    for (temperature, scale) in [(0.8, 1.0), (0.8, 1.0 / 0.8)] {
        let gap = max_gap(&f32_copies, temperature, scale);
        eprintln!("f32 sampling, logit scale {scale}: max |log-prob gap| {gap:.2e}");
        assert!(gap < 1e-4, "scale {scale}: {gap}");
    }
    let bf16_copies = load(DType::BF16);
    let gap = max_gap(&bf16_copies, 0.8, 1.0);
    eprintln!("bf16 sampling: max |log-prob gap| {gap:.2e}");
    assert!(gap < 0.2, "{gap}");
}
