//! `trainer.algorithm: marlhf` end to end on the small tiny scenario (built-in tiny model, 10
//! prompts, a collecting epoch and one online epoch): the first epoch builds the preference
//! set and trains the reward model on it, the second trains MAGRPO against that model (its
//! training reward is the model's score, the task's term stays in `reward/<term>`); the
//! checkpoint holds the set, the training state and the model, the final models the reward
//! model; and a run interrupted in either epoch resumes to the same metrics and weights as an
//! uninterrupted one (never sampling the set or training the model again).
use crate::common;
use comlrl::train::Trainer;
use common::tiny_run::StopAt;
use common::tiny_run::{load_small, metrics_without_timing, resume_matches, small};
use std::path::Path;

const MARLHF: [&str; 6] = [
    "trainer.algorithm=marlhf",
    "trainer.num_train_epochs=1",
    "preference.num_candidates=4",
    "preference.reward_train_batch_size=4",
    "preference.reward_learning_rate=1e-3",
    "checkpoint_every=4",
];

/// The MARLHF state of the latest checkpoint of `out`.
fn saved_state(out: &Path) -> serde_json::Value {
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    let file = out
        .join("checkpoints")
        .join(latest.trim())
        .join("marlhf_state.json");
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

#[test]
fn a_run_learns_its_reward_model_then_trains_against_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut sets = MARLHF.to_vec();
    sets.push("logging.steps=10");
    let (ok, _, err) = small(&out, &sets).output().parts();
    assert!(ok, "{err}");
    let rows = metrics_without_timing(&out);
    assert_eq!(rows.len(), 2, "one row per epoch: {rows:?}");
    let state = saved_state(&out);
    let pairs = state["set"]["pairs"].as_array().unwrap();
    let tied = state["set"]["tied_prompts"].as_u64().unwrap() as usize;
    assert!(
        !pairs.is_empty() && pairs.len() <= 10 * 6,
        "{} pairs of 4 candidates",
        pairs.len()
    );
    assert!(tied <= 10);
    for p in pairs {
        let text = p["winner"].as_str().unwrap();
        assert!(
            text.starts_with("Joint multi-agent response\n\nAgent 1 prompt:\n"),
            "{text}"
        );
        assert!(p["winner_reward"].as_f64().unwrap() > p["loser_reward"].as_f64().unwrap());
    }
    let trained = &state["trained"];
    assert_eq!(
        trained["steps"].as_u64().unwrap() as usize,
        pairs.len().div_ceil(4)
    );
    // The collecting epoch: the reward model's metrics, no agent update; its reward is the
    // task's (the scenario scales its one term by 100).
    let (first, second) = (&rows[0], &rows[1]);
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    for a in 0..2 {
        let m = |k: &str| f(first, &format!("agent_{a}/{k}"));
        assert_eq!(m("preference_pairs"), pairs.len() as f64);
        assert!((0.0..=1.0).contains(&m("reward_model_accuracy")));
        assert!(m("reward_model_loss") > 0.0 && m("reward_model_loss").is_finite());
        assert!(first.get(format!("agent_{a}/loss")).is_none(), "{first}");
        assert!(
            f(second, &format!("agent_{a}/loss")).is_finite(),
            "{second}"
        );
    }
    let task = |r: &serde_json::Value| 100.0 * f(r, "reward/len_ratio");
    assert!(
        (f(first, "reward_mean") - task(first)).abs() < 1e-3,
        "{first}"
    );
    // The online epoch trains on the reward model's scores, not on the task reward.
    assert!(
        (f(second, "reward_mean") - task(second)).abs() > 1e-3,
        "{second}"
    );
    assert!(task(second).is_finite());
    for file in [
        "model.safetensors",
        "config.json",
        "reward_head.safetensors",
    ] {
        assert!(
            out.join("models/reward_model").join(file).is_file(),
            "{file}"
        );
    }
    assert!(out.join("models/agent_1/model.safetensors").is_file());
}

#[test]
fn an_interrupted_marlhf_run_resumes_to_the_same_end() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let full = Trainer::new(load_small(&a, &MARLHF))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(full.steps_done, 20);
    // Step 7: the set half built; step 13: the reward model trained, the online epoch under
    // way.
    for stop in [7, 13] {
        let b = tmp.path().join(format!("b{stop}"));
        let mut t = Trainer::new(load_small(&b, &MARLHF)).unwrap();
        let flag = t.interrupt_flag();
        let part = t.run(false, &mut StopAt(stop, flag)).unwrap();
        assert!(part.interrupted && part.steps_done == stop);
        let state = saved_state(&b);
        assert_eq!(state["trained"].is_null(), stop < 10, "stopped at {stop}");
        resume_matches(&a, &b, &MARLHF);
        assert_eq!(saved_state(&a), saved_state(&b), "stopped at {stop}");
        let head = "models/reward_model/reward_head.safetensors";
        assert_eq!(
            std::fs::read(a.join(head)).unwrap(),
            std::fs::read(b.join(head)).unwrap()
        );
    }
}

#[test]
fn marlhf_trains_online_with_an_actor_critic_against_its_reward_model() {
    let tmp = tempfile::tempdir().unwrap();
    // CoMLRL's `rl_algorithm: iac | maac`: the critics train on the reward model's scores.
    for (alg, critic_dir) in [("iac", "critic_1"), ("maac", "critic")] {
        let out = tmp.path().join(alg);
        let mut sets = MARLHF.to_vec();
        let rl = format!("preference.rl_algorithm={alg}");
        sets.extend(["logging.steps=10", rl.as_str()]);
        let (ok, _, err) = small(&out, &sets).output().parts();
        assert!(ok, "{alg}: {err}");
        let rows = metrics_without_timing(&out);
        assert_eq!(rows.len(), 2, "{alg}: {rows:?}");
        let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        assert!(f(&rows[0], "agent_0/reward_model_accuracy").is_finite());
        assert!(
            rows[0].get("agent_0/value_loss").is_none(),
            "{alg}: {}",
            rows[0]
        );
        for a in 0..2 {
            let v = f(&rows[1], &format!("agent_{a}/value_loss"));
            assert!(v.is_finite() && v >= 0.0, "{alg}: {}", rows[1]);
        }
        // The online epoch's rewards are the reward model's, not the task's.
        let task = 100.0 * f(&rows[1], "reward/len_ratio");
        assert!((f(&rows[1], "reward_mean") - task).abs() > 1e-3, "{alg}");
        for dir in [critic_dir, "reward_model", "agent_1"] {
            assert!(
                out.join("models")
                    .join(dir)
                    .join("model.safetensors")
                    .is_file(),
                "{alg}: {dir}"
            );
        }
    }
}
