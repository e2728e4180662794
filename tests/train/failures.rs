//! Failures of a whole run or command, from the binary: a reward that fails mid-run (stop with
//! the last checkpoint intact, or skip the step), a crashing isolated plugin, broken models
//! (the first agent's error), an unwritable output directory, a malformed scenario, and bad
//! input to `comlrl reward`; in-process, a final checkpoint that cannot be written.
use crate::common;
use common::tiny_run::{load_small, small};
use common::*;
use std::path::{Path, PathBuf};

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
    let (ok, _, err) = small(&out, &sets).output().parts();
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

/// Takes the checkpoints directory's name with a file while the last step runs, as a full
/// disk would fail the checkpoint after it.
struct BlockFinalCheckpoint {
    out: PathBuf,
    total: usize,
}

impl comlrl::train::Observer for BlockFinalCheckpoint {
    fn start(&mut self, total_steps: usize, _done: usize) {
        self.total = total_steps;
    }
    fn step(&mut self, step: usize, _reward_mean: f64, _step_seconds: f64) {
        if step == self.total {
            std::fs::write(self.out.join("checkpoints"), "not a directory").unwrap();
        }
    }
}

#[test]
fn failed_final_checkpoint_is_reported_and_the_models_are_saved_all_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut obs = BlockFinalCheckpoint {
        out: out.clone(),
        total: 0,
    };
    let no_sets: [&str; 0] = [];
    let err = comlrl::train::Trainer::new(load_small(&out, &no_sets))
        .unwrap()
        .run(false, &mut obs)
        .expect_err("the final checkpoint cannot be written");
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        chain.push_str(&format!(" | {s}"));
        source = s.source();
    }
    assert!(
        chain.contains("the final checkpoint (step 20) could not be written")
            && chain.contains("models were saved to")
            && chain.contains("checkpoints"),
        "{chain}"
    );
    for agent in ["agent_0", "agent_1"] {
        let dir = out.join("models").join(agent);
        assert!(
            dir.join("model.safetensors").is_file() && dir.join("config.json").is_file(),
            "{} holds no model",
            dir.display()
        );
    }
    // The saved models load and generate.
    let (ok, _, stderr) = run_comlrl(&[
        "generate",
        "--model",
        out.join("models/agent_1").to_str().unwrap(),
        "--prompt",
        "A story:",
        "--max-new-tokens",
        "4",
    ]);
    assert!(ok, "{stderr}");
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
    let (ok, _, err) = small(&out, &sets).output().parts();
    assert!(ok, "the run goes on: {err}");
    // The third prompt (a bedtime story) fails in each of the 2 epochs.
    assert_eq!(err.matches("skipped").count(), 2, "{err}");
    assert!(err.contains("step 3 (epoch 1, prompt 3) skipped"), "{err}");
    assert!(err.contains("cannot score bedtime stories"), "{err}");
    let rows = metrics(&out);
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
    let (ok, _, err) = small(&out, &sets).output().parts();
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
    let (ok, _, err) = small(&out, &sets).flags(&["--resume"]).output().parts();
    assert!(
        !ok && err.contains("crashed") && err.contains("step 3"),
        "the resume passed the checkpoint's checks and reached the same prompt: {err}"
    );
}

#[test]
fn broken_models_are_reported_for_the_first_agent_though_agents_load_side_by_side() {
    // The agents load in parallel; the error is still the first failing agent's, by index.
    let tmp = tempfile::tempdir().unwrap();
    let (good, broken) = (fixtures().join("tiny-qwen2"), tmp.path().join("broken"));
    std::fs::create_dir_all(&broken).unwrap();
    let rhai = tiny_scenario()
        .parent()
        .unwrap()
        .join("../rewards/len_ratio.rhai");
    let run = |a: &Path, b: &Path, name: &str| {
        let yaml = format!(
            "dataset:\n  prompts: [\"Describe a city in the clouds:\"]\nagents:\n  - model: {}\n  - model: {}\n\
             reward:\n  rhai: {}\n  params: {{target_min: 2, target_max: 3}}\noutput_dir: {}\n",
            a.display(),
            b.display(),
            rhai.display(),
            tmp.path().join(name).display()
        );
        let f = tmp.path().join(format!("{name}.yaml"));
        std::fs::write(&f, yaml).unwrap();
        let (ok, _, err) = run_comlrl(&["run", f.to_str().unwrap(), "--quiet"]);
        assert!(!ok, "{name}: {err}");
        err
    };
    let err = run(&broken, &broken, "both");
    assert!(err.contains("agent 0") && !err.contains("agent 1"), "{err}");
    assert!(err.contains("no config.json"), "{err}");
    let err = run(&good, &broken, "second");
    assert!(
        err.contains("agent 1") && err.contains("no config.json"),
        "{err}"
    );
}

#[test]
fn unwritable_output_dir_is_reported_before_training() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let o = format!("output_dir={}/sub", file.display());
    let (ok, _, err) = run_comlrl(&[
        "run",
        tiny_scenario().to_str().unwrap(),
        "--quiet",
        "--set",
        &o,
    ]);
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
    let text = std::fs::read_to_string(tiny_scenario())
        .unwrap()
        .replace("num_generations: 8", "num_generatons: 8");
    std::fs::write(
        &bad,
        text.replace(
            "../rewards/len_ratio.rhai",
            &format!(
                "{}/../rewards/len_ratio.rhai",
                tiny_scenario().parent().unwrap().display()
            ),
        ),
    )
    .unwrap();
    let (ok, _, err) = run_comlrl(&["check", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("bad.yaml:")
            && err.contains("num_generatons")
            && err.contains("num_generations"),
        "{err}"
    );
    let (ok, _, err) = run_comlrl(&[
        "run",
        tiny_scenario().to_str().unwrap(),
        "--set",
        "trainer.num_generations=1",
    ]);
    assert!(!ok && err.contains("num_generations"), "{err}");
    let (ok, _, err) = run_comlrl(&["check", tiny_scenario().to_str().unwrap()]);
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
    let (ok, out, err) = run_comlrl(&[
        "reward",
        tiny_scenario().to_str().unwrap(),
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
    let (ok, _, err) = run_comlrl(&[
        "reward",
        tiny_scenario().to_str().unwrap(),
        "--completions",
        bad.to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("bad.jsonl:1") && err.contains("2 agents"),
        "{err}"
    );
}
