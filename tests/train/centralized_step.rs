//! Centralized MAGRPO (`trainer.collaboration_mode: centralized`) against CoMLRL 1.4.3's own
//! `CentralizedMAGRPOTrainer` (`magrpo/centralized_step_tiny.*`, from
//! `scripts/fixtures/make_centralized_magrpo.py`): one actor for two roles on tiny Qwen2 in f32.
//! The actor's prompt (the joint template of the shipped scenario's two templates) and its
//! tokens; each recorded joint answer split into the roles' outputs and scored by the
//! scenario's reward stack; MAGRPO's targets of the actor's answers; the loss, gradients and the
//! weights after one AdamW step, within 1e-5 relative. Then the scenario runs end to end as a
//! single-agent run whose reward reads the split, and the refusals.
use crate::common;
use candle_core::{Tensor, Var};
use comlrl::model::{LoadOptions, ModelSource, Policy};
use comlrl::train::algorithms::magrpo::loss::loss_and_grads;
use comlrl::train::algorithms::magrpo::Magrpo;
use comlrl::train::algorithms::Algorithm;
use comlrl::train::optim::{AdamW, AdamWConfig};
use comlrl::train::rollout::centralized::split;
use comlrl::train::rollout::joint::joint_actions;
use comlrl::train::rollout::{AgentRollout, Node};
use comlrl::train::setup::centralized::{actor_scenario, roles};
use comlrl::train::setup::rewards::reward_stack;
use comlrl::train::update::Share;
use comlrl_reward::JointSample;
use common::*;
use std::collections::HashMap;
use std::path::PathBuf;

fn scenario_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/story_len_ratio_centralized.yaml")
}

fn strs(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn check_step(recompute: bool) {
    let dir = fixtures().join("magrpo");
    let meta = json(&dir.join("centralized_step_tiny.json"));
    let t = load_st(&dir.join("centralized_step_tiny.safetensors"));
    let k = meta["answers"].as_array().unwrap().len();
    let s =
        comlrl_scenario::load(&scenario_path(), &[format!("trainer.num_generations={k}")]).unwrap();
    assert_eq!(roles(&s), Some(2));
    let actor = actor_scenario(&s).unwrap();
    assert_eq!(actor.agents.len(), 1);
    let row = comlrl_scenario::Row {
        prompt: meta["item"]["prompt"].as_str().unwrap().into(),
        fields: Default::default(),
    };
    let role_prompts: Vec<String> = s.agents.iter().map(|a| a.template.render(&row)).collect();
    assert_eq!(role_prompts, strs(&meta["role_prompts"]));
    let prompt = actor.agents[0].template.render(&row);
    assert_eq!(prompt, meta["prompt"].as_str().unwrap());
    let policy = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let prompt_ids = policy.tokenizer.encode(&prompt).unwrap();
    assert_eq!(prompt_ids, ids(&meta["prompt_ids"]));

    // The reward: each answer split into the roles' outputs, scored by the scenario's stack.
    let answers = strs(&meta["answers"]);
    let stack = reward_stack(&s).unwrap();
    let batch: Vec<JointSample> = answers
        .iter()
        .map(|a| JointSample {
            prompt: row.prompt.clone(),
            completions: split(a, 2),
            fields: Default::default(),
        })
        .collect();
    for (b, want) in batch.iter().zip(meta["splits"].as_array().unwrap()) {
        assert_eq!(b.completions, strs(want));
    }
    let scored = stack.score(&batch).unwrap();
    let want_rewards: Vec<f64> = meta["rewards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_f64().unwrap())
        .collect();
    assert!(
        want_rewards.contains(&0.0),
        "an answer without tags scores 0"
    );
    for (i, (got, want)) in scored.iter().zip(&want_rewards).enumerate() {
        // f32 rewards: relative 1e-5 of the reward scale (100).
        assert!(
            (got.reward as f64 - want).abs() <= 1e-5 * 100.0,
            "answer {i}: reward {} vs {want}",
            got.reward
        );
    }

    // MAGRPO's targets of the actor's K answers, then its loss over them.
    let completions: Vec<Vec<u32>> = meta["answer_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    let rewards: Vec<f32> = want_rewards.iter().map(|&r| r as f32).collect();
    let root = Node {
        turn: 0,
        agents: vec![AgentRollout::sampled(
            prompt_ids.clone(),
            completions,
            answers.clone(),
        )],
        joint: joint_actions(1, k, false),
        rewards: rewards.clone(),
        components: rewards.iter().map(|&r| vec![r / 100.0]).collect(),
        children: vec![],
    };
    let mut nodes = Magrpo::new(&actor).targets(root).unwrap();
    assert_eq!(nodes.len(), 1);
    let sample = nodes.remove(0).agents.remove(0);
    let named = policy.vars();
    let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let before: HashMap<String, Tensor> = named
        .iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().copy().unwrap()))
        .collect();
    let lg = loss_and_grads(&policy, &vars, &[&sample], 0, recompute, Share::ALL).unwrap();
    close("loss", lg.loss, meta["loss"].as_f64().unwrap());
    let grad_params = strs(&meta["grad_params"]);
    let norms = meta["grad_norms"].as_object().unwrap();
    let mut sq = 0.0;
    for ((name, _), g) in named.iter().zip(&lg.grads) {
        let g = as_f64s(
            g.as_ref()
                .unwrap_or_else(|| panic!("no gradient for {name}")),
        );
        let n2: f64 = g.iter().map(|x| x * x).sum();
        sq += n2;
        if grad_params.contains(name) {
            close_all(
                &format!("grad {name}"),
                &g,
                &as_f64s(&t[&format!("grad.{name}")]),
            );
        }
        // k_proj's bias gets a gradient of rounding noise only (softmax is shift-invariant).
        if !name.ends_with("k_proj.bias") {
            let want = norms[name].as_f64().unwrap();
            assert!(
                (n2.sqrt() - want).abs() <= 1e-4 * want + 1e-7,
                "‖grad {name}‖ {} vs {want}",
                n2.sqrt()
            );
        }
    }
    close(
        "grad norm",
        sq.sqrt(),
        meta["grad_global_norm"].as_f64().unwrap(),
    );
    let lr = meta["config"]["agent_learning_rate"].as_f64().unwrap();
    let mut opt = AdamW::new(
        named.clone(),
        AdamWConfig {
            lr,
            ..AdamWConfig::default()
        },
    );
    opt.step_grads(&lg.grads, lr, None).unwrap();
    let deltas = meta["update_delta_norms"].as_object().unwrap();
    for (name, var) in &named {
        if let Some(w) = t.get(&format!("after.{name}")) {
            close_all(
                &format!("{name} after"),
                &as_f64s(var.as_tensor()),
                &as_f64s(w),
            );
        }
        if name.ends_with("k_proj.bias") {
            continue;
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

#[test]
fn centralized_step_matches_comlrl_recomputed() {
    check_step(true);
}

#[test]
fn centralized_step_matches_comlrl_autograd() {
    check_step(false);
}

#[test]
fn the_scenario_trains_one_actor_whose_reward_reads_every_role() {
    let tmp = tempfile::tempdir().unwrap();
    // A reward of the number of outputs it is handed: 2 roles, whatever the actor writes.
    let script = tmp.path().join("count.rhai");
    std::fs::write(
        &script,
        "fn reward(completions, ctx) { completions.len().to_float() }\n",
    )
    .unwrap();
    let out = tmp.path().join("run");
    let sets = [
        format!("output_dir={}", out.display()),
        format!("reward={{rhai: {}}}", script.display()),
        "reward_processors=[]".to_string(),
        "trainer.num_train_epochs=1".to_string(),
        "logging.steps=5".to_string(),
    ];
    let s = comlrl_scenario::load(&scenario_path(), &sets).unwrap();
    let summary = comlrl::train::Trainer::new(s)
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(summary.steps_done, 10);
    let rows = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(rows.lines().last().unwrap()).unwrap();
    assert_eq!(last["reward_mean"].as_f64(), Some(2.0), "{last}");
    assert!(last.get("agent_0/loss").is_some() && last.get("agent_1/loss").is_none());
    assert!(out.join("models/agent_0").is_dir() && !out.join("models/agent_1").exists());
}

#[test]
fn centralized_is_refused_where_comlrl_has_none() {
    for (set, needle) in [
        ("trainer.algorithm=iac", "MAGRPO and its family only"),
        ("trainer.num_turns=2", "single-turn"),
        (
            "agents=[{model: ../models/tiny-story}]",
            "two or more agents",
        ),
    ] {
        let err = comlrl_scenario::load(&scenario_path(), &[set.to_string()])
            .err()
            .unwrap_or_else(|| panic!("{set}: must be refused"))
            .to_string();
        assert!(
            err.contains("collaboration_mode") && err.contains(needle),
            "{set}: {err}"
        );
    }
}

#[test]
fn another_agents_unused_settings_are_warned_about() {
    let quiet = comlrl_scenario::load(&scenario_path(), &[]).unwrap();
    assert!(quiet.warnings.is_empty(), "{:?}", quiet.warnings);
    let set =
        "agents=[{model: ../models/tiny-story}, {model: ../models/tiny-story, temperature: 0.3}]";
    let s = comlrl_scenario::load(&scenario_path(), &[set.to_string()]).unwrap();
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("agent 1: only its `template` is read")),
        "{:?}",
        s.warnings
    );
}
