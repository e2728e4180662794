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

/// The names of the crates in a `[dependencies]` section.
fn dependency_names(deps: &str) -> Vec<String> {
    deps.lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim().to_string()))
        .collect()
}

#[test]
fn the_reward_runtime_links_no_scenario_parser() {
    // The reward stack reads the plain specs of comlrl-spec; the scenario crate (YAML, parquet,
    // minijinja) stays out of it.
    let deps = dependencies(&root().join("crates/comlrl-reward/Cargo.toml"));
    for crate_name in ["comlrl-scenario", "parquet", "minijinja", "serde_norway"] {
        assert!(
            !dependency_names(&deps).iter().any(|d| d == crate_name),
            "comlrl-reward depends on {crate_name}:\n{deps}"
        );
    }
    let spec = dependencies(&root().join("crates/comlrl-spec/Cargo.toml"));
    assert_eq!(
        dependency_names(&spec),
        ["serde", "serde_json"],
        "comlrl-spec holds plain serde data and depends on nothing else:\n{spec}"
    );
}

#[test]
fn overwrite_clears_the_trackers_state_by_their_own_names() {
    // `train::rundir` names the trackers' files as literals (training does not import `track`).
    let cleared = comlrl::train::rundir::CLEARED;
    for name in [
        comlrl::track::tensorboard::DIR,
        comlrl::track::wandb::RUN_FILE,
    ] {
        assert!(cleared.contains(&name), "{name} is not in {cleared:?}");
    }
}

/// The rooms of `src/model` from the bottom up (docs/architecture.md): a file imports files of
/// its own room and of rooms of a lower rank, never of its rank or above. `mod.rs` at the top
/// only declares the rooms and re-exports for the rest of the crate.
const MODEL_ROOMS: &[(&str, usize)] = &[
    ("error", 0),
    ("tokenizer", 1),
    ("kernels", 1),
    ("decoder", 2),
    ("io", 3),
    ("sample", 3),
    ("grad", 3),
    ("policy", 4),
    ("mod", 5),
];

/// Rust source with comments and string and char literals blanked (offsets kept).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i..].starts_with(b"//") {
            let end = text[i..].find('\n').map_or(b.len(), |e| i + e);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if !ident_before && (b[i..].starts_with(b"r#") || b[i..].starts_with(b"r\"")) {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let start = i + 1 + hashes + 1;
            let end = (start..b.len())
                .find(|&j| b[j..].starts_with(&close))
                .map_or(b.len(), |j| j + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), else a lifetime.
            let end = if b.get(i + 1) == Some(&b'\\') {
                (i + 2..b.len()).find(|&j| b[j] == b'\'').map(|j| j + 1)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
            };
            match end {
                Some(e) => {
                    blank(&mut out, i, e);
                    i = e;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// `code` without its `#[cfg(test)]` items: test modules may compare a kernel against the
/// layer above it, the rules are about what the library itself imports.
fn without_tests(code: &str) -> String {
    let mut out = code.to_string();
    let b = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]").map(|p| p + from) {
        let mut j = at + "#[cfg(test)]".len();
        let (mut depth, mut end) = (0i32, b.len());
        while j < b.len() {
            match b[j] {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => {
                    end = j + 1;
                    break;
                }
                b'{' if depth == 0 => {
                    let mut d = 0;
                    for (k, &c) in b.iter().enumerate().skip(j) {
                        d += (c == b'{') as i32 - (c == b'}') as i32;
                        if d == 0 {
                            end = k + 1;
                            break;
                        }
                    }
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        out.replace_range(at..end, &" ".repeat(end - at));
        from = end;
    }
    out
}

fn tokens(code: &str) -> Vec<&str> {
    let mut out = vec![];
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(&code[start..i]);
        } else if code[i..].starts_with("::") {
            out.push("::");
            i += 2;
        } else if c.is_ascii_whitespace() || !c.is_ascii() {
            i += 1;
        } else {
            out.push(&code[i..i + 1]);
            i += 1;
        }
    }
    out
}

/// The paths starting at `t[*i]` (a use tree or an expression path), as segments.
fn path_tree(t: &[&str], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    loop {
        match t.get(*i).copied() {
            Some("{") => {
                *i += 1;
                while *i < t.len() && t[*i] != "}" {
                    if t[*i] == "," {
                        *i += 1;
                        continue;
                    }
                    path_tree(t, i, path.clone(), out);
                }
                *i += 1;
                return;
            }
            Some("*") => {
                *i += 1;
                break;
            }
            Some("self") if !path.is_empty() && t.get(*i + 1) != Some(&"::") => {
                *i += 1;
                break;
            }
            Some(s) if s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                path.push(s.to_string());
                *i += 1;
                if t.get(*i) == Some(&"::") {
                    *i += 1;
                } else {
                    if t.get(*i) == Some(&"as") {
                        *i += 2;
                    }
                    break;
                }
            }
            _ => break,
        }
    }
    out.push(path);
}

/// A file of `src/model` and its module path (`["model", "decoder", "linear"]`).
struct ModelFile {
    path: PathBuf,
    module: Vec<String>,
}

fn model_files() -> Vec<ModelFile> {
    let src = root().join("src");
    let mut files = vec![];
    rust_files(&src.join("model"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap().with_extension("");
            let mut module: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().to_string())
                .collect();
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            ModelFile { path, module }
        })
        .collect()
}

/// Every `crate::` / `super::` / `self::` path the file's library code names, resolved to
/// crate-absolute segments (inline modules such as `mod avx512 { .. }` counted).
fn imported_paths(f: &ModelFile) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(&f.path).unwrap();
    let code = without_tests(&code_only(&text));
    let t = tokens(&code);
    let (mut depth, mut inline): (usize, Vec<(String, usize)>) = (0, vec![]);
    let mut out = vec![];
    let mut i = 0;
    while i < t.len() {
        match t[i] {
            "{" => depth += 1,
            "}" => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            "mod" if t.get(i + 2) == Some(&"{") => {
                inline.push((t[i + 1].to_string(), depth + 1));
            }
            "crate" | "super" | "self"
                if t.get(i + 1) == Some(&"::")
                    && !matches!(t.get(i.wrapping_sub(1)), Some(&"::") | Some(&"in")) =>
            {
                let mut here: Vec<String> = f.module.clone();
                here.extend(inline.iter().map(|(m, _)| m.clone()));
                let mut paths = vec![];
                path_tree(&t, &mut i, vec![], &mut paths);
                for p in paths {
                    let mut abs = match p[0].as_str() {
                        "crate" => vec![],
                        _ => here.clone(),
                    };
                    let mut rest = &p[..];
                    if rest[0] == "crate" || rest[0] == "self" {
                        rest = &rest[1..];
                    }
                    while rest.first().is_some_and(|s| s == "super") {
                        abs.pop();
                        rest = &rest[1..];
                    }
                    abs.extend(rest.iter().cloned());
                    out.push(abs);
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The file of `src/` that a crate-absolute path under `model` lands in: the deepest module
/// file its segments name.
fn file_of(path: &[String]) -> PathBuf {
    let mut dir = root().join("src");
    let mut file = dir.join("lib.rs");
    for seg in path {
        if dir.join(seg).is_dir() {
            dir = dir.join(seg);
            file = dir.join("mod.rs");
        } else if dir.join(format!("{seg}.rs")).is_file() {
            file = dir.join(format!("{seg}.rs"));
            break;
        } else {
            break;
        }
    }
    file
}

/// The room of a file of `src/model`: its folder below `model`, else its own name.
fn room(file: &Path) -> String {
    let rel = file.strip_prefix(root().join("src/model")).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

fn rank(room: &str) -> usize {
    MODEL_ROOMS
        .iter()
        .find(|(r, _)| *r == room)
        .unwrap_or_else(|| panic!("room `{room}` of src/model is not in MODEL_ROOMS"))
        .1
}

/// Edges file → file inside `src/model` (library code only).
fn model_imports() -> Vec<(PathBuf, PathBuf)> {
    let mut edges = vec![];
    for f in model_files() {
        for p in imported_paths(&f) {
            if p.first().is_some_and(|m| m == "model") {
                let to = file_of(&p);
                if to != f.path {
                    edges.push((f.path.clone(), to));
                }
            }
        }
    }
    edges.sort();
    edges.dedup();
    edges
}

fn shown(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

#[test]
fn the_model_imports_only_rooms_below() {
    let bad: Vec<String> = model_imports()
        .into_iter()
        .filter(|(from, to)| {
            let (a, b) = (room(from), room(to));
            a != b && rank(&b) >= rank(&a)
        })
        .map(|(from, to)| format!("{} imports {}", shown(&from), shown(&to)))
        .collect();
    assert!(
        bad.is_empty(),
        "inside src/model a file imports its own room or the rooms below it ({MODEL_ROOMS:?}):\n{}",
        bad.join("\n")
    );
}

#[test]
fn no_import_loop_between_the_files_of_the_model() {
    let edges = model_imports();
    let next = |f: &PathBuf| -> Vec<&PathBuf> {
        edges
            .iter()
            .filter(|(a, _)| a == f)
            .map(|(_, b)| b)
            .collect()
    };
    // Depth-first search: a file met again while still on the stack closes a loop.
    fn visit<'a>(
        f: &'a PathBuf,
        next: &dyn Fn(&PathBuf) -> Vec<&'a PathBuf>,
        stack: &mut Vec<&'a PathBuf>,
        done: &mut std::collections::HashSet<&'a PathBuf>,
    ) -> Option<Vec<&'a PathBuf>> {
        if let Some(at) = stack.iter().position(|s| *s == f) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(f);
            return Some(cycle);
        }
        if !done.insert(f) {
            return None;
        }
        stack.push(f);
        for n in next(f) {
            if let Some(c) = visit(n, next, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    let mut done = std::collections::HashSet::new();
    for (f, _) in &edges {
        if let Some(cycle) = visit(f, &next, &mut vec![], &mut done) {
            let shown: Vec<String> = cycle.iter().map(|p| shown(p)).collect();
            panic!("an import loop in src/model: {}", shown.join(" -> "));
        }
    }
}

#[test]
fn the_model_has_its_own_error_and_no_reward_or_root_error() {
    let mut bad = vec![];
    for f in model_files() {
        let code = code_only(&std::fs::read_to_string(&f.path).unwrap());
        let t = tokens(&code);
        if t.contains(&"comlrl_reward") {
            bad.push(format!("{} names comlrl_reward", shown(&f.path)));
        }
        for p in imported_paths(&f) {
            if p.first().is_some_and(|m| m == "error") {
                bad.push(format!("{} imports crate::error", shown(&f.path)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "src/model returns model::Error and depends on no reward code:\n{}",
        bad.join("\n")
    );
}
