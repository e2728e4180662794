//! The real `comlrl` binary as plugin host: `comlrl plugin-host <path>` serves an isolated
//! reward term, a crash in the plugin is an error in the trainer, and `comlrl check` reports
//! a truncated plugin file instead of dying of SIGBUS. The testkit plugins are built on first use.
use crate::common;

use comlrl_reward::{
    HostCommand, IsolatedReward, JointSample, PluginFailure, RewardError, RewardFn,
};
use std::path::PathBuf;
use std::time::Duration;

fn plugin(name: &str) -> PathBuf {
    comlrl_testutil::plugin(name)
}

fn misbehave(mode: &str) -> IsolatedReward {
    IsolatedReward::load(
        plugin("comlrl_testkit_misbehave"),
        &serde_json::json!({ "mode": mode }),
        HostCommand::comlrl(common::bin()),
        Duration::from_secs(30),
    )
    .expect("create works")
}

#[test]
fn comlrl_plugin_host_scores_and_reports_crashes() {
    let batch = vec![JointSample::new("p", vec!["a".into(), "b".into()]); 2];
    assert_eq!(
        misbehave("ok").score(&batch).expect("scores"),
        vec![1.0, 1.0]
    );
    let err = misbehave("segv").score(&batch).expect_err("crashes");
    let text = err.to_string();
    assert!(
        matches!(
            err,
            RewardError::Plugin {
                kind: PluginFailure::Crash,
                ..
            }
        ),
        "{text}"
    );
    assert!(text.contains("comlrl_testkit_misbehave"), "{text}");
    assert!(text.contains("signal 11"), "{text}");
    assert!(
        text.contains("while scoring a batch of 2 joint samples"),
        "{text}"
    );
}

#[test]
fn check_reports_a_truncated_plugin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = std::fs::read(plugin("comlrl_len_ratio")).expect("read");
    let lib = dir.path().join("libcut.so");
    std::fs::write(&lib, &good[..good.len() / 2]).expect("write");
    let scenario = dir.path().join("s.yaml");
    std::fs::write(
        &scenario,
        format!(
            "dataset:\n  prompts: [\"a\", \"b\"]\nagents:\n  count: 2\n  model: builtin:tiny\nreward:\n  plugin: {}\ntrainer:\n  num_generations: 2\n",
            lib.display()
        ),
    )
    .expect("write");
    for isolate in ["true", "false"] {
        let out = common::on_scenario("check", &scenario)
            .set(format!("reward.isolate={isolate}"))
            .output();
        let stderr = out.stderr;
        assert_eq!(out.code, Some(1), "isolate {isolate}: {stderr}");
        assert!(stderr.contains("libcut.so"), "{stderr}");
        assert!(stderr.contains("truncated"), "{stderr}");
    }
}
