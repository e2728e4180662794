//! `trainer.algorithm: marlhf_iter` end to end on the small tiny scenario (built-in tiny model,
//! 10 prompts): two rounds, each a collecting epoch (the current policy's 4 candidates against
//! the comparator's 4, a reward model trained afresh on the round's pairs) and one online epoch
//! against that model. The checkpoint holds every round's pairs, the rounds, the phase and the
//! model; a run interrupted anywhere resumes to the same metrics, state and weights as an
//! uninterrupted one; `scoring_reward: reward_model` ranks the second round by the first
//! round's model.
use crate::common;
use comlrl::train::Trainer;
use common::tiny_run::StopAt;
use common::tiny_run::{load_small, metrics_without_timing, small};
use serde_json::Value;
use std::path::Path;

/// Two rounds of a collecting and an online epoch over 10 prompts: 40 steps.
const ITER: [&str; 8] = [
    "trainer.algorithm=marlhf_iter",
    "trainer.num_train_epochs=1",
    "preference.num_iterations=2",
    "preference.num_candidates=4",
    "preference.reward_train_batch_size=4",
    "preference.reward_num_train_epochs=1",
    "preference.reward_learning_rate=1e-3",
    "checkpoint_every=4",
];

/// The MARLHFIter state of the latest checkpoint of `out`.
fn saved_state(out: &Path) -> Value {
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    let file = out
        .join("checkpoints")
        .join(latest.trim())
        .join("marlhf_iter_state.json");
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

fn run(out: &Path, extra: &[&str]) -> Vec<Value> {
    let mut sets = ITER.to_vec();
    sets.push("logging.steps=10");
    sets.extend_from_slice(extra);
    let (ok, _, err) = small(out, &sets).output().parts();
    assert!(ok, "{err}");
    metrics_without_timing(out)
}

/// The pairs of round `r` (0-based) of a saved state.
fn round_pairs(state: &Value, r: usize) -> Vec<Value> {
    let shard = &state["shards"][r];
    let (a, b) = (
        shard["start"].as_u64().unwrap() as usize,
        shard["end"].as_u64().unwrap() as usize,
    );
    state["set"]["pairs"].as_array().unwrap()[a..b].to_vec()
}

#[test]
fn rounds_collect_train_a_reward_model_then_train_against_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let rows = run(&out, &[]);
    assert_eq!(rows.len(), 4, "one row per epoch: {rows:?}");
    let state = saved_state(&out);
    assert_eq!(state["iteration"], 2);
    assert_eq!(state["phase"], "online");
    assert_eq!(state["shards"].as_array().unwrap().len(), 2);
    let f = |r: &Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    let task = |r: &Value| 100.0 * f(r, "reward/len_ratio");
    for round in 0..2 {
        let (collect, online) = (&rows[2 * round], &rows[2 * round + 1]);
        let pairs = round_pairs(&state, round);
        // At most one pair per index (4) and pairs_per_sample (4) per prompt.
        assert!(!pairs.is_empty() && pairs.len() <= 40, "{}", pairs.len());
        for p in &pairs {
            let text = p["winner"].as_str().unwrap();
            assert!(text.starts_with("Joint multi-agent response\n\nAgent 1 prompt:\n"));
            assert!(p["winner_reward"].as_f64().unwrap() > p["loser_reward"].as_f64().unwrap());
        }
        for a in 0..2 {
            let m = |k: &str| f(collect, &format!("agent_{a}/{k}"));
            assert_eq!(m("iter_round"), (round + 1) as f64, "{collect}");
            assert_eq!(m("iter_round_pairs"), pairs.len() as f64);
            assert_eq!(m("iter_train_pairs"), pairs.len() as f64, "replay current");
            assert!((0.0..=1.0).contains(&m("reward_model_accuracy")));
            assert!(m("reward_model_loss") > 0.0 && m("reward_model_loss").is_finite());
            // The collecting epoch steps no agent; the online one does.
            assert!(
                collect.get(format!("agent_{a}/loss")).is_none(),
                "{collect}"
            );
            assert!(
                f(online, &format!("agent_{a}/loss")).is_finite(),
                "{online}"
            );
        }
        // Collecting ranks by the task reward; the online epoch trains on the model's scores.
        assert!(
            (f(collect, "reward_mean") - task(collect)).abs() < 1e-3,
            "{collect}"
        );
        assert!(
            (f(online, "reward_mean") - task(online)).abs() > 1e-3,
            "{online}"
        );
    }
    // The last round's model is the one saved.
    let steps = state["trained"]["steps"].as_u64().unwrap() as usize;
    assert_eq!(steps, round_pairs(&state, 1).len().div_ceil(4));
    assert!(out
        .join("models/reward_model/reward_head.safetensors")
        .is_file());
    assert!(out.join("models/agent_1/model.safetensors").is_file());
}

#[test]
fn an_interrupted_marlhf_iter_run_resumes_to_the_same_end() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let full = Trainer::new(load_small(&a, &ITER))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(full.steps_done, 40);
    // Step 7: round 1 collecting; 13: its online epoch; 27: round 2 collecting.
    for (stop, phase) in [(7, "collecting"), (13, "online"), (27, "collecting")] {
        let b = tmp.path().join(format!("b{stop}"));
        let mut t = Trainer::new(load_small(&b, &ITER)).unwrap();
        let flag = t.interrupt_flag();
        let part = t.run(false, &mut StopAt(stop, flag)).unwrap();
        assert!(part.interrupted && part.steps_done == stop);
        assert_eq!(saved_state(&b)["phase"], phase, "stopped at {stop}");
        let done = Trainer::new(load_small(&b, &ITER))
            .unwrap()
            .run(true, &mut ())
            .unwrap();
        assert_eq!(done.steps_done, 40);
        assert_eq!(metrics_without_timing(&a), metrics_without_timing(&b));
        assert_eq!(saved_state(&a), saved_state(&b), "stopped at {stop}");
        for file in [
            "models/agent_0/model.safetensors",
            "models/agent_1/model.safetensors",
            "models/reward_model/reward_head.safetensors",
        ] {
            assert!(
                std::fs::read(a.join(file)).unwrap() == std::fs::read(b.join(file)).unwrap(),
                "stopped at {stop}: {file} differs"
            );
        }
    }
}

#[test]
fn the_reward_model_ranks_the_next_round_under_scoring_reward_model() {
    let tmp = tempfile::tempdir().unwrap();
    let (t, m) = (tmp.path().join("task"), tmp.path().join("model"));
    run(&t, &[]);
    run(&m, &["preference.scoring_reward=reward_model"]);
    let (st, sm) = (saved_state(&t), saved_state(&m));
    // The first round has no model yet: the task reward ranks it in both runs.
    assert_eq!(round_pairs(&st, 0), round_pairs(&sm, 0));
    // The second is ranked by the first round's model: its pairs' rewards are that model's
    // scores, not the task's multiples of len_ratio.
    let second = round_pairs(&sm, 1);
    assert_ne!(round_pairs(&st, 1), second);
    assert!(!second.is_empty());
}

#[test]
fn the_shipped_scenario_runs_its_rounds() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let scenario = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/story_len_ratio_marlhf_iter.yaml");
    // Its comparator, replay and reward model as shipped; fewer rounds, candidates and tokens.
    let (ok, _, err) = common::cli::comlrl(&["run", &scenario.display().to_string(), "--quiet"])
        .sets(&[
            format!("output_dir={}", out.display()),
            "preference.num_iterations=2".into(),
            "preference.num_candidates=4".into(),
            "trainer.num_train_epochs=1".into(),
            "agents.max_new_tokens=24".into(),
        ])
        .output()
        .parts();
    assert!(ok, "{err}");
    let rows = metrics_without_timing(&out);
    let rounds: Vec<f64> = rows
        .iter()
        .filter_map(|r| r["agent_0/iter_round"].as_f64())
        .collect();
    assert_eq!(rounds, [1.0, 2.0], "{rows:?}");
    assert!(rows
        .iter()
        .any(|r| r["eval/reward_mean"].as_f64().is_some()));
}

#[test]
fn a_round_without_pairs_skips_its_online_epochs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    // Every joint candidate scores 0: no pair, so no reward model and no online epoch (CoMLRL
    // `continue`s): the loop samples nothing there.
    let rows = run(&out, &["reward_processors=[{scale: 0.0}]"]);
    assert_eq!(rows.len(), 4, "{rows:?}");
    let state = saved_state(&out);
    assert_eq!(state["phase"], "idle");
    assert_eq!(state["iteration"], 2);
    assert!(state["trained"].is_null());
    for (e, row) in rows.iter().enumerate() {
        let round = row["agent_0/iter_round"].as_f64();
        match e % 2 {
            0 => {
                assert_eq!(round, Some((e / 2 + 1) as f64), "{row}");
                assert_eq!(row["agent_0/iter_round_pairs"], 0.0);
            }
            _ => assert!(
                round.is_none() && row.get("agent_0/loss").is_none(),
                "{row}"
            ),
        }
        // Nothing sampled in the skipped epochs.
        let sampled = row["agent_0/completion_length_mean"].as_f64().unwrap() > 0.0;
        assert_eq!(sampled, e % 2 == 0, "{row}");
    }
    assert!(!out.join("models/reward_model").exists());
    assert!(out.join("models/agent_0/model.safetensors").is_file());
}
