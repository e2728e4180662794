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

/// `text` with comments, string and char literals blanked (so paths in docs or messages are
/// not imports), lengths kept.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { c } else { b' ' }))
    };
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            rest.windows(2)
                .position(|w| w == b"*/")
                .map_or(rest.len(), |p| p + 2)
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            (j + 1).min(rest.len())
        } else if rest[0] == b'\'' && rest.len() > 2 && (rest[1] == b'\\' || rest[2] == b'\'') {
            // A char literal (not a lifetime): 'x' or '\n', '\u{..}'.
            rest[2..]
                .iter()
                .position(|&c| c == b'\'')
                .map_or(1, |p| p + 3)
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        blank(&mut out, &rest[..end]);
        i += end;
    }
    String::from_utf8(out).unwrap()
}

/// The paths a `use` tree names, each as its segments (`a::{b, c::d}` → `a::b`, `a::c::d`).
fn use_tree(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or("");
        let mut p = prefix.to_vec();
        p.extend(
            path.split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
        );
        out.push(p);
        return;
    };
    let mut p = prefix.to_vec();
    p.extend(
        tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from),
    );
    let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut depth, mut start) = (0, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                use_tree(&body[start..i], &p, out);
                start = i + 1;
            }
            _ => {}
        }
    }
    use_tree(&body[start..], &p, out);
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

/// Every file under `src/` and the files it imports (`use` and inline `crate::`, `super::`,
/// `self::`, `comlrl::` paths; a module's `mod` declarations are not imports).
fn import_graph() -> std::collections::BTreeMap<PathBuf, std::collections::BTreeSet<PathBuf>> {
    let src = root().join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    let mut graph = std::collections::BTreeMap::new();
    for f in &files {
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        let here = module_of(&src, f);
        // Inline modules (`mod tests { .. }`): `super` inside one is the file itself.
        let inline: Vec<(usize, usize)> = code
            .match_indices("mod ")
            .filter_map(|(i, _)| {
                let after = &code[i + 4..];
                let name_len = after.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
                let open =
                    i + 4 + name_len + after[name_len..].find(|c: char| !c.is_whitespace())?;
                (code.as_bytes()[open] == b'{').then_some(open)
            })
            .map(|open| {
                let mut depth = 0;
                let end = code[open..]
                    .char_indices()
                    .find(|&(_, c)| {
                        depth += match c {
                            '{' => 1,
                            '}' => -1,
                            _ => 0,
                        };
                        depth == 0
                    })
                    .map_or(code.len(), |(j, _)| open + j);
                (open, end)
            })
            .collect();
        let mut paths: Vec<(usize, Vec<String>)> = vec![];
        let mut uses = vec![];
        for (i, _) in code.match_indices("use ") {
            let before = code[..i].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let end = code[i..].find(';').map_or(code.len(), |e| i + e);
            let mut out = vec![];
            use_tree(&code[i + 4..end], &[], &mut out);
            paths.extend(out.into_iter().map(|p| (i, p)));
            uses.push((i, end));
        }
        for prefix in ["crate::", "super::", "self::", "comlrl::"] {
            for (i, _) in code.match_indices(prefix) {
                let before = code[..i].chars().last();
                let in_use = uses.iter().any(|&(u, e)| u < i && i < e);
                if in_use || before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let len = code[i..]
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(code.len() - i);
                let segs = code[i..i + len].split("::").filter(|s| !s.is_empty());
                paths.push((i, segs.map(String::from).collect()));
            }
        }
        let mut targets = std::collections::BTreeSet::new();
        for (at, p) in paths {
            let depth = inline.iter().filter(|&&(o, e)| o < at && at < e).count();
            let mut base = here.clone();
            base.extend((0..depth).map(|_| "<inline>".to_string()));
            let full: Vec<String> = match p.first().map(String::as_str) {
                Some("crate") | Some("comlrl") => p[1..].to_vec(),
                Some("self") => base.iter().cloned().chain(p[1..].iter().cloned()).collect(),
                Some("super") => {
                    let ups = p.iter().take_while(|s| *s == "super").count();
                    let keep = base.len().saturating_sub(ups);
                    base[..keep]
                        .iter()
                        .cloned()
                        .chain(p[ups..].iter().cloned())
                        .collect()
                }
                // A path from a child module in scope (`use child::Item`).
                Some(_) => {
                    let child: Vec<String> = base.iter().chain(&p).cloned().collect();
                    let child: Vec<String> =
                        child.into_iter().filter(|s| s != "<inline>").collect();
                    let own = file_of(&src, &here);
                    match file_of(&src, &child) {
                        Some(t) if Some(&t) != own.as_ref() => child,
                        _ => continue,
                    }
                }
                None => continue,
            };
            let full: Vec<String> = full.into_iter().filter(|s| s != "<inline>").collect();
            if let Some(t) = file_of(&src, &full).filter(|t| t != f) {
                targets.insert(t);
            }
        }
        graph.insert(f.clone(), targets);
    }
    graph
}

/// The import loops among the files `keep` selects: each strongly connected set of two or
/// more files, as paths under `src/`.
fn import_loops(keep: impl Fn(&str) -> bool) -> Vec<Vec<String>> {
    let src = root().join("src");
    let name = |p: &Path| p.strip_prefix(&src).unwrap().display().to_string();
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
            let other = algorithm(&t).is_some_and(|a| a != mine);
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
