//! LoRA adapters on a frozen base (issue 43): PEFT 0.21.2's own adapters on the tiny Qwen2,
//! Llama and Qwen3 fixtures (`tests/fixtures/lora`, `scripts/fixtures/make_lora.py`) give
//! PEFT's logits and A/B gradients here, through candle's autograd and through the hand-written
//! backward; the hand-written A/B gradients equal f64 autograd and f64 finite differences on
//! every projection; an adapter saved here reads back identically and PEFT itself reads it;
//! the KV-cache decode applies the adapters; the base never becomes trainable.
use crate::common;
use candle_core::{DType, Device, Tensor, Var};
use comlrl::model::decoder::batch::causal_mask;
use comlrl::model::decoder::lora::{LoraSpec, PROJECTIONS};
use comlrl::model::grad::recompute::weighted_logprob_grads;
use comlrl::model::io::peft::Adapter;
use comlrl::model::{
    completion_logprobs, generate, LoadOptions, Mode, ModelSource, Policy, SamplingParams,
    ScoreLayout,
};
use common::grad::{central_difference, f64s};
use common::*;
use std::collections::HashMap;

pub(crate) const MODELS: [&str; 3] = ["tiny-qwen2", "tiny-llama", "tiny-qwen3"];

pub(crate) fn opts(dtype: DType) -> LoadOptions {
    LoadOptions {
        dtype,
        ..LoadOptions::default()
    }
}

/// The fixture model `name` in `dtype` with PEFT's adapter for it.
fn adapted(name: &str, dtype: DType) -> Policy {
    let base = Policy::load(&ModelSource::Local(fixtures().join(name)), &opts(dtype)).unwrap();
    let dir = fixtures().join("lora").join(name).join("adapter");
    let adapter = Adapter::load(&dir, &base.config, dtype, &Device::Cpu).unwrap();
    let p = base.with_adapter(adapter).unwrap();
    p.weights_changed().unwrap();
    p
}

pub(crate) fn reference(name: &str) -> HashMap<String, Tensor> {
    load_st(
        &fixtures()
            .join("lora")
            .join(name)
            .join("reference.safetensors"),
    )
}

/// The fixture's sequences as layout rows: the first token as the prompt, the rest scored.
pub(crate) fn layout(policy: &Policy, r: &HashMap<String, Tensor>) -> ScoreLayout {
    let ids = rows_i64(&r["ids"]);
    let ids: Vec<Vec<u32>> = ids
        .iter()
        .map(|row| row.iter().map(|&i| i as u32).collect())
        .collect();
    let prompts: Vec<&[u32]> = ids.iter().map(|r| &r[..1]).collect();
    let comps: Vec<&[u32]> = ids.iter().map(|r| &r[1..]).collect();
    ScoreLayout::new(&policy.model, &prompts, &comps, policy.pad_id).unwrap()
}

/// The fixture's per-row loss weights.
pub(crate) fn coefs(r: &HashMap<String, Tensor>) -> Vec<f32> {
    let w = r["weights"].to_vec2::<f32>().unwrap();
    w.iter().map(|row| row[0]).collect()
}

pub(crate) fn close(what: &str, got: &[f32], want: &[f32], abs: f32, rel: f32) {
    assert_eq!(got.len(), want.len(), "{what}: size");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= abs + rel * w.abs(),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

/// The last position's logits of each fixture row, full forward.
fn last_logits(policy: &Policy, r: &HashMap<String, Tensor>) -> Tensor {
    let ids = r["ids"].to_dtype(DType::U32).unwrap();
    let (b, s) = ids.dims2().unwrap();
    let dev = Device::Cpu;
    let valid = vec![vec![true; s]; b];
    let pos = Tensor::arange(0u32, s as u32, &dev)
        .unwrap()
        .unsqueeze(0)
        .unwrap()
        .repeat((b, 1))
        .unwrap();
    let mask = causal_mask(&valid, s, &dev).unwrap();
    let h = policy
        .model
        .hidden(&ids, &pos, &mask, None, Mode::Train)
        .unwrap();
    let logits = policy.model.logits(&h).unwrap();
    logits.narrow(1, s - 1, 1).unwrap().squeeze(1).unwrap()
}

#[test]
fn peft_adapters_give_peft_logits_on_every_architecture() {
    for name in MODELS {
        let p = adapted(name, DType::F32);
        let r = reference(name);
        let lp = completion_logprobs(&p.model, &layout(&p, &r), Mode::Train).unwrap();
        close(
            &format!("{name} logprobs"),
            &f32s(&lp),
            &f32s(&r["logprobs"]),
            1e-4,
            1e-5,
        );
        close(
            &format!("{name} last logits"),
            &f32s(&last_logits(&p, &r)),
            &f32s(&r["last_logits"]),
            1e-4,
            1e-5,
        );
    }
}

/// The adapter's term matters: the base alone is far from PEFT's adapted logits.
#[test]
fn the_fixture_adapters_change_the_logits() {
    let name = "tiny-llama";
    let base = Policy::load(
        &ModelSource::Local(fixtures().join(name)),
        &opts(DType::F32),
    )
    .unwrap();
    let r = reference(name);
    let lp = f32s(&completion_logprobs(&base.model, &layout(&base, &r), Mode::Train).unwrap());
    let want = f32s(&r["logprobs"]);
    let diff = lp
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        diff > 1e-2,
        "base and adapted log-probs differ by {diff} only"
    );
}

/// The hand-written backward (f32) and candle's autograd both give PEFT's A/B gradients; the
/// only trainable tensors are the adapter's.
#[test]
fn hand_written_and_autograd_ab_gradients_match_peft() {
    for name in MODELS {
        let p = adapted(name, DType::F32);
        let r = reference(name);
        let vars = p.vars();
        assert!(vars.iter().all(|(n, _)| n.contains(".lora_")), "{name}");
        let n_grads = r.keys().filter(|k| k.starts_with("grad.")).count();
        assert_eq!(
            vars.len(),
            n_grads,
            "{name}: one gradient per adapter tensor"
        );
        let lay = layout(&p, &r);
        let coef = coefs(&r);
        let vs: Vec<Var> = vars.iter().map(|(_, v)| v.clone()).collect();
        let mut acc: Vec<Option<Tensor>> = vec![None; vs.len()];
        let stats = weighted_logprob_grads(&p.model, &lay, &coef, &vs, &mut acc).unwrap();
        let want_loss = r["loss"].to_scalar::<f32>().unwrap() as f64;
        assert!(
            (stats.loss - want_loss).abs() < 1e-4 + 1e-5 * want_loss.abs(),
            "{name} loss {} vs {want_loss}",
            stats.loss
        );
        // Autograd through the decoder's own layer definition.
        let lp = completion_logprobs(&p.model, &lay, Mode::Train).unwrap();
        let c = Tensor::new(coef.as_slice(), &Device::Cpu).unwrap();
        let loss = (lp.sum(1).unwrap() * c).unwrap().sum_all().unwrap();
        let grads = loss.backward().unwrap();
        for ((n, v), a) in vars.iter().zip(&acc) {
            let want = f32s(&r[&format!("grad.{n}")]);
            let hand = f32s(
                a.as_ref()
                    .unwrap_or_else(|| panic!("{name} {n}: no gradient")),
            );
            close(
                &format!("{name} hand-written {n}"),
                &hand,
                &want,
                1e-4,
                1e-5,
            );
            let auto = f32s(grads.get(v.as_tensor()).expect("an autograd gradient"));
            close(&format!("{name} autograd {n}"), &auto, &want, 1e-4, 1e-5);
        }
        for (n, base) in p.base_vars() {
            assert!(
                grads.get(base.as_tensor()).is_none(),
                "{name} {n}: the frozen base got a gradient"
            );
        }
    }
}

/// The hand-written f32 A/B gradients against f64 autograd, and f64 autograd against f64
/// central differences, on one A and one B entry of every projection of every layer.
#[test]
fn ab_gradients_match_f64_autograd_and_finite_differences() {
    for name in MODELS {
        let r = reference(name);
        let p32 = adapted(name, DType::F32);
        let p64 = adapted(name, DType::F64);
        let coef = coefs(&r);
        let loss64 = |p: &Policy| {
            let lp = completion_logprobs(&p.model, &layout(p, &r), Mode::Train).unwrap();
            let c: Vec<f64> = coef.iter().map(|&c| c as f64).collect();
            let c = Tensor::new(c.as_slice(), &Device::Cpu).unwrap();
            (lp.sum(1).unwrap() * c).unwrap().sum_all().unwrap()
        };
        let grads = loss64(&p64).backward().unwrap();
        let vs: Vec<Var> = p32.vars().into_iter().map(|(_, v)| v).collect();
        let mut acc: Vec<Option<Tensor>> = vec![None; vs.len()];
        weighted_logprob_grads(&p32.model, &layout(&p32, &r), &coef, &vs, &mut acc).unwrap();
        let vars64 = p64.vars();
        let mut projections = std::collections::BTreeSet::new();
        for (i, ((n, v64), a)) in vars64.iter().zip(&acc).enumerate() {
            let want = f64s(grads.get(v64.as_tensor()).expect("f64 gradient"));
            let hand = f32s(a.as_ref().expect("hand-written gradient"));
            for (j, (h, w)) in hand.iter().zip(&want).enumerate() {
                let err = (*h as f64 - w).abs();
                assert!(
                    err < 1e-5 + 1e-4 * w.abs(),
                    "{name} {n}[{j}]: {h} vs f64 {w}"
                );
            }
            // One element per tensor, chosen to have a sizeable gradient.
            let idx = (0..want.len())
                .max_by(|&x, &y| want[x].abs().total_cmp(&want[y].abs()))
                .unwrap_or(0)
                .max(i % want.len().max(1)) // not always the same element
                .min(want.len() - 1);
            let numeric =
                central_difference(v64, idx, 1e-5, || loss64(&p64).to_scalar::<f64>().unwrap());
            let analytic = want[idx];
            assert!(
                (numeric - analytic).abs() < 1e-8 + 1e-5 * analytic.abs(),
                "{name} {n}[{idx}]: numeric {numeric} vs analytic {analytic}"
            );
            projections.insert(PROJECTIONS.iter().position(|p| n.contains(p)).unwrap());
        }
        assert_eq!(projections.len(), 7, "{name}: every projection checked");
    }
}

#[test]
fn an_adapter_saved_reads_back_identically_and_peft_reads_it() {
    let name = "tiny-qwen2";
    let p = adapted(name, DType::F32);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("agent");
    p.save(&dir).unwrap();
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("adapter_config.json")).unwrap())
            .unwrap();
    assert_eq!(cfg["peft_type"], "LORA");
    assert_eq!(cfg["r"], 4);
    assert_eq!(cfg["task_type"], "CAUSAL_LM");
    let back = Adapter::load(&dir, &p.config, DType::F32, &Device::Cpu).unwrap();
    assert_eq!(back.spec, p.adapter().unwrap().spec);
    for ((n, a), (m, b)) in p.vars().iter().zip(back.vars()) {
        assert_eq!(n, &m);
        assert_eq!(f32s(a.as_tensor()), f32s(b.as_tensor()), "{n}");
    }
    // PEFT itself: PeftModel.from_pretrained(base, dir) gives this model's outputs.
    let Some(py) = common::python_with(&["peft", "torch", "transformers"]) else {
        return;
    };
    let r = reference(name);
    let lp = completion_logprobs(&p.model, &layout(&p, &r), Mode::Train).unwrap();
    let mut ours = std::collections::BTreeMap::new();
    ours.insert("logprobs".to_string(), lp);
    ours.insert("last_logits".to_string(), last_logits(&p, &r));
    let expected = tmp.path().join("ours.safetensors");
    comlrl::model::io::safetensors::save_tensors(&ours, &expected).unwrap();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fixtures/make_lora.py");
    let out = std::process::Command::new(py)
        .arg(&script)
        .arg("check")
        .arg(fixtures().join(name))
        .arg(&dir)
        .arg(&expected)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "PEFT check failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Greedy KV-cache decoding of an adapted model picks, step by step, the argmax of the full
/// forward's logits of the adapted model.
#[test]
fn kv_cache_decode_applies_the_adapters() {
    let p = adapted("tiny-llama", DType::F32);
    let prompt: Vec<u32> = vec![5, 17, 230, 41];
    let params = SamplingParams {
        max_new_tokens: 6,
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
    let got = &out[0][0];
    let mut seq = prompt.clone();
    let dev = Device::Cpu;
    for _ in 0..params.max_new_tokens {
        let s = seq.len();
        let ids = Tensor::new(seq.as_slice(), &dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let pos = Tensor::arange(0u32, s as u32, &dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let mask = causal_mask(&[vec![true; s]], s, &dev).unwrap();
        let h = p
            .model
            .hidden(&ids, &pos, &mask, None, Mode::Train)
            .unwrap();
        let last = p.model.logits(&h).unwrap().narrow(1, s - 1, 1).unwrap();
        let next = f32s(&last)
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap()
            .0 as u32;
        seq.push(next);
    }
    assert_eq!(got.as_slice(), &seq[prompt.len()..]);
}

/// A fresh adapter is PEFT's init: B zero (the adapted model is the base), A within
/// ±1/√in, and a rank beyond a projection's size or a dropout outside [0, 1) is refused; with
/// a dropout in [0, 1) the adapted model scores as the base (scoring runs without dropout).
#[test]
fn fresh_adapters_start_at_the_base() {
    let base = Policy::load(&ModelSource::Builtin("tiny".into()), &opts(DType::F32)).unwrap();
    let spec = LoraSpec {
        rank: 8,
        alpha: 16.0,
        rslora: false,
        targets: PROJECTIONS.iter().map(|s| s.to_string()).collect(),
    };
    let a = Adapter::init(spec.clone(), 0.0, &base.config, 3, DType::F32, &Device::Cpu).unwrap();
    assert_eq!(a.parameters(), spec.parameters(&base.config));
    for (n, v) in a.vars() {
        let x = f32s(v.as_tensor());
        if n.contains("lora_B") {
            assert!(x.iter().all(|&x| x == 0.0), "{n}");
        } else {
            let bound = 1.0 / (v.dim(1).unwrap() as f32).sqrt();
            assert!(x.iter().all(|x| x.abs() <= bound), "{n}");
            assert!(x.iter().any(|&x| x != 0.0), "{n}");
        }
    }
    let ids: Vec<u32> = vec![3, 9, 27, 81];
    let lay =
        |p: &Policy| ScoreLayout::new(&p.model, &[&ids[..1]], &[&ids[1..]], p.pad_id).unwrap();
    let before = f32s(&completion_logprobs(&base.model, &lay(&base), Mode::Train).unwrap());
    let adapted = base.share_base(a).unwrap();
    let after = f32s(&completion_logprobs(&adapted.model, &lay(&adapted), Mode::Train).unwrap());
    assert_eq!(before, after);
    let big = LoraSpec {
        rank: 100_000,
        ..spec.clone()
    };
    let e = Adapter::init(big, 0.0, &base.config, 3, DType::F32, &Device::Cpu).unwrap_err();
    assert!(e.to_string().contains("rank"), "{e}");
    for p in [1.0, -0.1, f64::NAN] {
        let e =
            Adapter::init(spec.clone(), p, &base.config, 3, DType::F32, &Device::Cpu).unwrap_err();
        assert!(e.to_string().contains("dropout"), "{e}");
    }
    let a = Adapter::init(spec, 0.1, &base.config, 3, DType::F32, &Device::Cpu).unwrap();
    let dropped = base.share_base(a).unwrap();
    let scored = f32s(&completion_logprobs(&dropped.model, &lay(&dropped), Mode::Train).unwrap());
    assert_eq!(before, scored);
}

/// `Policy::merge` (what `comlrl export --merge` writes): each targeted W becomes W + s·B·A
/// (checked against an f64 sum formed here, element by element), every other tensor is the
/// base's bit for bit, and the merged model, which has no adapter, gives PEFT's adapted
/// log-probs and logits on every architecture (rsLoRA's scaling on tiny-qwen3).
#[test]
fn a_merged_adapter_gives_peft_outputs_and_the_exact_merged_weights() {
    use comlrl::model::io::peft::base_weight_name;
    for name in MODELS {
        let base = Policy::load(
            &ModelSource::Local(fixtures().join(name)),
            &opts(DType::F32),
        )
        .unwrap();
        let dir = fixtures().join("lora").join(name).join("adapter");
        let adapter = Adapter::load(&dir, &base.config, DType::F32, &Device::Cpu).unwrap();
        let merged = base.merge(&adapter).unwrap();
        assert!(
            merged.adapter().is_none(),
            "{name}: the merge has no adapter"
        );
        assert_eq!(merged.num_parameters(), base.num_parameters(), "{name}");
        let s = adapter.spec.scale();
        let lora: HashMap<String, Tensor> = adapter
            .vars()
            .into_iter()
            .map(|(n, v)| (n, v.as_tensor().clone()))
            .collect();
        let before: HashMap<String, Tensor> = base
            .base_vars()
            .into_iter()
            .map(|(n, v)| (n, v.as_tensor().clone()))
            .collect();
        let mut merged_names = 0;
        for (n, v) in merged.base_vars() {
            let got = f32s(v.as_tensor());
            let w = f32s(&before[&n]);
            let proj = (0..base.config.num_hidden_layers).find_map(|l| {
                PROJECTIONS
                    .iter()
                    .find(|m| base_weight_name(l, m) == n)
                    .map(|m| (l, *m))
            });
            let Some((l, m)) = proj else {
                assert_eq!(got, w, "{name} {n}: not a target, must be the base's");
                continue;
            };
            merged_names += 1;
            let stem = n.strip_suffix(".weight").unwrap();
            let a = &lora[&format!("base_model.model.{stem}.lora_A.weight")];
            let b = &lora[&format!("base_model.model.{stem}.lora_B.weight")];
            let (r, inp) = a.dims2().unwrap();
            let (av, bv) = (f32s(a), f32s(b));
            let mut changed = 0;
            for (i, (g, w0)) in got.iter().zip(&w).enumerate() {
                let (row, col) = (i / inp, i % inp);
                let delta: f64 = (0..r)
                    .map(|k| bv[row * r + k] as f64 * av[k * inp + col] as f64)
                    .sum();
                let want = *w0 as f64 + s * delta;
                assert!(
                    (*g as f64 - want).abs() <= 1e-7 * want.abs() + 1e-9,
                    "{name} layer {l} {m}[{i}]: {g} vs {want}"
                );
                changed += usize::from(g != w0);
            }
            assert!(changed > got.len() / 2, "{name} {n}: the adapter moved W");
        }
        assert_eq!(
            merged_names,
            7 * base.config.num_hidden_layers,
            "{name}: every projection merged"
        );
        let r = reference(name);
        let lp = completion_logprobs(&merged.model, &layout(&merged, &r), Mode::Train).unwrap();
        close(
            &format!("{name} merged logprobs"),
            &f32s(&lp),
            &f32s(&r["logprobs"]),
            1e-4,
            1e-5,
        );
        close(
            &format!("{name} merged last logits"),
            &f32s(&last_logits(&merged, &r)),
            &f32s(&r["last_logits"]),
            1e-4,
            1e-5,
        );
    }
}

/// A GGUF exported from an adapted policy is the merged model's (f32: its weights read back
/// through comlrl's GGUF loader give the merged model's logits), and `merge` refuses an
/// adapter that does not fit the base, naming the projection.
#[test]
fn gguf_export_of_an_adapted_model_is_the_merged_model_and_misfits_are_refused() {
    use comlrl::model::io::gguf::Quant;
    let tmp = tempfile::tempdir().unwrap();
    for name in MODELS {
        let p = adapted(name, DType::F32);
        let merged = p.merge(p.adapter().unwrap()).unwrap();
        let out = tmp.path().join(format!("{name}.gguf"));
        p.export_gguf(Quant::F32, &out).unwrap();
        let g = Policy::load(&ModelSource::Gguf(out), &opts(DType::F32)).unwrap();
        let r = reference(name);
        close(
            &format!("{name} gguf last logits"),
            &f32s(&last_logits(&g, &r)),
            &f32s(&last_logits(&merged, &r)),
            1e-5,
            1e-6,
        );
    }
    // tiny-llama's adapter on tiny-qwen3's base: the same names, other shapes.
    let qwen3 = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen3")),
        &opts(DType::F32),
    )
    .unwrap();
    let llama = adapted("tiny-llama", DType::F32);
    let Err(e) = qwen3.merge(llama.adapter().unwrap()) else {
        panic!("tiny-llama's adapter merged into tiny-qwen3");
    };
    let msg = format!("{e}");
    assert!(msg.contains("layer 0 q_proj"), "{msg}");
    assert!(
        std::error::Error::source(&e).is_some_and(|c| format!("{c}").contains("do not fit W")),
        "{msg}"
    );
}
