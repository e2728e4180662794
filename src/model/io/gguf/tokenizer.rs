//! A GGUF's tokenizer metadata (`tokenizer.ggml.*`, byte-level BPE) ↔ a `tokenizer.json` value
//! that the `tokenizers` crate loads and that encodes like the model's own tokenizer.json: the
//! split regex chosen by `tokenizer.ggml.pre`, control tokens special, user-defined ones added.
use super::meta::{as_u64, opt_array, opt_str, opt_strings, req_str, Meta};
use candle_core::quantized::gguf_file::Value;
use serde_json::{json, Value as Json};

type R<T> = std::result::Result<T, String>;

/// Qwen2's split regex (transformers' `Qwen2Tokenizer`, llama.cpp's `qwen2` pre-tokenizer).
pub const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's split regex (llama.cpp's `llama-bpe`).
pub const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const QWEN2_PRES: &[&str] = &["qwen2", "deepseek-r1-qwen", "megrez"];
const LLAMA3_PRES: &[&str] = &[
    "llama3",
    "llama-v3",
    "llama-bpe",
    "smaug-bpe",
    "falcon3",
    "dbrx",
];
const GPT2_PRES: &[&str] = &["default", "gpt-2", "gpt2"];
const DIGIT_PRES: &[&str] = &["smollm"];

/// llama.cpp token types.
pub const NORMAL: i32 = 1;
/// A control token (added as a special token).
pub const CONTROL: i32 = 3;
/// A user-defined token (added as a non-special token).
pub const USER_DEFINED: i32 = 4;
/// A reserved, unused token.
pub const UNUSED: i32 = 5;

fn byte_level(use_regex: bool, trim_offsets: bool) -> Json {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": trim_offsets, "use_regex": use_regex})
}

fn split_then_bytes(regex: &str) -> Json {
    json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
        byte_level(false, false)
    ]})
}

/// (normalizer, pre-tokenizer, ignore_merges) of a `tokenizer.ggml.pre` name, as the matching
/// HF tokenizer.json has them.
fn pre_tokenizer(pre: &str) -> R<(Json, Json, bool)> {
    if QWEN2_PRES.contains(&pre) {
        Ok((json!({"type": "NFC"}), split_then_bytes(QWEN2_SPLIT), false))
    } else if LLAMA3_PRES.contains(&pre) {
        Ok((Json::Null, split_then_bytes(LLAMA3_SPLIT), true))
    } else if DIGIT_PRES.contains(&pre) {
        let p = json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true}, byte_level(true, true)
        ]});
        Ok((Json::Null, p, false))
    } else if GPT2_PRES.contains(&pre) {
        Ok((Json::Null, byte_level(true, true), false))
    } else {
        let all: Vec<&str> = [QWEN2_PRES, LLAMA3_PRES, DIGIT_PRES, GPT2_PRES].concat();
        Err(format!(
            "tokenizer.ggml.pre `{pre}` is not supported; supported: {}",
            all.join(", ")
        ))
    }
}

/// The `tokenizer.json` value of a GGUF's tokenizer metadata.
pub fn tokenizer_json(m: &Meta) -> R<Json> {
    let model = req_str(m, "tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(format!(
            "tokenizer.ggml.model is `{model}`; only byte-level BPE (`gpt2`, used by Llama 3, Qwen2/3, SmolLM) is supported, \
             not SentencePiece (`llama`) vocabularies"
        ));
    }
    let tokens = opt_strings(m, "tokenizer.ggml.tokens")?
        .ok_or("metadata `tokenizer.ggml.tokens` is missing")?;
    let merges = opt_strings(m, "tokenizer.ggml.merges")?
        .ok_or("metadata `tokenizer.ggml.merges` is missing")?;
    let types: Vec<i64> = match opt_array(m, "tokenizer.ggml.token_type")? {
        None => vec![NORMAL as i64; tokens.len()],
        Some(a) => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::I32(x) => Ok(*x as i64),
                other => as_u64(other).map(|x| x as i64).ok_or(format!(
                    "metadata `tokenizer.ggml.token_type`[{i}] is not an integer"
                )),
            })
            .collect::<R<_>>()?,
    };
    if types.len() != tokens.len() {
        return Err(format!(
            "tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}",
            types.len(),
            tokens.len()
        ));
    }
    let pre = opt_str(m, "tokenizer.ggml.pre")?.unwrap_or("default");
    let (normalizer, pre_tok, ignore_merges) = pre_tokenizer(pre)?;
    let mut vocab = serde_json::Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, (tok, ty)) in tokens.iter().zip(&types).enumerate() {
        // A duplicated spelling keeps its first id, as a tokenizer.json vocabulary can only hold one.
        vocab.entry(tok.to_string()).or_insert(Json::from(id));
        if *ty == CONTROL as i64 || *ty == USER_DEFINED as i64 {
            added.push(
                json!({"id": id, "content": tok, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": *ty == CONTROL as i64}),
            );
        }
    }
    let merges: Vec<Json> = merges
        .iter()
        .enumerate()
        .map(|(i, mg)| {
            mg.split_once(' ')
                .map(|(a, b)| json!([a, b]))
                .ok_or(format!(
                    "tokenizer.ggml.merges[{i}] `{mg}` is not two tokens separated by a space"
                ))
        })
        .collect::<R<_>>()?;
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tok,
        "post_processor": null,
        "decoder": byte_level(true, true),
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges}
    }))
}

/// The `tokenizer.ggml.pre` name of a tokenizer.json's pre-tokenizer (the inverse of
/// [`pre_tokenizer`]).
pub fn pre_name(tok: &Json) -> R<&'static str> {
    let p = &tok["pre_tokenizer"];
    let ty = |v: &Json| v.get("type").and_then(|t| t.as_str()).map(String::from);
    let parts: Vec<&Json> = match ty(p).as_deref() {
        Some("Sequence") => p["pretokenizers"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default(),
        Some(_) => vec![p],
        None => vec![],
    };
    let types: Vec<String> = parts.iter().filter_map(|v| ty(v)).collect();
    let types: Vec<&str> = types.iter().map(String::as_str).collect();
    let uses_regex = |v: &Json| v.get("use_regex").and_then(|u| u.as_bool()).unwrap_or(true);
    match types.as_slice() {
        ["Split", "ByteLevel"] if !uses_regex(parts[1]) => {
            match parts[0]["pattern"]["Regex"].as_str() {
                Some(QWEN2_SPLIT) => return Ok("qwen2"),
                Some(LLAMA3_SPLIT) => return Ok("llama-bpe"),
                _ => {}
            }
        }
        ["Digits", "ByteLevel"]
            if parts[0]["individual_digits"].as_bool() == Some(true) && uses_regex(parts[1]) =>
        {
            return Ok("smollm")
        }
        ["ByteLevel"] if uses_regex(parts[0]) => return Ok("gpt-2"),
        _ => {}
    }
    Err(format!(
        "the tokenizer's pre-tokenizer ({}) matches none llama.cpp knows (qwen2 / llama-bpe split regex, smollm digits, gpt-2 byte-level)",
        serde_json::to_string(p).unwrap_or_default()
    ))
}

/// `tokenizer.ggml.*` metadata for a byte-level BPE tokenizer.json, the token list padded with
/// `[PAD<id>]` (type unused) up to `vocab_size` rows, as convert_hf_to_gguf.py does.
pub fn tokenizer_metadata(tok: &Json, vocab_size: usize) -> R<Vec<(String, Value)>> {
    let model = &tok["model"];
    if model["type"].as_str() != Some("BPE") {
        return Err(format!(
            "tokenizer model type is {}; only BPE can be exported",
            model["type"]
        ));
    }
    let pre = pre_name(tok)?;
    let vocab = model["vocab"]
        .as_object()
        .ok_or("tokenizer.json has no model.vocab object")?;
    let mut tokens: Vec<Option<(String, i32)>> = vec![None; vocab_size];
    let mut place = |id: u64, s: &str, ty: i32| -> R<()> {
        let slot = tokens.get_mut(id as usize).ok_or(format!(
            "token `{s}` has id {id}, beyond the model's vocab_size {vocab_size}"
        ))?;
        *slot = Some((s.to_string(), ty));
        Ok(())
    };
    for (s, id) in vocab {
        place(
            id.as_u64()
                .ok_or(format!("vocab id of `{s}` is not an integer"))?,
            s,
            NORMAL,
        )?;
    }
    for a in tok["added_tokens"].as_array().into_iter().flatten() {
        let (Some(id), Some(s)) = (a["id"].as_u64(), a["content"].as_str()) else {
            return Err(format!("added token {a} has no id/content"));
        };
        let ty = if a["special"].as_bool() == Some(true) {
            CONTROL
        } else {
            USER_DEFINED
        };
        place(id, s, ty)?;
    }
    let (toks, types): (Vec<Value>, Vec<Value>) = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| match t {
            Some((s, ty)) => (Value::String(s), Value::I32(ty)),
            None => (Value::String(format!("[PAD{i}]")), Value::I32(UNUSED)),
        })
        .unzip();
    let merges: Vec<Value> = model["merges"]
        .as_array()
        .ok_or("tokenizer.json has no model.merges array")?
        .iter()
        .map(|mg| match mg {
            Json::String(s) => Ok(Value::String(s.clone())),
            Json::Array(p) if p.len() == 2 => Ok(Value::String(format!(
                "{} {}",
                p[0].as_str().unwrap_or_default(),
                p[1].as_str().unwrap_or_default()
            ))),
            other => Err(format!("merge {other} is neither \"a b\" nor [a, b]")),
        })
        .collect::<R<_>>()?;
    Ok(vec![
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String(pre.into())),
        ("tokenizer.ggml.tokens".into(), Value::Array(toks)),
        ("tokenizer.ggml.token_type".into(), Value::Array(types)),
        ("tokenizer.ggml.merges".into(), Value::Array(merges)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pre: &str) -> Meta {
        let toks = [
            "<|endoftext|>",
            "a",
            "b",
            "ab",
            "Ġ",
            "Ġab",
            "1",
            "2",
            "<think>",
        ];
        let types = [3, 1, 1, 1, 1, 1, 1, 1, 4];
        let mut m = Meta::new();
        m.insert("tokenizer.ggml.model".into(), Value::String("gpt2".into()));
        m.insert("tokenizer.ggml.pre".into(), Value::String(pre.into()));
        m.insert(
            "tokenizer.ggml.tokens".into(),
            Value::Array(toks.iter().map(|t| Value::String(t.to_string())).collect()),
        );
        m.insert(
            "tokenizer.ggml.token_type".into(),
            Value::Array(types.iter().map(|t| Value::I32(*t)).collect()),
        );
        m.insert(
            "tokenizer.ggml.merges".into(),
            Value::Array(vec![
                Value::String("a b".into()),
                Value::String("Ġ ab".into()),
            ]),
        );
        m
    }

    fn encode(m: &Meta, text: &str) -> Vec<u32> {
        let t: tokenizers::Tokenizer = tokenizer_json(m).unwrap().to_string().parse().unwrap();
        t.encode(text, false).unwrap().get_ids().to_vec()
    }

    #[test]
    fn metadata_tokenizer_encodes_with_merges_and_added_tokens() {
        let m = meta("qwen2");
        assert_eq!(
            encode(&m, "ab ab<|endoftext|><think>12"),
            vec![3, 5, 0, 8, 6, 7]
        );
        let j = tokenizer_json(&m).unwrap();
        let added = j["added_tokens"].as_array().unwrap();
        assert_eq!(added.len(), 2);
        assert_eq!(added[0]["special"], true);
        assert_eq!(added[1]["special"], false);
        assert_eq!(pre_name(&j).unwrap(), "qwen2");
        assert_eq!(
            pre_name(&tokenizer_json(&meta("llama-bpe")).unwrap()).unwrap(),
            "llama-bpe"
        );
        assert_eq!(
            pre_name(&tokenizer_json(&meta("smollm")).unwrap()).unwrap(),
            "smollm"
        );
        assert_eq!(
            pre_name(&tokenizer_json(&meta("default")).unwrap()).unwrap(),
            "gpt-2"
        );
    }

    #[test]
    fn metadata_round_trips_through_tokenizer_json() {
        let m = meta("qwen2");
        let back: Meta = tokenizer_metadata(&tokenizer_json(&m).unwrap(), 11)
            .unwrap()
            .into_iter()
            .collect();
        let toks = opt_strings(&back, "tokenizer.ggml.tokens")
            .unwrap()
            .unwrap();
        assert_eq!(toks.len(), 11);
        assert_eq!(
            &toks[..9],
            opt_strings(&m, "tokenizer.ggml.tokens")
                .unwrap()
                .unwrap()
                .as_slice()
        );
        assert_eq!(toks[10], "[PAD10]");
        let ty = opt_array(&back, "tokenizer.ggml.token_type")
            .unwrap()
            .unwrap();
        assert!(matches!(ty[0], Value::I32(3)) && matches!(ty[8], Value::I32(4)));
        assert!(matches!(ty[1], Value::I32(1)) && matches!(ty[9], Value::I32(5)));
        assert_eq!(encode(&back, "ab ab<think>"), vec![3, 5, 8]);
        let e = tokenizer_metadata(&tokenizer_json(&m).unwrap(), 5).unwrap_err();
        assert!(e.contains("vocab_size 5"), "{e}");
    }

    #[test]
    fn unsupported_tokenizers_are_named() {
        let mut m = meta("qwen2");
        m.insert("tokenizer.ggml.model".into(), Value::String("llama".into()));
        assert!(tokenizer_json(&m).unwrap_err().contains("SentencePiece"));
        let e = tokenizer_json(&meta("chatglm-bpe")).unwrap_err();
        assert!(e.contains("chatglm-bpe") && e.contains("qwen2"), "{e}");
        let mut m = meta("qwen2");
        m.insert(
            "tokenizer.ggml.merges".into(),
            Value::Array(vec![Value::String("ab".into())]),
        );
        assert!(tokenizer_json(&m).unwrap_err().contains("merges[0]"));
    }
}
