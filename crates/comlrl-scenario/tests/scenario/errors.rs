//! Scenario errors about files, sources and whole documents: missing files, reward sources,
//! YAML syntax and duplicate keys, several errors at once, warnings, overrides, and the joint
//! action count; each message names the file, line and column, what is wrong, and a fix.
//! (Errors about single keys and values: `errors_keys.rs`.)
use crate::common;

use comlrl_scenario::ErrorKind::*;
use common::{check, with, Fixture, BASE};

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

#[test]
fn max_joint_actions_is_at_least_one() {
    let f = Fixture::new();
    let (msg, ds) = f.errs(
        BASE,
        &["trainer.joint_mode=cross", "trainer.max_joint_actions=0"],
    );
    let d = ds
        .iter()
        .find(|d| d.message.contains("at least 1"))
        .unwrap_or_else(|| panic!("no range error in:\n{msg}"));
    assert_eq!(
        (d.kind, d.key.as_str()),
        (InvalidValue, "trainer.max_joint_actions"),
        "{msg}"
    );
}

/// A document nested deeper than the limit is refused at the level that crosses it, at once
/// (indexing a deep document costs time quadratic in its depth); so is a `--set` key path.
#[test]
fn deep_nesting_is_refused_early() {
    let f = Fixture::new();
    let max = comlrl_scenario::positions::MAX_NESTING;
    let started = std::time::Instant::now();
    let deep = format!(
        "{BASE}logging:\n  x: {}1{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let (msg, d) = f.one(&deep, &[]);
    // Where the YAML scanner gives up on flow levels (255), on line 11.
    check(
        &d,
        Syntax,
        "(top level)",
        11,
        6 + 255,
        &[&format!("nests deeper than {max} levels")],
    );
    // Below the scanner's limit, the level that crosses ours: `logging` and the document are
    // two levels, so the list at column 6 + (max - 2).
    let deep = format!(
        "{BASE}logging:\n  x: {}1{}\n",
        "[".repeat(200),
        "]".repeat(200)
    );
    let (_, d) = f.one(&deep, &[]);
    check(
        &d,
        Syntax,
        "(top level)",
        11,
        6 + max - 2,
        &["nests deeper"],
    );
    let block: String = (0..100_000)
        .map(|i| format!("{}k:\n", " ".repeat(i % 50)))
        .collect();
    let _ = f.errs(&block, &[]);
    let nested_block: String = (0..1000)
        .map(|i| format!("{}k:\n", " ".repeat(i)))
        .collect();
    let (msg2, d) = f.one(&nested_block, &[]);
    assert!(
        d.kind == Syntax
            && matches!(d.location, comlrl_scenario::Location::File { line, .. } if line == max + 1),
        "{msg2}"
    );
    assert!(
        started.elapsed().as_secs() < 5,
        "{:?}\n{msg}\n{msg2}",
        started.elapsed()
    );
    // At the limit, a document still parses (and fails for what it lacks, not its depth).
    let ok_depth = format!(
        "{BASE}logging:\n  x: {}1{}\n",
        "[".repeat(max - 2),
        "]".repeat(max - 2)
    );
    let (msg, _) = f.errs(&ok_depth, &[]);
    assert!(!msg.contains("nests deeper"), "{msg}");
    let path = vec!["a"; max + 1].join(".");
    let (msg, d) = f.one(BASE, &[&format!("{path}=1")]);
    assert_eq!(d.kind, Override);
    assert!(msg.contains("more than the 128 levels"), "{msg}");
    let started = std::time::Instant::now();
    let value = format!("logging.x={}1{}", "[".repeat(60_000), "]".repeat(60_000));
    let (msg, d) = f.one(BASE, &[&value]);
    assert_eq!(d.kind, Override);
    assert!(
        msg.contains("the value nests deeper than 128 levels"),
        "{msg}"
    );
    assert!(started.elapsed().as_secs() < 2, "{:?}", started.elapsed());
}
