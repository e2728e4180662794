//! Dependencies point one way (docs/architecture.md): scenario → plan → rollout → reward →
//! advantage → loss → optimizer → metrics → trackers, the CLI on top, benchmarks beside. This
//! test reads the sources and the manifests and fails on an import against that direction.
use std::collections::{BTreeMap, BTreeSet};
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
    // `train::run::dir` names the trackers' files as literals (training does not import `track`).
    let cleared = comlrl::train::run::dir::CLEARED;
    for name in [
        comlrl::track::tensorboard::DIR,
        comlrl::track::wandb::RUN_FILE,
        comlrl::metrics::COMPLETIONS_FILE,
    ] {
        assert!(cleared.contains(&name), "{name} is not in {cleared:?}");
    }
}

// ---- The import graph between the files of `src/`. ----

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

/// The module path of a file under `src` (`train/rollout/tree.rs` → `train::rollout::tree`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut m: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if m.last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        m.pop();
    }
    m
}

/// The file that defines the deepest module `path` names (`train::rollout::Node` →
/// `src/train/rollout/mod.rs`), if it names one under `src`.
fn file_of(src: &Path, path: &[String]) -> Option<PathBuf> {
    let (mut dir, mut found) = (src.to_path_buf(), None);
    for seg in path {
        let (file, folder) = (dir.join(format!("{seg}.rs")), dir.join(seg));
        if file.is_file() {
            found = Some(file);
        } else if folder.join("mod.rs").is_file() {
            found = Some(folder.join("mod.rs"));
        } else {
            break;
        }
        dir = folder;
    }
    found
}

/// Every path the library code of `file` names into the crate, crate-absolute: `crate::`,
/// `comlrl::`, `super::` and `self::` paths in `use` trees and in expressions (inline modules
/// such as `mod avx512 { .. }` counted), and `use child::Item` of a child module.
fn imported_paths(src: &Path, file: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(file).unwrap();
    let code = without_tests(&code_only(&text));
    let t = tokens(&code);
    let module = module_of(src, file);
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
            first @ ("crate" | "comlrl" | "super" | "self")
                if t.get(i + 1) == Some(&"::")
                    && !matches!(t.get(i.wrapping_sub(1)), Some(&"::") | Some(&"in")) =>
            {
                let mut here = module.clone();
                here.extend(inline.iter().map(|(m, _)| m.clone()));
                let mut paths = vec![];
                path_tree(&t, &mut i, vec![], &mut paths);
                for p in paths {
                    let mut abs = match first {
                        "crate" | "comlrl" => vec![],
                        _ => here.clone(),
                    };
                    let mut rest = &p[..];
                    if matches!(rest[0].as_str(), "crate" | "comlrl" | "self") {
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
            "use"
                if inline.is_empty()
                    && t.get(i + 2) == Some(&"::")
                    && !matches!(
                        t.get(i + 1),
                        Some(&"crate" | &"comlrl" | &"super" | &"self")
                    ) =>
            {
                // `use child::Item`: a path from a module this file declares.
                i += 1;
                let mut paths = vec![];
                path_tree(&t, &mut i, module.clone(), &mut paths);
                let own = file_of(src, &module);
                out.extend(paths.into_iter().filter(|p| {
                    let to = file_of(src, p);
                    to.is_some() && to != own
                }));
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Every file under `src/` and the files its library code imports (a module's `mod`
/// declarations are not imports).
fn import_graph() -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let src = root().join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    files
        .iter()
        .map(|f| {
            let targets = imported_paths(&src, f)
                .iter()
                .filter_map(|p| file_of(&src, p))
                .filter(|t| t != f)
                .collect();
            (f.clone(), targets)
        })
        .collect()
}

/// A file's path under `src/` (`model/decoder/layer.rs`).
fn under_src(p: &Path) -> String {
    p.strip_prefix(root().join("src"))
        .unwrap()
        .display()
        .to_string()
}

/// The import loops among the files `keep` selects: each strongly connected set of two or
/// more files, as paths under `src/`.
fn import_loops(keep: impl Fn(&str) -> bool) -> Vec<Vec<String>> {
    let name = |p: &Path| under_src(p);
    let graph = import_graph();
    let nodes: Vec<&PathBuf> = graph.keys().filter(|p| keep(&name(p))).collect();
    let index: std::collections::HashMap<&PathBuf, usize> =
        nodes.iter().enumerate().map(|(i, p)| (*p, i)).collect();
    let edges: Vec<Vec<usize>> = nodes
        .iter()
        .map(|p| {
            graph[*p]
                .iter()
                .filter_map(|t| index.get(t).copied())
                .collect()
        })
        .collect();
    // Tarjan's strongly connected components.
    struct T<'a> {
        edges: &'a [Vec<usize>],
        idx: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on: Vec<bool>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T, v: usize) {
        t.idx[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &t.edges[v] {
            match t.idx[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(i) if t.on[w] => t.low[v] = t.low[v].min(i),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.idx[v] {
            let mut scc = vec![];
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                t.out.push(scc);
            }
        }
    }
    let n = nodes.len();
    let mut t = T {
        edges: &edges,
        idx: vec![None; n],
        low: vec![0; n],
        stack: vec![],
        on: vec![false; n],
        next: 0,
        out: vec![],
    };
    for v in 0..n {
        if t.idx[v].is_none() {
            visit(&mut t, v);
        }
    }
    t.out
        .into_iter()
        .map(|scc| {
            let mut files: Vec<String> = scc.into_iter().map(|i| name(nodes[i])).collect();
            files.sort();
            files
        })
        .collect()
}

// ---- Imports between files: `src/model`'s rooms in one order, no loops. ----

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

/// The room of a file of `src/model` (`model/decoder/layer.rs` → `decoder`,
/// `model/policy.rs` → `policy`); `None` outside `src/model`.
fn model_room(path: &str) -> Option<String> {
    let rest = path.strip_prefix("model/")?;
    let first = rest.split('/').next().unwrap();
    Some(first.trim_end_matches(".rs").to_string())
}

fn rank(room: &str) -> usize {
    MODEL_ROOMS
        .iter()
        .find(|(r, _)| *r == room)
        .unwrap_or_else(|| panic!("room `{room}` of src/model is not in MODEL_ROOMS"))
        .1
}

#[test]
fn the_model_imports_only_rooms_below() {
    let mut bad = vec![];
    for (file, targets) in import_graph() {
        let from = under_src(&file);
        let Some(a) = model_room(&from) else {
            continue;
        };
        for to in targets.iter().map(|t| under_src(t)) {
            if let Some(b) = model_room(&to) {
                if a != b && rank(&b) >= rank(&a) {
                    bad.push(format!("src/{from} imports src/{to}"));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "inside src/model a file imports its own room or the rooms below it ({MODEL_ROOMS:?}):\n{}",
        bad.join("\n")
    );
}

#[test]
fn no_two_files_of_the_model_import_each_other_in_a_loop() {
    let loops = import_loops(|f| f.starts_with("model/"));
    assert!(
        loops.is_empty(),
        "import loops between files of src/model: {loops:#?}"
    );
}

#[test]
fn the_model_has_its_own_error_and_no_reward_or_root_error() {
    let src = root().join("src");
    let mut files = vec![];
    rust_files(&src.join("model"), &mut files);
    let mut bad = vec![];
    for f in files {
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        let t = tokens(&code);
        if t.contains(&"comlrl_reward") {
            bad.push(format!("{} names comlrl_reward", under_src(&f)));
        }
        for p in imported_paths(&src, &f) {
            if p.first().is_some_and(|m| m == "error") {
                bad.push(format!("{} imports crate::error", under_src(&f)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "src/model returns model::Error and depends on no reward code:\n{}",
        bad.join("\n")
    );
}

// ---- Imports between files: `src/train`'s folders in one order, no loops. ----

/// The folders of `src/train`, lowest first: a file in one may import only files of its own
/// folder or of a folder before it (`src/train/mod.rs` lists their roles).
const TRAIN_ORDER: &[&str] = &[
    "report",
    "optim",
    "rollout",
    "update",
    "run",
    "world",
    "setup",
    "algorithms",
    "trainer",
];

/// `train/<folder>/...` → `<folder>`; `None` for `train/mod.rs` and files outside `train`.
fn train_folder(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("train/")?;
    rest.split_once('/').map(|(folder, _)| folder)
}

/// Each import from a file of `src/train` into a folder after its own in [`TRAIN_ORDER`].
fn upward_train_imports() -> Vec<String> {
    let src = root().join("src");
    let name = |p: &Path| p.strip_prefix(&src).unwrap().display().to_string();
    let rank = |f: &str| TRAIN_ORDER.iter().position(|o| *o == f);
    let mut bad = vec![];
    for (file, targets) in import_graph() {
        let from = name(&file);
        let Some(ff) = train_folder(&from) else {
            continue;
        };
        let Some(fr) = rank(ff) else {
            bad.push(format!("{from} is in a folder missing from TRAIN_ORDER"));
            continue;
        };
        for t in targets {
            let to = name(&t);
            if let Some(tr) = train_folder(&to).and_then(rank) {
                if tr > fr {
                    bad.push(format!("{from} imports {to}"));
                }
            }
        }
    }
    bad
}

#[test]
fn the_trainers_folders_import_only_the_folders_below_them() {
    let bad = upward_train_imports();
    assert!(
        bad.is_empty(),
        "src/train's folders import upward (the order, lowest first, is {TRAIN_ORDER:?}): {bad:#?}"
    );
}

#[test]
fn no_two_files_of_the_trainer_import_each_other_in_a_loop() {
    let loops = import_loops(|f| f.starts_with("train/"));
    assert!(
        loops.is_empty(),
        "import loops between files of src/train: {loops:#?}"
    );
}

#[test]
fn no_two_modules_of_the_crate_import_each_other_in_a_loop() {
    // The top-level modules of src/ (a folder or a file), as the file-level graph links them;
    // loops between files inside one module are that module's rule (train's above).
    let src = root().join("src");
    let top = |p: &Path| {
        let rel = p.strip_prefix(&src).unwrap();
        let first = rel.iter().next().unwrap().to_string_lossy().into_owned();
        first.trim_end_matches(".rs").to_string()
    };
    let mut edges: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for (file, targets) in import_graph() {
        let from = top(&file);
        for t in targets {
            let to = top(&t);
            if to != from && !["lib", "main"].contains(&from.as_str()) {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    // Each module that reaches itself again through another.
    let mut looped = vec![];
    for start in edges.keys() {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo: Vec<&String> = edges[start].iter().collect();
        while let Some(m) = todo.pop() {
            if m == start {
                looped.push(start.clone());
                break;
            }
            if seen.insert(m.clone()) {
                todo.extend(edges.get(m).into_iter().flatten());
            }
        }
    }
    assert!(
        looped.is_empty(),
        "modules of src/ that import each other in a loop: {looped:?} (imports: {edges:#?})"
    );
}

#[test]
fn an_algorithm_imports_the_seam_and_the_shared_machinery_never_another_algorithm() {
    let src = root().join("src");
    let name = |p: &Path| p.strip_prefix(&src).unwrap().display().to_string();
    // `actor_critic/` is not an algorithm but what IAC and MAAC share, `preference/` what the
    // iterative preference trainers share: any algorithm may import them, and they import no
    // algorithm (as algorithm folders, they are checked like one).
    const SHARED: [&str; 2] = ["actor_critic", "preference"];
    let algorithm = |p: &str| {
        let rest = p.strip_prefix("train/algorithms/")?;
        rest.split_once('/').map(|(a, _)| a.to_string())
    };
    let mut bad = vec![];
    for (file, targets) in import_graph() {
        let from = name(&file);
        let Some(mine) = algorithm(&from) else {
            continue;
        };
        for t in targets.iter().map(|t| name(t)) {
            let other = algorithm(&t).is_some_and(|a| a != mine && !SHARED.contains(&a.as_str()));
            let not_seam = t.starts_with("train/algorithms/")
                && algorithm(&t).is_none()
                && !["train/algorithms/algorithm.rs", "train/algorithms/round.rs"]
                    .contains(&t.as_str());
            if other || not_seam {
                bad.push(format!("{from} imports {t}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "an algorithm folder reaches beyond the seam: {bad:#?}"
    );
}

#[test]
fn the_loop_and_the_algorithms_never_branch_on_the_number_of_processes() {
    // One process or several is `train::world`'s strategy; elsewhere in `train` nothing asks.
    let mut files = vec![];
    rust_files(&root().join("src/train"), &mut files);
    let mut bad = vec![];
    for f in files
        .iter()
        .filter(|f| !f.starts_with(root().join("src/train/world")))
    {
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        for what in [".distributed()", ".size()", ".replicated()"] {
            if code.contains(what) {
                bad.push(format!("{} calls {what}", f.display()));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}
