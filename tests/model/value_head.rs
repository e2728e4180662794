//! A critic on the decoder: the final hidden state at the row CoMLRL reads (the last prompt
//! token for V, the last token of prompt + response for Q), the value head, and the critic
//! loss's gradients through the hand-written backward (value head, final norm at those rows,
//! layers): against CoMLRL 1.4.3's own `CausalLMWithValueHead` / `ValueHead` on the tiny Qwen2
//! fixture (`actor_critic/value_tiny.*`), and against candle's f64 autograd through the whole
//! graph on every architecture's switches; a value head read in the actor's own pass (the
//! shared head's joined backward) against f64 autograd of the log-probs' and value's sum.
use crate::common;
use candle_core::{DType, Tensor, Var};
use comlrl::model::decoder::value_head::ValueHead;
use comlrl::model::grad::pass_order::{run_passes, Pass};
use comlrl::model::grad::recompute::{value_forward, PassPlan};
use comlrl::model::grad::value::{hidden_at, value_columns, values, ValueAt, ValueSeeds, ValueTop};
use comlrl::model::{
    completion_logprobs, ComputeDtype, LoadOptions, Mode, ModelSource, Policy, ScoreLayout,
};
use common::*;
use std::collections::HashMap;

/// The critic loss of CoMLRL's IAC with a separate critic: coef · mean((target − V)²).
const COEF: f64 = 0.6;

fn load(name: &str, dtype: DType) -> Policy {
    let opts = LoadOptions {
        dtype,
        ..LoadOptions::default()
    };
    Policy::load(&ModelSource::Local(fixtures().join(name)), &opts).unwrap()
}

struct Fixture {
    t: HashMap<String, Tensor>,
    meta: serde_json::Value,
    rows: Vec<(Vec<u32>, Vec<u32>)>,
    targets: Vec<f64>,
}

fn fixture() -> Fixture {
    let dir = fixtures().join("actor_critic");
    let meta = json(&dir.join("value_tiny.json"));
    let rows = meta["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (ids(&r["prompt"]), ids(&r["completion"])))
        .collect();
    let targets = meta["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(meta["value_loss_coef"].as_f64().unwrap(), COEF);
    Fixture {
        t: load_st(&dir.join("value_tiny.safetensors")),
        meta,
        rows,
        targets,
    }
}

/// The fixture's head `name` (its tensors under `head.<name>.`), in `dtype`.
fn fixture_head(f: &Fixture, name: &str, hidden: usize, dtype: DType) -> ValueHead {
    let prefix = format!("head.{name}.");
    let t =
        f.t.iter()
            .filter_map(|(k, v)| {
                let k = k.strip_prefix(&prefix)?;
                Some((k.to_string(), v.to_dtype(dtype).unwrap()))
            })
            .collect();
    ValueHead::from_tensors(t, hidden).unwrap()
}

fn at(kind: &str) -> ValueAt {
    match kind {
        "v" => ValueAt::PromptEnd,
        _ => ValueAt::SequenceEnd,
    }
}

/// The rows laid out as a critic of `kind` reads them: V on the prompts alone (a separate
/// critic never needs the responses), Q on prompt + response.
fn layout(policy: &Policy, rows: &[(Vec<u32>, Vec<u32>)], kind: ValueAt) -> ScoreLayout {
    let prompts: Vec<&[u32]> = rows.iter().map(|(p, _)| p.as_slice()).collect();
    let comps: Vec<&[u32]> = rows
        .iter()
        .map(|(_, c)| match kind {
            ValueAt::PromptEnd => &[][..],
            ValueAt::SequenceEnd => c.as_slice(),
        })
        .collect();
    ScoreLayout::new(&policy.model, &prompts, &comps, policy.pad_id).unwrap()
}

/// Every trainable tensor: the backbone's, then the head's.
fn named_vars(policy: &Policy, head: &ValueHead) -> Vec<(String, Var)> {
    let mut v = policy.vars();
    v.extend(
        head.vars()
            .into_iter()
            .map(|(n, var)| (format!("value_head.{n}"), var)),
    );
    v
}

struct Outcome {
    values: Vec<f64>,
    loss: f64,
    grads: HashMap<String, Tensor>,
}

/// The critic loss's values, loss and gradients through the hand-written pass.
fn hand_written(
    policy: &Policy,
    head: &ValueHead,
    rows: &[(Vec<u32>, Vec<u32>)],
    kind: ValueAt,
    targets: &[f64],
    plan: PassPlan,
) -> Outcome {
    let lay = layout(policy, rows, kind);
    let cols = value_columns(&lay, kind).unwrap();
    let pass = value_forward(&policy.model, head, &lay, &cols, plan, None).unwrap();
    let v: Vec<f32> = pass.values().to_vec1().unwrap();
    let n = v.len() as f32;
    // d/dv of coef · mean((t − v)²), in f32 as torch computes it.
    let dv: Vec<f32> = v
        .iter()
        .zip(targets)
        .map(|(&v, &t)| COEF as f32 * 2.0 * (v - t as f32) / n)
        .collect();
    let loss = COEF
        * v.iter()
            .zip(targets)
            .map(|(&v, &t)| (t - v as f64).powi(2))
            .sum::<f64>()
        / v.len() as f64;
    let named = named_vars(policy, head);
    let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let mut acc = vec![None; vars.len()];
    let dv = Tensor::new(dv, policy.model.device()).unwrap();
    pass.backward(&policy.model, head, &dv, &vars, &mut acc)
        .unwrap();
    Outcome {
        values: v.iter().map(|&x| x as f64).collect(),
        loss,
        grads: named
            .into_iter()
            .zip(acc)
            .filter_map(|((n, _), g)| Some((n, g?)))
            .collect(),
    }
}

/// The same through candle's autograd over the whole graph (`Mode::Train`), in the model's
/// dtype.
fn autograd(
    policy: &Policy,
    head: &ValueHead,
    rows: &[(Vec<u32>, Vec<u32>)],
    kind: ValueAt,
    targets: &[f64],
) -> Outcome {
    let lay = layout(policy, rows, kind);
    let cols = value_columns(&lay, kind).unwrap();
    let v = values(&policy.model, head, &lay, &cols, Mode::Train).unwrap();
    let t = Tensor::new(targets, v.device())
        .unwrap()
        .to_dtype(v.dtype())
        .unwrap();
    let loss = ((t - &v).unwrap().sqr().unwrap().mean_all().unwrap() * COEF).unwrap();
    let grads = loss.backward().unwrap();
    let f64s = |t: &Tensor| -> Vec<f64> {
        t.to_dtype(DType::F64)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    Outcome {
        values: f64s(&v),
        loss: f64s(&loss)[0],
        grads: named_vars(policy, head)
            .into_iter()
            .filter_map(|(n, var)| Some((n, grads.get(var.as_tensor())?.clone())))
            .collect(),
    }
}

fn as_f64(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn norm(x: &[f64]) -> f64 {
    x.iter().map(|v| v * v).sum::<f64>().sqrt()
}

/// ‖a − b‖ / ‖b‖ (‖a − b‖ where b is 0).
fn relative(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let nb = norm(b);
    if nb == 0.0 {
        norm(&d)
    } else {
        norm(&d) / nb
    }
}

#[test]
fn critic_values_and_gradients_match_comlrl() {
    let f = fixture();
    let policy = load("tiny-qwen2", DType::F32);
    let hidden = policy.config.hidden_size;
    let plans = [
        PassPlan::rerun_all(ComputeDtype::F32),
        PassPlan {
            keep_bytes: 1 << 30,
            ..PassPlan::rerun_all(ComputeDtype::F32)
        },
    ];
    let mut cases = 0;
    for (key, case) in f.meta["cases"].as_object().unwrap() {
        cases += 1;
        let kind = at(case["critic_type"].as_str().unwrap());
        let head = fixture_head(&f, case["head"].as_str().unwrap(), hidden, DType::F32);
        // The hidden state the head reads, and the values.
        let lay = layout(&policy, &f.rows, kind);
        let cols = value_columns(&lay, kind).unwrap();
        let h = hidden_at(&policy.model, &lay, &cols, Mode::Infer).unwrap();
        let (got_h, want_h) = (as_f64(&h), as_f64(&f.t[&format!("{key}.hidden")]));
        let worst = got_h
            .iter()
            .zip(&want_h)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-4, "{key}: hidden state off by {worst}");
        let want_v = as_f64(&f.t[&format!("{key}.values")]);
        let got_v = as_f64(&values(&policy.model, &head, &lay, &cols, Mode::Infer).unwrap());
        for (a, b) in got_v.iter().zip(&want_v) {
            assert!((a - b).abs() < 1e-5, "{key}: value {a} vs {b}");
        }

        let mut first: Option<Outcome> = None;
        for plan in plans {
            let r = hand_written(&policy, &head, &f.rows, kind, &f.targets, plan);
            for (a, b) in r.values.iter().zip(&want_v) {
                assert!((a - b).abs() < 1e-5, "{key}: pass value {a} vs {b}");
            }
            let want_loss = case["loss"].as_f64().unwrap();
            assert!(
                (r.loss - want_loss).abs() < 1e-5 * want_loss.abs().max(1.0),
                "{key}: loss {} vs {want_loss}",
                r.loss
            );
            // Every value-head gradient and the chosen backbone ones, element by element.
            let mut compared = 0;
            for (name, want) in f.t.iter() {
                let Some(param) = name.strip_prefix(&format!("{key}.grad.")) else {
                    continue;
                };
                compared += 1;
                let got = r
                    .grads
                    .get(param)
                    .unwrap_or_else(|| panic!("{key}: no gradient for {param}"));
                let (g, w) = (as_f64(got), as_f64(want));
                assert_eq!(g.len(), w.len(), "{key}: {param} size");
                for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-5 + 1e-3 * b.abs(),
                        "{key}: {param}[{i}] {a} vs {b}"
                    );
                }
            }
            let heads = head.vars().len();
            let listed = f.meta["grad_params"].as_array().unwrap().len();
            assert_eq!(
                compared,
                heads + listed,
                "{key}: every given gradient compared"
            );
            // Every backbone tensor's gradient norm, and the global one.
            let mut sq = 0.0;
            for (param, want) in case["backbone_grad_norms"].as_object().unwrap() {
                let got = r
                    .grads
                    .get(param)
                    .unwrap_or_else(|| panic!("{key}: no gradient for {param}"));
                let n = norm(&as_f64(got));
                sq += n * n;
                let want = want.as_f64().unwrap();
                assert!(
                    (n - want).abs() <= 1e-4 * want + 1e-7,
                    "{key}: ‖grad {param}‖ {n} vs {want}"
                );
            }
            let want_global = case["backbone_grad_global_norm"].as_f64().unwrap();
            assert!(
                (sq.sqrt() - want_global).abs() <= 1e-5 * want_global,
                "{key}: global gradient norm {} vs {want_global}",
                sq.sqrt()
            );
            // Kept activations skip the re-run and give the same numbers, bit for bit.
            match &first {
                None => first = Some(r),
                Some(a) => {
                    for (name, g) in &a.grads {
                        assert!(
                            as_f64(g) == as_f64(&r.grads[name]),
                            "{key}: {name} differs with kept activations"
                        );
                    }
                }
            }
        }
    }
    assert_eq!(cases, 4, "v and q, each with both heads");
}

/// V read from the prompt alone, or from prompt + response at the last prompt token: the same
/// (the causal mask hides the response), so a shared backbone can read both from one pass.
#[test]
fn v_is_the_same_with_or_without_the_response_laid_out() {
    let f = fixture();
    let policy = load("tiny-qwen2", DType::F32);
    let head = fixture_head(&f, "tanh", policy.config.hidden_size, DType::F32);
    let alone = layout(&policy, &f.rows, ValueAt::PromptEnd);
    let with = layout(&policy, &f.rows, ValueAt::SequenceEnd);
    let v = |lay: &ScoreLayout| {
        let cols = value_columns(lay, ValueAt::PromptEnd).unwrap();
        as_f64(&values(&policy.model, &head, lay, &cols, Mode::Infer).unwrap())
    };
    let (a, b) = (v(&alone), v(&with));
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-6, "{x} vs {y}");
    }
    // And Q differs from V: it reads another token.
    let cols = value_columns(&with, ValueAt::SequenceEnd).unwrap();
    let q = as_f64(&values(&policy.model, &head, &with, &cols, Mode::Infer).unwrap());
    assert!(
        q.iter().zip(&a).all(|(x, y)| (x - y).abs() > 1e-6),
        "{q:?} vs {a:?}"
    );
}

/// The hand-written f32 pass against f64 autograd through the whole graph, for both heads
/// (seeded initialisation) and both critic types, on Qwen2 (tied head, q/k/v biases), Llama
/// (biases everywhere) and Qwen3 (q/k norms); with a shared prompt part where the rows allow.
#[test]
fn critic_backward_matches_f64_autograd() {
    let f = fixture();
    let shared_rows: Vec<(Vec<u32>, Vec<u32>)> = f
        .rows
        .iter()
        .map(|(_, c)| (f.rows[0].0.clone(), c.clone()))
        .collect();
    for model in ["tiny-qwen2", "tiny-llama", "tiny-qwen3"] {
        let p32 = load(model, DType::F32);
        let p64 = load(model, DType::F64);
        let hidden = p32.config.hidden_size;
        for (d, seed) in [(None, 5), (Some(16), 6)] {
            let h32 =
                ValueHead::init(hidden, d, seed, DType::F32, &candle_core::Device::Cpu).unwrap();
            assert_eq!(h32.hidden_dim(), d);
            let h64 = ValueHead::from_tensors(
                h32.vars()
                    .into_iter()
                    .map(|(n, v)| (n, v.as_tensor().to_dtype(DType::F64).unwrap()))
                    .collect(),
                hidden,
            )
            .unwrap();
            for kind in [ValueAt::PromptEnd, ValueAt::SequenceEnd] {
                for (rows, share) in [(&f.rows, false), (&shared_rows, true)] {
                    let what = format!("{model}, head {d:?}, {kind:?}, shared prompt {share}");
                    let plan = PassPlan {
                        share_prompt: share,
                        ..PassPlan::rerun_all(ComputeDtype::F32)
                    };
                    let got = hand_written(&p32, &h32, rows, kind, &f.targets, plan);
                    let want = autograd(&p64, &h64, rows, kind, &f.targets);
                    assert!(
                        relative(&got.values, &want.values) < 1e-5,
                        "{what}: values {:?} vs {:?}",
                        got.values,
                        want.values
                    );
                    assert!(
                        (got.loss - want.loss).abs() < 1e-5 * want.loss.max(1.0),
                        "{what}: loss"
                    );
                    assert_eq!(got.grads.len(), want.grads.len(), "{what}: tensors");
                    for (name, w) in &want.grads {
                        let g = got
                            .grads
                            .get(name)
                            .unwrap_or_else(|| panic!("{what}: no gradient for {name}"));
                        let err = relative(&as_f64(g), &as_f64(w));
                        assert!(err < 1e-4, "{what}: {name} off by {err} (relative)");
                    }
                }
            }
        }
    }
}

/// The squared error's seeds coef · 2 (v − t) / n of each value, for a joined pass.
struct Squared<'a> {
    targets: &'a [f64],
}

impl ValueSeeds for Squared<'_> {
    fn seeds(&self, v: &[f32]) -> Vec<f32> {
        let n = v.len() as f32;
        v.iter()
            .zip(self.targets)
            .map(|(&v, &t)| COEF as f32 * 2.0 * (v - t as f32) / n)
            .collect()
    }
}

/// A value head on the actor's own backbone read in the actor's pass (the shared head's one
/// backbone pass, `value::ValueTop`): the hand-written f32 gradient of Σ_r c_r · Σ_t log π +
/// coef · mean((t − V)²), the value's gradient joined with the log-probs' before the final
/// norm, against f64 autograd of the same sum (two forwards on one graph) on every
/// architecture's switches, both heads, V and Q, with a shared prompt part where the rows
/// allow, with and without kept activations.
#[test]
fn joined_log_prob_and_value_backward_matches_f64_autograd() {
    let f = fixture();
    let shared_rows: Vec<(Vec<u32>, Vec<u32>)> = f
        .rows
        .iter()
        .map(|(_, c)| (f.rows[0].0.clone(), c.clone()))
        .collect();
    let coefs: Vec<f32> = (0..f.rows.len())
        .map(|r| if r % 2 == 0 { 0.7 } else { -0.4 })
        .collect();
    for model in ["tiny-qwen2", "tiny-llama", "tiny-qwen3"] {
        let p32 = load(model, DType::F32);
        let p64 = load(model, DType::F64);
        let hidden = p32.config.hidden_size;
        for (d, seed) in [(None, 7), (Some(16), 8)] {
            let h32 =
                ValueHead::init(hidden, d, seed, DType::F32, &candle_core::Device::Cpu).unwrap();
            let h64 = ValueHead::from_tensors(
                h32.vars()
                    .into_iter()
                    .map(|(n, v)| (n, v.as_tensor().to_dtype(DType::F64).unwrap()))
                    .collect(),
                hidden,
            )
            .unwrap();
            for kind in [ValueAt::PromptEnd, ValueAt::SequenceEnd] {
                for (rows, share, keep) in [
                    (&f.rows, false, 0),
                    (&shared_rows, true, 0),
                    (&shared_rows, true, 1 << 30),
                ] {
                    let what = format!(
                        "{model}, head {d:?}, {kind:?}, shared prompt {share}, kept {keep}"
                    );
                    // Prompt + response laid out for both: the actor's pass.
                    let lay32 = layout(&p32, rows, ValueAt::SequenceEnd);
                    let lay64 = layout(&p64, rows, ValueAt::SequenceEnd);
                    let plan = PassPlan {
                        share_prompt: share,
                        keep_bytes: keep,
                        ..PassPlan::rerun_all(ComputeDtype::F32)
                    };
                    let named = named_vars(&p32, &h32);
                    let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
                    let mut acc = vec![None; vars.len()];
                    let pass = Pass {
                        layout: &lay32,
                        coef: coefs.clone(),
                        tokens: None,
                        entropy: None,
                        value: Some(ValueTop {
                            head: &h32,
                            at: kind,
                            seeds: Box::new(Squared {
                                targets: &f.targets,
                            }),
                        }),
                    };
                    let (_, stats) =
                        run_passes(&p32.model, &[pass], &vars, &mut acc, plan).unwrap();
                    let got_v: Vec<f64> = stats[0].values.iter().map(|&v| v as f64).collect();

                    let cols = value_columns(&lay64, kind).unwrap();
                    let v = values(&p64.model, &h64, &lay64, &cols, Mode::Train).unwrap();
                    let t = Tensor::new(&f.targets[..], v.device()).unwrap();
                    let value_loss =
                        ((t - &v).unwrap().sqr().unwrap().mean_all().unwrap() * COEF).unwrap();
                    let lp = completion_logprobs(&p64.model, &lay64, Mode::Train).unwrap();
                    let c: Vec<f64> = coefs.iter().map(|&c| c as f64).collect();
                    let c = Tensor::new(c, lp.device()).unwrap();
                    let lp_loss = (lp.sum(1).unwrap() * c).unwrap().sum_all().unwrap();
                    let grads = (lp_loss + value_loss).unwrap().backward().unwrap();
                    assert!(
                        relative(&got_v, &as_f64(&v)) < 1e-5,
                        "{what}: values {got_v:?} vs {v}"
                    );
                    let mut compared = 0;
                    for ((name, var), g) in named_vars(&p64, &h64).iter().zip(&acc) {
                        let Some(want) = grads.get(var.as_tensor()) else {
                            continue;
                        };
                        let g = g
                            .as_ref()
                            .unwrap_or_else(|| panic!("{what}: no gradient for {name}"));
                        let err = relative(&as_f64(g), &as_f64(want));
                        assert!(err < 1e-4, "{what}: {name} off by {err} (relative)");
                        compared += 1;
                    }
                    assert_eq!(compared, vars.len(), "{what}: every tensor compared");
                }
            }
        }
    }
}

/// A critic with LoRA adapters (`trainer.critic.adapter`): its backbone the fixture model
/// frozen with PEFT's adapter for it (B ≠ 0, so A has a gradient), the head on top. The
/// hand-written f32 pass gives f64 autograd's values and the gradients of exactly the
/// adapters' and the head's tensors (the frozen base gets none), and f64 autograd's adapter
/// gradients equal f64 central differences, on every projection of Qwen2, Llama and Qwen3.
#[test]
fn a_critic_with_adapters_gives_f64_autograd_and_finite_difference_gradients() {
    use comlrl::model::io::peft::Adapter;
    let f = fixture();
    let adapted = |model: &str, dtype: DType| {
        let base = load(model, dtype);
        let dir = fixtures().join("lora").join(model).join("adapter");
        let ad = Adapter::load(&dir, &base.config, dtype, &candle_core::Device::Cpu).unwrap();
        base.with_adapter(ad).unwrap()
    };
    for model in ["tiny-qwen2", "tiny-llama", "tiny-qwen3"] {
        let (p32, p64) = (adapted(model, DType::F32), adapted(model, DType::F64));
        let hidden = p32.config.hidden_size;
        let h32 =
            ValueHead::init(hidden, Some(8), 7, DType::F32, &candle_core::Device::Cpu).unwrap();
        let h64 = ValueHead::from_tensors(
            h32.vars()
                .into_iter()
                .map(|(n, v)| (n, v.as_tensor().to_dtype(DType::F64).unwrap()))
                .collect(),
            hidden,
        )
        .unwrap();
        let adapter_tensors = p32.adapter().unwrap().vars().len();
        for kind in [ValueAt::PromptEnd, ValueAt::SequenceEnd] {
            let what = format!("{model} with adapters, {kind:?}");
            let plan = PassPlan::rerun_all(ComputeDtype::F32);
            let got = hand_written(&p32, &h32, &f.rows, kind, &f.targets, plan);
            let want = autograd(&p64, &h64, &f.rows, kind, &f.targets);
            assert!(
                relative(&got.values, &want.values) < 1e-5,
                "{what}: values {:?} vs {:?}",
                got.values,
                want.values
            );
            // The adapters' and the head's tensors, nothing of the frozen base.
            assert_eq!(
                got.grads.len(),
                adapter_tensors + h32.vars().len(),
                "{what}"
            );
            assert_eq!(want.grads.len(), got.grads.len(), "{what}: tensors");
            for (name, w) in &want.grads {
                let g = (got.grads.get(name)).unwrap_or_else(|| panic!("{what}: no {name}"));
                let err = relative(&as_f64(g), &as_f64(w));
                assert!(err < 1e-4, "{what}: {name} off by {err} (relative)");
            }
        }
        // f64 autograd against central differences on one entry of every adapter tensor.
        let kind = ValueAt::SequenceEnd;
        let want = autograd(&p64, &h64, &f.rows, kind, &f.targets);
        let loss = || autograd_loss(&p64, &h64, &f.rows, kind, &f.targets);
        let mut projections = std::collections::BTreeSet::new();
        for (name, var) in p64.vars() {
            let g = as_f64(&want.grads[&name]);
            let idx = (0..g.len())
                .max_by(|&x, &y| g[x].abs().total_cmp(&g[y].abs()))
                .unwrap();
            let numeric = common::grad::central_difference(&var, idx, 1e-5, loss);
            assert!(
                (numeric - g[idx]).abs() < 1e-8 + 1e-5 * g[idx].abs(),
                "{model} {name}[{idx}]: numeric {numeric} vs analytic {}",
                g[idx]
            );
            let p = [
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
            ];
            projections.insert(p.iter().position(|p| name.contains(p)).unwrap());
        }
        assert_eq!(projections.len(), 7, "{model}: every projection checked");
    }
}

/// coef · mean((t − V)²) through f64 autograd's forward only (for finite differences).
fn autograd_loss(
    policy: &Policy,
    head: &ValueHead,
    rows: &[(Vec<u32>, Vec<u32>)],
    kind: ValueAt,
    targets: &[f64],
) -> f64 {
    autograd(policy, head, rows, kind, targets).loss
}
