//! LoRA dropout (`agents.adapter.dropout` > 0, issue 43): with PEFT's own recorded masks
//! (`tests/fixtures/lora/<model>/dropout.safetensors`, `make_lora.py dropout`) the train-mode
//! log-probs, logits and A/B gradients are PEFT's, through autograd and the hand-written
//! backward; the A/B gradients under a fixed mask equal f64 finite differences; the masks a
//! pass draws are the same in the first forward, a recomputed one, kept activations and the
//! autograd path; p = 0 is the path without dropout bit for bit; scoring runs without dropout;
//! a saved adapter records `lora_dropout` and PEFT reads it.
use crate::common;
use crate::lora::{close, coefs, layout, opts, reference, MODELS};
use candle_core::{DType, Device, Tensor, Var};
use comlrl::model::decoder::batch::causal_mask;
use comlrl::model::grad::recompute::{weighted_logprob_grads, weighted_logprob_grads_in, PassPlan};
use comlrl::model::io::peft::Adapter;
use comlrl::model::{
    completion_logprobs, ComputeDtype, LoraDropout, Mode, ModelSource, Policy, ScoreLayout,
    TrainWithDropout, WeightProducts,
};
use common::grad::{central_difference, f64s};
use common::*;
use std::collections::HashMap;

/// The fixture model `name` in `dtype` with PEFT's adapter for it, its dropout set to `p`.
fn adapted(name: &str, dtype: DType, p: f64) -> Policy {
    let base = Policy::load(&ModelSource::Local(fixtures().join(name)), &opts(dtype)).unwrap();
    let dir = fixtures().join("lora").join(name).join("adapter");
    let mut adapter = Adapter::load(&dir, &base.config, dtype, &Device::Cpu).unwrap();
    adapter.dropout = p;
    adapter.dropout_key = 43;
    base.with_adapter(adapter).unwrap()
}

/// PEFT's train-mode reference with its masks, and the masks as (rows, in) per site.
fn dropout_reference(name: &str) -> (HashMap<String, Tensor>, LoraDropout, f64) {
    let r = load_st(
        &fixtures()
            .join("lora")
            .join(name)
            .join("dropout.safetensors"),
    );
    let mut masks = HashMap::new();
    for (k, t) in &r {
        let Some(site) = k.strip_prefix("mask.") else {
            continue;
        };
        let (layer, module) = site.split_once('.').unwrap();
        let (b, s, i) = t.dims3().unwrap();
        let m = t.reshape((b * s, i)).unwrap();
        masks.insert((layer.parse::<usize>().unwrap(), module.to_string()), m);
    }
    let p = r["p"].to_scalar::<f32>().unwrap() as f64;
    // The sequences and loss weights are the eval-mode reference's.
    let mut r = r;
    let eval = reference(name);
    for k in ["ids", "weights"] {
        r.insert(k.to_string(), eval[k].clone());
    }
    (r, LoraDropout::fixed(masks), p)
}

/// The last position's logits of each fixture row (every row 8 real tokens), as `products` runs.
fn last_logits(p: &Policy, r: &HashMap<String, Tensor>, products: impl WeightProducts) -> Tensor {
    let ids = r["ids"].to_dtype(DType::U32).unwrap();
    let (b, s) = ids.dims2().unwrap();
    let dev = Device::Cpu;
    let pos = Tensor::arange(0u32, s as u32, &dev)
        .unwrap()
        .unsqueeze(0)
        .unwrap()
        .repeat((b, 1))
        .unwrap();
    let mask = causal_mask(&vec![vec![true; s]; b], s, &dev).unwrap();
    let h = p.model.hidden(&ids, &pos, &mask, None, products).unwrap();
    let logits = p.model.logits(&h).unwrap();
    logits.narrow(1, s - 1, 1).unwrap().squeeze(1).unwrap()
}

/// Σ coef · log-probs through autograd, as `products` runs the forward.
fn loss_of(p: &Policy, lay: &ScoreLayout, coef: &[f32], products: impl WeightProducts) -> Tensor {
    let lp = completion_logprobs(&p.model, lay, products).unwrap();
    let c: Vec<f64> = coef.iter().map(|&c| c as f64).collect();
    let c = Tensor::new(c.as_slice(), &Device::Cpu)
        .unwrap()
        .to_dtype(lp.dtype())
        .unwrap();
    (lp.sum(1).unwrap() * c).unwrap().sum_all().unwrap()
}

fn vars_of(p: &Policy) -> Vec<Var> {
    p.vars().into_iter().map(|(_, v)| v).collect()
}

/// The hand-written backward's loss and gradients of `lay` (every layer re-run, or with
/// `keep` bytes of kept activations; `share` a prompt where it may).
fn hand(
    p: &Policy,
    lay: &ScoreLayout,
    coef: &[f32],
    keep: usize,
    share: bool,
) -> (f64, Vec<Vec<f32>>) {
    let vs = vars_of(p);
    let mut acc: Vec<Option<Tensor>> = vec![None; vs.len()];
    let plan = PassPlan {
        keep_bytes: keep,
        share_prompt: share,
        ..PassPlan::rerun_all(ComputeDtype::F32)
    };
    let st = weighted_logprob_grads_in(&p.model, lay, coef, &vs, &mut acc, plan, None).unwrap();
    (
        st.loss,
        acc.iter().map(|a| f32s(a.as_ref().unwrap())).collect(),
    )
}

/// PEFT in train mode with its recorded masks: the log-probs, the last logits and the A/B
/// gradients, through autograd and the hand-written backward. Scoring (no dropout handed)
/// gives PEFT's eval-mode outputs, and the masks matter.
#[test]
fn train_mode_dropout_gives_peft_outputs_and_ab_gradients() {
    for name in MODELS {
        let (r, d, p) = dropout_reference(name);
        assert!(p > 0.0);
        let pol = adapted(name, DType::F32, p);
        let mut lay = layout(&pol, &r);
        let coef = coefs(&r);
        let lp = completion_logprobs(&pol.model, &lay, TrainWithDropout(&d)).unwrap();
        let want = f32s(&r["logprobs"]);
        close(&format!("{name} logprobs"), &f32s(&lp), &want, 1e-4, 1e-5);
        close(
            &format!("{name} last logits"),
            &f32s(&last_logits(&pol, &r, TrainWithDropout(&d))),
            &f32s(&r["last_logits"]),
            1e-4,
            1e-5,
        );
        // Eval mode: the adapter's dropout is not applied where no pass hands masks.
        let eval = f32s(&completion_logprobs(&pol.model, &lay, Mode::Train).unwrap());
        close(
            &format!("{name} eval logprobs"),
            &eval,
            &f32s(&reference(name)["logprobs"]),
            1e-4,
            1e-5,
        );
        let apart = eval
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            apart > 1e-3,
            "{name}: the masks change the log-probs by {apart} only"
        );

        let vars = pol.vars();
        let grads = loss_of(&pol, &lay, &coef, TrainWithDropout(&d))
            .backward()
            .unwrap();
        lay.dropout = Some(d.clone());
        let vs = vars_of(&pol);
        let mut acc: Vec<Option<Tensor>> = vec![None; vs.len()];
        let st = weighted_logprob_grads(&pol.model, &lay, &coef, &vs, &mut acc).unwrap();
        let want_loss = r["loss"].to_scalar::<f32>().unwrap() as f64;
        assert!(
            (st.loss - want_loss).abs() < 1e-4 + 1e-5 * want_loss.abs(),
            "{name} loss {} vs {want_loss}",
            st.loss
        );
        for ((n, v), a) in vars.iter().zip(&acc) {
            let want = f32s(&r[&format!("grad.{n}")]);
            close(
                &format!("{name} hand-written {n}"),
                &f32s(a.as_ref().unwrap()),
                &want,
                1e-4,
                1e-5,
            );
            let auto = f32s(grads.get(v.as_tensor()).expect("an autograd gradient"));
            close(&format!("{name} autograd {n}"), &auto, &want, 1e-4, 1e-5);
        }
    }
}

/// Under a fixed mask: the hand-written f32 A/B gradients against f64 autograd, and f64
/// autograd against f64 central differences on one A and one B entry of every projection.
#[test]
fn dropout_ab_gradients_match_f64_autograd_and_finite_differences() {
    for name in MODELS {
        let (r, d, p) = dropout_reference(name);
        let p32 = adapted(name, DType::F32, p);
        let p64 = adapted(name, DType::F64, p);
        let coef = coefs(&r);
        let lay64 = layout(&p64, &r);
        let loss64 = || loss_of(&p64, &lay64, &coef, TrainWithDropout(&d));
        let grads = loss64().backward().unwrap();
        let mut lay32 = layout(&p32, &r);
        lay32.dropout = Some(d.clone());
        let (_, hand32) = hand(&p32, &lay32, &coef, 0, false);
        let mut checked = std::collections::BTreeSet::new();
        for (i, ((n, v64), h)) in p64.vars().iter().zip(&hand32).enumerate() {
            let want = f64s(grads.get(v64.as_tensor()).expect("f64 gradient"));
            for (j, (h, w)) in h.iter().zip(&want).enumerate() {
                assert!(
                    (*h as f64 - w).abs() < 1e-5 + 1e-4 * w.abs(),
                    "{name} {n}[{j}]: {h} vs f64 {w}"
                );
            }
            let idx = (0..want.len())
                .max_by(|&x, &y| want[x].abs().total_cmp(&want[y].abs()))
                .unwrap_or(0)
                .max(i % want.len().max(1))
                .min(want.len() - 1);
            let numeric =
                central_difference(v64, idx, 1e-5, || loss64().to_scalar::<f64>().unwrap());
            let analytic = want[idx];
            assert!(
                (numeric - analytic).abs() < 1e-8 + 1e-5 * analytic.abs(),
                "{name} {n}[{idx}]: numeric {numeric} vs analytic {analytic}"
            );
            checked.insert(n.rsplit('.').nth(2).unwrap().to_string());
        }
        assert_eq!(
            checked.len(),
            7,
            "{name}: every projection checked: {checked:?}"
        );
    }
}

/// Rows continuing one prompt (a prompt the update could share) with drawn masks.
fn shared_layout(p: &Policy) -> ScoreLayout {
    let prompt: Vec<u32> = vec![5, 17, 230, 41];
    let comps: Vec<Vec<u32>> = vec![
        vec![999, 3, 77, 1200, 8],
        vec![64, 64],
        vec![2900, 1, 45, 300],
    ];
    let prompts: Vec<&[u32]> = vec![&prompt; comps.len()];
    let comps: Vec<&[u32]> = comps.iter().map(|c| c.as_slice()).collect();
    ScoreLayout::new(&p.model, &prompts, &comps, p.pad_id).unwrap()
}

/// The masks a pass draws are the same in the first forward, a recomputed one (every layer
/// re-run), kept activations and a pass that could share its prompt (dropout computes every row
/// whole): the gradients bit for bit; the autograd path (gradient checkpointing off) draws the
/// same masks. Another update step draws other masks.
#[test]
fn recompute_kept_activations_and_autograd_draw_the_same_masks() {
    let pol = adapted("tiny-qwen2", DType::F32, 0.1);
    let mut lay = shared_layout(&pol);
    let (rows, width) = lay.ids.dims2().unwrap();
    let coef = [1.0f32, -0.5, 0.25];
    let plain = hand(&pol, &lay, &coef, 0, false);
    pol.set_update_step(3);
    lay.dropout = pol.lora_dropout((0..rows as u64).collect(), width);
    assert!(lay.dropout.is_some());
    let rerun = hand(&pol, &lay, &coef, 0, false);
    let kept = hand(&pol, &lay, &coef, 1 << 30, false);
    let shared = hand(&pol, &lay, &coef, 1 << 30, true);
    assert!(rerun.1 == kept.1, "kept activations draw other masks");
    assert!(rerun.1 == shared.1, "a shared prompt changes the gradients");
    assert_ne!(rerun.1, plain.1, "the dropout is applied");
    let d = lay.dropout.clone().unwrap();
    let grads = loss_of(&pol, &lay, &coef, TrainWithDropout(&d))
        .backward()
        .unwrap();
    let mut worst = 0f32;
    for (v, h) in vars_of(&pol).iter().zip(&rerun.1) {
        let auto = f32s(grads.get(v.as_tensor()).unwrap());
        let scale = h.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-3);
        for (a, b) in auto.iter().zip(h) {
            worst = worst.max((a - b).abs() / scale);
        }
    }
    assert!(
        worst < 1e-5,
        "autograd and recomputed gradients differ by {worst} of the largest"
    );
    pol.set_update_step(4);
    lay.dropout = pol.lora_dropout((0..rows as u64).collect(), width);
    assert_ne!(
        hand(&pol, &lay, &coef, 0, false).1,
        rerun.1,
        "step 4 draws step 3's masks"
    );
}

/// p = 0 with masks handed to the pass is the path without dropout bit for bit (forward and
/// gradients), and the policy hands none.
#[test]
fn zero_dropout_is_the_path_without_dropout_bit_for_bit() {
    let pol = adapted("tiny-qwen2", DType::F32, 0.0);
    let mut lay = shared_layout(&pol);
    let (rows, width) = lay.ids.dims2().unwrap();
    assert!(pol
        .lora_dropout((0..rows as u64).collect(), width)
        .is_none());
    let coef = [1.0f32, -0.5, 0.25];
    let before = hand(&pol, &lay, &coef, 1 << 30, true);
    let lp = f32s(&completion_logprobs(&pol.model, &lay, Mode::Train).unwrap());
    let d = LoraDropout::hashed(9, (0..rows as u64).collect(), width);
    lay.dropout = Some(d.clone());
    // The prompt is still shared at p = 0 (only a dropout that applies stops it).
    let after = hand(&pol, &lay, &coef, 1 << 30, true);
    assert!(before.1 == after.1 && before.0 == after.0);
    let lp0 = f32s(&completion_logprobs(&pol.model, &lay, TrainWithDropout(&d)).unwrap());
    assert!(lp == lp0);
}

/// An adapter with dropout saves `lora_dropout` p, reads back with it, and PEFT loads the
/// directory (its eval mode drops nothing) to this model's scoring outputs.
#[test]
fn an_adapter_with_dropout_saves_lora_dropout_and_peft_reads_it() {
    let name = "tiny-qwen2";
    let p = adapted(name, DType::F32, 0.25);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("agent");
    p.save(&dir).unwrap();
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("adapter_config.json")).unwrap())
            .unwrap();
    assert_eq!(cfg["lora_dropout"], 0.25);
    let back = Adapter::load(&dir, &p.config, DType::F32, &Device::Cpu).unwrap();
    assert_eq!(back.dropout, 0.25);
    let Some(py) = common::python_with(&["peft", "torch", "transformers"]) else {
        return;
    };
    let r = reference(name);
    let lay = layout(&p, &r);
    let mut ours = std::collections::BTreeMap::new();
    let lp = completion_logprobs(&p.model, &lay, Mode::Train).unwrap();
    ours.insert("logprobs".to_string(), lp);
    ours.insert("last_logits".to_string(), last_logits(&p, &r, Mode::Train));
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
