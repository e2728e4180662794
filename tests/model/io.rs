//! Saving and reloading models, and the errors a user gets for broken model directories.
use crate::common;
use candle_core::{DType, Device, Tensor};
use comlrl::model::decoder::batch::{causal_mask, position_ids};
use comlrl::model::{parse_dtype, LoadOptions, Mode, ModelSource, Policy, RolloutCopies};
use common::*;
use std::collections::BTreeMap;
use std::path::Path;

fn logits(p: &Policy) -> Vec<f32> {
    let valid = vec![vec![false, true, true, true], vec![true; 4]];
    let ids = Tensor::new(&[[0u32, 5, 6, 7], [8, 9, 10, 11]], &Device::Cpu).unwrap();
    let pos = position_ids(&valid, 4, &Device::Cpu).unwrap();
    let mask = causal_mask(&valid, 4, &Device::Cpu).unwrap();
    let h = p
        .model
        .hidden(&ids, &pos, &mask, None, p.products(Mode::Infer))
        .unwrap();
    f32s(&p.model.logits(&h).unwrap())
}

fn load_dir(dir: &Path) -> comlrl::model::Result<Policy> {
    Policy::load(
        &ModelSource::Local(dir.to_path_buf()),
        &LoadOptions::default(),
    )
}

#[test]
fn changed_weights_survive_save_and_reload() {
    let p = Policy::load(
        &ModelSource::Builtin("tiny".into()),
        &LoadOptions::default(),
    )
    .unwrap();
    for (name, var) in p.vars() {
        if name.ends_with("q_proj.bias") || name == "model.norm.weight" {
            let t = var.as_tensor();
            var.set(&(t + 0.25).unwrap()).unwrap();
        }
    }
    p.weights_changed().unwrap();
    let before = logits(&p);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("agent_0");
    p.save(&out).unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        assert!(out.join(f).is_file(), "{f} not written");
    }
    let q = load_dir(&out).unwrap();
    assert_eq!(
        logits(&q),
        before,
        "reloaded model must give identical logits"
    );
    assert_eq!(q.eos_ids, p.eos_ids);
    // Saving again over an existing directory replaces it.
    q.save(&out).unwrap();
    assert_eq!(logits(&load_dir(&out).unwrap()), before);
}

#[test]
fn untied_bf16_checkpoint_round_trips_in_f32() {
    let p = load_dir(&fixtures().join("tiny-qwen2-untied")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    p.save(&tmp.path().join("m")).unwrap();
    let q = load_dir(&tmp.path().join("m")).unwrap();
    assert_eq!(logits(&p), logits(&q));
    let cfg = json(&tmp.path().join("m/config.json"));
    assert_eq!(cfg["tie_word_embeddings"], false);
    assert_eq!(cfg["torch_dtype"], "float32");
}

/// A copy of the tied fixture model that a test may break.
fn scratch_model() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    copy_model(&fixtures().join("tiny-qwen2"), tmp.path());
    tmp
}

fn err_of(dir: &Path) -> String {
    match load_dir(dir) {
        Ok(_) => panic!("loading {} should fail", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_or_corrupt_config_is_reported() {
    let d = scratch_model();
    std::fs::remove_file(d.path().join("config.json")).unwrap();
    let e = err_of(d.path());
    assert!(e.contains("no config.json"), "{e}");

    let d = scratch_model();
    std::fs::write(
        d.path().join("config.json"),
        "{\"vocab_size\": 3000,\n  oops",
    )
    .unwrap();
    let e = err_of(d.path());
    assert!(e.contains("config.json") && e.contains("line 2"), "{e}");
}

#[test]
fn unsupported_architecture_is_named() {
    let d = scratch_model();
    let mut cfg = json(&d.path().join("config.json"));
    cfg["architectures"] = serde_json::json!(["MistralForCausalLM"]);
    std::fs::write(d.path().join("config.json"), cfg.to_string()).unwrap();
    let e = err_of(d.path());
    assert!(
        e.contains("MistralForCausalLM")
            && e.contains("Qwen2ForCausalLM, LlamaForCausalLM, Qwen3ForCausalLM"),
        "{e}"
    );
}

#[test]
fn corrupt_safetensors_is_reported() {
    let d = scratch_model();
    let path = d.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..1000]).unwrap();
    let e = err_of(d.path());
    assert!(
        e.contains("model.safetensors") && e.contains("safetensors"),
        "{e}"
    );

    let d = scratch_model();
    std::fs::remove_file(d.path().join("model.safetensors")).unwrap();
    let e = err_of(d.path());
    assert!(e.contains("no model.safetensors"), "{e}");
}

fn rewrite_tensors(dir: &Path, edit: impl FnOnce(&mut BTreeMap<String, Tensor>)) {
    let path = dir.join("model.safetensors");
    let mut t: BTreeMap<String, Tensor> = load_st(&path).into_iter().collect();
    edit(&mut t);
    comlrl::model::io::safetensors::save_tensors(&t, &path).unwrap();
}

#[test]
fn missing_and_misshapen_tensors_are_named() {
    let d = scratch_model();
    rewrite_tensors(d.path(), |t| {
        t.remove("model.layers.1.mlp.up_proj.weight");
    });
    let e = err_of(d.path());
    assert!(
        e.contains("`model.layers.1.mlp.up_proj.weight` is missing"),
        "{e}"
    );

    let d = scratch_model();
    rewrite_tensors(d.path(), |t| {
        t.insert(
            "model.norm.weight".into(),
            Tensor::ones(64, DType::F32, &Device::Cpu).unwrap(),
        );
    });
    let e = err_of(d.path());
    assert!(
        e.contains("`model.norm.weight` has shape [64]") && e.contains("[128]"),
        "{e}"
    );
}

#[test]
fn sharded_checkpoints_load() {
    let d = scratch_model();
    let all: BTreeMap<String, Tensor> = load_st(&d.path().join("model.safetensors"))
        .into_iter()
        .collect();
    std::fs::remove_file(d.path().join("model.safetensors")).unwrap();
    let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
    let mut map = serde_json::Map::new();
    for (i, (k, v)) in all.into_iter().enumerate() {
        let file = if i % 2 == 0 {
            "model-00001-of-00002.safetensors"
        } else {
            "model-00002-of-00002.safetensors"
        };
        map.insert(k.clone(), file.into());
        if i % 2 == 0 {
            a.insert(k, v);
        } else {
            b.insert(k, v);
        }
    }
    comlrl::model::io::safetensors::save_tensors(
        &a,
        &d.path().join("model-00001-of-00002.safetensors"),
    )
    .unwrap();
    comlrl::model::io::safetensors::save_tensors(
        &b,
        &d.path().join("model-00002-of-00002.safetensors"),
    )
    .unwrap();
    let idx = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(
        d.path().join("model.safetensors.index.json"),
        idx.to_string(),
    )
    .unwrap();
    let sharded = load_dir(d.path()).unwrap();
    let single = load_dir(&fixtures().join("tiny-qwen2")).unwrap();
    assert_eq!(logits(&sharded), logits(&single));
}

#[test]
fn unknown_dtype_and_model_refs_are_errors() {
    let e = parse_dtype("f8").unwrap_err().to_string();
    assert!(e.contains("f8") && e.contains("bf16"), "{e}");
    let here = Path::new(".");
    let e = ModelSource::parse("builtin:huge", here)
        .unwrap_err()
        .to_string();
    assert!(e.contains("builtin:tiny"), "{e}");
    let e = ModelSource::parse("./no/such/dir", here)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not exist"), "{e}");
    let e = ModelSource::parse("not a model", here)
        .unwrap_err()
        .to_string();
    assert!(e.contains("owner/name"), "{e}");
    assert_eq!(
        ModelSource::parse("Qwen/Qwen2.5-0.5B", here).unwrap(),
        ModelSource::Hub {
            repo: "Qwen/Qwen2.5-0.5B".into(),
            revision: "main".into()
        }
    );
}

fn logits_in(p: &Policy, mode: Mode) -> Vec<f32> {
    let valid = vec![vec![true; 4]];
    let ids = Tensor::new(&[[5u32, 6, 7, 8]], &Device::Cpu).unwrap();
    let pos = position_ids(&valid, 4, &Device::Cpu).unwrap();
    let mask = causal_mask(&valid, 4, &Device::Cpu).unwrap();
    let h = p
        .model
        .hidden(&ids, &pos, &mask, None, p.products(mode))
        .unwrap();
    f32s(&p.model.logits_mode(&h, p.products(mode)).unwrap())
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn scale_some_weights(p: &Policy) {
    for (name, var) in p.vars() {
        if name.ends_with("mlp.up_proj.weight") || name == "model.embed_tokens.weight" {
            var.set(&(var.as_tensor() * 3.0).unwrap()).unwrap();
        }
    }
}

#[test]
fn sampling_without_copies_reads_the_trained_weights() {
    // Without copies (the default above 64 MiB of weights): sampling multiplies by the
    // checkpoint-layout weights themselves.
    let p = Policy::load(
        &ModelSource::Builtin("tiny".into()),
        &LoadOptions {
            rollout_copies: RolloutCopies::Never,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let before = logits_in(&p, Mode::Infer);
    assert!(max_diff(&before, &logits_in(&p, Mode::Train)) < 1e-5);
    scale_some_weights(&p);
    let after = logits_in(&p, Mode::Infer);
    assert!(max_diff(&before, &after) > 1e-3);
    assert!(max_diff(&after, &logits_in(&p, Mode::Train)) < 1e-5);
}

#[test]
fn sampling_copies_follow_weight_updates() {
    let p = Policy::load(
        &ModelSource::Builtin("tiny".into()),
        &LoadOptions {
            rollout_copies: RolloutCopies::Always,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    assert!(max_diff(&logits_in(&p, Mode::Infer), &logits_in(&p, Mode::Train)) < 1e-5);
    scale_some_weights(&p);
    // Until told, sampling still reads the old copies...
    assert!(max_diff(&logits_in(&p, Mode::Infer), &logits_in(&p, Mode::Train)) > 1e-3);
    // ...and after `weights_changed` it matches the training path again.
    p.weights_changed().unwrap();
    assert!(max_diff(&logits_in(&p, Mode::Infer), &logits_in(&p, Mode::Train)) < 1e-5);
}

#[test]
fn chat_template_file_wins_over_the_tokenizer_config_as_in_transformers() {
    let tmp = scratch_model();
    let cfg_path = tmp.path().join("tokenizer_config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["chat_template"] = serde_json::json!([
        {"name": "tool_use", "template": "TOOLS"},
        {"name": "default", "template": "FROM-CONFIG"}
    ]);
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let p = load_dir(tmp.path()).unwrap();
    assert_eq!(p.chat_template(), Some("FROM-CONFIG"));
    std::fs::write(tmp.path().join("chat_template.jinja"), "FROM-JINJA").unwrap();
    let p = load_dir(tmp.path()).unwrap();
    assert_eq!(p.chat_template(), Some("FROM-JINJA"));
}
