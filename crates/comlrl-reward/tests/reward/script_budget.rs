//! A reward or transition script cannot stall training: every call has a wall-clock budget
//! (closures and built-ins that call back included), `sleep` is gone, and growing arrays or
//! maps stops at a cap in bounded time.
use crate::common;

use comlrl_reward::{
    JointSample, RewardError, RewardFn, RhaiReward, RhaiTransition, SandboxLimits, ScriptFailure,
    TransitionFn,
};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

fn batch(n: usize) -> Vec<JointSample> {
    vec![JointSample::new("p", vec!["ab".into(), "日本".into()]); n]
}

/// Score `source` with `limits`; return the error and how long scoring took.
fn score_err(name: &str, source: &str, limits: &SandboxLimits) -> (RewardError, Duration) {
    let path = common::script(name, source);
    let reward = RhaiReward::load_with_limits(&path, &json!({}), limits).expect("script loads");
    let t = Instant::now();
    let err = reward.score(&batch(2)).expect_err("scoring should fail");
    (err, t.elapsed())
}

fn kind_of(err: &RewardError) -> ScriptFailure {
    match err {
        RewardError::Script { kind, .. } => *kind,
        other => panic!("expected a script error, got {other:?}"),
    }
}

fn assert_timeout(err: &RewardError, path: &Path, ms: u64, line: usize) {
    let text = err.to_string();
    assert_eq!(kind_of(err), ScriptFailure::TimeBudget, "{text}");
    let want = format!(
        "reward script exceeded its time budget ({ms} ms) at {}:{line}",
        path.display()
    );
    assert!(text.contains(&want), "wanted {want:?} in: {text}");
    assert!(
        text.contains("time_budget_ms"),
        "says how to raise it: {text}"
    );
}

#[test]
fn sleep_is_not_available() {
    let t = Instant::now();
    let (err, _) = score_err(
        "sleep_forever",
        "fn reward(c, ctx) {\n    sleep(1e9);\n    1.0\n}\n",
        &SandboxLimits::default(),
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let text = err.to_string();
    assert_eq!(kind_of(&err), ScriptFailure::Runtime, "{text}");
    assert!(text.contains("`sleep` is not available"), "{text}");
    let (err, _) = score_err(
        "sleep_int",
        "fn reward(c, ctx) { sleep(100000); 1.0 }\n",
        &SandboxLimits::default(),
    );
    assert!(
        err.to_string().contains("`sleep` is not available"),
        "{err}"
    );
}

#[test]
fn closures_in_map_cannot_escape_the_time_budget() {
    // Each closure call gets a fresh operation budget, so the operation cap never stops this.
    let src = "fn reward(c, ctx) {\n    let a = [];\n    a.pad(1000, 0);\n    loop {\n        a.map(|x| {\n            let n = 0;\n            while n < 100_000 { n += 1; }\n            x\n        });\n    }\n}\n";
    let limits = SandboxLimits {
        time_budget_ms: 300,
        ..SandboxLimits::default()
    };
    let path = common::script("closure_stall", src);
    let (err, took) = score_err("closure_stall", src, &limits);
    assert!(took < Duration::from_secs(5), "stopped late: {took:?}");
    assert_timeout(&err, &path, 300, 5);
}

#[test]
fn sort_comparator_cannot_escape_the_time_budget() {
    // `sort` swallows its comparator's errors: the budget must still hold.
    let src = "fn reward(c, ctx) {\n    let a = [];\n    a.pad(200, 1);\n    loop {\n        a.sort(|x, y| { let n = 0; while n < 100_000 { n += 1; } 0 });\n    }\n}\n";
    let limits = SandboxLimits {
        time_budget_ms: 200,
        ..SandboxLimits::default()
    };
    let path = common::script("sort_stall", src);
    let (err, took) = score_err("sort_stall", src, &limits);
    assert!(took < Duration::from_secs(5), "stopped late: {took:?}");
    let text = err.to_string();
    assert_eq!(kind_of(&err), ScriptFailure::TimeBudget, "{text}");
    assert!(
        text.contains("reward script exceeded its time budget (200 ms)"),
        "{text}"
    );
    assert!(text.contains(&path.display().to_string()), "{text}");
}

#[test]
fn batch_entry_has_its_own_budget() {
    let src = "fn reward_batch(s, ctx) {\n    let a = [];\n    a.pad(1000, 0);\n    loop {\n        a.map(|x| { let n = 0; while n < 100_000 { n += 1; } 1.0 });\n    }\n}\n";
    let limits = SandboxLimits {
        batch_time_budget_ms: 250,
        ..SandboxLimits::default()
    };
    let path = common::script("batch_stall", src);
    let (err, took) = score_err("batch_stall", src, &limits);
    assert!(took < Duration::from_secs(5), "stopped late: {took:?}");
    assert_timeout(&err, &path, 250, 5);
}

#[test]
fn pushing_forever_stops_quickly() {
    // The array's size check is linear per push: with a 1M cap this ran for many minutes.
    let (err, took) = score_err(
        "push_forever",
        "fn reward(c, ctx) {\n    let a = [];\n    loop { a.push(1); }\n}\n",
        &SandboxLimits::default(),
    );
    assert!(took < Duration::from_secs(10), "stopped late: {took:?}");
    let kind = kind_of(&err);
    assert!(
        matches!(kind, ScriptFailure::Limit | ScriptFailure::TimeBudget),
        "{err}"
    );
}

#[test]
fn growing_a_blob_or_map_stops_at_the_cap() {
    for (name, src) in [
        (
            "blob_forever",
            "fn reward(c, ctx) {\n    let b = blob();\n    loop { b.push(1); }\n}\n",
        ),
        (
            "map_forever",
            "fn reward(c, ctx) {\n    let m = #{};\n    let i = 0;\n    loop { m[`k${i}`] = i; i += 1; }\n}\n",
        ),
        (
            "blob_alloc",
            "fn reward(c, ctx) {\n    let b = blob(1_000_000_000);\n    1.0\n}\n",
        ),
    ] {
        let (err, took) = score_err(name, src, &SandboxLimits::default());
        assert!(took < Duration::from_secs(10), "{name} stopped late: {took:?}");
        assert_eq!(kind_of(&err), ScriptFailure::Limit, "{name}: {err}");
        let what = if name.starts_with("map") {
            "Size of object map `m` (10001 properties, at most 10000)"
        } else {
            "Size of array/BLOB too large"
        };
        assert!(err.to_string().contains(what), "{name}: {err}");
    }
}

#[test]
fn stalled_top_level_code_stops_at_load() {
    let path = common::script(
        "top_level_stall",
        "let a = [];\na.pad(1000, 0);\nloop { a.map(|x| { let n = 0; while n < 100_000 { n += 1; } x }); }\nfn reward(c, ctx) { 1.0 }\n",
    );
    let limits = SandboxLimits {
        time_budget_ms: 200,
        ..SandboxLimits::default()
    };
    let t = Instant::now();
    let err = RhaiReward::load_with_limits(&path, &json!({}), &limits).expect_err("stalls");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_timeout(&err, &path, 200, 3);
}

#[test]
fn transition_scripts_have_the_same_budget() {
    let path = common::script(
        "transition_stall",
        "fn transition(ctx) {\n    let a = [];\n    a.pad(1000, 0);\n    loop { a.map(|x| { let n = 0; while n < 100_000 { n += 1; } `${x}` }); }\n}\n",
    );
    let limits = SandboxLimits {
        time_budget_ms: 200,
        ..SandboxLimits::default()
    };
    let t = RhaiTransition::load_with_limits(&path, &json!({}), &limits).expect("loads");
    let branch = common::Branch::after_turn_one();
    let input = branch.input();
    let start = Instant::now();
    let err = t.next_prompts(&input).expect_err("stalls");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_timeout(&err, &path, 200, 4);
}

#[test]
fn normal_scripts_are_unaffected() {
    let reward = RhaiReward::load(common::len_ratio_script(), &json!({})).expect("loads");
    let scores = reward.score(&batch(4)).expect("scores");
    assert_eq!(scores.len(), 4);
}
