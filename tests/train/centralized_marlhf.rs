//! Centralized MARLHF (`trainer.algorithm: marlhf`, `collaboration_mode: centralized`) against
//! CoMLRL 1.4.3's own `MARLHFTrainer(collaboration_mode="centralized")`
//! (`marlhf/centralized_marlhf_tiny.*`, from `scripts/fixtures/make_centralized_marlhf.py`): one
//! actor for two roles on tiny Qwen2 in f32. The pairs the task reward selects and the joint
//! texts the reward model reads (CoMLRL's trainer has one agent, so its layout for one agent: the
//! tagged prompt and the whole answer), the reward model's scores of them and of every answer
//! (the online rewards), then the online MAGRPO loss, gradients and the weights after one step
//! against those rewards, within 1e-5 relative. Then a run end to end, its resume, and every
//! `rl_algorithm`.
use crate::centralized_step::{check_magrpo_step, scenario_path, strs};
use crate::common;
use comlrl::model::{LoadOptions, ModelSource, Policy, ValueHead};
use comlrl::train::algorithms::magrpo::Magrpo;
use comlrl::train::algorithms::marlhf::reward_model::{joint_text, JointRewardModel};
use comlrl::train::algorithms::marlhf::set::{score, TextSet, TrainConfig};
use comlrl::train::algorithms::Algorithm;
use comlrl::train::rollout::joint::joint_actions;
use comlrl::train::rollout::pairs::PairSelection;
use comlrl::train::rollout::{AgentRollout, Node, NodeSample};
use comlrl::train::setup::centralized::{actor_scenario, roles};
use common::*;
use rand::SeedableRng;
use std::collections::HashMap;

fn nums(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn check_step(recompute: bool) {
    let dir = fixtures().join("marlhf");
    let meta = json(&dir.join("centralized_marlhf_tiny.json"));
    let t = load_st(&dir.join("centralized_marlhf_tiny.safetensors"));
    let k = meta["answers"].as_array().unwrap().len();
    let sets = [
        "trainer.algorithm=marlhf".to_string(),
        format!("preference.num_candidates={k}"),
        format!("trainer.num_generations={k}"),
        "preference.pairs_per_sample=4".to_string(),
    ];
    let s = comlrl_scenario::load(&scenario_path(), &sets).unwrap();
    assert_eq!(roles(&s), Some(2));
    let actor = actor_scenario(&s).unwrap();
    let row = comlrl_scenario::Row {
        prompt: meta["item"]["prompt"].as_str().unwrap().into(),
        fields: Default::default(),
    };
    // What the loop hands MARLHF as the prompts: the actor's one rendered prompt.
    let prompt = actor.agents[0].template.render(&row);
    assert_eq!(prompt, meta["prompt"].as_str().unwrap());
    let prompts = vec![prompt.clone()];
    let answers = strs(&meta["answers"]);
    let completions: Vec<Vec<u32>> = meta["answer_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();

    // The pairs of the task rewards (recorded: CoMLRL's split and reward, checked for the same
    // answers by centralized_step.rs), as the collecting epoch's TextSet keeps them.
    let task: Vec<f32> = nums(&meta["task_rewards"])
        .iter()
        .map(|&r| r as f32)
        .collect();
    let node = NodeSample {
        turn: 0,
        agents: vec![AgentRollout::sampled(
            ids(&meta["prompt_ids"]),
            completions.clone(),
            answers.clone(),
        )],
        rewards: task.clone(),
        components: vec![],
    };
    let cfg = TrainConfig {
        selection: PairSelection::RewardGap,
        limit: Some(4),
        lr: 1e-5,
        epochs: 1,
        batch: 1,
        max_length: None,
        freeze_backbone: false,
    };
    let mut set = TextSet::default();
    set.add(
        &prompts,
        &node,
        &cfg,
        &mut rand_chacha::ChaCha8Rng::seed_from_u64(0),
    )
    .unwrap();
    let want_w = strs(&meta["winner_texts"]);
    let want_l = strs(&meta["loser_texts"]);
    assert_eq!(set.pairs.len(), want_w.len());
    for (i, (p, want)) in set
        .pairs
        .iter()
        .zip(meta["pairs"].as_array().unwrap())
        .enumerate()
    {
        assert_eq!(p.winner, want_w[i], "pair {i}'s winner text");
        assert_eq!(p.loser, want_l[i], "pair {i}'s loser text");
        let (w, l) = (
            want[0].as_u64().unwrap() as usize,
            want[1].as_u64().unwrap() as usize,
        );
        assert_eq!((p.winner_reward, p.loser_reward), (task[w], task[l]));
    }

    // The reward model with CoMLRL's head: its scores of the pairs' texts and of every answer.
    let policy = || {
        Policy::load(
            &ModelSource::Local(fixtures().join("tiny-qwen2")),
            &LoadOptions::default(),
        )
        .unwrap()
    };
    let backbone = policy();
    let head = ValueHead::from_tensors(
        HashMap::from([
            (
                "value_projection.weight".to_string(),
                t["head.weight"].clone(),
            ),
            ("value_projection.bias".to_string(), t["head.bias"].clone()),
        ]),
        backbone.config.hidden_size,
    )
    .unwrap();
    let rm = JointRewardModel {
        policy: backbone,
        head,
    };
    let as64 = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<_>>();
    let winners: Vec<String> = set.pairs.iter().map(|p| p.winner.clone()).collect();
    let losers: Vec<String> = set.pairs.iter().map(|p| p.loser.clone()).collect();
    close_all(
        "winner scores",
        &as64(score(&rm, &winners, None).unwrap()),
        &nums(&meta["winner_scores"]),
    );
    close_all(
        "loser scores",
        &as64(score(&rm, &losers, None).unwrap()),
        &nums(&meta["loser_scores"]),
    );
    let texts: Vec<String> = answers
        .iter()
        .map(|a| joint_text(&[prompt.as_str()], &[a.as_str()]))
        .collect();
    assert_eq!(texts, strs(&meta["answer_texts"]));
    let rewards = score(&rm, &texts, None).unwrap();
    close_all(
        "online rewards",
        &as64(rewards.clone()),
        &nums(&meta["rewards"]),
    );

    // The online step: centralized MAGRPO's targets and loss against the reward model's scores.
    let root = Node {
        turn: 0,
        agents: vec![AgentRollout::sampled(
            ids(&meta["prompt_ids"]),
            completions,
            answers,
        )],
        joint: joint_actions(1, k, false),
        rewards: rewards.clone(),
        components: rewards.iter().map(|&r| vec![r]).collect(),
        children: vec![],
    };
    let mut nodes = Magrpo::new(&actor).targets(root).unwrap();
    let sample = nodes.remove(0).agents.remove(0);
    check_magrpo_step(&meta, &t, &policy(), &sample, recompute);
}

#[test]
fn centralized_marlhf_matches_comlrl_recomputed() {
    check_step(true);
}

#[test]
fn centralized_marlhf_matches_comlrl_autograd() {
    check_step(false);
}

fn marlhf_sets(out: &std::path::Path, script: &std::path::Path, rl: &str) -> Vec<String> {
    vec![
        format!("output_dir={}", out.display()),
        format!("reward={{rhai: {}}}", script.display()),
        "reward_processors=[]".to_string(),
        "trainer.algorithm=marlhf".to_string(),
        format!("preference.rl_algorithm={rl}"),
        "trainer.num_train_epochs=1".to_string(),
        "trainer.num_generations=4".to_string(),
        "preference.num_candidates=4".to_string(),
        "preference.reward_train_batch_size=4".to_string(),
        "preference.reward_learning_rate=1e-3".to_string(),
        "logging.steps=10".to_string(),
        "checkpoint_every=4".to_string(),
    ]
}

/// The project's reward that ranks a prompt's candidates by their place in the batch: the tiny
/// model never writes the tags, so every split output is `""` and the task's reward would tie
/// them all.
fn by_place() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/rewards/by_position.rhai")
}

#[test]
fn centralized_marlhf_runs_one_actor_against_its_reward_model() {
    let tmp = tempfile::tempdir().unwrap();
    let script = by_place();
    let out = tmp.path().join("run");
    let s = comlrl_scenario::load(&scenario_path(), &marlhf_sets(&out, &script, "magrpo")).unwrap();
    let summary = comlrl::train::Trainer::new(s)
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(
        summary.steps_done, 20,
        "a collecting epoch and an online one"
    );
    let rows = crate::common::cli::metrics_without_timing(&out);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    // 4 candidates ranked 0..3: reward_gap keeps the default 16 pairs per prompt, i.e. all 6.
    assert_eq!(f(&rows[0], "agent_0/preference_pairs"), 60.0, "{}", rows[0]);
    assert!(f(&rows[0], "agent_0/reward_model_loss").is_finite());
    assert!(
        rows[0].get("agent_1/preference_pairs").is_none(),
        "one actor"
    );
    // The online epoch's rewards are the reward model's scores (not 1.5, the places' mean).
    assert!(
        (f(&rows[1], "reward_mean") - 1.5).abs() > 1e-3,
        "{}",
        rows[1]
    );
    assert!(f(&rows[1], "agent_0/loss").is_finite(), "{}", rows[1]);
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            out.join("checkpoints")
                .join(latest.trim())
                .join("marlhf_state.json"),
        )
        .unwrap(),
    )
    .unwrap();
    // The reward model reads CoMLRL's one-agent layout: the tagged prompt, the whole answer.
    let text = state["set"]["pairs"][0]["winner"].as_str().unwrap();
    assert!(
        text.starts_with(
            "Joint multi-agent response\n\nAgent 1 prompt:\nYou are a centralized coordinator"
        ) && !text.contains("Agent 2 prompt"),
        "{text}"
    );
    assert!(out
        .join("models/reward_model/reward_head.safetensors")
        .is_file());
    assert!(out.join("models/agent_0").is_dir() && !out.join("models/agent_1").exists());
}

#[test]
fn an_interrupted_centralized_marlhf_run_resumes_to_the_same_end() {
    use crate::common::cli::metrics_without_timing;
    use crate::common::tiny_run::StopAt;
    let tmp = tempfile::tempdir().unwrap();
    let script = by_place();
    let run = |out: &std::path::Path, stop: Option<usize>, resume: bool| {
        let s =
            comlrl_scenario::load(&scenario_path(), &marlhf_sets(out, &script, "magrpo")).unwrap();
        let mut t = comlrl::train::Trainer::new(s).unwrap();
        match stop {
            Some(n) => {
                let mut obs = StopAt(n, t.interrupt_flag());
                t.run(resume, &mut obs).unwrap()
            }
            None => t.run(resume, &mut ()).unwrap(),
        }
    };
    let a = tmp.path().join("a");
    assert_eq!(run(&a, None, false).steps_done, 20);
    // Step 13: the reward model trained, the online epoch under way.
    let b = tmp.path().join("b");
    run(&b, Some(13), false);
    assert_eq!(run(&b, None, true).steps_done, 20);
    assert_eq!(metrics_without_timing(&a), metrics_without_timing(&b));
    for file in [
        "models/agent_0/model.safetensors",
        "models/reward_model/reward_head.safetensors",
    ] {
        assert!(
            std::fs::read(a.join(file)).unwrap() == std::fs::read(b.join(file)).unwrap(),
            "{file} differs after the resume"
        );
    }
}

#[test]
fn centralized_marlhf_runs_every_rl_algorithm() {
    let tmp = tempfile::tempdir().unwrap();
    let script = by_place();
    for rl in ["mareinforce", "marloo", "maremax", "iac", "maac"] {
        let out = tmp.path().join(rl);
        let mut sets = marlhf_sets(&out, &script, rl);
        // Two prompts: each value runs its collecting and online epochs.
        sets.push("dataset.prompts=[\"Describe a city in the clouds:\", \"Tell a joke about dinosaurs:\"]".into());
        let s =
            comlrl_scenario::load(&scenario_path(), &sets).unwrap_or_else(|e| panic!("{rl}: {e}"));
        let summary = comlrl::train::Trainer::new(s)
            .unwrap_or_else(|e| panic!("{rl}: {e}"))
            .run(false, &mut ())
            .unwrap_or_else(|e| panic!("{rl}: {e}"));
        assert_eq!(summary.steps_done, 4, "{rl}");
        let rows = crate::common::cli::metrics_without_timing(&out);
        let last = rows.last().unwrap();
        assert!(
            last["agent_0/loss"].as_f64().is_some_and(f64::is_finite),
            "{rl}: {last}"
        );
        assert!(!out.join("models/agent_1").exists(), "{rl}: one actor");
    }
}
