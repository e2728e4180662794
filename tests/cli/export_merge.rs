//! `comlrl export --merge` and `--gguf --adapter` (issue 43): a base with a PEFT adapter written
//! as one merged model, read by its real consumers where the Python packages are there
//! (transformers and PEFT's own merge through `scripts/fixtures/make_lora.py merged`, the `gguf`
//! package's `GGUFReader` through `make_lora.py gguf`), scored by comlrl like the adapted base,
//! and every refusal: no adapter, an existing or input `--out`, an adapter that does not fit.
use crate::common;
use common::*;
use std::path::{Path, PathBuf};

const MODELS: [&str; 3] = ["tiny-qwen2", "tiny-llama", "tiny-qwen3"];

fn run(args: &[&str]) -> (bool, String, String) {
    comlrl(args).output().parts()
}

fn adapter_of(name: &str) -> PathBuf {
    fixtures().join("lora").join(name).join("adapter")
}

/// Copies the files of directory `from` into a new directory `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `comlrl score --json`'s log-probs of a fixed completion.
fn score(model: &Path, adapter: Option<&Path>) -> Vec<f64> {
    let mut args = vec!["score", "--model", s(model)];
    if let Some(a) = adapter {
        args.extend(["--adapter", s(a)]);
    }
    args.extend([
        "--prompt-ids",
        "5,17,230",
        "--completion-ids",
        "41,999,3,77,1200",
        "--json",
    ]);
    let (ok, out, err) = run(&args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn make_lora(py: &str, args: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fixtures/make_lora.py");
    let out = std::process::Command::new(py)
        .arg(&script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "make_lora.py {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn merged_directories_and_ggufs_are_what_peft_transformers_and_gguf_read() {
    let tmp = tempfile::tempdir().unwrap();
    let mut written = vec![];
    for name in MODELS {
        let (model, adapter) = (fixtures().join(name), adapter_of(name));
        let dir = tmp.path().join(format!("{name}-merged"));
        let (ok, out, err) = run(&[
            "export",
            "--merge",
            "--model",
            s(&model),
            "--adapter",
            s(&adapter),
            "--out",
            s(&dir),
        ]);
        assert!(ok, "{name}: {err}");
        assert!(out.contains("merged at rank 4"), "{out}");
        for f in ["config.json", "model.safetensors", "tokenizer.json"] {
            assert!(dir.join(f).is_file(), "{name}: no {f}");
        }
        assert!(!dir.join("adapter_config.json").exists(), "{name}");
        // comlrl scores the merged model as it scores the base with the adapter.
        let (merged, adapted) = (score(&dir, None), score(&model, Some(&adapter)));
        assert_eq!(merged.len(), adapted.len());
        for (m, a) in merged.iter().zip(&adapted) {
            assert!((m - a).abs() < 1e-4, "{name}: merged {m} vs adapted {a}");
        }
        assert!(
            merged
                .iter()
                .zip(score(&model, None))
                .any(|(m, b)| (m - b).abs() > 1e-3),
            "{name}: the merge changed nothing"
        );
        let gguf = tmp.path().join(format!("{name}.gguf"));
        let (ok, out, err) = run(&[
            "export",
            "--gguf",
            "--quant",
            "f32",
            "--model",
            s(&model),
            "--adapter",
            s(&adapter),
            "--out",
            s(&gguf),
        ]);
        assert!(ok, "{name}: {err}");
        assert!(out.contains("as f32"), "{out}");
        let from_gguf = score(&gguf, None);
        for (g, m) in from_gguf.iter().zip(&merged) {
            assert!((g - m).abs() < 1e-4, "{name}: gguf {g} vs merged {m}");
        }
        written.push((model, adapter, dir, gguf));
    }
    let Some(py) = python_with(&["peft", "torch", "transformers", "gguf"]) else {
        return;
    };
    for (model, adapter, dir, gguf) in &written {
        make_lora(&py, &["merged", s(model), s(adapter), s(dir)]);
        make_lora(&py, &["gguf", s(model), s(adapter), s(gguf)]);
    }
}

#[test]
fn export_merge_refuses_what_it_cannot_write_safely() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "tiny-qwen2";
    let model = tmp.path().join("model");
    copy_dir(&fixtures().join(name), &model);
    let adapter = tmp.path().join("adapter");
    copy_dir(&adapter_of(name), &adapter);
    let merge = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "export",
            "--merge",
            "--model",
            s(&model),
            "--adapter",
            s(&adapter),
            "--out",
            s(out),
        ];
        args.extend(extra);
        run(&args)
    };
    let snapshot = |d: &Path| {
        let mut v: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                let b = std::fs::read(&p).unwrap();
                (p, b)
            })
            .collect();
        v.sort();
        v
    };
    let (m0, a0) = (snapshot(&model), snapshot(&adapter));
    // An input, or a directory holding one, is never replaced, even with --force.
    for out in [&model, &adapter, &tmp.path().to_path_buf()] {
        for force in [&[][..], &["--force"]] {
            let (ok, _, err) = merge(out, force);
            assert!(!ok && err.contains("is or holds an input"), "{err}");
        }
    }
    assert!(snapshot(&model) == m0 && snapshot(&adapter) == a0);
    // An existing directory only with --force; a file never.
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep"), "keep").unwrap();
    let (ok, _, err) = merge(&out, &[]);
    assert!(!ok && err.contains("exists; pass --force"), "{err}");
    assert!(out.join("keep").is_file());
    let (ok, _, err) = merge(&out, &["--force"]);
    assert!(ok, "{err}");
    assert!(out.join("model.safetensors").is_file() && !out.join("keep").exists());
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let (ok, _, err) = merge(&file, &["--force"]);
    assert!(!ok && err.contains("is not a directory"), "{err}");
    // Flags: --merge needs --adapter, --quant is GGUF's, one format at a time, one at least.
    let fresh = tmp.path().join("fresh");
    for (args, want) in [
        (
            vec![
                "export",
                "--merge",
                "--model",
                s(&model),
                "--out",
                s(&fresh),
            ],
            "--adapter",
        ),
        (
            vec![
                "export",
                "--merge",
                "--model",
                s(&model),
                "--adapter",
                s(&adapter),
                "--quant",
                "q8_0",
                "--out",
                s(&fresh),
            ],
            "--quant applies to --gguf only",
        ),
        (
            vec![
                "export",
                "--merge",
                "--gguf",
                "--model",
                s(&model),
                "--adapter",
                s(&adapter),
                "--out",
                s(&fresh),
            ],
            "cannot be used with",
        ),
        (
            vec![
                "export",
                "--model",
                s(&model),
                "--adapter",
                s(&adapter),
                "--out",
                s(&fresh),
            ],
            "pass --gguf",
        ),
    ] {
        let (ok, _, err) = run(&args);
        assert!(!ok && err.contains(want), "{args:?}: {err}");
    }
    // The GGUF export never writes over an adapter file either.
    let (ok, _, err) = run(&[
        "export",
        "--gguf",
        "--model",
        s(&model),
        "--adapter",
        s(&adapter),
        "--out",
        s(&adapter.join("adapter_model.safetensors")),
        "--force",
    ]);
    assert!(!ok && err.contains("or of its adapter"), "{err}");
    assert!(snapshot(&adapter) == a0);
    assert!(!fresh.exists());
}

/// An adapter that does not fit the base: another model's (other shapes), a rank its tensors
/// do not have, a target the base's adapter file lacks. Each error names the file and what.
#[test]
fn export_merge_refuses_adapters_that_do_not_fit_the_base() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fixtures().join("tiny-qwen2");
    let out = tmp.path().join("out");
    let merge = |adapter: &Path| {
        run(&[
            "export",
            "--merge",
            "--model",
            s(&model),
            "--adapter",
            s(adapter),
            "--out",
            s(&out),
        ])
    };
    let (ok, _, err) = merge(&adapter_of("tiny-llama"));
    assert!(!ok && err.contains("shape"), "{err}");
    let edit = |dir: &str, key: &str, value: serde_json::Value| {
        let d = tmp.path().join(dir);
        copy_dir(&adapter_of("tiny-qwen2"), &d);
        let p = d.join("adapter_config.json");
        let mut c = json(&p);
        c[key] = value;
        std::fs::write(&p, serde_json::to_string(&c).unwrap()).unwrap();
        d
    };
    let (ok, _, err) = merge(&edit("rank", "r", 2.into()));
    assert!(
        !ok && err.contains("adapter_model.safetensors") && err.contains("rank 2"),
        "{err}"
    );
    let (ok, _, err) = merge(&edit(
        "lm_head",
        "target_modules",
        serde_json::json!(["lm_head"]),
    ));
    assert!(!ok && err.contains("`lm_head`"), "{err}");
    let (ok, _, err) = merge(&edit(
        "fewer",
        "target_modules",
        serde_json::json!(["q_proj"]),
    ));
    assert!(!ok && err.contains("not one of the adapter's"), "{err}");
    assert!(!out.exists(), "nothing written");
}

/// A GGUF base merges too: the directory written (config from the GGUF's metadata, its
/// tokenizer rebuilt) scores as the HF base with the adapter, and transformers reads it as PEFT's
/// merge (where the Python packages are there).
#[test]
fn a_gguf_base_merges_into_a_directory_transformers_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "tiny-qwen2";
    let (model, adapter) = (fixtures().join(name), adapter_of(name));
    let gguf = tmp.path().join("base.gguf");
    let (ok, _, err) = run(&[
        "export",
        "--gguf",
        "--quant",
        "f32",
        "--model",
        s(&model),
        "--out",
        s(&gguf),
    ]);
    assert!(ok, "{err}");
    let dir = tmp.path().join("merged");
    let (ok, _, err) = run(&[
        "export",
        "--merge",
        "--model",
        s(&gguf),
        "--adapter",
        s(&adapter),
        "--out",
        s(&dir),
    ]);
    assert!(ok, "{err}");
    for (m, a) in score(&dir, None).iter().zip(score(&model, Some(&adapter))) {
        assert!((m - a).abs() < 1e-4, "merged from GGUF {m} vs adapted {a}");
    }
    let Some(py) = python_with(&["peft", "torch", "transformers"]) else {
        return;
    };
    make_lora(&py, &["merged", s(&model), s(&adapter), s(&dir)]);
}
