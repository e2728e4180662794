//! The key tables (`top_keys.rs`, `dataset_keys.rs`, `agent_keys.rs`, `trainer_keys.rs`,
//! `logging_keys.rs`): the docs tables are the generated ones, every key survives the
//! resolved-YAML round trip, `null` keeps its meaning, and a refused key says why.
use crate::common;

use comlrl_scenario::keys::markdown_table;
use comlrl_scenario::ErrorKind::*;
use comlrl_scenario::{load_str, tables, TrainerPlan};
use common::{check, check_cases, Fixture, BASE};
use std::path::PathBuf;

const BLESS: &str =
    "COMLRL_BLESS=1 cargo test --release -p comlrl-scenario --test scenario key_tables";

fn docs_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/scenario.md")
}

/// The text between `<!-- keys:<section>:begin ... -->` and `<!-- keys:<section>:end -->`, with
/// the byte range it occupies.
fn between(doc: &str, section: &str) -> (usize, usize) {
    let begin = format!("<!-- keys:{section}:begin");
    let end = format!("<!-- keys:{section}:end -->");
    let b = doc
        .find(&begin)
        .unwrap_or_else(|| panic!("docs/scenario.md lacks the marker `{begin} ... -->`"));
    let start = b + doc[b..].find("-->\n").expect("unterminated begin marker") + 4;
    let stop = doc[start..]
        .find(&end)
        .unwrap_or_else(|| panic!("docs/scenario.md lacks `{end}` after `{begin}`"))
        + start;
    (start, stop)
}

#[test]
fn docs_key_tables_are_the_generated_ones() {
    let path = docs_path();
    let mut doc = std::fs::read_to_string(&path).expect("read docs/scenario.md");
    let bless = std::env::var_os("COMLRL_BLESS").is_some();
    let mut stale = Vec::new();
    for table in tables::all() {
        let (section, file) = (table.section, table.file);
        let (start, stop) = between(&doc, section);
        let want = markdown_table(&table.keys);
        if doc[start..stop] == want {
            continue;
        }
        stale.push(format!(
            "`{section}` (from crates/comlrl-scenario/src/{file}):\ngenerated:\n{want}\nin the docs:\n{}",
            &doc[start..stop]
        ));
        doc = format!("{}{want}{}", &doc[..start], &doc[stop..]);
    }
    if stale.is_empty() {
        return;
    }
    if bless {
        std::fs::write(&path, doc).expect("write docs/scenario.md");
        return;
    }
    panic!(
        "docs/scenario.md's key tables differ from the key tables in the code; regenerate them \
         with\n  {BLESS}\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_tables_list_every_key_once_with_docs() {
    for table in tables::all() {
        let keys = table.keys;
        let mut names: Vec<&str> = keys.iter().map(|k| k.key).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), keys.len());
        for k in &keys {
            assert!(!k.doc.is_empty() && !k.kind.is_empty(), "{k:?}");
            assert!(!k.default.is_empty(), "{k:?}");
        }
    }
    let keys = TrainerPlan::keys();
    let nge = keys.iter().find(|k| k.key == "num_generations").unwrap();
    assert_eq!(nge.default, "`4`; `1` with `iac`, `maac`");
    let lr = keys
        .iter()
        .find(|k| k.key == "agent_learning_rate")
        .unwrap();
    assert_eq!(lr.default, "`5e-6`");
    assert!(!keys.iter().any(|k| k.key == "eval_batch_size"));
}

#[test]
fn eval_batch_size_is_refused_with_the_reason() {
    let f = Fixture::new();
    let (_, d) = f.one(&format!("{BASE}  eval_batch_size: 4\n"), &[]);
    check(
        &d,
        UnknownKey,
        "trainer.eval_batch_size",
        10,
        3,
        &["one eval prompt at a time", "remove `eval_batch_size`"],
    );
}

#[test]
fn null_is_none_for_option_keys_and_the_default_for_others() {
    let f = Fixture::new();
    let s = f.ok(
        &format!("{BASE}  num_train_epochs: null\n  max_grad_norm: null\n"),
        &["trainer.early_termination_threshold=null"],
    );
    assert_eq!(s.trainer.num_train_epochs, 20);
    assert_eq!(s.trainer.max_grad_norm, None);
    assert_eq!(s.trainer.early_termination_threshold, None);
    let s = f.ok(BASE, &[]);
    assert_eq!(s.trainer.early_termination_threshold, Some(-0.2));
}

#[test]
fn every_trainer_key_survives_the_resolved_yaml() {
    let f = Fixture::new();
    f.write("t.rhai", "fn transition(ctx) { [\"x\", \"y\"] }");
    let text = "\
dataset:
  prompts: [\"a\", \"b\"]
  eval: {prompts: [\"c\"]}
agents: {count: 2, model: builtin:tiny}
reward: {rhai: r.rhai}
trainer:
  num_train_epochs: 3
  agent_learning_rate: 1.0e-4
  num_generations: 3
  joint_mode: cross
  advantage_mode: rloo
  advantage_normalization: false
  rollout_buffer_size: 4
  train_batch_size: 2
  num_turns: 2
  discount: 0.5
  early_termination_threshold: null
  external_transition: {rhai: t.rhai, params: {k: 1}}
  external_prompt_passthrough: true
  eval_interval: 7
  eval_num_samples: 1
  max_grad_norm: 0.5
  warmup_steps: 3
  lr_scheduler: cosine
  kl_coef: 0.1
  use_adaptive_entropy: true
  entropy_target: 1.5
  adam_beta1: 0.8
  adam_beta2: 0.99
  adam_epsilon: 1.0e-6
  weight_decay: 0.0
  parallel_sampling: false
  parallel_updates: false
  micro_batch_size: 0
  gradient_checkpointing: false
  activation_budget_mb: 7
  share_prompt: false
  max_joint_actions: 100
";
    let s = f.ok(text, &[]);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let yaml = s.to_yaml();
    // `critic` is written under `algorithm: iac` only (`algorithms::iac_*` checks it).
    for k in TrainerPlan::keys().iter().filter(|k| k.key != "critic") {
        assert!(
            yaml.contains(&format!("  {}:", k.key)),
            "{} not written:\n{yaml}",
            k.key
        );
    }
    let again = load_str(&yaml, &f.origin(), &[]).expect("reload the resolved scenario");
    assert_eq!(again.trainer, s.trainer);
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
}

#[test]
fn table_checks_give_the_diagnostics_of_the_hand_written_ones() {
    let f = Fixture::new();
    // (line added to BASE, message, hint).
    let cases = [
        (
            "num_train_epochs: 0",
            "num_train_epochs must be at least 1",
            "set `num_train_epochs: 1` or more",
        ),
        (
            "agent_learning_rate: 0.0",
            "the learning rate must be > 0 (got 0)",
            "e.g. `5e-6`",
        ),
        (
            "rollout_buffer_size: 0",
            "rollout_buffer_size must be at least 1",
            "(CoMLRL default 2)",
        ),
        (
            "train_batch_size: 0",
            "train_batch_size must be at least 1",
            "remove it to use rollout_buffer_size",
        ),
        (
            "num_turns: 0",
            "num_turns must be at least 1",
            "set `num_turns: 1` for single-turn training",
        ),
        (
            "discount: 1.5",
            "discount must be in [0, 1] (got 1.5)",
            "use e.g. `discount: 0.9`",
        ),
        (
            "max_grad_norm: -1.0",
            "max_grad_norm must be > 0 (got -1)",
            "remove it to disable clipping",
        ),
        (
            "kl_coef: -0.5",
            "kl_coef must be ≥ 0 (got -0.5)",
            "use 0 to disable the reference-KL penalty",
        ),
        (
            "adam_beta1: 1.0",
            "adam_beta1 must be in [0, 1) (got 1)",
            "torch defaults: adam_beta1 0.9",
        ),
        (
            "adam_beta2: -0.1",
            "adam_beta2 must be in [0, 1) (got -0.1)",
            "adam_beta2 0.999",
        ),
        (
            "adam_epsilon: 0.0",
            "adam_epsilon must be > 0 (got 0)",
            "torch default: 1e-8",
        ),
        (
            "weight_decay: -1.0",
            "weight_decay must be ≥ 0 (got -1)",
            "torch AdamW default: 0.01",
        ),
    ];
    let mut text = BASE.to_string();
    for (line, ..) in &cases {
        text.push_str(&format!("  {line}\n"));
    }
    let (msg, ds) = f.errs(&text, &[]);
    check_cases(&msg, &ds, &cases, "trainer.", 10, 3);
    // `logging.steps` keeps its own wording.
    let (_, d) = f.one(&format!("{BASE}logging: {{steps: 0}}\n"), &[]);
    check(
        &d,
        InvalidValue,
        "logging.steps",
        10,
        11,
        &["logging.steps must be at least 1", "training steps"],
    );
}

#[test]
fn a_check_runs_on_the_value_the_scenario_sets() {
    // `train_batch_size` defaults to `rollout_buffer_size`: a bad buffer size is reported once,
    // where it is written, not again at the key that took it as its default.
    let f = Fixture::new();
    let (_, d) = f.one(&format!("{BASE}  rollout_buffer_size: 0\n"), &[]);
    check(
        &d,
        InvalidValue,
        "trainer.rollout_buffer_size",
        10,
        3,
        &["rollout_buffer_size must be at least 1"],
    );
}

#[test]
fn the_raw_mirrors_accept_exactly_the_keys_of_the_tables() {
    // An unknown key with no close spelling is answered with every valid key, in table order:
    // the raw mirror and the docs table are one list.
    let f = Fixture::new();
    let keys = |section: &str, skip: &[&str]| -> String {
        let table = tables::all()
            .into_iter()
            .find(|t| t.section == section)
            .unwrap();
        let names: Vec<&str> = table
            .keys
            .iter()
            .map(|k| k.key)
            .filter(|k| !skip.contains(k))
            .collect();
        format!("valid keys here: {}", names.join(", "))
    };
    let unknown = "zzzzzzzzzzzzzzzz";
    let cases = [
        (
            format!("{BASE}{unknown}: 1\n"),
            unknown.to_string(),
            keys("top", &[]),
        ),
        (
            BASE.replace("  prompts:", &format!("  {unknown}: 1\n  prompts:")),
            format!("dataset.{unknown}"),
            keys("dataset", &[]),
        ),
        (
            BASE.replace(
                "  prompts: [\"a\", \"b\"]\n",
                &format!("  prompts: [\"a\"]\n  eval: {{prompts: [\"b\"], {unknown}: 1}}\n"),
            ),
            format!("dataset.eval.{unknown}"),
            keys("dataset", &["eval"]),
        ),
        (
            BASE.replace("  count: 2\n", &format!("  count: 2\n  {unknown}: 1\n")),
            format!("agents.{unknown}"),
            keys("agents", &[]),
        ),
        (
            BASE.replace(
                "agents:\n  count: 2\n  model: builtin:tiny\n",
                &format!("agents:\n  - model: builtin:tiny\n    {unknown}: 1\n"),
            ),
            format!("agents[0].{unknown}"),
            keys("agents", &["count"]),
        ),
        (
            format!("{BASE}  {unknown}: 1\n"),
            format!("trainer.{unknown}"),
            keys("trainer", &[]),
        ),
        (
            format!("{BASE}logging: {{{unknown}: 1}}\n"),
            format!("logging.{unknown}"),
            keys("logging", &[]),
        ),
    ];
    for (text, key, hint) in cases {
        let (msg, ds) = f.errs(&text, &[]);
        let d = ds
            .iter()
            .find(|d| d.key == key)
            .unwrap_or_else(|| panic!("no error at `{key}`:\n{msg}"));
        assert_eq!(d.kind, UnknownKey, "{msg}");
        assert_eq!(d.hint.as_deref(), Some(hint.as_str()), "{msg}");
    }
}
