//! End-to-end training on the tiny scenario: learning, reproducibility, resume after an
//! interruption, and failures that must leave the last checkpoint intact.
mod common;
use comlrl::metrics::read_jsonl;
use comlrl::train::{Observer, Trainer};
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn scenario() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/story_len_ratio_tiny.yaml")
}

fn run_bin(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin()).args(args).output().expect("run comlrl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Metrics rows without the wall-clock fields.
fn metrics_without_timing(dir: &Path) -> Vec<serde_json::Value> {
    read_jsonl(&dir.join("metrics.jsonl"))
        .unwrap()
        .into_iter()
        .map(|mut r| {
            let o = r.as_object_mut().unwrap();
            o.retain(|k, _| {
                !(k == "step_seconds"
                    || k == "tokens_per_s"
                    || k == "train_gflops_per_s"
                    || k.starts_with("time/"))
            });
            r
        })
        .collect()
}

/// The tiny scenario shrunk for tests: the built-in tiny model (random weights, byte
/// tokenizer; ~10× cheaper than the quick start's story model), 16 new tokens, 2 epochs, K = 4.
fn small(out: &Path) -> Vec<String> {
    [
        "--set",
        &format!("output_dir={}", out.display()),
        "--set",
        "agents.model=builtin:tiny",
        "--set",
        "agents.max_new_tokens=16",
        "--set",
        "trainer.num_train_epochs=2",
        "--set",
        "trainer.num_generations=4",
        "--set",
        "logging.steps=3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `comlrl run <tiny scenario> --quiet` with the small settings for `out` and extra
/// `--set` overrides; returns the full argument list (for reruns) and the outcome.
fn run_small(out: &Path, sets: &[String]) -> (Vec<String>, (bool, String, String)) {
    let mut args = vec![
        "run".to_string(),
        scenario().display().to_string(),
        "--quiet".into(),
    ];
    args.extend(small(out));
    for s in sets {
        args.extend(["--set".to_string(), s.clone()]);
    }
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let result = run_bin(&refs);
    (args, result)
}

/// Per-epoch mean rewards of the quick start (`scenarios/story_len_ratio_tiny.yaml` exactly as
/// shipped, but for the seed and the output directory).
fn quick_start_run(out: &Path, seed: u64) -> Vec<f64> {
    let o = format!("output_dir={}", out.display());
    let seed = format!("seed={seed}");
    let (ok, _, err) = run_bin(&[
        "run",
        scenario().to_str().unwrap(),
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
    let (ok, stdout, err) = run_bin(&[
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
        let (_, (ok, _, err)) = run_small(dir, &sets);
        assert!(ok, "{err}");
    }
    let (ma, mb) = (metrics_without_timing(&a), metrics_without_timing(&b));
    assert_eq!(ma.len(), 7, "20 steps logged every 3 plus the last");
    assert_eq!(ma, mb);
    let csv = std::fs::read_to_string(a.join("metrics.csv")).unwrap();
    assert_eq!(csv.lines().count(), 8, "header + one line per row");
}

struct StopAt(usize, Arc<AtomicBool>);

impl Observer for StopAt {
    fn step(&mut self, step: usize, _: f64, _: f64) {
        if step == self.0 {
            self.1.store(true, Ordering::SeqCst);
        }
    }
}

fn load(out: &Path, extra: &[&str]) -> comlrl_scenario::Scenario {
    let mut o = small(out);
    o.extend(extra.iter().map(|s| s.to_string()));
    let sets: Vec<String> = o.chunks(2).map(|c| c[1].clone()).collect();
    comlrl_scenario::load(&scenario(), &sets).unwrap()
}

#[test]
fn interrupted_and_resumed_run_matches_uninterrupted() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let extra = ["--set", "checkpoint_every=4"];
    let sa = Trainer::new(load(&a, &extra))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(sa.steps_done, 20);
    let mut t = Trainer::new(load(&b, &extra)).unwrap();
    let flag = t.interrupt_flag();
    let sb = t.run(false, &mut StopAt(7, flag)).unwrap();
    assert!(sb.interrupted && sb.steps_done == 7);
    assert!(
        !b.join("models").exists(),
        "an interrupted run saves no final models"
    );
    // Odd step, mid rollout buffer: the buffered rollout is in the checkpoint.
    let sb = Trainer::new(load(&b, &extra))
        .unwrap()
        .run(true, &mut ())
        .unwrap();
    assert_eq!(sb.steps_done, 20);
    assert_eq!(metrics_without_timing(&a), metrics_without_timing(&b));
    for i in 0..2 {
        let wa = std::fs::read(a.join(format!("models/agent_{i}/model.safetensors"))).unwrap();
        let wb = std::fs::read(b.join(format!("models/agent_{i}/model.safetensors"))).unwrap();
        assert!(wa == wb, "agent {i}: resumed weights differ");
    }
}

/// A reward script that fails on the third prompt of the tiny scenario (a bedtime story) and
/// scores 1.0 elsewhere.
fn flaky_script(dir: &Path) -> PathBuf {
    let script = dir.join("flaky.rhai");
    std::fs::write(
        &script,
        "fn reward(completions, ctx) {\n    if ctx.prompt.contains(\"bedtime\") {\n        throw \"cannot score bedtime stories\";\n    }\n    1.0\n}\n",
    )
    .unwrap();
    script
}

#[test]
fn reward_error_mid_run_stops_cleanly_with_checkpoint_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let script = flaky_script(tmp.path());
    let out = tmp.path().join("run");
    let sets = [
        format!("reward.rhai={}", script.display()),
        "checkpoint_every=1".to_string(),
    ];
    let (_, (ok, _, err)) = run_small(&out, &sets);
    assert!(!ok, "the run must fail");
    assert!(
        err.contains("flaky.rhai")
            && err.contains("cannot score bedtime stories")
            && err.contains("step 3"),
        "{err}"
    );
    assert!(
        err.contains("line 3"),
        "the script position is reported: {err}"
    );
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    assert_eq!(latest.trim(), "step-00000002");
    let ck = out.join("checkpoints/step-00000002");
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ck.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["step"], 2);
    assert!(
        ck.join("agent_0.safetensors").is_file() && ck.join("optimizer_1.safetensors").is_file()
    );
    assert!(!out.join("checkpoints").read_dir().unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with(".tmp")));
}

#[test]
fn reward_error_with_skip_step_skips_that_step_and_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let script = flaky_script(tmp.path());
    let out = tmp.path().join("run");
    let sets = [
        format!("reward={{rhai: {}, on_error: skip_step}}", script.display()),
        "logging.steps=1".to_string(),
    ];
    let (_, (ok, _, err)) = run_small(&out, &sets);
    assert!(ok, "the run goes on: {err}");
    // The third prompt (a bedtime story) fails in each of the 2 epochs.
    assert_eq!(err.matches("skipped").count(), 2, "{err}");
    assert!(err.contains("step 3 (epoch 1, prompt 3) skipped"), "{err}");
    assert!(err.contains("cannot score bedtime stories"), "{err}");
    let rows = read_jsonl(&out.join("metrics.jsonl")).unwrap();
    assert_eq!(rows.len(), 20, "every step logged");
    let skipped: Vec<i64> = rows
        .iter()
        .filter(|r| r["skipped_steps"] == 1)
        .map(|r| r["step"].as_i64().unwrap())
        .collect();
    assert_eq!(skipped, vec![3, 13]);
    assert!(rows[2]["reward_mean"].is_null(), "{}", rows[2]);
    assert_eq!(rows[3]["reward_mean"], 100.0, "1.0 × the scale processor");
    assert!(out.join("models/agent_1/model.safetensors").is_file());
}

#[test]
fn crashing_isolated_plugin_names_itself_and_leaves_the_checkpoint_intact() {
    let plugin = comlrl_testutil::plugin("comlrl_testkit_misbehave");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let sets = [
        format!(
            "reward={{plugin: {}, params: {{mode: segv_bedtime}}}}",
            plugin.display()
        ),
        "checkpoint_every=1".to_string(),
    ];
    let (_, (ok, _, err)) = run_small(&out, &sets);
    assert!(!ok, "the run must fail: {err}");
    assert!(
        err.contains("comlrl_testkit_misbehave")
            && err.contains("crashed")
            && err.contains("SIGSEGV")
            && err.contains("step 3"),
        "{err}"
    );
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    assert_eq!(latest.trim(), "step-00000002");
    // The checkpoint verifies: the run resumes from it (and crashes again at the same prompt).
    let ck = out.join("checkpoints/step-00000002");
    assert!(ck.join("manifest.json").is_file() && ck.join("agent_1.safetensors").is_file());
    let mut args = small(&out);
    for s in &sets {
        args.extend(["--set".to_string(), s.clone()]);
    }
    let mut full = vec!["run".to_string(), scenario().display().to_string()];
    full.extend(args);
    full.push("--resume".into());
    let refs: Vec<&str> = full.iter().map(|s| s.as_str()).collect();
    let (ok, _, err) = run_bin(&refs);
    assert!(
        !ok && err.contains("crashed") && err.contains("step 3"),
        "the resume passed the checkpoint's checks and reached the same prompt: {err}"
    );
}

#[test]
fn unwritable_output_dir_is_reported_before_training() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let o = format!("output_dir={}/sub", file.display());
    let (ok, _, err) = run_bin(&["run", scenario().to_str().unwrap(), "--quiet", "--set", &o]);
    assert!(!ok);
    assert!(
        err.contains("output_dir") && err.contains("cannot be created"),
        "{err}"
    );
    assert!(!err.contains("epoch"), "no training happened: {err}");
}

#[test]
fn malformed_scenario_names_file_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.yaml");
    let text = std::fs::read_to_string(scenario())
        .unwrap()
        .replace("num_generations: 8", "num_generatons: 8");
    std::fs::write(
        &bad,
        text.replace(
            "../rewards/len_ratio.rhai",
            &format!(
                "{}/../rewards/len_ratio.rhai",
                scenario().parent().unwrap().display()
            ),
        ),
    )
    .unwrap();
    let (ok, _, err) = run_bin(&["check", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("bad.yaml:")
            && err.contains("num_generatons")
            && err.contains("num_generations"),
        "{err}"
    );
    let (ok, _, err) = run_bin(&[
        "run",
        scenario().to_str().unwrap(),
        "--set",
        "trainer.num_generations=1",
    ]);
    assert!(!ok && err.contains("num_generations"), "{err}");
    let (ok, _, err) = run_bin(&["check", scenario().to_str().unwrap()]);
    assert!(ok, "{err}");
}

#[test]
fn reward_command_scores_with_the_whole_stack() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("c.jsonl");
    std::fs::write(
        &input,
        "{\"prompt\": \"p\", \"completions\": [\"ab\", \"abcde\"]}\n{\"prompt\": \"p\", \"completions\": [\"\", \"x\"]}\n{\"prompt\": \"p\", \"completions\": [\"日本\", \"é\"], \"topic\": \"x\"}\n",
    )
    .unwrap();
    let (ok, out, err) = run_bin(&[
        "reward",
        scenario().to_str().unwrap(),
        "--completions",
        input.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{err}");
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3);
    let expect = |a: &str, b: &str| comlrl_reward::reference::len_ratio(a, b, 2.0, 3.0);
    for (row, (a, b)) in rows.iter().zip([("ab", "abcde"), ("", "x"), ("日本", "é")]) {
        let raw = row["components"]["len_ratio"].as_f64().unwrap();
        assert!((raw - expect(a, b)).abs() < 1e-6, "{row}");
        assert!(
            (row["reward"].as_f64().unwrap() - 100.0 * expect(a, b)).abs() < 1e-4,
            "{row}"
        );
    }
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"prompt\": \"p\", \"completions\": [\"only one\"]}\n",
    )
    .unwrap();
    let (ok, _, err) = run_bin(&[
        "reward",
        scenario().to_str().unwrap(),
        "--completions",
        bad.to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("bad.jsonl:1") && err.contains("2 agents"),
        "{err}"
    );
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
    let (_, (ok, _, err)) = run_small(&out, &sets);
    assert!(ok, "{err}");
    let rows = read_jsonl(&out.join("metrics.jsonl")).unwrap();
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
fn kl_penalty_is_logged_and_lowers_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let lr = ["--set", "trainer.agent_learning_rate=1e-2"];
    let sa = load(&a, &lr);
    let mut sets = lr.to_vec();
    sets.extend(["--set", "trainer.kl_coef=0.5"]);
    let sb = load(&b, &sets);
    Trainer::new(sa).unwrap().run(false, &mut ()).unwrap();
    Trainer::new(sb).unwrap().run(false, &mut ()).unwrap();
    let (ra, rb) = (
        read_jsonl(&a.join("metrics.jsonl")).unwrap(),
        read_jsonl(&b.join("metrics.jsonl")).unwrap(),
    );
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
    let (args, (ok, _, err)) = run_small(&out, &sets);
    assert!(ok, "{err}");
    let rows = read_jsonl(&out.join("metrics.jsonl")).unwrap();
    assert_eq!(rows.len(), 4);
    assert!(
        rows.iter()
            .all(|r| r["turn_2/reward_mean"].is_number() && r["agent_1/loss"].is_number()),
        "{rows:?}"
    );

    // A transition returning the wrong number of prompts is a clear error naming the script.
    std::fs::write(&script, "fn transition(ctx) { [\"only one\"] }\n").unwrap();
    // The same output_dir holds the first run: start over in it.
    let args: Vec<&str> = args
        .iter()
        .map(|s| s.as_str())
        .chain(["--overwrite"])
        .collect();
    let (ok, _, err) = run_bin(&args);
    assert!(
        !ok && err.contains("revise.rhai") && err.contains("1 prompts for 2 agents"),
        "{err}"
    );
}

#[test]
fn ctrl_c_writes_a_checkpoint_and_resume_finishes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut args = vec![
        "run".to_string(),
        scenario().display().to_string(),
        "--quiet".into(),
    ];
    args.extend(small(&out));
    args.extend(
        [
            "--set",
            "logging.steps=1",
            "--set",
            "trainer.num_train_epochs=10",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let child = Command::new(bin())
        .args(&args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let metrics = out.join("metrics.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while std::fs::read_to_string(&metrics)
        .map(|t| t.lines().count())
        .unwrap_or(0)
        < 2
    {
        assert!(
            std::time::Instant::now() < deadline,
            "training did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{err}");
    assert!(err.contains("checkpoint written at step"), "{err}");
    assert!(
        out.join("training.svg").is_file(),
        "the plot is drawn on Ctrl-C too"
    );
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    let done: usize = latest.trim().trim_start_matches("step-").parse().unwrap();
    assert!((2..100).contains(&done), "{latest}");
    let args: Vec<&str> = args
        .iter()
        .map(|s| s.as_str())
        .chain(["--resume"])
        .collect();
    let (ok, _, err) = run_bin(&args);
    assert!(ok, "{err}");
    assert!(err.contains("resuming from"), "{err}");
    let rows = read_jsonl(&metrics).unwrap();
    let steps: Vec<i64> = rows.iter().map(|r| r["step"].as_i64().unwrap()).collect();
    assert_eq!(
        steps,
        (1..=100).collect::<Vec<i64>>(),
        "every step logged once, in order"
    );
    assert!(out.join("models/agent_1/model.safetensors").is_file());
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
    let (_, (ok, _, err)) = run_small(&out, &sets);
    assert!(ok, "{err}");
    let rows = read_jsonl(&out.join("metrics.jsonl")).unwrap();
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
    let (_, (ok, _, err)) = run_small(&tmp.path().join("run2"), &sets);
    assert!(
        !ok && err.contains("comlrl_testkit_transition") && err.contains("asked to panic"),
        "{err}"
    );
}
