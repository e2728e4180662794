//! The repository stands on its own: nothing reads the shared folder beside it, every
//! `comlrl <command>` the docs mention exists, and the agents a run saves load in the
//! ecosystem (the config keeps the source's keys; transformers, where installed, decodes the
//! same greedy tokens).
use crate::common;
use common::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file below `dir`, skipping build output, run output and VCS metadata.
fn files_below(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "runs" | "bench-results") {
                files_below(&p, out);
            }
        } else {
            out.push(p);
        }
    }
}

#[test]
fn nothing_reads_the_shared_folder_beside_the_clone() {
    // The project owns its test data (tests/fixtures); a clone has nothing beside it.
    let needle = ["..", "/shared"].concat();
    let mut files = vec![];
    files_below(&root(), &mut files);
    let offenders: Vec<String> = files
        .iter()
        .filter(|p| {
            std::fs::read(p)
                .map(|b| String::from_utf8_lossy(&b).contains(&needle))
                .unwrap_or(false)
        })
        .map(|p| p.strip_prefix(root()).unwrap_or(p).display().to_string())
        .collect();
    assert!(offenders.is_empty(), "{needle} is named in {offenders:?}");
}

/// The subcommands `comlrl --help` lists.
fn subcommands() -> BTreeSet<String> {
    let text = comlrl(&["--help"]).output().stdout;
    let list = text
        .split("Commands:")
        .nth(1)
        .and_then(|s| s.split("Options:").next())
        .expect("a Commands: section in --help");
    list.lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Whether `cmd` is a subcommand `--help` does not list (e.g. `plugin-host`, which the
/// trainer starts itself): its own `--help` succeeds.
fn hidden_command(cmd: &str) -> bool {
    comlrl(&[cmd, "--help"]).output().ok
}

/// Text in code: fenced or indented code blocks and inline `code` spans of a Markdown file;
/// a whole YAML file (its comments show commands).
fn code_text(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    if path.extension().is_some_and(|e| e == "yaml") {
        return text;
    }
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || line.starts_with("    ") {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 1 {
                out.push_str(span);
                out.push('\n');
            }
        }
    }
    out
}

#[test]
fn every_command_the_docs_mention_exists() {
    let known = subcommands();
    assert!(
        known.contains("run") && known.contains("check"),
        "{known:?}"
    );
    let mut files = vec![root().join("README.md")];
    for dir in ["docs", "scenarios"] {
        files_below(&root().join(dir), &mut files);
    }
    let mut unknown = vec![];
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "md" || e == "yaml"))
    {
        for code in code_text(f).lines() {
            // A command line: `comlrl <command>` first, after a shell prompt, a comment
            // marker or environment assignments (`RUST_LOG=debug comlrl run ...`).
            let mut words = code
                .split_whitespace()
                .skip_while(|w| matches!(*w, "$" | "#" | "//") || w.contains('='));
            let (Some(prog), Some(cmd)) = (words.next(), words.next()) else {
                continue;
            };
            let named = prog == "comlrl" || prog.ends_with("/comlrl");
            let looks_like_command =
                cmd.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !cmd.starts_with('-');
            if named && looks_like_command && !known.contains(cmd) && !hidden_command(cmd) {
                unknown.push(format!("{}: comlrl {cmd}", f.display()));
            }
        }
    }
    assert!(unknown.is_empty(), "not a comlrl subcommand: {unknown:?}");
}

fn run_ok(args: &[&str]) -> String {
    let out = comlrl(args).output();
    assert!(out.ok, "comlrl {args:?}: {}", out.stderr);
    out.stdout
}

fn json_file(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Trains the quick start's story model for a few steps and returns the run directory.
fn trained_run(tmp: &Path) -> PathBuf {
    let out = tmp.join("run");
    let scenario = root().join("scenarios/story_len_ratio_tiny.yaml");
    run_ok(&[
        "run",
        scenario.to_str().unwrap(),
        "--quiet",
        "--set",
        &format!("output_dir={}", out.display()),
        "--set",
        "trainer.num_train_epochs=1",
        "--set",
        "agents.max_new_tokens=16",
    ]);
    out
}

const HF_GREEDY: &str = r#"
import json, sys, torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
model.eval()
ids = [int(x) for x in sys.argv[2].split(",")]
with torch.no_grad():
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         do_sample=False, max_new_tokens=int(sys.argv[3]))
print(json.dumps(out[0, len(ids):].tolist()))
"#;

#[test]
fn saved_agents_keep_the_source_files_and_load_in_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    let out = trained_run(tmp.path());
    let source = root().join("models/tiny-story");
    let src_cfg = json_file(&source.join("config.json"));
    for i in 0..2 {
        let agent = out.join(format!("models/agent_{i}"));
        let cfg = json_file(&agent.join("config.json"));
        let (src, saved) = (src_cfg.as_object().unwrap(), cfg.as_object().unwrap());
        let mut expected: BTreeSet<&String> = src.keys().collect();
        let dtype_keys = ["dtype".to_string(), "torch_dtype".to_string()];
        expected.extend(dtype_keys.iter());
        assert_eq!(
            saved.keys().collect::<BTreeSet<_>>(),
            expected,
            "agent {i}: config.json keys differ from the source's (plus dtype fields)"
        );
        for (k, v) in src {
            if !dtype_keys.contains(k) {
                assert_eq!(&saved[k], v, "agent {i}: config.json `{k}` changed");
            }
        }
        assert_eq!(saved["dtype"], "float32");
        assert_eq!(saved["torch_dtype"], "float32");
        for f in [
            "generation_config.json",
            "tokenizer.json",
            "tokenizer_config.json",
        ] {
            assert_eq!(
                std::fs::read(agent.join(f)).unwrap(),
                std::fs::read(source.join(f)).unwrap(),
                "agent {i}: {f} differs from the source's"
            );
        }
    }
    let Some(py) = python_with(&["transformers", "torch"]) else {
        return;
    };
    let script = tmp.path().join("hf_greedy.py");
    std::fs::write(&script, HF_GREEDY).unwrap();
    for i in 0..2 {
        let agent = out.join(format!("models/agent_{i}"));
        let agent = agent.to_str().unwrap();
        for prompt in ["49,80,662", "1,5,9,200,31"] {
            let hf = Command::new(&py)
                .args([script.to_str().unwrap(), agent, prompt, "24"])
                .output()
                .unwrap();
            assert!(
                hf.status.success(),
                "transformers could not load agent {i}: {}",
                String::from_utf8_lossy(&hf.stderr)
            );
            let hf_ids: Vec<u64> =
                serde_json::from_str(String::from_utf8_lossy(&hf.stdout).trim()).unwrap();
            let ours: serde_json::Value = serde_json::from_str(&run_ok(&[
                "generate",
                "--model",
                agent,
                "--prompt-ids",
                prompt,
                "--greedy",
                "--max-new-tokens",
                "24",
                "--json",
            ]))
            .unwrap();
            let our_ids: Vec<u64> = ours["samples"][0]["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            // transformers stops after EOS and includes it; so does comlrl.
            assert_eq!(hf_ids, our_ids, "agent {i}, prompt {prompt}");
        }
    }
}
