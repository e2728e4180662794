//! Every way a Rhai reward script can fail gives a clear error naming the script and, where
//! Rhai knows it, the line and column; none of them brings the process down.
use crate::common;

use comlrl_reward::{JointSample, RewardError, RewardFn, RhaiReward, ScriptFailure};
use serde_json::json;
use std::path::{Path, PathBuf};

fn batch(n: usize) -> Vec<JointSample> {
    (0..n)
        .map(|i| JointSample::new("p", vec!["ab".repeat(i + 1), "日本".into()]))
        .collect()
}

/// Load `source`, expecting a load error; return it with the script path.
fn load_err(name: &str, source: &str) -> (RewardError, PathBuf) {
    let path = common::script(name, source);
    let err = RhaiReward::load(&path, &json!({})).expect_err("load should fail");
    (err, path)
}

/// Load `source` fine, then expect scoring a 3-sample batch to fail.
fn score_err(name: &str, source: &str) -> (RewardError, PathBuf) {
    let path = common::script(name, source);
    let reward = RhaiReward::load(&path, &json!({})).expect("script loads");
    let err = reward.score(&batch(3)).expect_err("scoring should fail");
    (err, path)
}

/// Assert the error is a script error of `kind` at (line, column-if-given), mentioning every
/// `needles`, and that its message names the path.
fn assert_script(
    err: &RewardError,
    path: &Path,
    kind: ScriptFailure,
    line: Option<usize>,
    needles: &[&str],
) {
    let text = err.to_string();
    assert!(
        text.contains(&path.display().to_string()),
        "names the path: {text}"
    );
    assert!(text.contains("hint:"), "says what to do: {text}");
    match err {
        RewardError::Script { kind: k, pos, .. } => {
            assert_eq!(*k, kind, "{text}");
            match line {
                Some(l) => {
                    let p = pos.unwrap_or_else(|| panic!("expected a position: {text}"));
                    assert_eq!(p.line, l, "{text}");
                    assert!(
                        text.contains(&format!("(line {l}, column {})", p.column)),
                        "{text}"
                    );
                }
                None => assert!(pos.is_none(), "{text}"),
            }
        }
        other => panic!("expected a script error, got {other:?}"),
    }
    for n in needles {
        assert!(text.contains(n), "mentions {n:?}: {text}");
    }
}

#[test]
fn syntax_error_has_line_and_column() {
    let (err, path) = load_err(
        "syntax",
        "fn reward(c, ctx) {\n    let x = 1;\n    let y = ;\n    x\n}\n",
    );
    assert_script(
        &err,
        &path,
        ScriptFailure::Syntax,
        Some(3),
        &["syntax error"],
    );
    if let RewardError::Script { pos: Some(p), .. } = &err {
        assert_eq!(p.column, 13, "{err}");
    }
}

#[test]
fn undeclared_variable_is_caught_at_load() {
    let (err, path) = load_err(
        "strict",
        "fn reward(c, ctx) {\n    c.len() + undeclared\n}\n",
    );
    assert_script(&err, &path, ScriptFailure::Syntax, Some(2), &["undeclared"]);
}

#[test]
fn runtime_error_has_line_and_sample() {
    let (err, path) = score_err(
        "runtime",
        "fn reward(c, ctx) {\n    let x = c[0];\n    c[7].len()\n}\n",
    );
    assert_script(
        &err,
        &path,
        ScriptFailure::Runtime,
        Some(3),
        &["joint sample #0"],
    );
}

#[test]
fn thrown_error_inside_helper_points_at_the_helper() {
    let src = "fn helper(x) {\n    throw `bad input ${x}`;\n}\nfn reward(c, ctx) {\n    helper(c.len())\n}\n";
    let (err, path) = score_err("throw", src);
    assert_script(
        &err,
        &path,
        ScriptFailure::Runtime,
        Some(2),
        &["bad input 2", "helper"],
    );
}

#[test]
fn endless_loop_hits_the_operation_cap() {
    let (err, path) = score_err(
        "endless",
        "fn reward(c, ctx) {\n    let n = 0;\n    loop { n += 1; }\n}\n",
    );
    assert_script(
        &err,
        &path,
        ScriptFailure::Limit,
        Some(3),
        &["Too many operations"],
    );
}

#[test]
fn runaway_recursion_hits_the_call_depth_cap() {
    let (err, path) = score_err(
        "recursion",
        "fn down(n) { down(n + 1) }\nfn reward(c, ctx) { down(0) }\n",
    );
    assert_script(
        &err,
        &path,
        ScriptFailure::Limit,
        Some(1),
        &["Stack overflow"],
    );
}

#[test]
fn huge_string_hits_the_size_cap() {
    let (err, path) = score_err(
        "huge",
        "fn reward(c, ctx) {\n    let s = \"x\";\n    loop { s += s; }\n}\n",
    );
    assert_script(&err, &path, ScriptFailure::Limit, Some(3), &["too large"]);
}

#[test]
fn wrong_return_type() {
    let (err, path) = score_err("string_return", "fn reward(c, ctx) { \"one\" }\n");
    assert_script(
        &err,
        &path,
        ScriptFailure::Return,
        None,
        &["string", "integer or a float", "#0"],
    );
    let (err, path) = score_err("unit_return", "fn reward(c, ctx) { }\n");
    assert_script(&err, &path, ScriptFailure::Return, None, &["()"]);
}

#[test]
fn nan_and_infinity_are_rejected() {
    let (err, path) = score_err("nan", "fn reward(c, ctx) { sqrt(-1.0) }\n");
    assert_script(&err, &path, ScriptFailure::Return, None, &["NaN", "finite"]);
    let (err, path) = score_err("inf", "fn reward(c, ctx) { exp(1000.0) }\n");
    assert_script(&err, &path, ScriptFailure::Return, None, &["inf", "finite"]);
    let (err, path) = score_err("f32_overflow", "fn reward(c, ctx) { 1e300 }\n");
    assert_script(&err, &path, ScriptFailure::Return, None, &["finite f32"]);
}

#[test]
fn batched_entry_must_return_one_value_per_sample() {
    let (err, path) = score_err("batch_count", "fn reward_batch(samples, ctx) { [1.0] }\n");
    assert_script(
        &err,
        &path,
        ScriptFailure::Return,
        None,
        &["1 values for 3 joint samples"],
    );
    let (err, path) = score_err("batch_type", "fn reward_batch(samples, ctx) { 1.0 }\n");
    assert_script(&err, &path, ScriptFailure::Return, None, &["array"]);
    let (err, path) = score_err(
        "batch_item",
        "fn reward_batch(samples, ctx) { [1, 2, \"x\"] }\n",
    );
    assert_script(&err, &path, ScriptFailure::Return, None, &["item #2"]);
}

#[test]
fn missing_or_malformed_entry_is_caught_at_load() {
    let (err, path) = load_err("no_entry", "fn score(c, ctx) { 1.0 }\n");
    assert_script(
        &err,
        &path,
        ScriptFailure::Entry,
        None,
        &["no entry point", "fn reward(completions, ctx)"],
    );
    let (err, path) = load_err("arity", "fn reward(c) { 1.0 }\n");
    assert_script(
        &err,
        &path,
        ScriptFailure::Entry,
        None,
        &["takes 1 parameter(s)"],
    );
    let (err, path) = load_err(
        "both",
        "fn reward(c, ctx) { 1.0 }\nfn reward_batch(s, ctx) { [] }\n",
    );
    assert_script(&err, &path, ScriptFailure::Entry, None, &["both"]);
}

#[test]
fn missing_file_is_a_read_error() {
    let path = common::script("exists", "").with_file_name("does_not_exist.rhai");
    let err = RhaiReward::load(&path, &json!({})).expect_err("missing file");
    assert_script(&err, &path, ScriptFailure::Read, None, &["cannot read"]);
}

#[test]
fn import_and_eval_are_blocked() {
    let (err, path) = load_err(
        "import",
        "import \"std\" as s;\nfn reward(c, ctx) { 1.0 }\n",
    );
    assert_script(
        &err,
        &path,
        ScriptFailure::Syntax,
        Some(1),
        &["import", "not available to reward scripts"],
    );
    let (err, path) = load_err("eval", "fn reward(c, ctx) {\n    eval(\"1.0\")\n}\n");
    assert_script(
        &err,
        &path,
        ScriptFailure::Syntax,
        Some(2),
        &["eval", "not available to reward scripts"],
    );
}

#[test]
fn top_level_errors_surface_at_load() {
    let (err, path) = load_err("top_level", "let x = [1][5];\nfn reward(c, ctx) { 1.0 }\n");
    assert_script(&err, &path, ScriptFailure::Runtime, Some(1), &[]);
}
