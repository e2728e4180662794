//! Adapters on a base held in bf16 (`agents.base_dtype: bf16`, issue 43): the projections'
//! weights are bf16 tensors (nothing else is), and every product reads those values widened to
//! f32. So the log-probs (training, scoring), the hand-written and autograd A/B gradients and
//! greedy sampling equal those of an f32 base whose projections hold the same bf16-rounded
//! values, within f32 summation order; against the unrounded f32 base they differ by the
//! rounding alone, within a bound derived from bf16's precision (tiny-qwen3's checkpoint is
//! stored in bf16, so there the two are the same base).
use crate::common;
use candle_core::{DType, Device, Tensor, Var};
use comlrl::model::decoder::adapted::projection_weights;
use comlrl::model::grad::recompute::weighted_logprob_grads;
use comlrl::model::io::peft::Adapter;
use comlrl::model::{
    completion_logprobs, generate, LoadOptions, Mode, ModelSource, Policy, SamplingParams,
    ScoreLayout,
};
use common::*;

const MODELS: [&str; 3] = ["tiny-qwen2", "tiny-llama", "tiny-qwen3"];

/// The fixture `name` with PEFT's adapter for it, its projections held in `base`; with
/// `round`, an f32 base whose projections are rounded to bf16 values in place.
fn adapted(name: &str, base: DType, round: bool) -> Policy {
    let opts = LoadOptions {
        base_dtype: Some(base),
        ..LoadOptions::default()
    };
    let p = Policy::load(&ModelSource::Local(fixtures().join(name)), &opts).unwrap();
    if round {
        for (n, v) in p.base_vars() {
            if n.ends_with("_proj.weight") {
                let r = v.as_tensor().to_dtype(DType::BF16).unwrap();
                v.set(&r.to_dtype(DType::F32).unwrap()).unwrap();
            }
        }
    }
    let dir = fixtures().join("lora").join(name).join("adapter");
    let adapter = Adapter::load(&dir, &p.config, DType::F32, &Device::Cpu).unwrap();
    let p = p.with_adapter(adapter).unwrap();
    p.weights_changed().unwrap();
    p
}

/// Two rows of different lengths (left-padded), the first token of each the prompt.
fn layout(p: &Policy) -> ScoreLayout {
    let a: Vec<u32> = vec![5, 17, 230, 41, 99, 3, 77, 12, 8];
    let b: Vec<u32> = vec![61, 2, 150, 33, 9];
    ScoreLayout::new(&p.model, &[&a[..1], &b[..2]], &[&a[1..], &b[2..]], p.pad_id).unwrap()
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn max_of(a: &[f32]) -> f32 {
    a.iter().map(|x| x.abs()).fold(0.0, f32::max)
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

#[test]
fn a_bf16_base_holds_only_the_projections_in_bf16() {
    for name in MODELS {
        let p = adapted(name, DType::BF16, false);
        let ws = projection_weights(&p.model);
        assert!(!ws.is_empty());
        assert!(ws.iter().all(|w| w.dtype() == DType::BF16), "{name}");
        assert_eq!(p.model.lm_head().dtype(), DType::F32, "{name}");
        assert!(p.vars().iter().all(|(_, v)| v.dtype() == DType::F32));
        for (n, v) in p.base_vars() {
            let want = match n.ends_with("_proj.weight") {
                true => DType::BF16,
                false => DType::F32,
            };
            assert_eq!(v.dtype(), want, "{name} {n}");
        }
    }
}

/// Against the f32 base with the same (bf16-rounded) projection values: the same numbers but
/// for the order of f32 sums (the bf16 base's products run over blocks of W rows, the decode
/// over W rows): 1e-4 abs + 1e-5 rel, the PEFT parity tolerance. Against the unrounded f32
/// base: bf16 keeps 8 significant bits, so each weight moves by at most 2⁻⁹ of itself and each
/// product by at most 2⁻⁹ Σ|w·x|; with the fixtures' N(0, 0.02²)-scale weights that is far
/// below 1% of the largest value, and the differences are bounded by 1% of the largest value
/// (log-prob or gradient) while rounding must move them at all.
#[test]
fn bf16_base_outputs_equal_the_rounded_f32_base_and_approach_the_f32_one() {
    for name in MODELS {
        let p16 = outputs(&adapted(name, DType::BF16, false));
        let pr = outputs(&adapted(name, DType::F32, true));
        let p32 = outputs(&adapted(name, DType::F32, false));
        let tight = |what: &str, a: &[f32], b: &[f32]| {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-4 + 1e-5 * y.abs(),
                    "{name} {what}[{i}]: {x} vs {y}"
                );
            }
        };
        tight("train log-probs", &p16.train, &pr.train);
        tight("infer log-probs", &p16.infer, &pr.infer);
        for (i, (h, r)) in p16.hand.iter().zip(&pr.hand).enumerate() {
            tight(&format!("hand-written gradient {i}"), h, r);
        }
        for (i, (a, r)) in p16.auto.iter().zip(&pr.auto).enumerate() {
            tight(&format!("autograd gradient {i}"), a, r);
        }
        // tiny-qwen3's checkpoint is stored in bf16: rounding it changes nothing.
        let rounds = name != "tiny-qwen3";
        let d = max_abs(&p16.train, &p32.train);
        // Moved beyond the summation-order noise of the tight comparison (1e-4) where the
        // base rounds.
        assert_eq!(
            d > 1e-4,
            rounds,
            "{name}: rounding the base moved the log-probs by {d}"
        );
        assert!(d <= 0.01 * max_of(&p32.train), "{name} log-probs: {d}");
        let (mut dg, mut scale) = (0f32, 0f32);
        for (h, r) in p16.hand.iter().zip(&p32.hand) {
            dg = dg.max(max_abs(h, r));
            scale = scale.max(max_of(r));
        }
        assert_eq!(dg > 1e-4, rounds, "{name}: gradients moved by {dg}");
        assert!(dg <= 0.01 * scale, "{name} gradients: {dg} of {scale}");
    }
}

/// Greedy decoding (the KV-cache decode's few-row products on the bf16 weights, no sampling
/// copy) picks the tokens the rounded f32 base picks.
#[test]
fn a_bf16_base_samples_as_the_rounded_f32_base() {
    for name in MODELS {
        let got = greedy(&adapted(name, DType::BF16, false));
        assert_eq!(got, greedy(&adapted(name, DType::F32, true)), "{name}");
    }
}

/// [`adapted`] sampling with `sampling_dtype` (f32 or bf16).
fn adapted_sampling(name: &str, base: DType, round: bool, sampling_dtype: DType) -> Policy {
    let opts = LoadOptions {
        base_dtype: Some(base),
        sampling_dtype,
        ..LoadOptions::default()
    };
    let p = Policy::load(&ModelSource::Local(fixtures().join(name)), &opts).unwrap();
    if round {
        for (n, v) in p.base_vars() {
            if n.ends_with("_proj.weight") {
                let r = v.as_tensor().to_dtype(DType::BF16).unwrap();
                v.set(&r.to_dtype(DType::F32).unwrap()).unwrap();
            }
        }
    }
    let dir = fixtures().join("lora").join(name).join("adapter");
    let adapter = Adapter::load(&dir, &p.config, DType::F32, &Device::Cpu).unwrap();
    let p = p.with_adapter(adapter).unwrap();
    p.weights_changed().unwrap();
    p
}

/// The last hidden state and the logits of a 12-token prompt through `products` (a prefill:
/// every row at once), as bits.
fn prefill(p: &Policy, products: impl comlrl::model::WeightProducts + Copy) -> [Vec<u32>; 2] {
    use comlrl::model::decoder::batch::{causal_mask, position_ids};
    let ids: Vec<u32> = (0..12u32).map(|i| (i * 37 + 5) % 3000).collect();
    let valid = vec![vec![true; 12]];
    let ids = Tensor::from_vec(ids, (1, 12), &Device::Cpu).unwrap();
    let pos = position_ids(&valid, 12, &Device::Cpu).unwrap();
    let mask = causal_mask(&valid, 12, &Device::Cpu).unwrap();
    let h = p.model.hidden(&ids, &pos, &mask, None, products).unwrap();
    let l = p.model.logits_mode(&h, products).unwrap();
    let bits = |t: &Tensor| f32s(t).iter().map(|v| v.to_bits()).collect();
    [bits(&h), bits(&l)]
}

/// How many of two equally long bit vectors' values differ.
fn differing(a: &[u32], b: &[u32]) -> usize {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

/// Two prompts, three completions each, drawn at temperature 1 from one seed.
fn drawn(p: &Policy) -> Vec<Vec<Vec<u32>>> {
    let prompts: [&[u32]; 2] = [&[5, 17, 230, 41], &[61, 2, 150]];
    let params = SamplingParams {
        max_new_tokens: 10,
        temperature: 1.0,
        top_p: 1.0,
        top_k: 0,
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(7);
    generate(
        p.sampler(),
        &prompts,
        3,
        &params,
        &p.eos_ids,
        p.pad_id,
        &mut rng,
    )
    .unwrap()
}

/// With `sampling_dtype: bf16` a bf16 base is read in place by the bf16 copies' kernel: the
/// prefill's logits, greedy tokens and drawn tokens are bit for bit those of the f32 base
/// holding the same (bf16-representable) projections with its bf16 sampling copies, adapters
/// (PEFT's, B nonzero) included: the same bf16 bytes, the same kernel and rounding of x, and
/// the low-rank term added in f32 on the same path. And nothing is copied: the projections are
/// read in place, the only bf16 copy is the f32 LM head's, so the copies' bytes are the f32
/// base's less every projection's bf16 bytes. (Bit equality needs the f32 base's copies in the
/// rows layout, which the in-place read always uses: CPUs that prefer panels skip it.)
#[test]
fn bf16_sampling_reads_a_bf16_base_in_place_as_the_f32_base_copy() {
    use comlrl::model::kernels::bf16_matmul::Layout;
    if Layout::detect() != Layout::Rows {
        comlrl_testutil::skip(
            "this CPU keeps bf16 sampling copies in panels (AVX-512 without AMX): an f32 \
             base's copies then sum in another order than the bf16 base read in rows",
        );
        return;
    }
    for name in MODELS {
        let p16 = adapted_sampling(name, DType::BF16, false, DType::BF16);
        let pr = adapted_sampling(name, DType::F32, true, DType::BF16);
        let got = prefill(&p16, p16.products(Mode::Sample));
        let want = prefill(&pr, pr.products(Mode::Sample));
        for (what, a, b) in [("hidden", &got[0], &want[0]), ("logits", &got[1], &want[1])] {
            assert_eq!(differing(a, b), 0, "{name}: prefill {what}");
        }
        assert_eq!(greedy(&p16), greedy(&pr), "{name}: greedy");
        assert_eq!(drawn(&p16), drawn(&pr), "{name}: drawn");
        // The in-place read rounds x to bf16: not the widening product's logits.
        let widened = prefill(&p16, Mode::Sample);
        assert!(
            differing(&got[0], &widened[0]) > 0,
            "{name}: the bf16 base was not read by the bf16 kernel"
        );
        let ws = projection_weights(&p16.model);
        let (bytes16, in_place) = p16.sampler().copies.bf16_footprint();
        let (bytes32, none) = pr.sampler().copies.bf16_footprint();
        assert_eq!((in_place, none), (ws.len(), 0), "{name}");
        let proj: usize = ws.iter().map(|w| w.elem_count() * 2).sum();
        assert_eq!(bytes16 + proj, bytes32, "{name}: copy bytes");
    }
}

/// With `sampling_dtype: f32` (the default) a bf16 base keeps no sampling copy of its
/// projections and decodes exactly as before: sampling's products by the projections are the
/// plain `Mode::Sample` ones (`bf16_weight`'s widening decode), bit for bit, so the hidden
/// state is (the f32 LM head keeps its own copies, as before).
#[test]
fn f32_sampling_on_a_bf16_base_decodes_as_before() {
    for name in MODELS {
        let p = adapted_sampling(name, DType::BF16, false, DType::F32);
        assert_eq!(p.sampler().copies.bf16_footprint(), (0, 0), "{name}");
        let (got, plain) = (
            prefill(&p, p.products(Mode::Sample)),
            prefill(&p, Mode::Sample),
        );
        assert_eq!(differing(&got[0], &plain[0]), 0, "{name}");
    }
}
