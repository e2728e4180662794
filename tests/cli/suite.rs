//! The test suite's own shape: every test file is compiled (a module of one of the few test
//! binaries, not a binary of its own that links candle again, nor a file no `mod` names), and
//! every test file, test binary and module that the docs, scripts and comments name exists, so
//! a command copied from them runs tests rather than nothing.
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's crate folders: the root and every folder under crates/ and plugins/ with a
/// Cargo.toml.
fn crate_dirs() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        if dir.join("Cargo.toml").is_file() {
            out.push(dir.to_path_buf());
        }
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.path().is_dir() && e.file_name() != "target" {
                walk(&e.path(), out);
            }
        }
    }
    let mut dirs = vec![root()];
    for top in ["crates", "plugins"] {
        walk(&root().join(top), &mut dirs);
    }
    dirs
}

/// The `mod name;` declarations of a Rust source (outside comments).
fn declared_mods(source: &str) -> Vec<String> {
    source
        .lines()
        .map(|l| l.split("//").next().unwrap_or("").trim())
        .filter_map(|l| {
            let l = l.strip_prefix("pub ").unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// The test binaries (folders with a main.rs) under `dir` (a crate's tests/ folder); what is
/// wrong with its files goes to `bad`: a top-level `.rs` file (a binary of its own) or a file
/// of a binary's folder that its main.rs does not declare.
fn test_binaries(dir: &Path, bad: &mut Vec<String>) -> Vec<String> {
    let shown = dir.strip_prefix(root()).unwrap().display().to_string();
    let mut binaries = vec![];
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.extension().is_some_and(|x| x == "rs") {
            bad.push(format!(
                "{shown}/{name} is a test binary of its own (it links the whole crate again): \
                 make it a module of one of the binaries in {shown}/"
            ));
        }
        if !p.join("main.rs").is_file() {
            continue;
        }
        binaries.push(name.clone());
        let mods = declared_mods(&std::fs::read_to_string(p.join("main.rs")).unwrap());
        for f in std::fs::read_dir(&p).unwrap().flatten() {
            let file = f.file_name().to_string_lossy().into_owned();
            let module = match file.strip_suffix(".rs") {
                Some("main") => continue,
                Some(m) => m.to_string(),
                None if f.path().join("mod.rs").is_file() => file.clone(),
                None => continue,
            };
            if !mods.contains(&module) {
                bad.push(format!(
                    "{shown}/{name}/{file} is compiled by nothing: add `mod {module};` to \
                     {shown}/{name}/main.rs"
                ));
            }
        }
    }
    binaries.sort();
    binaries
}

#[test]
fn every_test_file_is_a_module_of_a_test_binary() {
    let mut bad = vec![];
    let binaries = test_binaries(&root().join("tests"), &mut bad);
    assert_eq!(
        binaries,
        ["cli", "model", "mpi", "train"],
        "the root crate's test binaries"
    );
    for c in crate_dirs().iter().skip(1) {
        test_binaries(&c.join("tests"), &mut bad);
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The text files to read for references to tests: docs, scripts, manifests and sources.
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "runs") {
                text_files(&p, out);
            }
        } else if ["md", "rs", "toml", "py", "sh", "yaml", "yml"]
            .iter()
            .any(|x| name.ends_with(&format!(".{x}")))
            || p.parent()
                .and_then(Path::file_name)
                .is_some_and(|d| d == ".ci")
        {
            out.push(p);
        }
    }
}

/// Words of `text` that contain `needle`, extended over path characters on both sides.
fn paths_around<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_-./".contains(c);
    text.match_indices(needle)
        .map(|(i, _)| {
            let start = text[..i]
                .char_indices()
                .rev()
                .take_while(|&(_, c)| path_char(c))
                .last()
                .map_or(i, |(j, _)| j);
            let end = text[i..]
                .char_indices()
                .find(|&(_, c)| !path_char(c))
                .map_or(text.len(), |(j, _)| i + j);
            text[start..end].trim_end_matches('.')
        })
        .collect()
}

/// Whether `dir` (a test binary's folder) has module `m`.
fn has_module(dir: &Path, m: &str) -> bool {
    dir.join(format!("{m}.rs")).is_file() || dir.join(m).join("mod.rs").is_file()
}

#[test]
fn the_tests_that_docs_and_comments_name_exist() {
    let root = root();
    let crates = crate_dirs();
    let mut files = vec![];
    text_files(&root, &mut files);
    let this = root.join(file!());
    let mut bad = vec![];
    for f in files.iter().filter(|f| **f != this) {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let shown = f.strip_prefix(&root).unwrap().display().to_string();
        // The crate a relative path in this file is relative to, besides the root.
        let home = crates
            .iter()
            .filter(|c| f.starts_with(c))
            .max_by_key(|c| c.components().count())
            .unwrap();
        for path in paths_around(&text, "tests/") {
            if !path.ends_with(".rs") || path.starts_with('/') || path.contains("..") {
                continue;
            }
            if !root.join(path).is_file() && !home.join(path).is_file() {
                bad.push(format!("{shown} names {path}, which does not exist"));
            }
        }
        for (i, _) in text.match_indices("--test ") {
            let mut words = text[i + "--test ".len()..].split_whitespace();
            let Some(name) = words.next() else { continue };
            let name = name.trim_end_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_');
            if name.is_empty() {
                continue;
            }
            let dirs: Vec<PathBuf> = crates
                .iter()
                .map(|c| c.join("tests"))
                .filter(|t| t.join(format!("{name}.rs")).is_file() || t.join(name).is_dir())
                .collect();
            if dirs.is_empty() {
                bad.push(format!("{shown} runs `--test {name}`: no such test binary"));
                continue;
            }
            // `--test model gguf::`: the module the filter names.
            let filter = words
                .next()
                .unwrap_or("")
                .trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'));
            if let Some(m) = filter.strip_suffix("::") {
                if !dirs.iter().any(|d| has_module(&d.join(name), m)) {
                    bad.push(format!(
                        "{shown} runs `--test {name} {m}::`: {name} has no module {m}"
                    ));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
