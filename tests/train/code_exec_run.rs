//! The two-turn coding scenario end to end (`scenarios/humaneval_coop_2turn_tiny.yaml`): the
//! real binary trains the story model on two HumanEval problems with the sandboxed `code_exec`
//! reward, and the same library's `level_feedback` transition writes the second turn's prompts.
//! Skips without a `python3` (the reward's and the transition's interpreter).
use crate::common;

#[test]
fn two_turn_humaneval_scenario_runs_with_the_level_feedback_transition() {
    if common::python_with(&["ast"]).is_none() {
        return;
    }
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let plugin = comlrl_testutil::plugin("comlrl_code_exec");
    let tmp = tempfile::tempdir().unwrap();
    // The first two training problems and the first held-out one.
    let head = |file: &str, n: usize| {
        let text = std::fs::read_to_string(root.join("data/humaneval").join(file)).unwrap();
        let rows: Vec<&str> = text.lines().take(n).collect();
        let path = tmp.path().join(file);
        std::fs::write(&path, rows.join("\n") + "\n").unwrap();
        path
    };
    let (train, eval) = (head("train.jsonl", 2), head("eval.jsonl", 1));
    let scenario = std::fs::read_to_string(root.join("scenarios/humaneval_coop_2turn_tiny.yaml"))
        .unwrap()
        .replace(
            "../target/release/comlrl_code_exec",
            &plugin.display().to_string(),
        )
        .replace(
            "../data/humaneval/train.jsonl",
            &train.display().to_string(),
        )
        .replace("../data/humaneval/eval.jsonl", &eval.display().to_string())
        .replace(
            "../models/tiny-story",
            &root.join("models/tiny-story").display().to_string(),
        );
    let path = tmp.path().join("humaneval_coop_2turn_tiny.yaml");
    std::fs::write(&path, scenario).unwrap();
    let out = tmp.path().join("run");
    let o = common::on_scenario("run", &path)
        .sets(&[
            "agents[0].max_new_tokens=8",
            "agents[1].max_new_tokens=8",
            "trainer.eval_interval=2",
            "trainer.eval_num_samples=1",
            "logging.steps=1",
        ])
        .set(format!("output_dir={}", out.display()))
        .flags(&["--quiet"])
        .output();
    assert!(o.ok, "{}", o.stderr);
    let rows = common::metrics(&out);
    let steps: Vec<i64> = rows.iter().map(|r| r["step"].as_i64().unwrap()).collect();
    // The scenario evaluates the untrained pair first (`eval_at_start`), then after step 2.
    assert_eq!(steps, vec![0, 1, 2], "{rows:?}");
    for r in &rows[1..] {
        // The story model writes no function: both turns score level 0, shifted by -4.
        assert_eq!(r["turn_2/reward_mean"].as_f64(), Some(-4.0), "{r:?}");
        assert!(
            r["time/transition_s"].as_f64().unwrap_or(0.0) > 0.0,
            "{r:?}"
        );
    }
    for r in [&rows[0], &rows[2]] {
        assert_eq!(r["eval/reward/level"].as_f64(), Some(0.0), "{r:?}");
        assert_eq!(r["eval/reward/pass_all"].as_f64(), Some(0.0), "{r:?}");
        assert_eq!(r["eval/reward_mean"].as_f64(), Some(-4.0), "{r:?}");
    }
}
