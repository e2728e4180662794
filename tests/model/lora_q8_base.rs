//! Adapters on a base held as GGUF Q8_0 blocks (`agents.base_dtype: q8_0`, issue 43): the
//! projections' weights are Q8_0 matrices (their blocks' bytes; nothing else is), quantized at
//! load with llama.cpp's rounding (checked against the blocks `gguf`'s Python quantizer wrote
//! into the GGUF fixtures) or, from a Q8_0 GGUF, kept bit for bit. Every product dequantizes
//! them exactly (the decode's fused kernel applies each block's scale to its sum instead, an
//! f32 rounding apart), so the log-probs, the hand-written and autograd A/B gradients and greedy
//! decoding equal those of an f32 base whose projections hold the dequantized values, within
//! f32 summation order.
use crate::common;
use candle_core::quantized::gguf_file::Content;
use candle_core::{DType, Device, Tensor, Var};
use comlrl::model::decoder::adapted::projection_weights;
use comlrl::model::grad::recompute::weighted_logprob_grads;
use comlrl::model::io::peft::Adapter;
use comlrl::model::kernels::q8_weight;
use comlrl::model::{
    completion_logprobs, generate, LoadOptions, Mode, ModelSource, Policy, SamplingParams,
    ScoreLayout,
};
use common::*;
use std::collections::HashMap;

const MODELS: [&str; 3] = ["tiny-qwen2", "tiny-llama", "tiny-qwen3"];

/// The fixture `name` (its HF directory, or with `gguf` its Q8_0 GGUF) with PEFT's adapter for
/// it, its projections held as `base` says; with `dequantized`, an f32 base whose projections
/// are set in place to the dequantized values of their Q8_0 quantization.
fn adapted(name: &str, base: Option<DType>, dequantized: bool, gguf: bool) -> Policy {
    let opts = LoadOptions {
        base_dtype: base,
        ..LoadOptions::default()
    };
    let src = match gguf {
        true => ModelSource::Gguf(fixtures().join(format!("gguf/{name}.q8_0.gguf"))),
        false => ModelSource::Local(fixtures().join(name)),
    };
    let p = Policy::load(&src, &opts).unwrap();
    if dequantized {
        for (n, v) in p.base_vars() {
            if n.ends_with("_proj.weight") {
                let q = q8_weight::quantize(v.as_tensor()).unwrap();
                v.set(&q8_weight::dequantize(&q).unwrap()).unwrap();
            }
        }
    }
    let dir = fixtures().join("lora").join(name).join("adapter");
    let adapter = Adapter::load(&dir, &p.config, DType::F32, &Device::Cpu).unwrap();
    let p = p.with_adapter(adapter).unwrap();
    p.weights_changed().unwrap();
    p
}

fn q8(name: &str) -> Policy {
    adapted(name, Some(q8_weight::HELD), false, false)
}

/// Two rows of different lengths (left-padded), the first token of each the prompt.
fn layout(p: &Policy) -> ScoreLayout {
    let a: Vec<u32> = vec![5, 17, 230, 41, 99, 3, 77, 12, 8];
    let b: Vec<u32> = vec![61, 2, 150, 33, 9];
    ScoreLayout::new(&p.model, &[&a[..1], &b[..2]], &[&a[1..], &b[2..]], p.pad_id).unwrap()
}

/// The hand-written and autograd A/B gradients of Σ coef·log-prob, and the log-probs in
/// `Train` and `Infer`.
struct Outputs {
    train: Vec<f32>,
    infer: Vec<f32>,
    hand: Vec<Vec<f32>>,
    auto: Vec<Vec<f32>>,
}

fn outputs(p: &Policy) -> Outputs {
    let lay = layout(p);
    let coef = [0.7f32, -1.3];
    let vs: Vec<Var> = p.vars().into_iter().map(|(_, v)| v).collect();
    let mut acc: Vec<Option<Tensor>> = vec![None; vs.len()];
    weighted_logprob_grads(&p.model, &lay, &coef, &vs, &mut acc).unwrap();
    let lp = completion_logprobs(&p.model, &lay, Mode::Train).unwrap();
    let c = Tensor::new(&coef[..], &Device::Cpu).unwrap();
    let grads = (lp.sum(1).unwrap() * c)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    Outputs {
        train: f32s(&lp),
        infer: f32s(&completion_logprobs(&p.model, &lay, Mode::Infer).unwrap()),
        hand: acc.iter().map(|a| f32s(a.as_ref().unwrap())).collect(),
        auto: vs
            .iter()
            .map(|v| f32s(grads.get(v.as_tensor()).unwrap()))
            .collect(),
    }
}

fn greedy(p: &Policy) -> Vec<u32> {
    let prompt: Vec<u32> = vec![5, 17, 230, 41];
    let params = SamplingParams {
        max_new_tokens: 8,
        greedy: true,
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(0);
    let out = generate(
        p.sampler(),
        &[prompt.as_slice()],
        1,
        &params,
        &p.eos_ids,
        p.pad_id,
        &mut rng,
    )
    .unwrap();
    out[0][0].clone()
}

fn bytes(t: &Tensor) -> Vec<u8> {
    t.flatten_all().unwrap().to_vec1::<u8>().unwrap()
}

/// Each projection's Q8_0 blocks by HF name, as `p` holds them.
fn held_blocks(p: &Policy) -> HashMap<String, Vec<u8>> {
    p.base_vars()
        .into_iter()
        .filter(|(n, _)| n.ends_with("_proj.weight"))
        .map(|(n, v)| {
            assert!(q8_weight::is_q8_weight(v.as_tensor()), "{n} is not Q8_0");
            (n, bytes(v.as_tensor()))
        })
        .collect()
}

#[test]
fn a_q8_0_base_holds_only_the_projections_as_blocks() {
    for name in MODELS {
        let p = q8(name);
        let ws = projection_weights(&p.model);
        assert!(!ws.is_empty());
        assert!(ws.iter().all(q8_weight::is_q8_weight), "{name}");
        assert_eq!(p.model.lm_head().dtype(), DType::F32, "{name}");
        assert!(p.vars().iter().all(|(_, v)| v.dtype() == DType::F32));
        for (n, v) in p.base_vars() {
            let want = match n.ends_with("_proj.weight") {
                true => q8_weight::HELD,
                false => DType::F32,
            };
            assert_eq!(v.dtype(), want, "{name} {n}");
        }
        // 34 bytes per 32 weights.
        for w in &ws {
            let (out, k) = q8_weight::dims(w).unwrap();
            assert_eq!(w.elem_count(), out * k / 32 * 34, "{name}");
        }
    }
}

/// Quantizing at load gives the blocks `gguf`'s Python quantizer (`gguf.quants.quantize`,
/// bit-exact with ggml's `quantize_row_q8_0_ref`) wrote into the GGUF fixtures from the same
/// checkpoints (section 7 of tests/fixtures/README.md), byte for byte; and loading those GGUFs
/// with a Q8_0 base keeps their blocks bit for bit (tiny-qwen2 against the file's raw tensor
/// data; tiny-llama's q/k rows, which the file stores permuted, come back in HF order).
#[test]
fn quantizing_at_load_matches_gguf_py_and_a_q8_0_gguf_keeps_its_blocks() {
    for name in MODELS {
        let from_hf = held_blocks(&q8(name));
        let from_gguf = held_blocks(&adapted(name, Some(q8_weight::HELD), false, true));
        assert_eq!(from_hf.len(), from_gguf.len(), "{name}");
        for (n, b) in &from_hf {
            assert!(
                b == &from_gguf[n],
                "{name} {n}: blocks differ from gguf-py's"
            );
        }
    }
    let path = fixtures().join("gguf/tiny-qwen2.q8_0.gguf");
    let mut f = std::fs::File::open(&path).unwrap();
    let content = Content::read(&mut f).unwrap();
    let p = adapted("tiny-qwen2", Some(q8_weight::HELD), false, true);
    let held = held_blocks(&p);
    let q = content
        .tensor(&mut f, "blk.1.ffn_down.weight", &Device::Cpu)
        .unwrap();
    assert_eq!(q.dtype(), candle_core::quantized::GgmlDType::Q8_0);
    assert!(
        q.data().unwrap().as_ref() == held["model.layers.1.mlp.down_proj.weight"].as_slice(),
        "the file's blocks were not kept"
    );
}

/// Against the f32 base holding the dequantized values: the same numbers but for the order of
/// f32 sums (the Q8_0 products run over panels of W rows, the decode over W rows): 1e-4 abs +
/// 1e-5 rel, the PEFT parity tolerance. And quantization does move them (beyond that noise)
/// against the unquantized base.
#[test]
fn q8_0_base_outputs_equal_the_dequantized_f32_base() {
    for name in MODELS {
        let pq = outputs(&q8(name));
        let pd = outputs(&adapted(name, None, true, false));
        let p32 = outputs(&adapted(name, None, false, false));
        let tight = |what: &str, a: &[f32], b: &[f32]| {
            assert_eq!(a.len(), b.len());
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-4 + 1e-5 * y.abs(),
                    "{name} {what}[{i}]: {x} vs {y}"
                );
            }
        };
        tight("train log-probs", &pq.train, &pd.train);
        tight("infer log-probs", &pq.infer, &pd.infer);
        assert_eq!(pq.hand.len(), pd.hand.len());
        for (i, (h, r)) in pq.hand.iter().zip(&pd.hand).enumerate() {
            tight(&format!("hand-written gradient {i}"), h, r);
        }
        for (i, (a, r)) in pq.auto.iter().zip(&pd.auto).enumerate() {
            tight(&format!("autograd gradient {i}"), a, r);
        }
        let d = pq
            .train
            .iter()
            .zip(&p32.train)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(d > 1e-4, "{name}: quantizing the base moved nothing ({d})");
    }
}

/// Greedy decoding (the KV-cache decode's few-row products: the fused Q8_0 kernel, no sampling
/// copy) picks the tokens the dequantized f32 base picks.
#[test]
fn a_q8_0_base_samples_as_the_dequantized_f32_base() {
    for name in MODELS {
        assert_eq!(
            greedy(&q8(name)),
            greedy(&adapted(name, None, true, false)),
            "{name}"
        );
    }
}

/// Merging the adapter into a Q8_0 base (what `export --merge` writes) gives the f32 model the
/// dequantized base merges into, tensor for tensor.
#[test]
fn merging_into_a_q8_0_base_merges_into_its_dequantized_values() {
    let (pq, pd) = (q8("tiny-qwen2"), adapted("tiny-qwen2", None, true, false));
    let mq = pq.merge(pq.adapter().unwrap()).unwrap();
    let md = pd.merge(pd.adapter().unwrap()).unwrap();
    let (vq, vd) = (mq.base_vars(), md.base_vars());
    assert_eq!(vq.len(), vd.len());
    for ((nq, q), (nd, d)) in vq.iter().zip(&vd) {
        assert_eq!(nq, nd);
        assert_eq!(q.dtype(), DType::F32, "{nq}");
        assert!(f32s(q.as_tensor()) == f32s(d.as_tensor()), "{nq}");
    }
}
