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

pub(crate) fn scenario_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/story_len_ratio_centralized.yaml")
}

pub(crate) fn strs(v: &serde_json::Value) -> Vec<String> {
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
    check_magrpo_step(&meta, &t, &policy, &sample, recompute);
}

/// A policy's variables by name, the same as a list, and a copy of their values (to check a
/// step's weights against).
pub(crate) struct Before {
    pub named: Vec<(String, Var)>,
    pub vars: Vec<Var>,
    pub values: HashMap<String, Tensor>,
}

pub(crate) fn vars_before(policy: &Policy) -> Before {
    let named = policy.vars();
    let vars = named.iter().map(|(_, v)| v.clone()).collect();
    let values = named
        .iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().copy().unwrap()))
        .collect();
    Before {
        named,
        vars,
        values,
    }
}

/// The MAGRPO loss of `policy` on `sample`, its gradients and the weights after one AdamW step
/// against a fixture's.
pub(crate) fn check_magrpo_step(
    meta: &serde_json::Value,
    t: &HashMap<String, Tensor>,
    policy: &Policy,
    sample: &AgentRollout,
    recompute: bool,
) {
    let b = vars_before(policy);
    let lg = loss_and_grads(policy, &b.vars, &[sample], 0, recompute, Share::ALL).unwrap();
    close("loss", lg.loss, meta["loss"].as_f64().unwrap());
    check_grads_and_step(meta, t, &b.named, &b.values, &lg.grads);
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
        (
            "trainer.algorithm=iac",
            "MAGRPO and its family, MADPO and MARLHF only",
        ),
        (
            "trainer.algorithm=marlhf_iter",
            "MAGRPO and its family, MADPO and MARLHF only",
        ),
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

/// Centralized MADPO against CoMLRL's own `MADPOTrainer(collaboration_mode="centralized")`
/// (`madpo/centralized_madpo_step_tiny.*`, from `scripts/fixtures/make_centralized_madpo.py`):
/// the same actor, prompt and answers; the `reward_gap` pairs, every sequence log-prob (every
/// token: CoMLRL's `joint_sequence_log_prob`, also under `compat_last_token`), the loss,
/// gradients and the weights after one AdamW step.
fn check_madpo_step(recompute: bool) {
    use comlrl::model::grad::recompute::PassPlan;
    use comlrl::model::ComputeDtype;
    use comlrl::train::algorithms::madpo::loss::{
        agent_grads, deltas, sequence_logprobs, LastToken,
    };
    use comlrl::train::algorithms::madpo::set::PreferenceSet;
    use comlrl::train::algorithms::madpo::Madpo;
    use comlrl::train::rollout::pairs::PairSelection;
    use comlrl::train::rollout::NodeSample;
    use rand::SeedableRng;

    let dir = fixtures().join("madpo");
    let meta = json(&dir.join("centralized_madpo_step_tiny.json"));
    let t = load_st(&dir.join("centralized_madpo_step_tiny.safetensors"));
    let k = meta["answers"].as_array().unwrap().len();
    let sets = [
        "trainer.algorithm=madpo".to_string(),
        "preference.collaboration_mode=centralized".to_string(),
        "trainer.collaboration_mode=decentralized".to_string(),
        "preference.compat_last_token=true".to_string(),
        format!("preference.num_candidates={k}"),
        format!("trainer.num_generations={k}"),
        "preference.pairs_per_sample=4".to_string(),
    ];
    let s = comlrl_scenario::load(&scenario_path(), &sets).unwrap();
    // `preference.collaboration_mode` is the trainer's, whatever the trainer's key said.
    assert_eq!(roles(&s), Some(2));
    let actor = actor_scenario(&s).unwrap();
    let madpo = Madpo::new(&actor);
    assert_eq!(madpo.last_token(), LastToken::Counted);
    let row = comlrl_scenario::Row {
        prompt: meta["item"]["prompt"].as_str().unwrap().into(),
        fields: Default::default(),
    };
    assert_eq!(
        actor.agents[0].template.render(&row),
        meta["prompt"].as_str().unwrap()
    );
    let policy = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let completions: Vec<Vec<u32>> = meta["answer_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    let rewards: Vec<f32> = meta["rewards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_f64().unwrap() as f32)
        .collect();
    let node = NodeSample {
        turn: 0,
        agents: vec![AgentRollout::sampled(
            ids(&meta["prompt_ids"]),
            completions.clone(),
            vec![],
        )],
        rewards,
        components: vec![],
    };
    let mut set = PreferenceSet::default();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    set.add(&node, PairSelection::RewardGap, Some(4), &mut rng)
        .unwrap();
    let batch = set.pairs.clone();
    let want_pairs = meta["pairs"].as_array().unwrap();
    assert_eq!(batch.len(), want_pairs.len());
    for (p, want) in batch.iter().zip(want_pairs) {
        let e = &set.entries[p.entry].agents[0];
        assert_eq!(
            e.candidates[p.winner],
            completions[want[0].as_u64().unwrap() as usize]
        );
        assert_eq!(
            e.candidates[p.loser],
            completions[want[1].as_u64().unwrap() as usize]
        );
    }
    let last = madpo.last_token();
    let lps = sequence_logprobs(&policy, &set, &batch, 0, last, 0).unwrap();
    for (b, (p, want)) in batch
        .iter()
        .zip(meta["sequence_logprobs"].as_array().unwrap())
        .enumerate()
    {
        close(
            &format!("pair {b} winner"),
            lps[&(p.entry, p.winner)] as f64,
            want["winner"].as_f64().unwrap(),
        );
        close(
            &format!("pair {b} loser"),
            lps[&(p.entry, p.loser)] as f64,
            want["loser"].as_f64().unwrap(),
        );
    }
    let rows: Vec<Vec<f32>> = deltas(&lps, &batch).into_iter().map(|d| vec![d]).collect();
    for (b, (row, want)) in rows
        .iter()
        .zip(meta["detached_deltas"].as_array().unwrap())
        .enumerate()
    {
        close(
            &format!("delta {b}"),
            row[0] as f64,
            want[0].as_f64().unwrap(),
        );
    }
    let Before {
        named,
        vars,
        values: before,
    } = vars_before(&policy);
    let beta = meta["config"]["dpo_beta"].as_f64().unwrap();
    let (lg, _) = agent_grads(
        &policy,
        &vars,
        &set,
        &batch,
        &rows,
        0,
        beta,
        last,
        0,
        recompute,
        Share::ALL,
        PassPlan::rerun_all(ComputeDtype::F32),
    )
    .unwrap();
    close("loss", lg.loss, meta["loss"].as_f64().unwrap());
    check_grads_and_step(&meta, &t, &named, &before, &lg.grads);
}

/// The gradients and the weights after one AdamW step against a fixture's.
pub(crate) fn check_grads_and_step(
    meta: &serde_json::Value,
    t: &HashMap<String, Tensor>,
    named: &[(String, Var)],
    before: &HashMap<String, Tensor>,
    grads: &[Option<Tensor>],
) {
    let grad_params = strs(&meta["grad_params"]);
    let norms = meta["grad_norms"].as_object().unwrap();
    let mut sq = 0.0;
    for ((name, _), g) in named.iter().zip(grads) {
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
        named.to_vec(),
        AdamWConfig {
            lr,
            ..AdamWConfig::default()
        },
    );
    opt.step_grads(grads, lr, None).unwrap();
    let deltas = meta["update_delta_norms"].as_object().unwrap();
    for (name, var) in named {
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
fn centralized_madpo_step_matches_comlrl_recomputed() {
    check_madpo_step(true);
}

#[test]
fn centralized_madpo_step_matches_comlrl_autograd() {
    check_madpo_step(false);
}

#[test]
fn centralized_madpo_runs_one_actor() {
    let tmp = tempfile::tempdir().unwrap();
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
        "trainer.algorithm=madpo".to_string(),
        "trainer.num_train_epochs=2".to_string(),
        "preference.num_candidates=4".to_string(),
        "trainer.num_generations=4".to_string(),
        "logging.steps=5".to_string(),
    ];
    let s = comlrl_scenario::load(&scenario_path(), &sets).unwrap();
    assert_eq!(
        s.preference.collaboration_mode,
        comlrl_scenario::CollaborationMode::Centralized
    );
    let summary = comlrl::train::Trainer::new(s)
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(summary.steps_done, 20);
    let rows = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(rows.lines().next().unwrap()).unwrap();
    // Every answer is handed to the reward as two outputs; equal rewards give no pair.
    assert_eq!(first["reward_mean"].as_f64(), Some(2.0), "{first}");
    assert!(out.join("models/agent_0").is_dir() && !out.join("models/agent_1").exists());
}

#[test]
fn a_centralized_run_resumes_as_it_would_have_run() {
    use crate::common::cli::metrics_without_timing;
    use crate::common::tiny_run::StopAt;
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("len.rhai");
    std::fs::write(
        &script,
        "fn reward(completions, ctx) { (completions[0].len() + completions[1].len()).to_float() }\n",
    )
    .unwrap();
    let run = |out: &std::path::Path, stop: Option<usize>, resume: bool| {
        let sets = [
            format!("output_dir={}", out.display()),
            format!("reward={{rhai: {}}}", script.display()),
            "reward_processors=[]".to_string(),
            "trainer.num_train_epochs=2".to_string(),
            "trainer.num_generations=4".to_string(),
            "logging.steps=2".to_string(),
            // The tiny model writes no tags, so every reward is 0 and every advantage too: the
            // entropy bonus makes the updates move the weights all the same.
            "trainer.entropy_coef=0.01".to_string(),
        ];
        let s = comlrl_scenario::load(&scenario_path(), &sets).unwrap();
        let mut t = comlrl::train::Trainer::new(s).unwrap();
        match stop {
            Some(n) => {
                let mut obs = StopAt(n, t.interrupt_flag());
                t.run(resume, &mut obs).unwrap()
            }
            None => t.run(resume, &mut ()).unwrap(),
        }
    };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    assert_eq!(run(&a, None, false).steps_done, 20);
    run(&b, Some(7), false);
    assert_eq!(run(&b, None, true).steps_done, 20);
    let rows = metrics_without_timing(&a);
    assert!(
        rows.iter()
            .any(|r| r["agent_0/grad_norm"].as_f64().is_some_and(|g| g > 0.0)),
        "the updates move the weights"
    );
    assert_eq!(rows, metrics_without_timing(&b));
    let file = "models/agent_0/model.safetensors";
    assert!(
        std::fs::read(a.join(file)).unwrap() == std::fs::read(b.join(file)).unwrap(),
        "resumed weights differ"
    );
}
