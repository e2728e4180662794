//! Dependencies point one way (docs/architecture.md): scenario → plan → rollout → reward →
//! advantage → loss → optimizer → metrics → trackers, the CLI on top, benchmarks beside. This
//! test reads the sources and the manifests and fails on an import against that direction.
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The root-crate modules that the sources of module `module` (a folder or file under src/)
/// name as `crate::<m>` or `comlrl::<m>`.
fn imports_of(module: &str) -> Vec<(String, String)> {
    let src = root().join("src");
    let mut files = vec![];
    let dir = src.join(module);
    if dir.is_dir() {
        rust_files(&dir, &mut files);
    } else {
        files.push(src.join(format!("{module}.rs")));
    }
    let mut found = vec![];
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            for prefix in ["crate::", "comlrl::"] {
                for (i, _) in code.match_indices(prefix) {
                    let rest = &code[i + prefix.len()..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    let shown = f.strip_prefix(root()).unwrap_or(&f).display().to_string();
                    found.push((name, shown));
                }
            }
        }
    }
    found
}

fn assert_never_imports(module: &str, forbidden: &[&str]) {
    let bad: Vec<String> = imports_of(module)
        .into_iter()
        .filter(|(m, _)| forbidden.contains(&m.as_str()))
        .map(|(m, file)| format!("{file} imports {m}"))
        .collect();
    assert!(
        bad.is_empty(),
        "`{module}` must not import {forbidden:?}: {bad:?}"
    );
}

#[test]
fn the_model_knows_nothing_of_training() {
    assert_never_imports("model", &["train", "metrics", "track", "bench", "cli"]);
}

#[test]
fn training_does_not_import_trackers_benchmarks_or_the_cli() {
    assert_never_imports("train", &["track", "bench", "cli"]);
}

#[test]
fn metrics_and_trackers_do_not_import_the_trainer() {
    assert_never_imports("metrics", &["train", "track", "bench", "cli"]);
    assert_never_imports("track", &["train", "bench", "cli"]);
    assert_never_imports("runtime", &["model", "train", "track", "bench", "cli"]);
}

#[test]
fn the_transport_between_ranks_knows_nothing_of_models_or_training() {
    assert_never_imports(
        "dist",
        &["model", "train", "metrics", "track", "bench", "cli"],
    );
}

/// The `[dependencies]` section of a crate's manifest (dev-dependencies excluded).
fn dependencies(manifest: &Path) -> String {
    let text = std::fs::read_to_string(manifest).unwrap();
    let start = text.find("[dependencies]").map_or(text.len(), |i| i);
    let rest = &text[start..];
    let end = rest[1..].find("\n[").map_or(rest.len(), |i| i + 1);
    rest[..end].to_string()
}

#[test]
fn parsing_a_scenario_links_no_reward_runtime() {
    let deps = dependencies(&root().join("crates/comlrl-scenario/Cargo.toml"));
    for crate_name in ["comlrl-reward", "rhai", "libloading", "candle-core"] {
        assert!(
            !deps.contains(crate_name),
            "comlrl-scenario depends on {crate_name}:\n{deps}"
        );
    }
    let api = dependencies(&root().join("crates/comlrl-plugin-api/Cargo.toml"));
    assert!(
        api.lines()
            .skip(1)
            .all(|l| l.trim().is_empty() || l.starts_with('#')),
        "comlrl-plugin-api must stay dependency-free:\n{api}"
    );
}

#[test]
fn overwrite_clears_the_trackers_state_by_their_own_names() {
    // `train::rundir` names the trackers' files as literals (training does not import `track`).
    let cleared = comlrl::train::run::dir::CLEARED;
    for name in [
        comlrl::track::tensorboard::DIR,
        comlrl::track::wandb::RUN_FILE,
    ] {
        assert!(cleared.contains(&name), "{name} is not in {cleared:?}");
    }
}
