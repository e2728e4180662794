//! Every key of the scenario key tables is read by the trainer: a key that is validated and
//! echoed but never read (as `trainer.eval_batch_size` once was) fails here. "Read" means some
//! source file under src/ names the plan field outside comments (`.key` for trainer keys, which
//! the trainer reads through `let t = &scenario.trainer`; `logging.key` for logging keys) not
//! followed by an identifier character; the few keys the scenario loader itself folds into
//! other plan fields are listed with where. Agent keys are read as `.field` of an `AgentPlan`
//! (`.sampling.temperature` for sampling settings), not followed by `(` (a method call such as
//! a tensor's `.dtype()` is no read of `agents.dtype`).
use comlrl_scenario::{AgentPlan, LoggingPlan, PreferencePlan, TrainerPlan};
use std::path::{Path, PathBuf};

/// Keys consumed by the scenario loader rather than the trainer: (key, file of the scenario
/// crate that reads it, the text that reads it).
const READ_BY_THE_LOADER: &[(&str, &str, &str)] = &[
    (
        "agent_learning_rate",
        "crates/comlrl-scenario/src/resolve.rs",
        "trainer.agent_learning_rate",
    ),
    // A preset takes effect as the defaults of the keys it names.
    (
        "preset",
        "crates/comlrl-scenario/src/trainer.rs",
        "t.preset",
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for e in entries {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether `text` contains `<prefix>.field` as a whole field name.
fn reads_field(text: &str, prefix: &str, field: &str) -> bool {
    let pat = format!("{prefix}.{field}");
    text.match_indices(&pat).any(|(i, _)| {
        let next = text[i + pat.len()..].chars().next();
        !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

fn unread(prefix: &str, keys: &[&str], sources: &[String]) -> Vec<String> {
    keys.iter()
        .filter(|k| !READ_BY_THE_LOADER.iter().any(|(l, ..)| l == *k))
        .filter(|k| !sources.iter().any(|s| reads_field(s, prefix, k)))
        .map(|k| k.to_string())
        .collect()
}

fn main_crate_sources() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(
        files.len() > 20,
        "found only {} files under src/",
        files.len()
    );
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).expect("read source");
            // Comments (docs included) name keys without reading them.
            text.lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

#[test]
fn every_trainer_key_is_read_under_src() {
    let sources = main_crate_sources();
    let keys = TrainerPlan::keys();
    let names: Vec<&str> = keys.iter().map(|k| k.key).collect();
    let missing = unread("", &names, &sources);
    assert!(
        missing.is_empty(),
        "trainer keys accepted by the scenario but never read under src/: {missing:?}. Read \
         `scenario.trainer.<key>` where it takes effect, or remove its row from \
         crates/comlrl-scenario/src/trainer_keys.rs"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (key, file, text) in READ_BY_THE_LOADER {
        assert!(names.contains(key), "{key} is no longer a trainer key");
        let src = std::fs::read_to_string(root.join(file)).expect("read loader source");
        assert!(src.contains(text), "{file} no longer reads `{text}`");
    }
}

#[test]
fn an_unread_key_is_caught() {
    let sources = main_crate_sources();
    // A key nobody reads, and one that only appears as a prefix of another field.
    let missing = unread("", &["no_such_setting", "num_train", "num_turns"], &sources);
    assert_eq!(missing, ["no_such_setting", "num_train"]);
    // `logging.wandb` appears in doc comments of src/cli; only code counts.
    let missing = unread("logging", &["tensorboard", "tensor"], &sources);
    assert_eq!(missing, ["tensor"]);
}

#[test]
fn every_logging_key_is_read_under_src() {
    let sources = main_crate_sources();
    let keys = LoggingPlan::keys();
    let names: Vec<&str> = keys.iter().map(|k| k.key).collect();
    let missing = unread("logging", &names, &sources);
    assert!(
        missing.is_empty(),
        "logging keys accepted by the scenario but never read under src/: {missing:?}. Read \
         `scenario.logging.<key>` where it takes effect, or remove its row from \
         crates/comlrl-scenario/src/logging_keys.rs"
    );
}

/// Preference keys the scenario loader consumes (key, why): `num_candidates` becomes
/// `trainer.num_generations`, and `collaboration_mode` becomes `trainer.collaboration_mode`
/// (its alias), which the run reads.
const PREFERENCE_BY_THE_LOADER: &[(&str, &str)] = &[
    (
        "num_candidates",
        "trainer.num_generations = plan.num_candidates",
    ),
    (
        "collaboration_mode",
        "trainer.collaboration_mode = CollaborationMode::Centralized",
    ),
];

#[test]
fn every_preference_key_is_read_under_src() {
    let sources = main_crate_sources();
    let keys = PreferencePlan::keys();
    let names: Vec<&str> = keys
        .iter()
        .map(|k| k.key)
        .filter(|k| !PREFERENCE_BY_THE_LOADER.iter().any(|(l, _)| l == k))
        .collect();
    // Read as `p.<key>` where `p = &scenario.preference`, like the trainer keys.
    let missing = unread("", &names, &sources);
    assert!(
        missing.is_empty(),
        "preference keys accepted by the scenario but never read under src/: {missing:?}. Read \
         `scenario.preference.<key>` where it takes effect, or remove its row from \
         crates/comlrl-scenario/src/preference_keys.rs"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let loader =
        std::fs::read_to_string(root.join("crates/comlrl-scenario/src/preference_keys.rs"))
            .expect("read loader source");
    for (key, text) in PREFERENCE_BY_THE_LOADER {
        assert!(
            keys.iter().any(|k| k.key == *key),
            "{key} is no longer a preference key"
        );
        assert!(
            loader.contains(text),
            "preference_keys.rs no longer reads `{text}`"
        );
    }
}

/// The per-agent keys (key, plan field) that no code under src/ reads as a field.
fn unread_agent_keys(fields: &[(&str, &str)], sources: &[String]) -> Vec<String> {
    fields
        .iter()
        .filter(|(_, field)| {
            let pat = format!(".{field}");
            !sources.iter().any(|s| {
                s.match_indices(&pat).any(|(i, _)| {
                    let next = s[i + pat.len()..].chars().next();
                    !next.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '(')
                })
            })
        })
        .map(|(k, _)| k.to_string())
        .collect()
}

#[test]
fn every_agent_key_is_read_under_src() {
    let sources = main_crate_sources();
    let missing = unread_agent_keys(&AgentPlan::plan_fields(), &sources);
    assert!(
        missing.is_empty(),
        "agents keys accepted by the scenario but never read under src/: {missing:?}. Read \
         `agent.<key>` (an `AgentPlan`) where it takes effect, or remove its row from \
         crates/comlrl-scenario/src/agent_keys.rs"
    );
    // A field nobody reads, and one only called as a method (`.dtype()` of tensors).
    let missing = unread_agent_keys(
        &[
            ("x", "no_such_setting"),
            ("y", "to_dtype"),
            ("t", "sampling.top_k"),
        ],
        &sources,
    );
    assert_eq!(missing, ["x", "y"]);
}
