//! Plugins run in a child process (`isolate: true`): whatever they do to their process —
//! abort, segfault, stack overflow, `exit(0)`, an endless loop — comes back as an error that
//! names the plugin, how its process ended and what it was doing; the test process (the
//! trainer) lives on, and the next call starts a fresh child. Transition plugins run the same
//! way. The child leads a process group of its own, and nothing the plugin forked outlives it.
//! Needs the testkit plugins built.
use crate::common;

use comlrl_reward::isolate::HOST_ENV;
use comlrl_reward::spec::{CodeSource, OnError, RewardSpec, TransitionPlan};
use comlrl_reward::{
    HostCommand, IsolatedReward, IsolatedTransition, NativeTransition, PluginFailure, RewardError,
    RewardFn, RewardStack, TransitionFn,
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

#[test]
fn what_a_plugin_forks_dies_with_its_host() {
    let reward = misbehave("fork_sleep", 30_000).expect("create works");
    assert_eq!(
        reward.score(&common::batch()).expect("scores"),
        vec![1.0; 3]
    );
    let group = reward.process_group().expect("a host runs");
    let Some(live) = common::live_group_members(group) else {
        comlrl_testutil::skip("no /proc to list the processes of a group");
        return;
    };
    // The host and the sleeper it forked (which would sleep for 10 s).
    assert!(live.len() >= 2, "host and sleeper: {live:?}");
    drop(reward);
    let left = common::live_group_members_after(group, Duration::from_secs(2)).expect("/proc");
    assert!(left.is_empty(), "still alive in group {group}: {left:?}");
}

#[test]
fn a_plugin_that_forks_then_aborts_is_a_crash_at_once() {
    let path = common::plugin("comlrl_testkit_misbehave");
    let reward = misbehave("fork_abort", 60_000).expect("create works");
    let group = reward.process_group().expect("a host runs");
    let t = Instant::now();
    let err = reward.score(&common::batch()).expect_err("aborts");
    let took = t.elapsed();
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Crash,
        &["crashed (signal 6 SIGABRT)", "while scoring a batch of 3"],
    );
    // The forked sleeper holds the pipes for 10 s: the crash is seen from the host's exit.
    assert!(took < Duration::from_secs(3), "reported after {took:?}");
    if let Some(left) = common::live_group_members_after(group, Duration::from_secs(2)) {
        assert!(left.is_empty(), "still alive in group {group}: {left:?}");
    }
    // The next call starts a fresh host (and crashes the same way).
    assert!(reward.process_group().is_none());
    let err = reward.score(&common::batch()).expect_err("aborts again");
    common::assert_plugin_error(&err, &path, PluginFailure::Crash, &["SIGABRT"]);
}

fn transition(
    params: serde_json::Value,
    budget_ms: u64,
) -> Result<IsolatedTransition, RewardError> {
    IsolatedTransition::load(
        common::plugin("comlrl_testkit_transition"),
        &params,
        host(),
        Duration::from_millis(budget_ms),
    )
}

#[test]
fn an_isolated_transition_writes_what_the_in_process_one_writes() {
    let path = common::plugin("comlrl_testkit_transition");
    let branch = common::Branch::after_turn_one();
    let native = NativeTransition::load(&path, &json!({})).expect("load");
    let isolated = transition(json!({}), 30_000).expect("load");
    assert_eq!(isolated.plugin_name(), native.plugin_name());
    for _ in 0..2 {
        assert_eq!(
            isolated.next_prompts(&branch.input()).expect("isolated"),
            native.next_prompts(&branch.input()).expect("native")
        );
    }
    // A plugin printing to stdout cannot corrupt the protocol.
    let chatty = transition(json!({"misbehave": "stdout"}), 30_000).expect("load");
    assert_eq!(
        chatty.next_prompts(&branch.input()).expect("prompts"),
        vec!["Revise (turn 1): a", "Revise (turn 1): b"]
    );
    // Its own errors travel back with their kind, said of the transition.
    let err = transition(json!({"panic": true}), 30_000)
        .expect("load")
        .next_prompts(&branch.input())
        .expect_err("panics");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Panic,
        &["transition plugin", "asked to panic"],
    );
    let err = transition(json!({"bad_utf8": true}), 30_000)
        .expect("load")
        .next_prompts(&branch.input())
        .expect_err("not utf-8");
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::Return,
        &["prompt for agent 0 is not valid UTF-8"],
    );
}

#[test]
fn a_crashing_transition_is_an_error_naming_it() {
    let path = common::plugin("comlrl_testkit_transition");
    let branch = common::Branch::after_turn_one();
    for (mode, needle) in [
        ("abort", "crashed (signal 6 SIGABRT)"),
        ("segv", "crashed (signal 11 SIGSEGV)"),
        ("exit0", "exited with status 0"),
    ] {
        let t = transition(json!({ "misbehave": mode }), 30_000).expect("create works");
        for _ in 0..2 {
            let err = t.next_prompts(&branch.input()).expect_err(mode);
            common::assert_plugin_error(
                &err,
                &path,
                PluginFailure::Crash,
                &[
                    "transition plugin",
                    needle,
                    "while writing the prompts of turn 2 for 2 agents",
                    "trainer.external_transition",
                ],
            );
        }
    }
    let t = transition(json!({"misbehave": "hang"}), 300).expect("create works");
    let start = Instant::now();
    let err = t.next_prompts(&branch.input()).expect_err("hangs");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    common::assert_plugin_error(
        &err,
        &path,
        PluginFailure::TimeBudget,
        &[
            "(300 ms)",
            "killed",
            "trainer.external_transition.time_budget_ms",
        ],
    );
}

#[test]
fn scenario_transitions_are_isolated_by_default_and_can_skip_steps() {
    // Sets the host for `load_transition` (the same variable as the stack test's, same value).
    std::env::set_var(HOST_ENV, env!("CARGO_BIN_EXE_comlrl-plugin-host"));
    let path = common::plugin("comlrl_testkit_transition");
    let branch = common::Branch::after_turn_one();
    let plan = |misbehave: &str, on_error| TransitionPlan {
        source: CodeSource::Plugin(path.clone()),
        params: json!({ "misbehave": misbehave }),
        time_budget_ms: None,
        isolate: None,
        on_error,
    };
    // In-process, this segfault would end the test process.
    let t = comlrl_reward::load_transition(&plan("segv", OnError::Fail)).expect("load");
    let err = t.next_prompts(&branch.input()).expect_err("crashes");
    common::assert_plugin_error(&err, &path, PluginFailure::Crash, &["signal 11"]);
    let t = comlrl_reward::load_transition(&plan("segv", OnError::SkipStep)).expect("load");
    match t.next_prompts(&branch.input()).expect_err("crashes") {
        RewardError::SkipStep { term, source } => {
            assert_eq!(term, comlrl_reward::TRANSITION_TERM);
            common::assert_plugin_error(&source, &path, PluginFailure::Crash, &["signal 11"]);
            let text = RewardError::SkipStep { term, source }.to_string();
            assert!(
                text.starts_with("the transition (`trainer.external_transition`) failed"),
                "{text}"
            );
        }
        other => panic!("expected a skip, got {other:?}"),
    }
    // A hang ends at the plan's budget.
    let slow = TransitionPlan {
        time_budget_ms: Some(200),
        ..plan("hang", OnError::Fail)
    };
    let t = comlrl_reward::load_transition(&slow).expect("load");
    let err = t.next_prompts(&branch.input()).expect_err("hangs");
    common::assert_plugin_error(&err, &path, PluginFailure::TimeBudget, &["(200 ms)"]);
    // `isolate: false` loads it in-process (only a well-behaved one here).
    let inproc = TransitionPlan {
        isolate: Some(false),
        ..plan("", OnError::Fail)
    };
    let t = comlrl_reward::load_transition(&inproc).expect("load");
    assert_eq!(
        t.next_prompts(&branch.input()).expect("prompts"),
        vec!["Revise (turn 1): a", "Revise (turn 1): b"]
    );
}
