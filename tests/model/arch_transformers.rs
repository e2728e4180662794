//! comlrl against a live transformers run on the Llama and Qwen3 fixtures' own weights, at the
//! standard tolerances: logits (valid rows), completion log-probs, and the loss and every
//! parameter's gradient through the trainer's recomputed loss path. Complements
//! reference.rs / arch_training.rs, whose tiny-qwen3 reference values differ from what
//! transformers computes from the stored weights. Skipped, with the reason, when
//! `$COMLRL_PYTHON` (else `python3`) cannot import torch, transformers and safetensors (CI never
//! installs them; `COMLRL_REQUIRE_ALL=1` makes that a failure).
use crate::common;
use candle_core::{DType, Device, Tensor, Var};
use comlrl::model::decoder::batch::{causal_mask, position_ids};
use comlrl::model::{completion_logprobs, LoadOptions, Mode, ModelSource, Policy, ScoreLayout};
use comlrl::train::algorithms::magrpo::loss::loss_and_grads;
use comlrl::train::rollout::AgentRollout;
use common::*;
use std::process::Command;

const SCRIPT: &str = r#"
import sys, json, torch, transformers
from safetensors.torch import load_file, save_file
d, out = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)
r = load_file(d + "/reference.safetensors")
adv = json.load(open(d + "/reference.json"))["loss_grads"]["advantages"]
m = transformers.AutoModelForCausalLM.from_pretrained(
    d, dtype=torch.float32, attn_implementation="eager").eval()
res = {}
with torch.no_grad():
    res["logits"] = m(r["input_ids"], attention_mask=r["attention_mask"],
                      position_ids=r["position_ids"]).logits.contiguous()
    # Positions 50 apart: relative distances up to ~1100 reach the long wavelengths that
    # llama3 scaling changes (at the fixture's own positions its effect is below 1e-4).
    res["logits_spread"] = m(r["input_ids"], attention_mask=r["attention_mask"],
                             position_ids=r["position_ids"] * 50).logits.contiguous()
T = r["input_ids"].shape[1]
ids = torch.cat([r["input_ids"], r["completion_ids"]], 1)
am = torch.cat([r["attention_mask"], r["completion_mask"]], 1)
lg = m(ids, attention_mask=am, position_ids=r["full_position_ids"]).logits
lp = torch.log_softmax(lg[:, T - 1:-1], -1).gather(-1, r["completion_ids"][..., None])[..., 0]
lp = lp * r["completion_mask"]
loss = -(torch.tensor(adv) * lp.sum(1)).sum() / len(adv)
loss.backward()
res["completion_logprobs"] = lp.detach().contiguous()
res["loss"] = loss.detach()
for n, p in m.named_parameters():
    res["grad." + n] = p.grad.contiguous()
save_file(res, out)
"#;

/// transformers' values for fixture `name`, or `None` (skipped, with the reason) without them.
fn transformers_values(name: &str) -> Option<std::collections::HashMap<String, Tensor>> {
    let py = python_with(&["torch", "transformers", "safetensors"])?;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("hf.safetensors");
    let run = Command::new(&py)
        .args(["-c", SCRIPT])
        .arg(fixtures().join(name))
        .arg(&out)
        .output()
        .expect("run python");
    assert!(
        run.status.success(),
        "transformers run failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    Some(load_st(&out))
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn agrees_with_transformers(name: &str) {
    let Some(hf) = transformers_values(name) else {
        return;
    };
    let dir = fixtures().join(name);
    let policy = Policy::load(&ModelSource::Local(dir.clone()), &LoadOptions::default()).unwrap();
    let r = load_st(&dir.join("reference.safetensors"));

    // Logits of the valid (unpadded) prompt positions, both model paths.
    let valid: Vec<Vec<bool>> = rows_i64(&r["attention_mask"])
        .iter()
        .map(|row| row.iter().map(|&m| m == 1).collect())
        .collect();
    let (_, t) = r["input_ids"].dims2().unwrap();
    let input = r["input_ids"].to_dtype(DType::U32).unwrap();
    let pos = position_ids(&valid, t, &Device::Cpu).unwrap();
    let spread = (&pos * 50.0).unwrap();
    let mask = causal_mask(&valid, t, &Device::Cpu).unwrap();
    for (key, pos, mode) in [
        ("logits", &pos, Mode::Train),
        ("logits", &pos, Mode::Infer),
        ("logits_spread", &spread, Mode::Train),
        ("logits_spread", &spread, Mode::Infer),
    ] {
        let want = hf[key].to_vec3::<f32>().unwrap();
        let h = policy
            .model
            .hidden(&input, pos, &mask, None, policy.products(mode))
            .unwrap();
        let got = policy.model.logits(&h).unwrap().to_vec3::<f32>().unwrap();
        let (mut diff, mut top) = (0f32, 0f32);
        for (b, row) in valid.iter().enumerate() {
            for (i, &v) in row.iter().enumerate() {
                if v {
                    diff = diff.max(max_abs(&got[b][i], &want[b][i]));
                    top = want[b][i].iter().fold(top, |m, x| m.max(x.abs()));
                }
            }
        }
        assert!(
            diff / top < 1e-4,
            "{name} {mode:?} {key}: differ by {diff} (max {top})"
        );
    }

    // Loss and every gradient through the trainer's recomputed path (one sample per prompt).
    let refj = json(&dir.join("reference.json"));
    let adv: Vec<f32> = refj["loss_grads"]["advantages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_f64().unwrap() as f32)
        .collect();
    let samples: Vec<AgentRollout> = (0..adv.len())
        .map(|k| AgentRollout {
            prompt_ids: ids(&refj["prompts"][k]["ids"]),
            completions: vec![ids(&refj["completions"][k]["ids"])],
            texts: vec![String::new()],
            returns: vec![0.0],
            kl: vec![0.0],
            sampling_logprobs: vec![],
            ref_logprobs: vec![],
            advantages: vec![adv[k]],
        })
        .collect();
    let lens: Vec<usize> = rows_i64(&r["completion_mask"])
        .iter()
        .map(|m| m.iter().filter(|&&x| x == 1).count())
        .collect();
    for (s, n) in samples.iter().zip(&lens) {
        assert_eq!(s.completions[0].len(), *n, "reference.json completion ids");
    }
    let p: Vec<&[u32]> = samples.iter().map(|s| s.prompt_ids.as_slice()).collect();
    let c: Vec<&[u32]> = samples
        .iter()
        .map(|s| s.completions[0].as_slice())
        .collect();
    let layout = ScoreLayout::new(&policy.model, &p, &c, policy.pad_id).unwrap();
    let want_lp = hf["completion_logprobs"].to_vec2::<f32>().unwrap();
    for mode in [Mode::Train, Mode::Infer] {
        let got = completion_logprobs(&policy.model, &layout, policy.products(mode)).unwrap();
        let got = got.to_vec2::<f32>().unwrap();
        for (b, n) in lens.iter().enumerate() {
            let d = max_abs(&got[b][..*n], &want_lp[b][..*n]);
            assert!(d < 1e-4, "{name} {mode:?}: row {b} log-probs differ by {d}");
        }
    }
    let refs: Vec<&AgentRollout> = samples.iter().collect();
    let named = policy.vars();
    let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let lg = loss_and_grads(
        &policy,
        &vars,
        &refs,
        1,
        true,
        comlrl::train::update::Share::ALL,
    )
    .unwrap();
    let want_loss = hf["loss"].to_scalar::<f32>().unwrap() as f64;
    assert!(
        ((lg.loss - want_loss) / want_loss).abs() < 1e-5,
        "{name}: loss {} vs {want_loss}",
        lg.loss
    );
    for ((pname, _), g) in named.iter().zip(&lg.grads) {
        let want = f32s(&hf[&format!("grad.{pname}")]);
        let got = f32s(g.as_ref().unwrap());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 + 1e-3 * b.abs(),
                "{name} grad.{pname}[{i}]: {a} vs {b}"
            );
        }
    }
}

#[test]
fn llama_agrees_with_transformers() {
    agrees_with_transformers("tiny-llama");
}

#[test]
fn qwen3_agrees_with_transformers() {
    agrees_with_transformers("tiny-qwen3");
}
