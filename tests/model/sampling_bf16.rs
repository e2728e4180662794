//! `agents.sampling_dtype: bf16`: decoding with bf16 copies of the weights (f32 accumulation)
//! stays close to the f32 logits, scoring (`Mode::Infer`) and training stay exactly f32, and
//! the copies follow weight updates.
use crate::common;
use candle_core::{DType, Device, Tensor};
use comlrl::model::decoder::batch::{causal_mask, position_ids};
use comlrl::model::{generate, LoadOptions, Mode, ModelSource, Policy, SamplingParams};
use common::*;
use rand::SeedableRng;

fn load(spec: &str, sampling_dtype: DType) -> Policy {
    let src = if spec.starts_with("builtin:") {
        ModelSource::parse(spec, std::path::Path::new(".")).unwrap()
    } else {
        ModelSource::Local(fixtures().join(spec))
    };
    let opts = LoadOptions {
        sampling_dtype,
        ..LoadOptions::default()
    };
    Policy::load(&src, &opts).expect("load model")
}

/// Logits of a 12-token prompt in `mode`.
fn logits_in(p: &Policy, mode: Mode) -> Vec<f32> {
    let ids: Vec<u32> = (0..12u32)
        .map(|i| (i * 37 + 5) % p.config.vocab_size as u32)
        .collect();
    let valid = vec![vec![true; 12]];
    let ids = Tensor::from_vec(ids, (1, 12), &Device::Cpu).unwrap();
    let pos = position_ids(&valid, 12, &Device::Cpu).unwrap();
    let mask = causal_mask(&valid, 12, &Device::Cpu).unwrap();
    let h = p
        .model
        .hidden(&ids, &pos, &mask, None, p.products(mode))
        .unwrap();
    f32s(&p.model.logits_mode(&h, p.products(mode)).unwrap())
}

/// max |a − b| / max |b|.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    d / b.iter().map(|y| y.abs()).fold(0.0, f32::max)
}

#[test]
fn bf16_sampling_logits_are_close_to_f32() {
    // bf16 keeps 8 significant bits (relative rounding ≤ 2⁻⁹ per operand); over a few layers
    // the logits move by ~1% of their range. Tolerance: 3% of the largest logit.
    for spec in ["tiny-qwen2", "builtin:small"] {
        let (f, b) = (load(spec, DType::F32), load(spec, DType::BF16));
        let exact = logits_in(&f, Mode::Sample);
        let approx = logits_in(&b, Mode::Sample);
        let rel = rel_diff(&approx, &exact);
        eprintln!("{spec}: bf16 sampling logits relative max diff {rel:.2e}");
        assert!(rel < 3e-2, "{spec}: {rel}");
        assert!(rel > 0.0, "{spec}: the bf16 copy was not used");
        // Scoring and training never read the bf16 copy.
        assert!(logits_in(&b, Mode::Infer) == logits_in(&f, Mode::Infer));
        assert!(logits_in(&b, Mode::Train) == logits_in(&f, Mode::Train));
    }
}

#[test]
fn bf16_copies_follow_weight_updates() {
    let p = load("builtin:tiny", DType::BF16);
    let before = logits_in(&p, Mode::Sample);
    for (name, var) in p.vars() {
        // Projections only: the embedding lookup reads the f32 weights themselves.
        if name.ends_with("mlp.up_proj.weight") {
            var.set(&(var.as_tensor() * 3.0).unwrap()).unwrap();
        }
    }
    // Until told, sampling reads the old copies; after `weights_changed`, the new weights.
    assert!(
        logits_in(&p, Mode::Sample) == before,
        "stale copies expected"
    );
    p.weights_changed().unwrap();
    let after = logits_in(&p, Mode::Sample);
    let exact = logits_in(&p, Mode::Infer);
    assert!(
        rel_diff(&after, &before) > 0.01,
        "{}",
        rel_diff(&after, &before)
    );
    assert!(rel_diff(&after, &exact) < 3e-2);
}

/// An update round frees the copies (`release_sampling_copies`) and rebuilds them after its
/// last step (`weights_changed`): without them sampling reads the f32 weights (scoring's
/// numbers up to the order of the f32 sums: sampling's products sum each row on its own), far
/// from the bf16 copies' rounding; rebuilt it reads the same bf16 copies as before, bit for bit.
#[test]
fn released_copies_come_back_with_weights_changed() {
    let p = load("builtin:tiny", DType::BF16);
    let with_copies = logits_in(&p, Mode::Sample);
    p.release_sampling_copies().unwrap();
    let released = logits_in(&p, Mode::Sample);
    let exact = logits_in(&p, Mode::Infer);
    assert!(
        rel_diff(&released, &exact) < 1e-5,
        "released: sampling must read the f32 weights ({})",
        rel_diff(&released, &exact)
    );
    assert!(
        rel_diff(&with_copies, &exact) > 100.0 * rel_diff(&released, &exact).max(1e-7),
        "the bf16 copies round: {} vs {}",
        rel_diff(&with_copies, &exact),
        rel_diff(&released, &exact)
    );
    p.weights_changed().unwrap();
    assert!(logits_in(&p, Mode::Sample) == with_copies);
}

#[test]
fn bf16_greedy_decoding_starts_like_f32() {
    // The policies differ by rounding only: greedy continuations agree on most tokens (they
    // may part where two logits are within the rounding of each other, and then differ).
    let (f, b) = (
        load("tiny-qwen2", DType::F32),
        load("tiny-qwen2", DType::BF16),
    );
    let prompt = f
        .tokenizer
        .encode("Describe a city in the clouds:")
        .unwrap();
    let params = SamplingParams {
        max_new_tokens: 8,
        greedy: true,
        ignore_eos: true,
        ..Default::default()
    };
    let run = |p: &Policy| {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        generate(
            p.sampler(),
            &[&prompt],
            1,
            &params,
            &p.eos_ids,
            p.pad_id,
            &mut rng,
        )
        .unwrap()[0][0]
            .clone()
    };
    let (a, c) = (run(&f), run(&b));
    assert_eq!(a.len(), 8);
    assert_eq!(
        a[0], c[0],
        "the first greedy token: f32 {a:?} vs bf16 {c:?}"
    );
}

#[test]
fn unsupported_sampling_dtype_is_refused() {
    let err = Policy::load(
        &ModelSource::Builtin("tiny".into()),
        &LoadOptions {
            sampling_dtype: DType::F16,
            ..LoadOptions::default()
        },
    )
    .err()
    .expect("f16 sampling must be refused");
    assert!(err.to_string().contains("use f32 or bf16"), "{err}");
}

#[test]
fn a_run_with_bf16_sampling_trains_and_f16_is_refused_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bf16");
    let (code, err) = tiny_run::run(&out, &["agents.sampling_dtype=bf16"], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(tiny_run::metrics_without_timing(&out).len(), 20);
    let (code, err) = tiny_run::run(&tmp.path().join("f16"), &["agents.sampling_dtype=f16"], &[]);
    assert_ne!(code, Some(0));
    assert!(err.contains("sampling_dtype"), "{err}");
}

#[test]
fn copies_left_to_weights_changed_are_the_copies_built_at_load() {
    // The trainer loads agents on the pool's threads without their copies
    // (`copies_now: false`) and builds them on its own thread with `weights_changed`.
    for (spec, dtype) in [("builtin:small", DType::BF16), ("tiny-qwen2", DType::F32)] {
        let now = load(spec, dtype);
        let src = if spec.starts_with("builtin:") {
            ModelSource::parse(spec, std::path::Path::new(".")).unwrap()
        } else {
            ModelSource::Local(fixtures().join(spec))
        };
        let opts = LoadOptions {
            sampling_dtype: dtype,
            copies_now: false,
            ..LoadOptions::default()
        };
        let later = Policy::load(&src, &opts).unwrap();
        let want = logits_in(&now, Mode::Sample);
        if dtype == DType::BF16 {
            // Without them, sampling reads the f32 weights: not the bf16 copies' logits.
            assert!(logits_in(&later, Mode::Sample) != want, "{spec}");
        }
        later.weights_changed().unwrap();
        assert!(logits_in(&later, Mode::Sample) == want, "{spec}");
    }
}
