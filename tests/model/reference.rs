//! The model against transformers' reference values (`tests/fixtures`): logits on left-padded
//! prompts, completion log-probs, greedy generations, for the tied f32 and untied bf16 Qwen2
//! models, the llama3-scaled Llama and the q/k-norm Qwen3.
use crate::common;
use candle_core::Device;
use comlrl::model::decoder::batch::{causal_mask, position_ids};
use comlrl::model::{
    completion_logprobs, generate, Architecture, LoadOptions, Mode, ModelSource, Policy,
    SamplingParams, ScoreLayout,
};
use common::*;

fn load(name: &str) -> Policy {
    let dir = fixtures().join(name);
    Policy::load(&ModelSource::Local(dir), &LoadOptions::default()).expect("load fixture model")
}

fn check_logits(name: &str, mode: Mode) {
    check_logits_within(name, mode, 1e-4)
}

/// Logits on valid rows within `tol` × the largest reference logit.
fn check_logits_within(name: &str, mode: Mode, tol: f32) {
    let policy = load(name);
    let r = load_st(&fixtures().join(name).join("reference.safetensors"));
    let mask = rows_i64(&r["attention_mask"]);
    let valid: Vec<Vec<bool>> = mask
        .iter()
        .map(|row| row.iter().map(|&m| m == 1).collect())
        .collect();
    let (b, t) = r["input_ids"].dims2().unwrap();
    let ids = r["input_ids"].to_dtype(candle_core::DType::U32).unwrap();
    // Our positions follow the same rule the fixture used.
    let pos = position_ids(&valid, t, &Device::Cpu).unwrap();
    let ref_pos = r["position_ids"].to_dtype(candle_core::DType::U32).unwrap();
    assert_eq!(
        pos.to_vec2::<u32>().unwrap(),
        ref_pos.to_vec2::<u32>().unwrap()
    );
    let m = causal_mask(&valid, t, &Device::Cpu).unwrap();
    let hidden = policy
        .model
        .hidden(&ids, &pos, &m, None, policy.products(mode))
        .unwrap();
    // A no-grad forward must leave no graph behind: attached, its result would keep every
    // intermediate tensor of the forward alive (a scoring pass's memory grew by gigabytes).
    assert_eq!(
        hidden.track_op(),
        !mode.no_grad(),
        "{name} {mode:?}: hidden states tracked for a backward"
    );
    let logits = policy.model.logits(&hidden).unwrap();
    let got = logits.to_vec3::<f32>().unwrap();
    let want = r["logits"].to_vec3::<f32>().unwrap();
    let (mut max_diff, mut max_ref) = (0f32, 0f32);
    for bi in 0..b {
        for ti in 0..t {
            if !valid[bi][ti] {
                continue;
            }
            for (g, w) in got[bi][ti].iter().zip(&want[bi][ti]) {
                max_diff = max_diff.max((g - w).abs());
                max_ref = max_ref.max(w.abs());
            }
        }
    }
    let rel = max_diff / max_ref;
    assert!(
        rel < tol,
        "{name} {mode:?}: logits max-abs diff {max_diff} / max-abs ref {max_ref} = {rel}"
    );
}

fn check_logprobs(name: &str, mode: Mode) {
    check_logprobs_within(name, mode, 1e-4)
}

/// Completion log-probs within `tol` (absolute) where the completion mask is 1.
fn check_logprobs_within(name: &str, mode: Mode, tol: f32) {
    let policy = load(name);
    let refj = json(&fixtures().join(name).join("reference.json"));
    let r = load_st(&fixtures().join(name).join("reference.safetensors"));
    let prompts: Vec<Vec<u32>> = refj["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ids(&p["ids"]))
        .collect();
    let comps: Vec<Vec<u32>> = refj["completions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| ids(&c["ids"]))
        .collect();
    let p: Vec<&[u32]> = prompts.iter().map(|v| v.as_slice()).collect();
    let c: Vec<&[u32]> = comps.iter().map(|v| v.as_slice()).collect();
    let layout = ScoreLayout::new(&policy.model, &p, &c, policy.pad_id).unwrap();
    let got = completion_logprobs(&policy.model, &layout, policy.products(mode))
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let want = r["completion_logprobs"].to_vec2::<f32>().unwrap();
    let cmask = rows_i64(&r["completion_mask"]);
    for (bi, row) in want.iter().enumerate() {
        for (j, w) in row.iter().enumerate() {
            if cmask[bi][j] == 1 {
                assert!(
                    (got[bi][j] - w).abs() < tol,
                    "{name} row {bi} token {j}: {} vs {w}",
                    got[bi][j]
                );
            } else {
                assert_eq!(
                    got[bi][j], 0.0,
                    "{name}: padded position {bi},{j} must score exactly 0"
                );
            }
        }
    }
}

fn check_greedy(name: &str) {
    let policy = load(name);
    let refj = json(&fixtures().join(name).join("reference.json"));
    let r = load_st(&fixtures().join(name).join("reference.safetensors"));
    let prompts: Vec<Vec<u32>> = refj["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ids(&p["ids"]))
        .collect();
    let p: Vec<&[u32]> = prompts.iter().map(|v| v.as_slice()).collect();
    let params = SamplingParams {
        max_new_tokens: 16,
        greedy: true,
        ignore_eos: true,
        ..Default::default()
    };
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(0);
    let out = generate(
        policy.sampler(),
        &p,
        1,
        &params,
        &policy.eos_ids,
        policy.pad_id,
        &mut rng,
    )
    .unwrap();
    let want = rows_i64(&r["greedy_ids"]);
    for (bi, w) in want.iter().enumerate() {
        let w: Vec<u32> = w.iter().map(|&x| x as u32).collect();
        assert_eq!(out[bi][0], w, "{name}: greedy row {bi}");
    }
}

#[test]
fn tied_f32_logits_train_and_infer_paths() {
    check_logits("tiny-qwen2", Mode::Train);
    check_logits("tiny-qwen2", Mode::Infer);
}

#[test]
fn untied_bf16_logits_train_and_infer_paths() {
    check_logits("tiny-qwen2-untied", Mode::Train);
    check_logits("tiny-qwen2-untied", Mode::Infer);
}

#[test]
fn completion_logprobs_match_reference() {
    for name in ["tiny-qwen2", "tiny-qwen2-untied"] {
        check_logprobs(name, Mode::Train);
        check_logprobs(name, Mode::Infer);
    }
}

#[test]
fn greedy_generations_match_token_for_token() {
    check_greedy("tiny-qwen2");
    check_greedy("tiny-qwen2-untied");
}

#[test]
fn special_ids_come_from_generation_config() {
    let p = load("tiny-qwen2");
    assert_eq!(p.eos_ids, vec![0]);
    assert_eq!(p.pad_id, 0);
}

/// Llama with llama3 RoPE scaling, untied head, f32 on disk, transformers-4-style config.
#[test]
fn llama_scaled_rope_untied_matches_reference() {
    let p = load("tiny-llama");
    assert_eq!(p.config.features().unwrap().arch, Architecture::Llama);
    check_logits("tiny-llama", Mode::Train);
    check_logits("tiny-llama", Mode::Infer);
    check_logprobs("tiny-llama", Mode::Train);
    check_logprobs("tiny-llama", Mode::Infer);
    check_greedy("tiny-llama");
}

/// Qwen3 with per-head q/k norms and head_dim 48 ≠ 128 / 4, tied, bf16 on disk loaded as f32,
/// transformers-5-style config. The fixture's stored logits and log-probs are not what
/// transformers 5.24 computes from the stored weights (f32, eager: logits differ by 4.3e-4,
/// 3.1e-4 of the largest; log-probs by 2.7e-4), so they are checked to 1e-3 here; comlrl
/// matches that transformers run to ~1e-6 (arch_transformers.rs). Greedy ids agree exactly.
/// Without the q/k norms the logits move by 0.6, with unit norm weights by 0.1.
#[test]
fn qwen3_qk_norm_tied_bf16_matches_reference() {
    let p = load("tiny-qwen3");
    assert_eq!(p.config.features().unwrap().arch, Architecture::Qwen3);
    assert_eq!(p.model.dtype(), candle_core::DType::F32);
    check_logits_within("tiny-qwen3", Mode::Train, 1e-3);
    check_logits_within("tiny-qwen3", Mode::Infer, 1e-3);
    check_logprobs_within("tiny-qwen3", Mode::Train, 1e-3);
    check_logprobs_within("tiny-qwen3", Mode::Infer, 1e-3);
    check_greedy("tiny-qwen3");
}
