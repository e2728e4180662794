//! Every way a native plugin can fail gives a clear error naming the plugin; none of them
//! (a panic included) brings the process down. Needs the testkit plugins built.
use crate::common;

use comlrl_reward::{JointSample, NativeReward, PluginFailure, RewardError, RewardFn};
use serde_json::json;
use std::path::Path;

fn misbehave(mode: &str) -> Result<NativeReward, RewardError> {
    NativeReward::load(
        common::plugin("comlrl_testkit_misbehave"),
        &json!({ "mode": mode }),
    )
}

#[test]
fn missing_plugin_lists_tried_paths_and_build_command() {
    let requested = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no/such/comlrl_nothing");
    let err = NativeReward::load(&requested, &json!({})).expect_err("missing");
    let text = err.to_string();
    match &err {
        RewardError::PluginNotFound { tried, .. } => {
            assert!(tried.len() >= 2, "{text}");
            for p in tried {
                assert!(text.contains(&p.display().to_string()), "{text}");
            }
        }
        other => panic!("expected PluginNotFound, got {other:?}"),
    }
    assert!(text.contains("cargo build --release --workspace"), "{text}");
}

#[test]
fn library_without_the_entry_symbol() {
    let path = common::plugin("comlrl_testkit_no_symbol");
    let err = NativeReward::load(&path, &json!({})).expect_err("no symbol");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Symbol,
        &["comlrl_reward_v1", "export_reward!"],
    );
}

#[test]
fn abi_version_mismatch_is_refused_before_any_call() {
    // Every function of this plugin aborts the process if called: passing proves the host
    // stopped at the header.
    let path = common::plugin("comlrl_testkit_bad_abi");
    let err = NativeReward::load(&path, &json!({})).expect_err("bad abi");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Abi,
        &["ABI version 999", "version 1", "rebuild"],
    );
}

#[test]
fn not_a_library_at_all() {
    let path = common::script("not_a_library", "this is text");
    let err = NativeReward::load(&path, &json!({})).expect_err("not a library");
    common::assert_plugin_error(&err, &path, PluginFailure::Load, &[]);
}

#[test]
fn panic_in_score_is_an_error_and_the_plugin_stays_usable() {
    let path = common::plugin("comlrl_testkit_misbehave");
    let reward = misbehave("panic_score").expect("create works");
    for _ in 0..2 {
        let err = reward.score(&common::batch()).expect_err("panics");
        common::assert_plugin_error(
            &err,
            &path,
            PluginFailure::Panic,
            &["panic in score as asked"],
        );
    }
}

#[test]
fn panic_in_create_is_an_error() {
    let path = common::plugin("comlrl_testkit_misbehave");
    let err = misbehave("panic_create").expect_err("panics");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Create,
        &["panicked in create", "panic in create as asked"],
    );
}

#[test]
fn errors_reported_by_the_plugin() {
    let path = common::plugin("comlrl_testkit_misbehave");
    let err = misbehave("error_create").expect_err("refuses");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Create,
        &["create refused as asked"],
    );
    let err = misbehave("error_score")
        .expect("create")
        .score(&common::batch())
        .expect_err("refuses");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Score,
        &["score refused as asked"],
    );
}

#[test]
fn nan_from_a_plugin_is_rejected() {
    let path = common::plugin("comlrl_testkit_misbehave");
    let err = misbehave("nan")
        .expect("create")
        .score(&common::batch())
        .expect_err("nan");
    common::assert_plugin_error(&err, &path, PluginFailure::Return, &["score #0 is NaN"]);
}

#[test]
fn bad_params_for_len_ratio() {
    let path = common::plugin("comlrl_len_ratio");
    let err = NativeReward::load(&path, &json!({"target_min": 5.0})).expect_err("min > max");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Create,
        &["target_min (5) must not exceed target_max (3)"],
    );
    let err = NativeReward::load(&path, &json!({"min": 1})).expect_err("unknown");
    common::assert_plugin_error(&err, &path, PluginFailure::Create, &["unknown param `min`"]);
}

#[test]
fn len_ratio_needs_two_agents() {
    let path = common::plugin("comlrl_len_ratio");
    let reward = NativeReward::load(&path, &json!({})).expect("load");
    let err = reward
        .score(&[JointSample::new("p", vec!["solo".into()])])
        .expect_err("one agent");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Score,
        &["needs 2 agents, got 1"],
    );
    assert_eq!(reward.score(&[]).expect("empty batch"), Vec::<f32>::new());
}
