//! What the host checks so that a broken plugin is an error, not a crash, even in-process:
//! the file before `dlopen`, the table before the first call, strings the plugin hands back,
//! and the score buffer's guard space. Needs the testkit plugins built.
use crate::common;

use comlrl_reward::{NativeReward, PluginFailure, RewardFn};
use serde_json::json;
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-hardening");
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir.join(name)
}

#[test]
fn truncated_library_is_an_error_not_sigbus() {
    let good = std::fs::read(common::plugin("comlrl_len_ratio")).expect("read plugin");
    // Cut at several points: inside the headers, mid-file, just before the end.
    for (i, keep) in [64, 4096, good.len() / 2, good.len() - 100]
        .into_iter()
        .enumerate()
    {
        let path = scratch(&format!("libtruncated_{i}.so"));
        std::fs::write(&path, &good[..keep]).expect("write");
        let err = NativeReward::load(&path, &json!({})).expect_err("truncated");
        let (kind, text) = common::plugin_error(&err, &path);
        assert_eq!(kind, PluginFailure::Load, "{text}");
        assert!(
            text.contains("truncated") || text.contains("not a shared library"),
            "{keep} bytes: {text}"
        );
    }
}

#[test]
fn dlopen_errors_carry_the_loaders_text() {
    // A complete ELF shared library the loader still refuses: an unresolvable dependency is
    // hard to fake, so use a library for the wrong machine (patched e_machine).
    let mut bytes = std::fs::read(common::plugin("comlrl_len_ratio")).expect("read plugin");
    if &bytes[..4] != b"\x7fELF" {
        comlrl_testutil::skip("not an ELF platform");
        return;
    }
    bytes[18] = 0x28; // EM_ARM
    bytes[19] = 0;
    let path = scratch("libwrong_machine.so");
    std::fs::write(&path, &bytes).expect("write");
    let err = NativeReward::load(&path, &json!({})).expect_err("wrong machine");
    let (kind, text) = common::plugin_error(&err, &path);
    assert_eq!(kind, PluginFailure::Load, "{text}");
    // dlerror's text names the file and the reason, after libloading's "dlopen failed".
    assert!(text.contains("dlopen failed: "), "{text}");
    assert!(text.matches("libwrong_machine.so").count() >= 2, "{text}");
}

#[test]
fn broken_tables_are_refused_before_any_call() {
    // Every function of this plugin aborts the process if called.
    let path = common::plugin("comlrl_testkit_bad_table");
    for (mode, needle) in [
        ("null_create", "`create` function pointer is null"),
        ("null_score", "`score` function pointer is null"),
        ("null_destroy", "`destroy` function pointer is null"),
        ("null_name", "name pointer is null"),
        ("bad_utf8_name", "name is not valid UTF-8"),
        ("long_name", "at most 1024"),
    ] {
        // The entry point reads the variable when the host calls it, once per load; only
        // this test sets it.
        std::env::set_var("COMLRL_TESTKIT_BAD_TABLE", mode);
        let err = NativeReward::load(&path, &json!({})).expect_err(mode);
        let (kind, text) = common::plugin_error(&err, &path);
        assert_eq!(kind, PluginFailure::Table, "{mode}: {text}");
        assert!(text.contains(needle), "{mode}: {text}");
    }
    std::env::remove_var("COMLRL_TESTKIT_BAD_TABLE");
}

fn misbehave(mode: &str) -> NativeReward {
    NativeReward::load(
        common::plugin("comlrl_testkit_misbehave"),
        &json!({ "mode": mode }),
    )
    .expect("create works")
}

#[test]
fn writing_past_the_scores_is_caught() {
    let path = common::plugin("comlrl_testkit_misbehave");
    let reward = misbehave("write_past_n");
    for _ in 0..3 {
        let err = reward.score(&common::batch()).expect_err("overrun");
        let (kind, text) = common::plugin_error(&err, &path);
        assert_eq!(kind, PluginFailure::Memory, "{text}");
        assert!(text.contains("wrote past the 3 scores"), "{text}");
        assert!(text.contains("isolate: true"), "{text}");
    }
}

#[test]
fn unwritten_scores_are_caught() {
    let path = common::plugin("comlrl_testkit_misbehave");
    let err = misbehave("skip_write")
        .score(&common::batch())
        .expect_err("unwritten");
    let (kind, text) = common::plugin_error(&err, &path);
    assert_eq!(kind, PluginFailure::Memory, "{text}");
    assert!(text.contains("did not write score #0 of 3"), "{text}");
}

#[test]
fn error_text_that_is_not_utf8_is_checked() {
    let path = common::plugin("comlrl_testkit_misbehave");
    let err = misbehave("bad_utf8_error")
        .score(&common::batch())
        .expect_err("error");
    let (kind, text) = common::plugin_error(&err, &path);
    assert_eq!(kind, PluginFailure::Score, "{text}");
    assert!(text.contains("not valid UTF-8"), "{text}");
    assert!(text.contains("misbehave: "), "{text}");
}

#[test]
fn transition_prompts_that_are_not_utf8_are_refused() {
    use comlrl_reward::{NativeTransition, TransitionFn};
    let path = common::plugin("comlrl_testkit_transition");
    let branch = common::Branch::after_turn_one();
    let input = branch.input();
    let good = NativeTransition::load(&path, &json!({})).expect("load");
    assert_eq!(
        good.next_prompts(&input).expect("prompts"),
        vec!["Revise (turn 1): a", "Revise (turn 1): b"]
    );
    let bad = NativeTransition::load(&path, &json!({"bad_utf8": true})).expect("load");
    let err = bad.next_prompts(&input).expect_err("not utf-8");
    let (kind, text) = common::plugin_error(&err, &path);
    assert_eq!(kind, PluginFailure::Return, "{text}");
    assert!(
        text.contains("prompt for agent 0 is not valid UTF-8"),
        "{text}"
    );
}
