//! Gradient checks shared by the model and loss tests: the PyTorch MAGRPO loss fixture, a
//! policy-gradient loss over fixed sequences, and central finite differences.
use super::{fixtures, load_st, rows_i64};
use candle_core::{DType, Device, Tensor, Var};
use comlrl::model::{completion_logprobs, Mode, Policy, ScoreLayout};
use comlrl::train::rollout::AgentRollout;
use comlrl::train::update::LossGrads;
use std::collections::HashMap;

/// `magrpo/loss_tiny.safetensors`: the prompt ids, the K completions (their mask applied)
/// and every tensor of the file.
pub fn loss_fixture() -> (Vec<u32>, Vec<Vec<u32>>, HashMap<String, Tensor>) {
    let r = load_st(&fixtures().join("magrpo/loss_tiny.safetensors"));
    let prompt: Vec<u32> = r["prompt_ids"]
        .to_dtype(DType::U32)
        .unwrap()
        .to_vec1()
        .unwrap();
    let cids = rows_i64(&r["completion_ids"]);
    let cmask = rows_i64(&r["completion_mask"]);
    let completions: Vec<Vec<u32>> = cids
        .iter()
        .zip(&cmask)
        .map(|(ids, m)| {
            ids.iter()
                .zip(m)
                .filter(|(_, &m)| m == 1)
                .map(|(&i, _)| i as u32)
                .collect()
        })
        .collect();
    (prompt, completions, r)
}

/// One agent's node sample of `completions` after `prompt` with their `advantages` (no returns
/// or KL: the loss reads neither).
pub fn rollout(prompt: Vec<u32>, completions: Vec<Vec<u32>>, advantages: Vec<f32>) -> AgentRollout {
    let k = completions.len();
    AgentRollout {
        prompt_ids: prompt,
        texts: vec![String::new(); k],
        returns: vec![0.0; k],
        kl: vec![0.0; k],
        sampling_logprobs: vec![],
        ref_logprobs: vec![],
        completions,
        advantages,
    }
}

/// The loss fixture as the trainer's node sample of one agent, and every tensor of the file.
pub fn loss_sample() -> (AgentRollout, HashMap<String, Tensor>) {
    let (prompt, completions, r) = loss_fixture();
    let advantages: Vec<f32> = r["advantages"]
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec1()
        .unwrap();
    (rollout(prompt, completions, advantages), r)
}

/// −Σ advantage · Σ completion log-prob over two fixed sequences (advantages 0.7 and −1.3).
pub fn pg_loss(policy: &Policy, prompts: [&[u32]; 2], comps: [&[u32]; 2]) -> Tensor {
    let layout = ScoreLayout::new(&policy.model, &prompts, &comps, policy.pad_id).unwrap();
    let lp = completion_logprobs(&policy.model, &layout, Mode::Train).unwrap();
    let adv = Tensor::new(&[0.7f64, -1.3], &Device::Cpu).unwrap();
    (lp.sum(1).unwrap() * adv)
        .unwrap()
        .sum_all()
        .unwrap()
        .neg()
        .unwrap()
}

/// The elements of an f64 tensor, flattened.
pub fn f64s(t: &Tensor) -> Vec<f64> {
    t.flatten_all().unwrap().to_vec1::<f64>().unwrap()
}

/// The central difference `(loss(x + h) − loss(x − h)) / 2h` in element `idx` of `var`
/// (an f64 variable), which is restored afterwards.
pub fn central_difference(var: &Var, idx: usize, h: f64, loss: impl Fn() -> f64) -> f64 {
    let orig = var.as_tensor().copy().unwrap();
    let shifted = |delta: f64| {
        let mut v = f64s(&orig);
        v[idx] += delta;
        var.set(&Tensor::from_vec(v, orig.shape(), &Device::Cpu).unwrap())
            .unwrap();
        loss()
    };
    let numeric = (shifted(h) - shifted(-h)) / (2.0 * h);
    var.set(&orig).unwrap();
    numeric
}

/// Asserts that `lg` (one pass layout's loss and gradients, `vars` named as the policy names
/// them) is the loss fixture `r`'s: its loss, every gradient it records and the global norm.
pub fn assert_matches_reference(
    what: &str,
    named: &[(String, Var)],
    lg: &LossGrads,
    r: &HashMap<String, Tensor>,
) {
    let want_loss = r["loss"].to_scalar::<f32>().unwrap() as f64;
    let want_norm = r["grad_global_norm"].to_scalar::<f32>().unwrap() as f64;
    assert!(
        (lg.loss - want_loss).abs() < 1e-4 + 1e-5 * want_loss.abs(),
        "{what}: loss {} vs {want_loss}",
        lg.loss
    );
    let mut sq = 0f64;
    for ((name, _), g) in named.iter().zip(&lg.grads) {
        let g = g
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: {name} got no gradient"));
        let gv = super::f32s(g);
        sq += gv.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>();
        if let Some(want) = r.get(&format!("grad.{name}")) {
            for (i, (a, b)) in gv.iter().zip(super::f32s(want)).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 + 1e-3 * b.abs(),
                    "{what}: grad.{name}[{i}]: {a} vs {b}"
                );
            }
        }
    }
    let norm = sq.sqrt();
    assert!(
        ((norm - want_norm) / want_norm).abs() < 1e-4,
        "{what}: grad norm {norm} vs {want_norm}"
    );
}
