//! `trainer.algorithm: maac` end to end on the small tiny-model scenario: it trains the agents
//! and the one critic (metrics `agent_i/value_loss`, `value_mean`, `advantage_mean`; the critic
//! saved as `models/critic/` with its value head, and in every checkpoint), CoMLRL's N critic
//! steps (`compat_critic_steps`) train another critic than the fix's one step, and an
//! interrupted run resumed from its checkpoint ends with the same metrics, agents and critic as
//! an uninterrupted one.
use crate::common;
use comlrl::train::Trainer;
use common::metrics;
use common::metrics_without_timing;
use common::tiny_run::load_small;
use common::tiny_run::StopAt;
use std::path::Path;

/// MAAC with two generations, a buffer of 3 in mini-batches of 2 (two critic and actor steps a
/// round; an epoch of 10 prompts ends mid-buffer), a checkpoint every 4 steps.
const MAAC: [&str; 7] = [
    "trainer.algorithm=maac",
    "trainer.num_generations=2",
    "trainer.rollout_buffer_size=3",
    "trainer.train_batch_size=2",
    "trainer.agent_learning_rate=1e-3",
    "trainer.critic.learning_rate=1e-3",
    "checkpoint_every=4",
];

fn sets(extra: &[&'static str]) -> Vec<&'static str> {
    MAAC.iter().copied().chain(extra.iter().copied()).collect()
}

fn train(out: &Path, extra: &[&'static str]) {
    let done = Trainer::new(load_small(out, &sets(extra)))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 20);
}

fn read(out: &Path, file: &str) -> Vec<u8> {
    std::fs::read(out.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn maac_trains_agents_and_one_critic_and_saves_both() {
    let tmp = tempfile::tempdir().unwrap();
    let v = tmp.path().join("v");
    train(&v, &[]);
    let rows = metrics(&v);
    assert_eq!(rows.len(), 7, "20 steps logged every 3 plus the last");
    for r in &rows {
        for i in 0..2 {
            for m in ["value_loss", "value_mean", "advantage_mean", "loss"] {
                let x = r[format!("agent_{i}/{m}")].as_f64();
                assert!(x.is_some_and(f64::is_finite), "agent_{i}/{m} in {r}");
            }
        }
    }
    for f in [
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "value_head.safetensors",
    ] {
        assert!(
            v.join(format!("models/critic/{f}")).is_file(),
            "models/critic/{f}"
        );
    }
    assert!(
        !v.join("models/critic_0").exists(),
        "one critic, not one per agent"
    );
    let cp = v.join("checkpoints");
    assert!(
        read(&cp, "step-00000016/critic.safetensors")
            != read(&cp, "step-00000020/critic.safetensors"),
        "the critic did not change between steps 16 and 20"
    );
    assert!(cp
        .join("step-00000020/critic_optimizer.safetensors")
        .is_file());
    // CoMLRL's two critic steps per mini-batch: another critic, the same actors' first round
    // (their advantages read V_old, from the critic before the round).
    let c = tmp.path().join("compat");
    train(&c, &["trainer.critic.compat_critic_steps=true"]);
    assert!(
        read(&v, "models/critic/value_head.safetensors")
            != read(&c, "models/critic/value_head.safetensors"),
        "compat_critic_steps did not change the critic"
    );
    let progress = |d: &Path| -> serde_json::Value {
        serde_json::from_slice(&read(d, "checkpoints/step-00000020/critic.json")).unwrap()
    };
    let (fixed, compat) = (progress(&v)["step"].as_u64(), progress(&c)["step"].as_u64());
    assert_eq!(
        compat,
        fixed.map(|s| 2 * s),
        "N = 2 critic steps per mini-batch"
    );
}

#[test]
fn an_interrupted_maac_run_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let q = ["trainer.critic.type=q"];
    train(&a, &q);
    let mut t = Trainer::new(load_small(&b, &sets(&q))).unwrap();
    let flag = t.interrupt_flag();
    // Step 7: mid buffer (rounds at 3 and 6).
    let sb = t.run(false, &mut StopAt(7, flag)).unwrap();
    assert!(sb.interrupted && sb.steps_done == 7);
    let done = Trainer::new(load_small(&b, &sets(&q)))
        .unwrap()
        .run(true, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 20);
    assert_eq!(metrics_without_timing(&a), metrics_without_timing(&b));
    for f in [
        "models/agent_0/model.safetensors",
        "models/agent_1/model.safetensors",
        "models/critic/model.safetensors",
        "models/critic/value_head.safetensors",
        "checkpoints/step-00000020/critic_optimizer.safetensors",
        "checkpoints/step-00000020/critic.json",
    ] {
        assert!(read(&a, f) == read(&b, f), "{f} differs after the resume");
    }
}

/// With `replicas` the one critic lives on agent 0's first replica only (the one that samples
/// it; see docs/distributed.md): set up on a rank that holds agent 0 without sampling it (a
/// second replica), MAAC loads no critic, so a critic model that cannot load is no error there;
/// on the first replica it is one, naming the critic. (The runs on ranks are
/// `tests/mpi/ranks.rs`'s.)
#[test]
fn maacs_critic_is_loaded_on_agent_0s_first_replica_only() {
    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("not_a_model");
    std::fs::create_dir_all(&broken).unwrap();
    let mut extra: Vec<String> = sets(&["agents.replicas=2"])
        .iter()
        .map(|x| x.to_string())
        .collect();
    extra.push(format!("trainer.critic.model={}", broken.display()));
    let s = load_small(&tmp.path().join("run"), &extra);
    let agent = || {
        comlrl::model::Policy::load(
            &comlrl::model::ModelSource::Local(common::fixtures().join("tiny-qwen2")),
            &comlrl::model::LoadOptions::default(),
        )
        .unwrap()
    };
    let build = |samples: &[bool]| {
        comlrl::train::algorithms::registry::build(&s, &[Some(agent()), None], samples)
    };
    if let Err(e) = build(&[false, false]) {
        panic!("agent 0's second replica loaded a critic: {}", e.chain());
    }
    let err = match build(&[true, false]) {
        Ok(_) => panic!("the critic loaded from a folder without a model"),
        Err(e) => e.chain(),
    };
    assert!(err.contains("critic"), "{err}");
}

/// Two-turn episodes (γ 0.9, a Rhai transition, no early termination): the run trains with
/// TD(0) targets from the critic's value of the next turn's joint prompt, and logs each turn's
/// critic loss and advantage over that turn's steps.
#[test]
fn maac_trains_two_turn_episodes_and_logs_each_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("revise.rhai");
    std::fs::write(
        &script,
        "fn transition(ctx) {\n    let out = [];\n    for i in 0..ctx.agent_count {\n        out.push(`Improve: ${ctx.response_history[i][-1]}`);\n    }\n    out\n}\n",
    )
    .unwrap();
    let out = tmp.path().join("run");
    let mut sets: Vec<String> = sets(&[
        "trainer.num_generations=1",
        "trainer.num_turns=2",
        "trainer.discount=0.9",
        "trainer.early_termination_threshold=null",
        "agents.max_new_tokens=8",
    ])
    .into_iter()
    .filter(|s| *s != "trainer.num_generations=2")
    .map(String::from)
    .collect();
    sets.push(format!(
        "trainer.external_transition={{rhai: {}}}",
        script.display()
    ));
    let done = Trainer::new(load_small(&out, &sets))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 20);
    let rows = metrics(&out);
    assert!(!rows.is_empty());
    for r in &rows {
        assert!(r["turn_2/reward_mean"].is_number(), "{r}");
        for i in 0..2 {
            for t in 1..=2 {
                for m in ["value_loss", "advantage_mean"] {
                    let x = r[format!("agent_{i}/turn_{t}/{m}")].as_f64();
                    assert!(
                        x.is_some_and(f64::is_finite),
                        "agent_{i}/turn_{t}/{m} in {r}"
                    );
                }
                let steps = r[format!("agent_{i}/turn_{t}/steps")].as_f64().unwrap();
                assert!(steps >= 1.0, "{r}");
            }
        }
    }
}
