//! config.json handling across architectures: transformers 4 and 5 spellings load the same
//! model, linear RoPE scaling rescales positions, the switches decide which tensors are read,
//! and what is not implemented (other RoPE types, sliding windows, MoE, other architectures)
//! is refused naming config.json, the key and what is supported.
use crate::common;
use candle_core::{DType, Device, Tensor};
use comlrl::model::decoder::batch::{causal_mask, position_ids};
use comlrl::model::{LoadOptions, Mode, ModelSource, Policy};
use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// A copy of fixture `name` whose config.json is `edit`ed.
fn variant(
    name: &str,
    edit: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    copy_model(&fixtures().join(name), tmp.path());
    let path = tmp.path().join("config.json");
    let mut cfg = json(&path);
    edit(cfg.as_object_mut().unwrap());
    std::fs::write(&path, cfg.to_string()).unwrap();
    tmp
}

fn load(dir: &Path) -> comlrl::model::Result<Policy> {
    Policy::load(
        &ModelSource::Local(dir.to_path_buf()),
        &LoadOptions::default(),
    )
}

fn err(dir: &Path) -> String {
    match load(dir) {
        Ok(_) => panic!("{} should be refused", dir.display()),
        Err(e) => e.to_string(),
    }
}

/// Logits (all rows) of one left-padded batch at position ids `pos` (the rule's, times `step`).
fn logits(p: &Policy, step: u32) -> Vec<f32> {
    let valid = vec![vec![true; 6], [vec![false; 2], vec![true; 4]].concat()];
    let ids = Tensor::new(
        &[[5u32, 9, 14, 200, 31, 7], [0, 0, 41, 52, 63, 74]],
        &Device::Cpu,
    )
    .unwrap();
    let pos = (position_ids(&valid, 6, &Device::Cpu).unwrap() * step as f64)
        .unwrap()
        .to_dtype(DType::U32)
        .unwrap();
    let mask = causal_mask(&valid, 6, &Device::Cpu).unwrap();
    let h = p
        .model
        .hidden(&ids, &pos, &mask, None, Mode::Train)
        .unwrap();
    f32s(&p.model.logits(&h).unwrap())
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn v4_and_v5_configs_load_the_same_model() {
    let llama = load(&fixtures().join("tiny-llama")).unwrap();
    let v5 = variant("tiny-llama", |c| {
        let mut rope = c.remove("rope_scaling").unwrap();
        rope["rope_theta"] = c.remove("rope_theta").unwrap();
        c.insert("rope_parameters".into(), rope);
        c.remove("torch_dtype");
    });
    let llama5 = load(v5.path()).unwrap();
    assert_eq!(max_diff(&logits(&llama, 1), &logits(&llama5, 1)), 0.0);

    let qwen3 = load(&fixtures().join("tiny-qwen3")).unwrap();
    let v4 = variant("tiny-qwen3", |c| {
        let rope = c.remove("rope_parameters").unwrap();
        c.insert("rope_theta".into(), rope["rope_theta"].clone());
        c.insert("rope_scaling".into(), Value::Null);
        c.insert("torch_dtype".into(), c["dtype"].clone());
        c.remove("dtype");
    });
    let qwen3_4 = load(v4.path()).unwrap();
    assert_eq!(max_diff(&logits(&qwen3, 1), &logits(&qwen3_4, 1)), 0.0);
    // The scaling is read: without it the llama3 model's logits change.
    let plain = variant("tiny-llama", |c| {
        c.remove("rope_scaling");
    });
    let d = max_diff(
        &logits(&llama, 300),
        &logits(&load(plain.path()).unwrap(), 300),
    );
    assert!(d > 1e-3, "llama3 scaling has no effect ({d})");
}

/// Linear scaling by 2 divides every frequency by 2: positions 2p give default RoPE's angles at p.
#[test]
fn linear_scaling_halves_the_angles() {
    let linear = variant("tiny-llama", |c| {
        c.insert(
            "rope_scaling".into(),
            json!({"type": "linear", "factor": 2.0}),
        );
    });
    let default = variant("tiny-llama", |c| {
        c.insert("rope_scaling".into(), json!({"rope_type": "default"}));
    });
    let (lin, def) = (load(linear.path()).unwrap(), load(default.path()).unwrap());
    assert!(max_diff(&logits(&lin, 2), &logits(&def, 1)) < 1e-5);
    assert!(max_diff(&logits(&lin, 1), &logits(&def, 1)) > 1e-3);
}

#[test]
fn bias_switches_decide_the_tensors_read() {
    let d = variant("tiny-llama", |c| {
        c.insert("attention_bias".into(), json!(true));
    });
    let e = err(d.path());
    assert!(
        e.contains("model.safetensors")
            && e.contains("`model.layers.0.self_attn.q_proj.bias` is missing"),
        "{e}"
    );
    let d = variant("tiny-llama", |c| {
        c.insert("mlp_bias".into(), json!(true));
    });
    assert!(err(d.path()).contains("mlp.gate_proj.bias` is missing"));
    let p = load(&fixtures().join("tiny-qwen3")).unwrap();
    let names: Vec<String> = p.vars().into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&"model.layers.1.self_attn.k_norm.weight".to_string()));
    assert!(!names
        .iter()
        .any(|n| n.ends_with(".bias") || n == "lm_head.weight"));
    assert_eq!(p.num_parameters(), p.config.num_parameters());
    let l = load(&fixtures().join("tiny-llama")).unwrap();
    assert_eq!(l.num_parameters(), l.config.num_parameters());
    assert!(l.vars().iter().any(|(n, _)| n == "lm_head.weight"));
}

/// A change to a config.json object.
type Edit = dyn FnOnce(&mut serde_json::Map<String, Value>);

#[test]
fn unsupported_settings_are_refused_by_name() {
    let cases: Vec<(&str, Box<Edit>, &str)> = vec![
        (
            "tiny-qwen3",
            Box::new(|c| {
                c["rope_parameters"]["rope_type"] = json!("yarn");
                c["rope_parameters"]["factor"] = json!(4.0);
            }),
            "rope_parameters.rope_type `yarn` is not supported; supported RoPE types: default, linear, llama3",
        ),
        (
            "tiny-llama",
            Box::new(|c| c["rope_scaling"]["rope_type"] = json!("dynamic")),
            "rope_scaling.rope_type `dynamic`",
        ),
        (
            "tiny-llama",
            Box::new(|c| {
                c["rope_scaling"].as_object_mut().unwrap().remove("high_freq_factor");
            }),
            "rope_scaling.high_freq_factor is missing",
        ),
        (
            "tiny-qwen3",
            Box::new(|c| {
                c.insert("use_sliding_window".into(), json!(true));
                c.insert("sliding_window".into(), json!(64));
            }),
            "use_sliding_window = true is not supported",
        ),
        (
            "tiny-qwen3",
            Box::new(|c| c["layer_types"][1] = json!("sliding_attention")),
            "layer_types contains \"sliding_attention\"",
        ),
        (
            "tiny-qwen3",
            Box::new(|c| {
                c.insert("num_experts".into(), json!(8));
            }),
            "num_experts = 8: mixture-of-experts models are not supported",
        ),
        (
            "tiny-qwen3",
            Box::new(|c| c["architectures"] = json!(["Qwen3MoeForCausalLM"])),
            "supported: Qwen2ForCausalLM, LlamaForCausalLM, Qwen3ForCausalLM",
        ),
    ];
    for (name, edit, want) in cases {
        let d = variant(name, edit);
        let e = err(d.path());
        assert!(e.contains("config.json") && e.contains(want), "{name}: {e}");
    }
}

/// `architectures: null` (what `PretrainedConfig.to_dict()` writes when it was never set):
/// the architecture comes from `model_type`.
#[test]
fn null_architectures_fall_back_to_model_type() {
    let d = variant("tiny-qwen3", |c| {
        c.insert("architectures".into(), Value::Null);
    });
    let p = load(d.path()).unwrap();
    assert_eq!(
        p.config.features().unwrap().arch,
        comlrl::model::Architecture::Qwen3
    );
    let d = variant("tiny-qwen3", |c| {
        c.insert("architectures".into(), Value::Null);
        c.insert("model_type".into(), json!("gemma"));
    });
    let e = err(d.path());
    assert!(e.contains("model_type \"gemma\""), "{e}");
}
