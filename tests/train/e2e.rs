//! End-to-end training on the tiny scenario: learning, reproducibility, resume after an
//! interruption or Ctrl-C, evaluation rows, the KL penalty, and multi-turn transitions.
use crate::common;
use comlrl::train::Trainer;
use common::tiny_run::StopAt;
use common::tiny_run::{finish, load_small, resume_matches, signal, small, steps, wait_rows};
use common::*;
use std::path::Path;

/// Per-epoch mean rewards of the quick start (`scenarios/story_len_ratio_tiny.yaml` exactly as
/// shipped, but for the seed and the output directory).
fn quick_start_run(out: &Path, seed: u64) -> Vec<f64> {
    let o = format!("output_dir={}", out.display());
    let seed = format!("seed={seed}");
    let (ok, _, err) = run_comlrl(&[
        "run",
        tiny_scenario().to_str().unwrap(),
        "--quiet",
        "--set",
        &o,
        "--set",
        &seed,
    ]);
    assert!(ok, "{err}");
    let means: Vec<f64> = err
        .lines()
        .filter_map(|l| {
            l.strip_prefix("epoch ")?
                .split("mean reward ")
                .nth(1)?
                .trim()
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(means.len(), 5, "{err}");
    means
}

#[test]
fn quick_start_learns_in_four_of_five_seeds() {
    // The README's first command is the project's demo: its last epoch must beat its first.
    // RL on a tiny model is noisy (float summation order differs between CPUs), so the claim
    // is "in at least 4 of seeds 0-4", not every seed.
    let tmp = tempfile::tempdir().unwrap();
    let runs: Vec<Vec<f64>> = (0..5)
        .map(|seed| quick_start_run(&tmp.path().join(format!("run{seed}")), seed))
        .collect();
    let improved = runs.iter().filter(|m| m[4] > m[0]).count();
    assert!(
        improved >= 4,
        "last epoch above the first in only {improved} of 5 seeds: {runs:?}"
    );
    let out = tmp.path().join("run0");
    for f in [
        "metrics.jsonl",
        "metrics.csv",
        "training.svg",
        "models/agent_0/model.safetensors",
        "models/agent_1/config.json",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let svg = std::fs::read_to_string(out.join("training.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("reward mean"));
    // The trained model loads and generates.
    let model = out.join("models/agent_0");
    let (ok, stdout, err) = run_comlrl(&[
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--prompt",
        "Hi",
        "--json",
        "--max-new-tokens",
        "8",
    ]);
    assert!(ok && stdout.contains("samples"), "{err}");
}

#[test]
fn same_seed_same_metrics() {
    // The second run trains its agents one after the other instead of at the same time:
    // each agent samples from its own RNG stream, so nothing may change.
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for (dir, sets) in [
        (&a, vec![]),
        (
            &b,
            vec![
                "trainer.parallel_sampling=false".to_string(),
                "trainer.parallel_updates=false".to_string(),
            ],
        ),
    ] {
        let (ok, _, err) = small(dir, &sets).output().parts();
        assert!(ok, "{err}");
    }
    let (ma, mb) = (metrics_without_timing(&a), metrics_without_timing(&b));
    assert_eq!(ma.len(), 7, "20 steps logged every 3 plus the last");
    assert_eq!(ma, mb);
    let csv = std::fs::read_to_string(a.join("metrics.csv")).unwrap();
    assert_eq!(csv.lines().count(), 8, "header + one line per row");
}

#[test]
fn interrupted_and_resumed_run_matches_uninterrupted() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let extra = ["checkpoint_every=4"];
    let sa = Trainer::new(load_small(&a, &extra))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(sa.steps_done, 20);
    let mut t = Trainer::new(load_small(&b, &extra)).unwrap();
    let flag = t.interrupt_flag();
    let sb = t.run(false, &mut StopAt(7, flag)).unwrap();
    assert!(sb.interrupted && sb.steps_done == 7);
    assert!(
        !b.join("models").exists(),
        "an interrupted run saves no final models"
    );
    // Odd step, mid rollout buffer: the buffered rollout is in the checkpoint.
    resume_matches(&a, &b, &extra);
}

#[test]
fn ctrl_c_writes_a_checkpoint_and_resume_finishes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let run = small(&out, &["logging.steps=1", "trainer.num_train_epochs=10"]);
    let child = run.spawn();
    wait_rows(&out, 2);
    signal(&child, libc::SIGINT);
    let (code, err) = finish(child);
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("checkpoint written at step"), "{err}");
    assert!(
        out.join("training.svg").is_file(),
        "the plot is drawn on Ctrl-C too"
    );
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    let done: usize = latest.trim().trim_start_matches("step-").parse().unwrap();
    assert!((2..100).contains(&done), "{latest}");
    let (ok, _, err) = run.flags(&["--resume"]).output().parts();
    assert!(ok, "{err}");
    assert!(err.contains("resuming from"), "{err}");
    assert_eq!(
        steps(&out),
        (1..=100).collect::<Vec<i64>>(),
        "every step logged once, in order"
    );
    assert!(out.join("models/agent_1/model.safetensors").is_file());
}

#[test]
fn evaluation_rows_follow_eval_interval() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let sets: Vec<String> = [
        "dataset.eval={prompts: [\"Say hi:\", \"Say bye:\"]}",
        "trainer.eval_interval=6",
        "trainer.eval_num_samples=2",
        "trainer.num_train_epochs=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (ok, _, err) = small(&out, &sets).output().parts();
    assert!(ok, "{err}");
    let rows = metrics(&out);
    // Rows at steps 3, 6, 9, 10; evaluation ran at step 6 only.
    let evals: Vec<(i64, bool)> = rows
        .iter()
        .map(|r| {
            (
                r["step"].as_i64().unwrap(),
                r["eval/reward_mean"].is_number(),
            )
        })
        .collect();
    assert_eq!(evals, vec![(3, false), (6, true), (9, false), (10, false)]);
    assert!(rows[1]["eval/reward_mean"].as_f64().unwrap() >= 0.0);
}

#[test]
fn evaluation_at_start_is_a_row_of_its_own_with_each_terms_mean() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let sets: Vec<String> = [
        "dataset.eval={prompts: [\"Say hi:\", \"Say bye:\"]}",
        "trainer.eval_interval=6",
        "trainer.eval_num_samples=2",
        "trainer.num_train_epochs=1",
        "trainer.eval_at_start=true",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (ok, _, err) = small(&out, &sets).output().parts();
    assert!(ok, "{err}");
    let rows = metrics(&out);
    let steps: Vec<i64> = rows.iter().map(|r| r["step"].as_i64().unwrap()).collect();
    assert_eq!(steps, vec![0, 3, 6, 9, 10]);
    // The step-0 row holds the untrained agents' evaluation and nothing of a training step.
    let start = &rows[0];
    assert!(start.get("reward_mean").is_none(), "{start}");
    for r in [&rows[0], &rows[2]] {
        let terms: Vec<(&String, f64)> = r
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with("eval/reward/"))
            .map(|(k, v)| (k, v.as_f64().expect("a measured term")))
            .collect();
        assert_eq!(terms.len(), 1, "{r}");
        // One term of weight 1, then the scenario's `scale: 100` processor.
        let joint = r["eval/reward_mean"].as_f64().unwrap();
        assert!(
            (joint - 100.0 * terms[0].1).abs() < 1e-3 * joint.abs().max(1.0),
            "{r}"
        );
    }
    assert!(rows[1]["eval/reward_mean"].is_null(), "{}", rows[1]);
}

#[test]
fn kl_penalty_is_logged_and_lowers_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let lr = "trainer.agent_learning_rate=1e-2";
    let sa = load_small(&a, &[lr]);
    let sb = load_small(&b, &[lr, "trainer.kl_coef=0.5"]);
    Trainer::new(sa).unwrap().run(false, &mut ()).unwrap();
    Trainer::new(sb).unwrap().run(false, &mut ()).unwrap();
    let (ra, rb) = (metrics(&a), metrics(&b));
    assert!(ra[0].get("agent_0/kl").is_none());
    // Until the first update both policies equal their references: KL exactly 0.
    assert_eq!(rb[0]["step"], 3);
    let kls: Vec<f64> = rb
        .iter()
        .map(|r| r["agent_0/kl"].as_f64().unwrap())
        .collect();
    assert!(kls.iter().all(|k| *k >= 0.0), "k3 is non-negative: {kls:?}");
    assert!(
        kls.last().unwrap() > &0.0,
        "policies moved away from the reference: {kls:?}"
    );
    // Same seed, same first rollout: returns differ only by the penalty, which is 0 at step 1.
    assert_eq!(ra[0]["reward_mean"], rb[0]["reward_mean"]);
}

#[test]
fn multi_turn_with_a_rhai_transition() {
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("revise.rhai");
    std::fs::write(
        &script,
        "fn transition(ctx) {\n    let out = [];\n    for i in 0..ctx.agent_count {\n        out.push(`Turn ${ctx.turn}: improve \"${ctx.response_history[i][-1]}\"`);\n    }\n    out\n}\n",
    )
    .unwrap();
    let out = tmp.path().join("run");
    let sets = [
        "trainer.num_turns=2".to_string(),
        format!("trainer.external_transition={{rhai: {}}}", script.display()),
        "trainer.num_train_epochs=1".to_string(),
        "trainer.early_termination_threshold=null".to_string(),
        "agents.max_new_tokens=8".to_string(),
    ];
    let run = small(&out, &sets);
    let (ok, _, err) = run.output().parts();
    assert!(ok, "{err}");
    let rows = metrics(&out);
    assert_eq!(rows.len(), 4);
    assert!(
        rows.iter()
            .all(|r| r["turn_2/reward_mean"].is_number() && r["agent_1/loss"].is_number()),
        "{rows:?}"
    );

    // A transition returning the wrong number of prompts is a clear error naming the script.
    std::fs::write(&script, "fn transition(ctx) { [\"only one\"] }\n").unwrap();
    // The same output_dir holds the first run: start over in it.
    let (ok, _, err) = run.flags(&["--overwrite"]).output().parts();
    assert!(
        !ok && err.contains("revise.rhai") && err.contains("1 prompts for 2 agents"),
        "{err}"
    );
}

#[test]
fn multi_turn_with_a_native_transition_plugin() {
    let plugin = comlrl_testutil::plugin("comlrl_testkit_transition");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let sets = [
        "trainer.num_turns=2".to_string(),
        format!(
            "trainer.external_transition={{plugin: {}}}",
            plugin.display()
        ),
        "trainer.num_train_epochs=1".to_string(),
        "trainer.early_termination_threshold=null".to_string(),
        "agents.max_new_tokens=8".to_string(),
    ];
    let (ok, _, err) = small(&out, &sets).output().parts();
    assert!(ok, "{err}");
    let rows = metrics(&out);
    assert!(
        rows.iter().all(|r| r["turn_2/reward_mean"].is_number()),
        "{rows:?}"
    );
    // A panic inside the plugin is an error naming it, not an abort.
    let mut sets = sets.to_vec();
    sets[1] = format!(
        "trainer.external_transition={{plugin: {}, params: {{panic: true}}}}",
        plugin.display()
    );
    let (ok, _, err) = small(&tmp.path().join("run2"), &sets).output().parts();
    assert!(
        !ok && err.contains("comlrl_testkit_transition") && err.contains("asked to panic"),
        "{err}"
    );
    // The plugin runs isolated (the default): a crash in it, at the third prompt, is an error
    // naming the plugin, how its process died and the step, not the end of the trainer.
    let crashing = format!(
        "trainer.external_transition={{plugin: {}, params: {{misbehave: abort_bedtime}}",
        plugin.display()
    );
    sets[1] = format!("{crashing}}}");
    let (ok, _, err) = small(&tmp.path().join("run3"), &sets).output().parts();
    assert!(
        !ok && err.contains("transition plugin")
            && err.contains("comlrl_testkit_transition")
            && err.contains("crashed (signal 6 SIGABRT)")
            && err.contains("step 3"),
        "{err}"
    );
    // With `on_error: skip_step` the steps it crashes on are skipped and training goes on.
    sets[1] = format!("{crashing}, on_error: skip_step}}");
    let out4 = tmp.path().join("run4");
    let (ok, _, err) = small(&out4, &sets).output().parts();
    assert!(ok, "{err}");
    assert!(
        err.contains("step 3 (epoch 1, prompt 3) skipped")
            && err.contains("the transition (`trainer.external_transition`) failed"),
        "{err}"
    );
    assert_eq!(err.matches("skipped:").count(), 1, "{err}");
    assert!(out4.join("models/agent_1/model.safetensors").is_file());
}

#[test]
fn a_pass_fail_reward_logs_its_zero_advantage_share() {
    // With a reward of 0 or 100, a step's K advantages (mean baseline) are all exactly 0 when
    // its K rewards are equal and none is 0 otherwise: the logged share is 1 or 0 accordingly.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let sets = [
        "reward.rhai=../rewards/len_ratio_pass.rhai",
        // The trained tiny model: its rewards are neither always 0 nor always 100.
        "agents.model=../models/tiny-story",
        "agents.max_new_tokens=32",
        "logging.steps=1",
        "trainer.num_train_epochs=1",
    ];
    let (ok, _, err) = small(&out, &sets).output().parts();
    assert!(ok, "{err}");
    let rows = metrics(&out);
    assert_eq!(rows.len(), 10);
    for r in &rows {
        let all_equal = r["reward_std"].as_f64().unwrap() == 0.0;
        for i in 0..2 {
            let frac = r[format!("agent_{i}/zero_advantage_frac").as_str()]
                .as_f64()
                .unwrap_or_else(|| panic!("no zero_advantage_frac in {r}"));
            assert_eq!(frac, if all_equal { 1.0 } else { 0.0 }, "{r}");
        }
    }
    let equal = rows
        .iter()
        .filter(|r| r["reward_std"].as_f64() == Some(0.0))
        .count();
    assert!(
        (1..rows.len()).contains(&equal),
        "rows with equal rewards and rows without expected: {rows:?}"
    );
    // `bench train` runs the same steps (the output directory aside) and reports the share.
    let report = tmp.path().join("train.json");
    let (ok, _, err) = comlrl(&["bench", "train", tiny_scenario().to_str().unwrap()])
        .sets(&small(&out, &sets).overrides()[1..])
        .flags(&["--out", report.to_str().unwrap()])
        .output()
        .parts();
    assert!(ok, "{err}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let share = r["train"]["zero_advantage_frac"].as_f64().unwrap();
    assert_eq!(share, equal as f64 / rows.len() as f64, "{r}");
    assert!(
        err.contains(&format!(
            "{:.0}% of completions had advantage 0",
            100.0 * share
        )),
        "{err}"
    );
}
