//! Scenario errors about keys and values: the message names the file, line and column of the
//! offending key, the key path, what is wrong, and a fix — unknown or misplaced keys, wrong
//! types, values out of range, misspelt enum values, per-agent entries.
use crate::common;

use comlrl_scenario::ErrorKind::*;
use common::{check, with, Fixture, BASE};

#[test]
fn unknown_key_suggests_the_closest() {
    let f = Fixture::new();
    let (msg, d) = f.one(&with("num_generations: 8", "num_generatons: 8"), &[]);
    check(
        &d,
        UnknownKey,
        "trainer.num_generatons",
        9,
        3,
        &[
            "unknown key `num_generatons`",
            "did you mean `num_generations`?",
        ],
    );
    assert!(
        msg.contains("s.yaml:9:3: error at `trainer.num_generatons`"),
        "{msg}"
    );
}

#[test]
fn unknown_top_level_key() {
    let f = Fixture::new();
    let (_, d) = f.one(&with("trainer:", "trainr:"), &[]);
    check(&d, UnknownKey, "trainr", 8, 1, &["did you mean `trainer`?"]);
}

#[test]
fn comlrl_keys_that_live_elsewhere() {
    let f = Fixture::new();
    let (_, ds) = f.errs(
        &format!("{BASE}  learning_rate: 1e-5\n  logging_steps: 5\n"),
        &[],
    );
    assert_eq!(ds.len(), 2, "{ds:?}");
    check(
        &ds[0],
        UnknownKey,
        "trainer.learning_rate",
        10,
        3,
        &["agent_learning_rate"],
    );
    check(
        &ds[1],
        UnknownKey,
        "trainer.logging_steps",
        11,
        3,
        &["logging.steps"],
    );
}

#[test]
fn wrong_type() {
    let f = Fixture::new();
    let (_, d) = f.one(&with("num_generations: 8", "num_generations: lots"), &[]);
    check(
        &d,
        WrongType,
        "trainer.num_generations",
        9,
        3,
        &["wrong type", "whole number"],
    );
    let (_, d) = f.one(&with("count: 2", "count: 2.5"), &[]);
    check(
        &d,
        WrongType,
        "agents.count",
        4,
        3,
        &["floating point `2.5`"],
    );
}

#[test]
fn num_generations_below_two() {
    let f = Fixture::new();
    let (_, d) = f.one(&with("num_generations: 8", "num_generations: 1"), &[]);
    check(
        &d,
        InvalidValue,
        "trainer.num_generations",
        9,
        3,
        &["at least 2", "num_generations: 2"],
    );
}

#[test]
fn learning_rate_must_be_positive() {
    let f = Fixture::new();
    let (_, d) = f.one(&format!("{BASE}  agent_learning_rate: 0\n"), &[]);
    check(
        &d,
        InvalidValue,
        "trainer.agent_learning_rate",
        10,
        3,
        &["must be > 0", "5e-6"],
    );
    let (_, d) = f.one(
        &with(
            "  model: builtin:tiny\n",
            "  model: builtin:tiny\n  learning_rate: -1e-5\n",
        ),
        &[],
    );
    check(
        &d,
        InvalidValue,
        "agents.learning_rate",
        6,
        3,
        &["must be > 0"],
    );
}

#[test]
fn sampling_ranges_reported_once_for_shared_settings() {
    let f = Fixture::new();
    let text = with(
        "  model: builtin:tiny\n",
        "  model: builtin:tiny\n  top_p: 1.5\n  temperature: -0.1\n  max_new_tokens: 0\n  top_k: 0\n",
    );
    let (_, ds) = f.errs(&text, &[]);
    assert_eq!(ds.len(), 4, "{ds:?}");
    check(&ds[0], InvalidValue, "agents.top_p", 6, 3, &["(0, 1]"]);
    check(&ds[1], InvalidValue, "agents.temperature", 7, 3, &["≥ 0"]);
    check(
        &ds[2],
        InvalidValue,
        "agents.max_new_tokens",
        8,
        3,
        &["at least 1"],
    );
    check(&ds[3], InvalidValue, "agents.top_k", 9, 3, &["null"]);
}

#[test]
fn per_agent_entries_are_located() {
    let f = Fixture::new();
    let text = with(
        "agents:\n  count: 2\n  model: builtin:tiny\n",
        "agents:\n  - model: builtin:tiny\n  - model: builtin:tiny\n    top_p: 0\n",
    );
    let (_, d) = f.one(&text, &[]);
    check(
        &d,
        InvalidValue,
        "agents[1].top_p",
        6,
        5,
        &["top_p must be in (0, 1]"],
    );
    let (_, d) = f.one(
        &with(
            "agents:\n  count: 2\n  model: builtin:tiny\n",
            "agents:\n  - dtype: f32\n",
        ),
        &[],
    );
    check(
        &d,
        MissingKey,
        "agents[0]",
        4,
        5,
        &["missing required key `model`"],
    );
}

#[test]
fn num_turns_zero_and_multi_turn_without_transition() {
    let f = Fixture::new();
    let (_, d) = f.one(&format!("{BASE}  num_turns: 0\n"), &[]);
    check(
        &d,
        InvalidValue,
        "trainer.num_turns",
        10,
        3,
        &["at least 1"],
    );
    let (_, d) = f.one(&format!("{BASE}  num_turns: 2\n"), &[]);
    check(
        &d,
        MissingKey,
        "trainer.num_turns",
        10,
        3,
        &["external_transition"],
    );
}

#[test]
fn enum_spellings_suggest_the_valid_one() {
    let f = Fixture::new();
    let (_, d) = f.one(&format!("{BASE}  joint_mode: crossed\n"), &[]);
    check(
        &d,
        InvalidValue,
        "trainer.joint_mode",
        10,
        3,
        &[
            "`crossed` is not a valid `joint_mode`",
            "did you mean `cross`?",
            "`aligned`",
        ],
    );
    let (_, d) = f.one(&format!("{BASE}  advantage_mode: rlooo\n"), &[]);
    check(
        &d,
        InvalidValue,
        "trainer.advantage_mode",
        10,
        3,
        &["did you mean `rloo`?"],
    );
    let (_, d) = f.one(&format!("{BASE}  lr_scheduler: cos\n"), &[]);
    check(
        &d,
        InvalidValue,
        "trainer.lr_scheduler",
        10,
        3,
        &["did you mean `cosine`?"],
    );
    let (_, d) = f.one(
        &with(
            "  model: builtin:tiny\n",
            "  model: builtin:tiny\n  dtype: fp16\n",
        ),
        &[],
    );
    check(
        &d,
        InvalidValue,
        "agents.dtype",
        6,
        3,
        &["did you mean `f16`?"],
    );
}
