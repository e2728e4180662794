//! One round of `marlhf_iter` before its online phase against CoMLRL 1.4.3's own
//! `MARLHFIterTrainer` (`marlhf/marlhf_iter_round_tiny.*`, from
//! `scripts/fixtures/make_marlhf_iter.py`): for recorded candidates of the current policy (4 per
//! agent) and a comparator (3), the pairs a round selects as joint texts with their rewards
//! (task-scored, and scored by a joint reward model on the tiny Qwen2 backbone in f32, whose
//! scores must agree first), under `comparator_reward` and `reward_gap`, 2 pairs or all; then
//! the reward model's Bradley–Terry step on the round's pairs: its loss, gradients and the
//! weights after the step (1e-5 relative).
use crate::common;
use candle_core::{Tensor, Var};
use comlrl::model::grad::recompute::PassPlan;
use comlrl::model::{ComputeDtype, LoadOptions, ModelSource, Policy, ValueHead};
use comlrl::train::algorithms::marlhf::reward_model::{joint_text, JointRewardModel};
use comlrl::train::algorithms::marlhf::set::{self, reward_adamw, TextSet, TrainConfig};
use comlrl::train::rollout::pairs::PairSelection;
use comlrl::train::rollout::{AgentRollout, NodeSample};
use common::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use std::collections::HashMap;

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn nums(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// The tiny backbone with the fixture's head.
fn reward_model(t: &HashMap<String, Tensor>) -> JointRewardModel {
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
    JointRewardModel { policy, head }
}

fn config(selection: PairSelection, limit: Option<usize>, batch: usize) -> TrainConfig {
    TrainConfig {
        selection,
        limit,
        lr: 0.0,
        epochs: 1,
        batch,
        max_length: None,
        freeze_backbone: false,
    }
}

/// The round's node of one prompt: the current policy's candidates, then the comparator's.
fn node(meta: &Value, rewards: Vec<f32>) -> NodeSample {
    let agents = (0..2)
        .map(|a| {
            let mut texts = strs(&meta["current"][a]);
            texts.extend(strs(&meta["comparator"][a]));
            AgentRollout::sampled(vec![], vec![vec![]; texts.len()], texts)
        })
        .collect();
    NodeSample {
        turn: 0,
        agents,
        rewards,
        components: vec![],
    }
}

#[test]
fn a_rounds_pairs_and_reward_model_step_match_comlrl() {
    let dir = fixtures().join("marlhf");
    let meta = json(&dir.join("marlhf_iter_round_tiny.json"));
    let t = load_st(&dir.join("marlhf_iter_round_tiny.safetensors"));
    let rm = reward_model(&t);
    let prompts = strs(&meta["prompts"]);
    let refs: Vec<&str> = prompts.iter().map(String::as_str).collect();
    let current = meta["current"][0].as_array().unwrap().len();
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    // Every candidate's joint text, as the reward model scores them.
    let all: Vec<String> = {
        let n = node(&meta, vec![]);
        (0..n.agents[0].texts.len())
            .map(|c| {
                let comps: Vec<&str> = n.agents.iter().map(|a| a.texts[c].as_str()).collect();
                joint_text(&refs, &comps)
            })
            .collect()
    };
    let scores = set::score(&rm, &all, None).unwrap();
    for case in meta["cases"].as_array().unwrap() {
        let what = format!(
            "{} {} {}",
            case["scoring"], case["pair_selection"], case["pairs_per_sample"]
        );
        let mut want = nums(&case["current_rewards"]);
        want.extend(nums(&case["comparator_rewards"]));
        let rewards: Vec<f32> = match case["scoring"].as_str().unwrap() {
            "task" => want.iter().map(|&r| r as f32).collect(),
            _ => {
                let got: Vec<f64> = scores.iter().map(|&s| s as f64).collect();
                close_all(&format!("{what}: scores"), &got, &want);
                scores.clone()
            }
        };
        let selection = match case["pair_selection"].as_str().unwrap() {
            "comparator_reward" => PairSelection::ComparatorReward,
            _ => PairSelection::RewardGap,
        };
        let limit = case["pairs_per_sample"].as_u64().map(|n| n as usize);
        let mut set = TextSet::default();
        let cfg = config(selection, limit, 1);
        let added = set
            .add_compared(&prompts, &node(&meta, rewards), current, &cfg, &mut rng)
            .unwrap();
        let pairs = case["pairs"].as_array().unwrap();
        assert_eq!(added, pairs.len(), "{what}");
        for (i, (got, want)) in set.pairs.iter().zip(pairs).enumerate() {
            assert_eq!(got.winner, want["winner"].as_str().unwrap(), "{what}: {i}");
            assert_eq!(got.loser, want["loser"].as_str().unwrap(), "{what}: {i}");
            close(
                &format!("{what}: {i} winner reward"),
                got.winner_reward as f64,
                want["winner_reward"].as_f64().unwrap(),
            );
            close(
                &format!("{what}: {i} loser reward"),
                got.loser_reward as f64,
                want["loser_reward"].as_f64().unwrap(),
            );
        }
    }

    // The reward model's step on the task-scored `comparator_reward` pairs, all in one batch.
    let train = &meta["train"];
    let case = meta["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["scoring"] == "task"
                && c["pair_selection"] == "comparator_reward"
                && c["pairs_per_sample"].is_null()
        })
        .unwrap();
    let mut set = TextSet::default();
    let mut want = nums(&case["current_rewards"]);
    want.extend(nums(&case["comparator_rewards"]));
    let rewards = want.iter().map(|&r| r as f32).collect();
    let n = case["pairs"].as_array().unwrap().len();
    let mut cfg = config(PairSelection::ComparatorReward, None, n);
    set.add_compared(&prompts, &node(&meta, rewards), current, &cfg, &mut rng)
        .unwrap();
    // CoMLRL's DataLoader shuffled the batch: the same pairs.
    let mut texts: Vec<&str> = set.pairs.iter().map(|p| p.winner.as_str()).collect();
    let mut want_texts: Vec<String> = strs(&train["winner_texts"]);
    texts.sort();
    want_texts.sort();
    assert_eq!(texts, want_texts);
    let named = rm.vars();
    let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let rows = |k: &str| -> Vec<Vec<u32>> {
        strs(&train[k])
            .iter()
            .map(|x| set::tokens(&rm, x, None).unwrap())
            .collect()
    };
    let (w, l) = (rows("winner_texts"), rows("loser_texts"));
    let w: Vec<&[u32]> = w.iter().map(Vec::as_slice).collect();
    let l: Vec<&[u32]> = l.iter().map(Vec::as_slice).collect();
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    let bt = rm.bt_loss_and_grads(&w, &l, &vars, plan).unwrap();
    let as64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    close_all(
        "winner scores",
        &as64(&bt.winner_scores),
        &nums(&train["winner_scores"]),
    );
    close_all(
        "loser scores",
        &as64(&bt.loser_scores),
        &nums(&train["loser_scores"]),
    );
    close("loss", bt.loss, train["loss"].as_f64().unwrap());
    for ((name, _), g) in named.iter().zip(&bt.grads) {
        if let Some(want) = t.get(&format!("grad.{name}")) {
            let g = as_f64s(g.as_ref().unwrap());
            close_all(&format!("grad {name}"), &g, &as_f64s(want));
        }
    }
    // What a round runs: one shuffled pass, one step of the reward model's AdamW.
    cfg.lr = train["lr"].as_f64().unwrap();
    let mut opt = reward_adamw(named.clone(), cfg.lr);
    let report = set::train(&rm, &mut opt, &set.pairs, &cfg, &mut rng, plan).unwrap();
    assert_eq!(report.steps, 1);
    close("trained loss", report.loss, train["loss"].as_f64().unwrap());
    for (name, var) in &named {
        // The head's bias has gradient 0 up to rounding (s_w − s_l does not depend on it):
        // AdamW's normalised first step follows the noise, which no two implementations share.
        if name == "reward_head.bias" {
            continue;
        }
        if let Some(want) = t.get(&format!("after.{name}")) {
            close_all(
                &format!("{name} after"),
                &as_f64s(var.as_tensor()),
                &as_f64s(want),
            );
        }
    }
}
