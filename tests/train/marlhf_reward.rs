//! MARLHF's joint reward model against CoMLRL 1.4.3's own `JointRewardModel`
//! (`marlhf/reward_model_tiny.*`, from `scripts/fixtures/make_marlhf_reward.py`): the tiny Qwen2
//! backbone in f32 with CoMLRL's head, two preference pairs of two agents' joint responses. The
//! joint texts and their token ids, the scores, the Bradley–Terry loss, the gradients and the
//! weights after one step of the reward model's AdamW (the one a MARLHF run builds) must agree
//! (1e-5 relative).
use crate::common;
use candle_core::{Tensor, Var};
use comlrl::model::grad::recompute::PassPlan;
use comlrl::model::{ComputeDtype, LoadOptions, ModelSource, Policy, ValueHead};
use comlrl::train::algorithms::marlhf::reward_model::{joint_text, JointRewardModel};
use comlrl::train::algorithms::marlhf::set::reward_adamw;
use common::*;
use std::collections::HashMap;

fn strs(v: &serde_json::Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

#[test]
fn bradley_terry_step_matches_comlrl() {
    let dir = fixtures().join("marlhf");
    let meta = json(&dir.join("reward_model_tiny.json"));
    let t = load_st(&dir.join("reward_model_tiny.safetensors"));
    let policy = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let head = ValueHead::from_tensors(
        HashMap::from([
            (
                "value_projection.weight".to_string(),
                t["head.weight"].clone(),
            ),
            ("value_projection.bias".to_string(), t["head.bias"].clone()),
        ]),
        policy.config.hidden_size,
    )
    .unwrap();
    let rm = JointRewardModel { policy, head };
    // The joint texts, laid out and tokenized as CoMLRL does.
    let prompts = strs(&meta["prompts"]);
    let mut rows: [Vec<Vec<u32>>; 2] = [vec![], vec![]];
    for (p, pair) in meta["pairs"].as_array().unwrap().iter().enumerate() {
        for (side, key) in ["winner", "loser"].iter().enumerate() {
            let text = joint_text(&prompts, &strs(&pair[*key]));
            assert_eq!(text, meta[format!("{key}_texts")][p].as_str().unwrap());
            let ids = rm.encode(&text).unwrap();
            assert_eq!(
                ids,
                common::ids(&meta[format!("{key}_ids")][p]),
                "{key} {p}"
            );
            rows[side].push(ids);
        }
    }
    let named = rm.vars();
    let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let before: HashMap<String, Tensor> = named
        .iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().copy().unwrap()))
        .collect();
    let w: Vec<&[u32]> = rows[0].iter().map(Vec::as_slice).collect();
    let l: Vec<&[u32]> = rows[1].iter().map(Vec::as_slice).collect();
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    let bt = rm.bt_loss_and_grads(&w, &l, &vars, plan).unwrap();
    let as64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let nums = |k: &str| -> Vec<f64> {
        meta[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    close_all(
        "winner scores",
        &as64(&bt.winner_scores),
        &nums("winner_scores"),
    );
    close_all(
        "loser scores",
        &as64(&bt.loser_scores),
        &nums("loser_scores"),
    );
    close("loss", bt.loss, meta["loss"].as_f64().unwrap());
    // The online phase scores joint actions with the inference forward (no graph): the same
    // scores as the training pass.
    {
        use comlrl::model::grad::value::{value_columns, values, ValueAt};
        use comlrl::model::{Mode, ScoreLayout};
        let m = &rm.policy;
        let empty: Vec<&[u32]> = vec![&[]; w.len()];
        let layout = ScoreLayout::new(&m.model, &w, &empty, m.pad_id).unwrap();
        let cols = value_columns(&layout, ValueAt::PromptEnd).unwrap();
        let v = values(&m.model, &rm.head, &layout, &cols, Mode::Infer).unwrap();
        close_all("inference scores", &as_f64s(&v), &nums("winner_scores"));
    }
    assert_eq!(bt.accuracy, 1.0, "both winners score higher here");
    let norms = meta["grad_norms"].as_object().unwrap();
    let mut sq = 0.0;
    for ((name, _), g) in named.iter().zip(&bt.grads) {
        let g = as_f64s(
            g.as_ref()
                .unwrap_or_else(|| panic!("no gradient for {name}")),
        );
        let n2: f64 = g.iter().map(|x| x * x).sum();
        sq += n2;
        if let Some(want) = t.get(&format!("grad.{name}")) {
            close_all(&format!("grad {name}"), &g, &as_f64s(want));
        }
        if !name.ends_with("k_proj.bias") {
            let want = norms[name].as_f64().unwrap();
            assert!(
                (n2.sqrt() - want).abs() <= 1e-4 * want + 1e-7,
                "‖grad {name}‖ {} vs {want}",
                n2.sqrt()
            );
        }
    }
    assert_eq!(named.len(), norms.len(), "every tensor compared");
    close(
        "grad norm",
        sq.sqrt(),
        meta["grad_global_norm"].as_f64().unwrap(),
    );
    let lr = meta["lr"].as_f64().unwrap();
    // The optimizer a MARLHF run builds for its reward model.
    let mut opt = reward_adamw(named.clone(), lr);
    opt.step_grads(&bt.grads, lr, None).unwrap();
    let deltas = meta["update_delta_norms"].as_object().unwrap();
    for (name, var) in &named {
        // The head's bias and the k_proj biases have gradient 0 up to rounding (s_w − s_l does
        // not depend on the bias; q·b_k shifts every key's score alike): AdamW's normalised
        // first step follows the rounding noise's sign and size, which no two implementations
        // share. Their gradients are compared above (absolutely, near 0).
        if name.ends_with("k_proj.bias") || name == "reward_head.bias" {
            continue;
        }
        if let Some(want) = t.get(&format!("after.{name}")) {
            close_all(
                &format!("{name} after"),
                &as_f64s(var.as_tensor()),
                &as_f64s(want),
            );
        }
        let d: f64 = as_f64s(var.as_tensor())
            .iter()
            .zip(as_f64s(&before[name]))
            .map(|(x, y)| (x - y) * (x - y))
            .sum::<f64>()
            .sqrt();
        let want = deltas[name].as_f64().unwrap();
        assert!(
            (d - want).abs() <= 1e-3 * want + 1e-9,
            "{name}: ‖Δ‖ {d} vs {want}"
        );
    }
}
