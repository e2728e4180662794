//! `trainer.algorithm: iac` end to end on the small tiny-model scenario: it trains the agents
//! and their critics (metrics `agent_i/value_loss`, `value_mean`, `advantage_mean`; the critics
//! saved beside the agents with their value heads, and in every checkpoint), the critic's
//! reading (V or Q) changes what the actors learn, and an interrupted run resumed from its
//! checkpoint ends with the same metrics, agents and critics as an uninterrupted one.
use crate::common;
use comlrl::train::Trainer;
use common::metrics;
use common::metrics_without_timing;
use common::tiny_run::load_small;
use common::tiny_run::StopAt;
use std::path::Path;

/// IAC with two generations, a buffer of 3 in mini-batches of 2 (two critic and actor steps a
/// round; an epoch of 10 prompts ends mid-buffer), a checkpoint every 4 steps.
const IAC: [&str; 7] = [
    "trainer.algorithm=iac",
    "trainer.num_generations=2",
    "trainer.rollout_buffer_size=3",
    "trainer.train_batch_size=2",
    "trainer.agent_learning_rate=1e-3",
    "trainer.critic.learning_rate=1e-3",
    "checkpoint_every=4",
];

fn sets(extra: &[&'static str]) -> Vec<&'static str> {
    IAC.iter().copied().chain(extra.iter().copied()).collect()
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
fn iac_trains_agents_and_critics_and_saves_both() {
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
    for i in 0..2 {
        for f in [
            "model.safetensors",
            "config.json",
            "tokenizer.json",
            "value_head.safetensors",
        ] {
            assert!(
                v.join(format!("models/critic_{i}/{f}")).is_file(),
                "models/critic_{i}/{f}"
            );
        }
        // The head reads back as CoMLRL's layout over the critic's hidden size.
        let t = candle_core::safetensors::load(
            v.join(format!("models/critic_{i}/value_head.safetensors")),
            &candle_core::Device::Cpu,
        )
        .unwrap();
        let hidden = t["value_projection.weight"].dims()[1];
        comlrl::model::ValueHead::from_tensors(t.into_iter().collect(), hidden).unwrap();
    }
    // The critics were trained between the last two checkpoints (steps 16 and 20).
    let cp = v.join("checkpoints");
    for i in 0..2 {
        let f = format!("critic_{i}.safetensors");
        assert!(
            read(&cp, &format!("step-00000016/{f}")) != read(&cp, &format!("step-00000020/{f}")),
            "critic {i} did not change between steps 16 and 20"
        );
        let o = format!("critic_optimizer_{i}.safetensors");
        assert!(cp.join("step-00000020").join(o).is_file());
    }
    // A Q critic values other rows than a V critic: different advantages, different actors.
    let q = tmp.path().join("q");
    train(&q, &["trainer.critic.type=q"]);
    assert!(
        read(&v, "models/agent_0/model.safetensors")
            != read(&q, "models/agent_0/model.safetensors"),
        "the critic's type did not change what agent 0 learned"
    );
}

#[test]
fn an_interrupted_iac_run_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    train(&a, &[]);
    let mut t = Trainer::new(load_small(&b, &sets(&[]))).unwrap();
    let flag = t.interrupt_flag();
    // Step 7: mid buffer (rounds at 3 and 6), the critics stepped 4 times each.
    let sb = t.run(false, &mut StopAt(7, flag)).unwrap();
    assert!(sb.interrupted && sb.steps_done == 7);
    let done = Trainer::new(load_small(&b, &sets(&[])))
        .unwrap()
        .run(true, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 20);
    assert_eq!(metrics_without_timing(&a), metrics_without_timing(&b));
    for i in 0..2 {
        for f in [
            format!("models/agent_{i}/model.safetensors"),
            format!("models/critic_{i}/model.safetensors"),
            format!("models/critic_{i}/value_head.safetensors"),
            format!("checkpoints/step-00000020/critic_optimizer_{i}.safetensors"),
            format!("checkpoints/step-00000020/critic_{i}.json"),
        ] {
            assert!(read(&a, &f) == read(&b, &f), "{f} differs after the resume");
        }
    }
}

#[test]
fn a_shared_head_trains_with_its_agent_and_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let shared = ["trainer.critic.separate=false"];
    train(&a, &shared);
    let rows = metrics(&a);
    assert!(rows
        .iter()
        .all(|r| r["agent_1/value_loss"].as_f64().is_some_and(f64::is_finite)));
    for i in 0..2 {
        assert!(a
            .join(format!("models/agent_{i}/value_head.safetensors"))
            .is_file());
        assert!(!a.join(format!("models/critic_{i}")).exists());
    }
    let mut t = Trainer::new(load_small(&b, &sets(&shared))).unwrap();
    let flag = t.interrupt_flag();
    assert!(t.run(false, &mut StopAt(7, flag)).unwrap().interrupted);
    Trainer::new(load_small(&b, &sets(&shared)))
        .unwrap()
        .run(true, &mut ())
        .unwrap();
    assert_eq!(metrics_without_timing(&a), metrics_without_timing(&b));
    for i in 0..2 {
        for f in [
            format!("models/agent_{i}/model.safetensors"),
            format!("models/agent_{i}/value_head.safetensors"),
        ] {
            assert!(read(&a, &f) == read(&b, &f), "{f} differs after the resume");
        }
    }
    // Not the separate critic's run under another name.
    let sep = tmp.path().join("separate");
    train(&sep, &[]);
    assert!(
        read(&a, "models/agent_0/model.safetensors")
            != read(&sep, "models/agent_0/model.safetensors")
    );
}

#[test]
fn a_diverging_critic_is_an_error_naming_agent_and_step() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    // The critic's first step at 1e30 leaves its weights non-finite: the next round's V_old.
    // The agents update one after the other, so agent 0 is the one that fails.
    let s = load_small(
        &out,
        &sets(&[
            "trainer.critic.learning_rate=1e30",
            "trainer.train_batch_size=3",
            "trainer.parallel_updates=false",
        ]),
    );
    let err = Trainer::new(s).unwrap().run(false, &mut ()).unwrap_err();
    let msg = err.chain();
    assert!(
        msg.contains("agent 0, optimizer step 2: the critic's value V_old is NaN")
            && msg.contains("lower trainer.critic.learning_rate"),
        "{msg}"
    );
}

#[test]
fn compat_pad_cut_leaves_the_eos_out_of_the_actor_loss() {
    // The story model stops its answers with EOS, which is also its pad token: CoMLRL's cut at
    // the first pad leaves it out of the actor's loss, comlrl's default counts it. The same
    // seed samples the same first buffer, so the first round's losses differ by the EOS terms.
    let tmp = tempfile::tempdir().unwrap();
    let story = format!(
        "agents.model={}",
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("models/tiny-story")
            .display()
    );
    let mut losses = vec![];
    for cut in ["false", "true"] {
        let out = tmp.path().join(cut);
        let flag = format!("trainer.critic.compat_pad_cut={cut}");
        let extra = [
            story.as_str(),
            "agents.max_new_tokens=64",
            "logging.steps=3",
            flag.as_str(),
        ];
        let s: Vec<&str> = IAC.iter().copied().chain(extra).collect();
        let done = Trainer::new(load_small(&out, &s))
            .unwrap()
            .run(false, &mut ())
            .unwrap();
        assert_eq!(done.steps_done, 20);
        let rows = metrics(&out);
        let first = rows[0]["agent_0/loss"].as_f64().unwrap();
        assert!(first.is_finite(), "{cut}: {}", rows[0]);
        losses.push((
            first,
            rows[0]["agent_0/completion_length_mean"].as_f64().unwrap(),
        ));
    }
    // The same completions were sampled; only the loss's tokens differ.
    assert_eq!(losses[0].1, losses[1].1, "{losses:?}");
    assert_ne!(losses[0].0, losses[1].0, "{losses:?}");
}

/// Two-turn episodes (γ 0.9, a Rhai transition, no early termination): the run trains with
/// TD(0) targets, and logs each turn's critic loss and advantage over that turn's steps.
#[test]
fn iac_trains_two_turn_episodes_and_logs_each_turn() {
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
                // Each turn is a group of its own: as many steps as the other turn (every
                // episode runs both turns).
                let steps = r[format!("agent_{i}/turn_{t}/steps")].as_f64().unwrap();
                assert_eq!(
                    steps,
                    r[format!("agent_{i}/turn_1/steps")].as_f64().unwrap()
                );
                assert!(steps >= 1.0, "{r}");
            }
        }
    }
    // Interrupted at step 5 (one episode buffered: rounds take two, at steps 2, 4, 6, …) and
    // resumed from the checkpoint of step 4, it ends as the uninterrupted run.
    let b = tmp.path().join("b");
    let mut t = Trainer::new(load_small(&b, &sets)).unwrap();
    let flag = t.interrupt_flag();
    let sb = t.run(false, &mut StopAt(5, flag)).unwrap();
    assert!(sb.interrupted && sb.steps_done == 5);
    common::tiny_run::resume_matches(&out, &b, &sets);
}
