//! Plugins run in a child process (`isolate: true`): whatever they do to their process —
//! abort, segfault, stack overflow, `exit(0)`, an endless loop — comes back as an error that
//! names the plugin, how its process ended and what it was doing; the test process (the
//! trainer) lives on, and the next call starts a fresh child. Needs the testkit plugins built.
mod common;

use comlrl_reward::isolate::HOST_ENV;
use comlrl_reward::spec::RewardSpec;
use comlrl_reward::{
    HostCommand, IsolatedReward, PluginFailure, RewardError, RewardFn, RewardStack,
};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

fn host() -> HostCommand {
    HostCommand::comlrl(env!("CARGO_BIN_EXE_comlrl-plugin-host"))
}

fn misbehave(mode: &str, budget_ms: u64) -> Result<IsolatedReward, RewardError> {
    IsolatedReward::load(
        common::plugin("comlrl_testkit_misbehave"),
        &json!({ "mode": mode }),
        host(),
        Duration::from_millis(budget_ms),
    )
}

#[test]
fn an_isolated_plugin_scores_like_an_in_process_one() {
    let plugin = common::plugin("comlrl_len_ratio");
    let isolated =
        IsolatedReward::load(&plugin, &json!({}), host(), Duration::from_secs(30)).expect("load");
    let native = comlrl_reward::NativeReward::load(&plugin, &json!({})).expect("load");
    let b = comlrl_reward::bench::synthetic_batch(200, 2);
    for _ in 0..3 {
        assert_eq!(
            isolated.score(&b).expect("isolated"),
            native.score(&b).expect("native")
        );
    }
    assert_eq!(isolated.plugin_name(), native.plugin_name());
    assert_eq!(isolated.score(&[]).expect("empty"), Vec::<f32>::new());
}

#[test]
fn crashes_become_errors_and_the_next_call_starts_afresh() {
    let path = common::plugin("comlrl_testkit_misbehave");
    for (mode, needles) in [
        ("abort", &["crashed (signal 6 SIGABRT)"][..]),
        ("segv", &["crashed (signal 11 SIGSEGV)"][..]),
        (
            "stack_overflow",
            &["crashed (signal", "overflowed its stack"][..],
        ),
        ("exit0", &["exited with status 0"][..]),
    ] {
        let reward = misbehave(mode, 30_000).expect("create works");
        for _ in 0..2 {
            let err = reward.score(&common::batch()).expect_err(mode);
            common::assert_plugin_error(&err, &path, PluginFailure::Crash, needles);
            common::assert_plugin_error(
                &err,
                &path,
                PluginFailure::Crash,
                &["while scoring a batch of 3 joint samples"],
            );
        }
    }
}

#[test]
fn an_endless_loop_is_killed_at_the_time_budget() {
    let path = common::plugin("comlrl_testkit_misbehave");
    let reward = misbehave("hang", 300).expect("create works");
    let t = Instant::now();
    let err = reward.score(&common::batch()).expect_err("hangs");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::TimeBudget,
        &["(300 ms)", "killed"],
    );
}

#[test]
fn plugin_errors_travel_back_with_their_kind() {
    let path = common::plugin("comlrl_testkit_misbehave");
    let err = misbehave("error_create", 30_000).expect_err("refuses");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Create,
        &["create refused as asked"],
    );
    let reward = misbehave("panic_score", 30_000).expect("create works");
    let err = reward.score(&common::batch()).expect_err("panics");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Panic,
        &["panic in score as asked"],
    );
    let err = misbehave("write_past_n", 30_000)
        .expect("create")
        .score(&common::batch())
        .expect_err("overrun");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Memory,
        &["wrote past the 3 scores"],
    );
    let err = misbehave("nan", 30_000)
        .expect("create")
        .score(&common::batch())
        .expect_err("nan");
    common::assert_plugin_error(&err, &path, PluginFailure::Return, &["score #0 is NaN"]);
}

#[test]
fn stdout_chatter_cannot_corrupt_the_protocol() {
    let reward = misbehave("stdout", 30_000).expect("create works");
    for _ in 0..3 {
        assert_eq!(
            reward.score(&common::batch()).expect("scores"),
            vec![1.0; 3]
        );
    }
}

#[test]
fn a_broken_host_is_a_clear_error() {
    let path = common::plugin("comlrl_testkit_misbehave");
    let missing = HostCommand::comlrl("/no/such/comlrl");
    let err = IsolatedReward::load(&path, &json!({}), missing, Duration::from_secs(5))
        .expect_err("no host");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Host,
        &["cannot start the plugin host", "/no/such/comlrl"],
    );
    // A program that exits without speaking the protocol (the test binary of this crate
    // stands in for "current_exe is not comlrl").
    let wrong = HostCommand {
        program: env!("CARGO_BIN_EXE_comlrl-plugin-host").into(),
        args: vec!["not-a-subcommand".into()],
    };
    let err = IsolatedReward::load(&path, &json!({}), wrong, Duration::from_secs(5))
        .expect_err("wrong host");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Crash,
        &[
            "exited with status 2 while creating its state",
            "usage: comlrl-plugin-host",
        ],
    );
}

#[test]
fn stack_terms_are_isolated_by_default() {
    // The only test here that builds a stack with plugins; it sets the host for them.
    std::env::set_var(HOST_ENV, env!("CARGO_BIN_EXE_comlrl-plugin-host"));
    let path = common::plugin("comlrl_testkit_misbehave");
    let spec = RewardSpec {
        plugin: Some(path.clone()),
        params: json!({"mode": "segv"}),
        ..RewardSpec::default()
    };
    let stack =
        RewardStack::build(std::slice::from_ref(&spec), &[], Path::new("/")).expect("build");
    let err = stack.score(&common::batch()).expect_err("crashes");
    common::assert_plugin_error(&err, &path, PluginFailure::Crash, &["signal 11"]);
    let ok = RewardSpec {
        params: json!({"mode": "ok"}),
        time_budget_ms: Some(10_000),
        ..spec
    };
    let stack = RewardStack::build(&[ok], &[], Path::new("/")).expect("build");
    assert_eq!(stack.score(&common::batch()).expect("scores").len(), 3);
}
