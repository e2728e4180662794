//! A real GGUF file named by `COMLRL_TEST_GGUF` (skipped when unset): metadata, every tensor
//! dequantized, the tokenizer's encodings against another implementation's (docs/models.md).
use crate::common;
use candle_core::{DType, Device, Tensor};
use comlrl::model::io::gguf as g;
use comlrl::model::Tokenizer;
use common::*;
use std::collections::HashMap;

/// Texts for checking a real GGUF's tokenizer against transformers' (see docs/models.md).
const REAL_TEXTS: &[&str] = &[
    "Hello, world!",
    "The year 2024 had 366 days; 3.14159 is pi.",
    "I'm sure you'll see they've done it; it's John's.",
    "<|im_start|>user\nWrite a haiku.<|im_end|>\n<|im_start|>assistant\n",
    "def f(x):\n    return x**2  # square\n\n\n",
    "naïve café, Ünïcödé — “quotes” 🚀 日本語のテキスト",
    "   leading and trailing spaces   ",
    "tabs\tand\r\nCRLF lines",
];

/// A real GGUF named by `COMLRL_TEST_GGUF` (skipped when unset): metadata → config, tokenizer,
/// every tensor dequantized under an HF name. With `COMLRL_TEST_GGUF_IDS` (a JSON list of id
/// lists, one per `REAL_TEXTS` entry, e.g. from transformers' GGUF tokenizer) the encodings must
/// match; `COMLRL_TEST_GGUF_DUMP=out.safetensors` writes layer 0's tensors.
#[test]
fn real_gguf_from_env() {
    let Some(path) = std::env::var_os("COMLRL_TEST_GGUF") else {
        comlrl_testutil::skip("set COMLRL_TEST_GGUF=/path/model.gguf to check a real file");
        return;
    };
    let path = std::path::PathBuf::from(path);
    let m = g::load(&path, DType::F32, None, &Device::Cpu).expect("load real gguf");
    println!("config: {}", m.config);
    println!("special tokens: {:?}", m.special_tokens);
    println!(
        "chat template: {} chars",
        m.chat_template.as_deref().map_or(0, str::len)
    );
    let layers = m.config["num_hidden_layers"].as_u64().unwrap() as usize;
    let per_layer = m
        .tensors
        .keys()
        .filter(|k| k.starts_with("model.layers.0."))
        .count();
    println!(
        "{} tensors, {per_layer} in layer 0 of {layers}",
        m.tensors.len()
    );
    assert_eq!(
        m.tensors.len(),
        2 + layers * per_layer + usize::from(!m.config["tie_word_embeddings"].as_bool().unwrap())
    );
    for (n, t) in &m.tensors {
        let v = f32s(t);
        assert!(v.iter().all(|x| x.is_finite()), "{n} has non-finite values");
    }
    if let Some(dump) = std::env::var_os("COMLRL_TEST_GGUF_DUMP") {
        // Layer 0's tensors, for comparing with another loader (e.g. transformers' state dict).
        let sel: HashMap<String, Tensor> = m
            .tensors
            .iter()
            .filter(|(k, _)| k.starts_with("model.layers.0.") || k.starts_with("model.embed"))
            .map(|(k, t)| (k.clone(), t.clone()))
            .collect();
        candle_core::safetensors::save(&sel, dump).unwrap();
    }
    let tok = Tokenizer::from_json(&m.tokenizer).unwrap();
    let got: Vec<Vec<u32>> = REAL_TEXTS.iter().map(|t| tok.encode(t).unwrap()).collect();
    println!("ids: {}", serde_json::to_string(&got).unwrap());
    for (t, ids) in REAL_TEXTS.iter().zip(&got) {
        assert_eq!(tok.decode(ids, false).unwrap(), *t, "decode round trip");
    }
    if let Some(want) = std::env::var_os("COMLRL_TEST_GGUF_IDS") {
        let want: Vec<Vec<u32>> =
            serde_json::from_str(&std::fs::read_to_string(want).unwrap()).unwrap();
        for ((t, g), w) in REAL_TEXTS.iter().zip(&got).zip(&want) {
            assert_eq!(g, w, "{t:?}");
        }
    }
}
