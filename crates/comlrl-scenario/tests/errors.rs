//! Every class of scenario error: the message names the file, line and column of the offending
//! key, the key path, what is wrong, and a fix.
mod common;

use comlrl_scenario::ErrorKind::*;
use common::{check, Fixture, BASE};

fn with(replace: &str, by: &str) -> String {
    assert!(BASE.contains(replace), "{replace}");
    BASE.replacen(replace, by, 1)
}

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

#[test]
fn empty_dataset() {
    let f = Fixture::new();
    let (_, d) = f.one(&with("prompts: [\"a\", \"b\"]", "prompts: []"), &[]);
    check(&d, Dataset, "dataset.prompts", 2, 3, &["empty"]);
}

#[test]
fn unquoted_prompt_ending_in_colon() {
    let f = Fixture::new();
    let (_, d) = f.one(
        &with(
            "  prompts: [\"a\", \"b\"]",
            "  prompts:\n    - Tell a joke:",
        ),
        &[],
    );
    check(
        &d,
        WrongType,
        "dataset.prompts[0]",
        3,
        7,
        &["quote prompts"],
    );
}

#[test]
fn missing_files() {
    let f = Fixture::new();
    let (_, d) = f.one(&with("rhai: r.rhai", "rhai: nope.rhai"), &[]);
    check(
        &d,
        MissingFile,
        "reward.rhai",
        7,
        3,
        &["nope.rhai does not exist", "relative to the scenario"],
    );
    let (_, d) = f.one(&with("rhai: r.rhai", "plugin: ../nowhere/libx"), &[]);
    check(
        &d,
        MissingFile,
        "reward.plugin",
        7,
        3,
        &["not found", "cargo build --release --workspace"],
    );
    let (_, d) = f.one(&with("prompts: [\"a\", \"b\"]", "path: nope.jsonl"), &[]);
    check(
        &d,
        MissingFile,
        "dataset.path",
        2,
        3,
        &["nope.jsonl does not exist"],
    );
    let (_, d) = f.one(&with("model: builtin:tiny", "model: ./models/x"), &[]);
    check(
        &d,
        MissingFile,
        "agents.model",
        5,
        3,
        &["local model directory"],
    );
    // A `*.gguf` file (no `./` needed) must exist as a file; an existing one resolves to it.
    let (_, d) = f.one(&with("model: builtin:tiny", "model: models/x.gguf"), &[]);
    check(
        &d,
        MissingFile,
        "agents.model",
        5,
        3,
        &["GGUF file", "x.gguf does not exist"],
    );
    let gguf = f.write("m.Q8_0.gguf", "");
    let s = f.ok(&with("model: builtin:tiny", "model: m.Q8_0.gguf"), &[]);
    assert_eq!(
        s.agents[0].model.source,
        comlrl_scenario::ModelSource::Local(gguf)
    );
}

#[test]
fn reward_source_must_be_exactly_one() {
    let f = Fixture::new();
    let (_, d) = f.one(
        &with("  rhai: r.rhai\n", "  rhai: r.rhai\n  plugin: x\n"),
        &[],
    );
    check(
        &d,
        InvalidValue,
        "reward.plugin",
        8,
        3,
        &["both `rhai` and `plugin`"],
    );
    let (_, d) = f.one(&with("  rhai: r.rhai\n", "  weight: 2.0\n"), &[]);
    check(
        &d,
        MissingKey,
        "reward",
        6,
        1,
        &["neither `rhai` nor `plugin`"],
    );
}

#[test]
fn bad_model_and_processor_spellings() {
    let f = Fixture::new();
    let (_, d) = f.one(&with("model: builtin:tiny", "model: qwen"), &[]);
    check(&d, InvalidValue, "agents.model", 5, 3, &["owner/name"]);
    let (_, d) = f.one(
        &format!("{BASE}reward_processors:\n  - scale: 10\n  - sigmod\n"),
        &[],
    );
    check(
        &d,
        InvalidValue,
        "reward_processors[1]",
        12,
        5,
        &["did you mean `sigmoid`?"],
    );
}

#[test]
fn several_errors_are_collected() {
    let f = Fixture::new();
    let text = format!("{BASE}  joint_mode: crossed\n  num_turnz: 1\nlogging:\n  stepz: 3\n")
        .replace("num_generations: 8", "num_generations: 1")
        .replace("top_p", "");
    let (msg, ds) = f.errs(&text, &[]);
    let keys: Vec<&str> = ds.iter().map(|d| d.key.as_str()).collect();
    for k in [
        "trainer.joint_mode",
        "trainer.num_turnz",
        "logging.stepz",
        "trainer.num_generations",
    ] {
        assert!(keys.contains(&k), "{k} missing from:\n{msg}");
    }
    assert!(msg.contains(&format!("has {} errors", ds.len())), "{msg}");
}

#[test]
fn yaml_syntax_error_is_located() {
    let f = Fixture::new();
    let (msg, d) = f.one("dataset:\n  prompts: [\"a\",\nagents: x\n", &[]);
    assert_eq!(d.kind, Syntax);
    assert!(msg.contains("s.yaml:"), "{msg}");
    assert!(
        matches!(d.location, comlrl_scenario::Location::File { line, .. } if line >= 2),
        "{d:?}"
    );
}

#[test]
fn empty_and_missing_sections() {
    let f = Fixture::new();
    let (_, d) = f.one("", &[]);
    assert_eq!(d.kind, MissingKey);
    let (_, ds) = f.errs("trainer:\n  num_generations: 4\n", &[]);
    let keys: Vec<&str> = ds.iter().map(|d| d.key.as_str()).collect();
    assert_eq!(keys, ["dataset", "agents", "reward"]);
}

#[test]
fn warnings_for_moot_settings() {
    let f = Fixture::new();
    let s = f.ok(
        &format!("{BASE}  advantage_mode: raw\n  discount: 0.5\n  eval_interval: 4\n"),
        &[],
    );
    let all = s.warnings.join("\n");
    assert!(
        all.contains("`trainer.advantage_mode`: `raw` gives the same advantages as `mean`"),
        "{all}"
    );
    assert!(
        all.contains("`trainer.discount`: has no effect with num_turns: 1"),
        "{all}"
    );
    assert!(
        all.contains("`trainer.eval_interval`: has no effect without an evaluation set"),
        "{all}"
    );
    let s = f.ok(
        &format!("{BASE}  advantage_mode: raw\n  advantage_normalization: false\n"),
        &[],
    );
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn duplicate_keys_are_syntax_errors() {
    let f = Fixture::new();
    let (msg, d) = f.one(&format!("{BASE}  num_generations: 4\n"), &[]);
    assert_eq!(d.kind, Syntax, "{msg}");
    assert!(msg.contains("duplicate"), "{msg}");
}

#[test]
fn duplicate_key_points_at_the_second_one() {
    let f = Fixture::new();
    let (_, d) = f.one(
        &with(
            "  model: builtin:tiny\n",
            "  model: builtin:tiny\n  count: 3\n",
        ),
        &[],
    );
    check(
        &d,
        Syntax,
        "agents.count",
        6,
        3,
        &["duplicate key `agents.count`"],
    );
}

#[test]
fn override_of_an_unknown_nested_key_points_at_the_override() {
    let f = Fixture::new();
    let (msg, d) = f.one(BASE, &["a.b.c=1"]);
    assert_eq!(d.kind, UnknownKey, "{d:?}");
    assert_eq!(
        d.location,
        comlrl_scenario::Location::Override("a.b.c=1".into())
    );
    assert!(msg.contains("(from --set a.b.c=1)"), "{msg}");
}

#[test]
fn indexing_a_mapping_suggests_one_of_its_keys() {
    let f = Fixture::new();
    let (_, d) = f.one(BASE, &["reward.0.weight=2"]);
    let hint = d.hint.unwrap_or_default();
    assert!(hint.contains("e.g. `reward.rhai`"), "{hint}");
}

#[test]
fn a_directory_given_as_a_script_is_named_as_such() {
    let f = Fixture::new();
    std::fs::create_dir(f.dir.path().join("dir.rhai")).unwrap();
    let (_, d) = f.one(&with("rhai: r.rhai", "rhai: dir.rhai"), &[]);
    check(
        &d,
        MissingFile,
        "reward.rhai",
        7,
        3,
        &["is a directory, not a file"],
    );
}

#[test]
fn cross_joint_actions_are_counted_without_overflow_and_bounded() {
    let f = Fixture::new();
    for (sets, shown) in [
        (vec!["agents.count=22"], "8^22 = more than"),
        (vec!["agents.count=21"], "8^21 = 9223372036854775808"),
        (vec!["agents.count=5"], "8^5 = 32768"),
        (
            vec!["agents.count=2", "trainer.max_joint_actions=63"],
            "8^2 = 64",
        ),
    ] {
        let mut all = vec!["trainer.joint_mode=cross"];
        all.extend(sets);
        let (msg, d) = f.one(BASE, &all);
        assert_eq!(d.kind, InvalidValue, "{msg}");
        assert!(
            msg.contains(shown) && msg.contains("trainer.max_joint_actions"),
            "{msg}"
        );
    }
    // 8^4 = 4096: at the default limit, allowed.
    let p = f.write("ok.yaml", BASE);
    let s = comlrl_scenario::load(
        &p,
        &["trainer.joint_mode=cross".into(), "agents.count=4".into()],
    )
    .unwrap();
    assert_eq!(s.trainer.max_joint_actions, 4096);
}
