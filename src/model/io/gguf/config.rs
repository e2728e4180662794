//! GGUF metadata ↔ an HF-style `config.json` value: `<arch>.*` hyper-parameters to
//! `LlamaForCausalLM` / `Qwen2ForCausalLM` / `Qwen3ForCausalLM` configs for the existing
//! config parser, and a saved config back to llama.cpp's keys for export.
use super::meta::{opt_f64, opt_u64, req_str, req_u64, Meta};
use candle_core::quantized::gguf_file::Value;
use serde_json::json;

type R<T> = std::result::Result<T, String>;

/// (GGUF `general.architecture`, HF architecture, HF `model_type`).
pub const ARCHS: &[(&str, &str, &str)] = &[
    ("llama", "LlamaForCausalLM", "llama"),
    ("qwen2", "Qwen2ForCausalLM", "qwen2"),
    ("qwen3", "Qwen3ForCausalLM", "qwen3"),
];

/// The GGUF architecture name of an HF config (`architectures[0]`, else `model_type`).
pub fn gguf_arch(cfg: &serde_json::Value) -> R<&'static str> {
    let hf = cfg
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(|a| a.as_str());
    let mt = cfg.get("model_type").and_then(|m| m.as_str());
    ARCHS
        .iter()
        .find(|(_, a, m)| hf == Some(*a) || (hf.is_none() && mt == Some(*m)))
        .map(|(g, _, _)| *g)
        .ok_or_else(|| {
            format!(
                "architecture {:?} has no GGUF mapping; exportable: {}",
                hf.or(mt).unwrap_or("<missing>"),
                ARCHS.iter().map(|a| a.1).collect::<Vec<_>>().join(", ")
            )
        })
}

/// The HF-style config of a GGUF file. `has_output`: whether `output.weight` is stored
/// (absent means the LM head is tied to the embedding). `vocab_size`: the token list's length.
pub fn hf_config(m: &Meta, has_output: bool, vocab_size: usize) -> R<serde_json::Value> {
    let arch = req_str(m, "general.architecture")?;
    let Some((_, hf_arch, model_type)) = ARCHS.iter().find(|(g, _, _)| *g == arch) else {
        return Err(format!(
            "general.architecture is `{arch}`; supported GGUF architectures: {}",
            ARCHS.iter().map(|a| a.0).collect::<Vec<_>>().join(", ")
        ));
    };
    let k = |s: &str| format!("{arch}.{s}");
    let hidden = req_u64(m, &k("embedding_length"))?;
    let heads = req_u64(m, &k("attention.head_count"))?;
    let kv_heads = match m.get(&k("attention.head_count_kv")) {
        Some(Value::Array(_)) => {
            return Err(format!(
                "metadata `{}` is per-layer (an array); only one kv-head count for all layers is supported",
                k("attention.head_count_kv")
            ))
        }
        _ => opt_u64(m, &k("attention.head_count_kv"))?.unwrap_or(heads),
    };
    if heads == 0 {
        return Err(format!("metadata `{}` is 0", k("attention.head_count")));
    }
    let head_dim = opt_u64(m, &k("attention.key_length"))?.unwrap_or(hidden / heads);
    if let Some(v) = opt_u64(m, &k("attention.value_length"))? {
        if v != head_dim {
            return Err(format!(
                "metadata `{}` = {v} differs from the key length {head_dim}; unequal key/value head sizes are not supported",
                k("attention.value_length")
            ));
        }
    }
    if let Some(d) = opt_u64(m, &k("rope.dimension_count"))? {
        if d != head_dim {
            return Err(format!(
                "metadata `{}` = {d} but the head size is {head_dim}; partial rotary embeddings are not supported",
                k("rope.dimension_count")
            ));
        }
    }
    let theta = opt_f64(m, &k("rope.freq_base"))?.unwrap_or(10_000.0);
    let eps = opt_f64(m, &k("attention.layer_norm_rms_epsilon"))?.ok_or_else(|| {
        format!(
            "metadata `{}` is missing",
            k("attention.layer_norm_rms_epsilon")
        )
    })?;
    let ctx = req_u64(m, &k("context_length"))?;
    let layers = req_u64(m, &k("block_count"))?;
    let ffn = req_u64(m, &k("feed_forward_length"))?;
    // The sizes the model is built from, against the same caps as config.json's: a number
    // from the file must not size anything before it is known to be sane.
    let sizes = [
        (k("context_length"), "max_position_embeddings", ctx),
        (k("block_count"), "num_hidden_layers", layers),
        (k("embedding_length"), "hidden_size", hidden),
        (k("feed_forward_length"), "intermediate_size", ffn),
        (k("attention.head_count"), "num_attention_heads", heads),
        (
            k("attention.head_count_kv"),
            "num_key_value_heads",
            kv_heads,
        ),
        (k("attention.key_length"), "head_dim", head_dim),
        (
            "tokenizer.ggml.tokens".to_string(),
            "vocab_size",
            vocab_size as u64,
        ),
    ];
    for (key, field, v) in sizes {
        let cap = crate::model::decoder::config::cap_of(field).unwrap_or(usize::MAX) as u64;
        if v > cap {
            return Err(format!(
                "metadata `{key}` = {v} exceeds {cap}, the most a model may declare here ({}); \
                 the file is damaged or describes a model far beyond what this crate can run",
                crate::model::decoder::config::cap_reason(field)
            ));
        }
    }
    let mut rope = json!({"rope_type": "default", "rope_theta": theta});
    let mut rope_scaling = serde_json::Value::Null;
    let scaling = super::meta::opt_str(m, &k("rope.scaling.type"))?;
    match scaling {
        None | Some("none") => {}
        Some(t @ ("linear" | "yarn")) => {
            let factor = opt_f64(m, &k("rope.scaling.factor"))?
                .ok_or_else(|| format!("metadata `{}` is missing", k("rope.scaling.factor")))?;
            rope["rope_type"] = t.into();
            rope["factor"] = factor.into();
            let mut sc = json!({"rope_type": t, "factor": factor});
            if let Some(orig) = opt_u64(m, &k("rope.scaling.original_context_length"))? {
                rope["original_max_position_embeddings"] = orig.into();
                sc["original_max_position_embeddings"] = orig.into();
            }
            rope_scaling = sc;
        }
        Some(other) => {
            return Err(format!(
                "metadata `{}` is `{other}`; supported: none, linear, yarn",
                k("rope.scaling.type")
            ))
        }
    }
    let id = |key: &str| -> R<serde_json::Value> {
        Ok(opt_u64(m, key)?.map_or(serde_json::Value::Null, |v| v.into()))
    };
    let mut cfg = json!({
        "architectures": [hf_arch],
        "model_type": model_type,
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": ctx,
        "rope_theta": theta,
        "rope_parameters": rope,
        "rms_norm_eps": eps,
        "tie_word_embeddings": !has_output,
        "hidden_act": "silu",
        "torch_dtype": "float32",
        "dtype": "float32",
    });
    for (hf, g) in [
        ("bos_token_id", "tokenizer.ggml.bos_token_id"),
        ("eos_token_id", "tokenizer.ggml.eos_token_id"),
        ("pad_token_id", "tokenizer.ggml.padding_token_id"),
    ] {
        let v = id(g)?;
        if !v.is_null() {
            cfg[hf] = v;
        }
    }
    if !rope_scaling.is_null() {
        cfg["rope_scaling"] = rope_scaling;
    }
    match arch {
        "qwen2" => cfg["use_sliding_window"] = false.into(),
        "llama" => {
            cfg["attention_bias"] = false.into();
            cfg["mlp_bias"] = false.into();
        }
        "qwen3" => {
            cfg["attention_bias"] = false.into();
            cfg["use_sliding_window"] = false.into();
        }
        _ => {}
    }
    Ok(cfg)
}

fn get_u64(cfg: &serde_json::Value, key: &str) -> R<u64> {
    cfg.get(key)
        .and_then(|v| v.as_u64())
        .ok_or_else(|| format!("config `{key}` is missing or not a non-negative integer"))
}

/// RoPE base of an HF config: `rope_parameters.rope_theta` (transformers 5), else `rope_theta`,
/// else 10000.
pub fn rope_theta(cfg: &serde_json::Value) -> f64 {
    cfg.get("rope_parameters")
        .and_then(|p| p.get("rope_theta"))
        .or_else(|| cfg.get("rope_theta"))
        .and_then(|v| v.as_f64())
        .unwrap_or(10_000.0)
}

/// llama.cpp's `<arch>.*` keys for a saved HF config (the inverse of [`hf_config`]).
pub fn gguf_metadata(cfg: &serde_json::Value) -> R<Vec<(String, Value)>> {
    let arch = gguf_arch(cfg)?;
    let hidden = get_u64(cfg, "hidden_size")?;
    let heads = get_u64(cfg, "num_attention_heads")?;
    let kv = cfg
        .get("num_key_value_heads")
        .and_then(|v| v.as_u64())
        .unwrap_or(heads);
    let head_dim = cfg
        .get("head_dim")
        .and_then(|v| v.as_u64())
        .unwrap_or(hidden / heads.max(1));
    let rp = cfg.get("rope_parameters");
    let theta = rope_theta(cfg);
    let eps = cfg
        .get("rms_norm_eps")
        .and_then(|v| v.as_f64())
        .ok_or("config `rms_norm_eps` is missing")?;
    let u = |v: u64| Value::U32(v as u32);
    let k = |s: &str| format!("{arch}.{s}");
    let mut out = vec![
        (
            "general.architecture".to_string(),
            Value::String(arch.into()),
        ),
        (
            k("context_length"),
            u(get_u64(cfg, "max_position_embeddings")?),
        ),
        (k("embedding_length"), u(hidden)),
        (k("block_count"), u(get_u64(cfg, "num_hidden_layers")?)),
        (
            k("feed_forward_length"),
            u(get_u64(cfg, "intermediate_size")?),
        ),
        (k("attention.head_count"), u(heads)),
        (k("attention.head_count_kv"), u(kv)),
        (k("attention.key_length"), u(head_dim)),
        (k("attention.value_length"), u(head_dim)),
        (k("rope.dimension_count"), u(head_dim)),
        (k("rope.freq_base"), Value::F32(theta as f32)),
        (
            k("attention.layer_norm_rms_epsilon"),
            Value::F32(eps as f32),
        ),
    ];
    // transformers 5 keeps scaling in `rope_parameters.rope_type`, 4 in `rope_scaling`.
    let scaling = rp
        .filter(|p| p.get("rope_type").and_then(|t| t.as_str()) != Some("default"))
        .or_else(|| cfg.get("rope_scaling").filter(|s| !s.is_null()));
    if let Some(s) = scaling {
        let t = s
            .get("rope_type")
            .or_else(|| s.get("type"))
            .and_then(|t| t.as_str())
            .unwrap_or("default");
        match t {
            // llama.cpp stores Llama 3 scaling as the `rope_freqs.weight` tensor (see rope_freqs.rs).
            "default" | "llama3" if arch == "llama" => {}
            "default" => {}
            "linear" | "yarn" => {
                let f = s
                    .get("factor")
                    .and_then(|f| f.as_f64())
                    .ok_or(format!("config rope scaling `{t}` has no `factor`"))?;
                out.push((k("rope.scaling.type"), Value::String(t.into())));
                out.push((k("rope.scaling.factor"), Value::F32(f as f32)));
                if let Some(o) = s
                    .get("original_max_position_embeddings")
                    .and_then(|o| o.as_u64())
                {
                    out.push((k("rope.scaling.original_context_length"), u(o)));
                }
            }
            other => {
                return Err(format!(
                "config rope scaling `{other}` cannot be written to GGUF (supported: linear, yarn)"
            ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(arch: &str, extra: &[(&str, Value)]) -> Meta {
        let mut m = Meta::new();
        m.insert("general.architecture".into(), Value::String(arch.into()));
        let k = |s: &str| format!("{arch}.{s}");
        m.insert(k("embedding_length"), Value::U32(64));
        m.insert(k("block_count"), Value::U32(2));
        m.insert(k("feed_forward_length"), Value::U32(96));
        m.insert(k("attention.head_count"), Value::U32(4));
        m.insert(k("attention.head_count_kv"), Value::U32(2));
        m.insert(k("context_length"), Value::U32(2048));
        m.insert(k("rope.freq_base"), Value::F32(500000.0));
        m.insert(k("attention.layer_norm_rms_epsilon"), Value::F32(1e-5));
        m.insert("tokenizer.ggml.eos_token_id".into(), Value::U32(7));
        for (key, v) in extra {
            m.insert(k(key), v.clone());
        }
        m
    }

    #[test]
    fn llama_metadata_becomes_a_llama_config() {
        let c = hf_config(&meta("llama", &[]), false, 300).unwrap();
        assert_eq!(c["architectures"][0], "LlamaForCausalLM");
        assert_eq!(c["model_type"], "llama");
        assert_eq!(c["hidden_size"], 64);
        assert_eq!(c["num_key_value_heads"], 2);
        assert_eq!(c["head_dim"], 16);
        assert_eq!(c["intermediate_size"], 96);
        assert_eq!(c["vocab_size"], 300);
        assert_eq!(c["rope_theta"], 500000.0);
        assert_eq!(c["rope_parameters"]["rope_theta"], 500000.0);
        assert_eq!(
            c["rms_norm_eps"], 1e-5,
            "f32 1e-5 read back as the decimal 1e-5"
        );
        assert_eq!(c["tie_word_embeddings"], true);
        assert_eq!(c["eos_token_id"], 7);
        assert!(c.get("bos_token_id").is_none());
        assert_eq!(c["attention_bias"], false);
    }

    #[test]
    fn qwen3_key_length_sets_head_dim_and_untied_head() {
        let c = hf_config(
            &meta("qwen3", &[("attention.key_length", Value::U32(32))]),
            true,
            10,
        )
        .unwrap();
        assert_eq!(c["architectures"][0], "Qwen3ForCausalLM");
        assert_eq!(c["head_dim"], 32);
        assert_eq!(c["tie_word_embeddings"], false);
        let back = gguf_metadata(&c).unwrap();
        let get = |k: &str| back.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert!(matches!(
            get("qwen3.attention.key_length"),
            Some(Value::U32(32))
        ));
        assert!(matches!(get("general.architecture"), Some(Value::String(s)) if s == "qwen3"));
    }

    #[test]
    fn config_round_trips_through_metadata() {
        let c = hf_config(
            &meta(
                "qwen2",
                &[
                    ("rope.scaling.type", Value::String("linear".into())),
                    ("rope.scaling.factor", Value::F32(4.0)),
                ],
            ),
            false,
            300,
        )
        .unwrap();
        assert_eq!(c["rope_scaling"]["factor"], 4.0);
        let mut m: Meta = gguf_metadata(&c).unwrap().into_iter().collect();
        m.insert("tokenizer.ggml.eos_token_id".into(), Value::U32(7));
        assert_eq!(hf_config(&m, false, 300).unwrap(), c);
    }

    #[test]
    fn sizes_beyond_the_caps_name_the_key() {
        for (key, v) in [
            ("context_length", Value::U64(1 << 31)),
            ("block_count", Value::U64(1_000_000_000)),
            ("embedding_length", Value::U64(u64::MAX)),
            ("attention.head_count_kv", Value::U32(1 << 20)),
        ] {
            let e = hf_config(&meta("qwen2", &[(key, v)]), false, 10).unwrap_err();
            assert!(
                e.contains(&format!("qwen2.{key}")) && e.contains("a model may declare"),
                "{e}"
            );
        }
        let e = hf_config(&meta("qwen2", &[]), false, 1 << 30).unwrap_err();
        assert!(e.contains("tokenizer.ggml.tokens"), "{e}");
    }

    #[test]
    fn bad_metadata_names_the_key() {
        let mut m = meta("llama", &[]);
        m.remove("llama.block_count");
        assert!(hf_config(&m, false, 10)
            .unwrap_err()
            .contains("llama.block_count"));
        let e = hf_config(&meta("gemma", &[]), false, 10).unwrap_err();
        assert!(e.contains("gemma") && e.contains("qwen2"), "{e}");
        let m = meta(
            "llama",
            &[("attention.head_count_kv", Value::Array(vec![Value::U32(2)]))],
        );
        assert!(hf_config(&m, false, 10).unwrap_err().contains("per-layer"));
        let m = meta(
            "llama",
            &[("rope.scaling.type", Value::String("su".into()))],
        );
        assert!(hf_config(&m, false, 10)
            .unwrap_err()
            .contains("rope.scaling.type"));
    }
}
