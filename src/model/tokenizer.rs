//! Tokenizers: a model directory's `tokenizer.json` through the `tokenizers` crate, and the
//! built-in byte-level tokenizer of `builtin:*` models (256 byte tokens + 3 specials, no merges).
use crate::model::error::{Error, Result};
use std::path::Path;

/// `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` follow the 256 byte tokens.
pub const BYTE_VOCAB_SIZE: usize = 259;
/// Id of `<|endoftext|>` in the built-in tokenizer (eos and pad).
pub const BYTE_EOS_ID: u32 = 256;

/// A Hugging Face `tokenizers` tokenizer.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The longest vocabulary entry in bytes, computed on first use.
    longest: std::sync::OnceLock<usize>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer(vocab {})", self.inner.get_vocab_size(true))
    }
}

impl Tokenizer {
    fn wrap(inner: tokenizers::Tokenizer) -> Self {
        Self {
            inner,
            longest: std::sync::OnceLock::new(),
        }
    }

    /// The most bytes of text that `tokens` tokens can stand for: `tokens` times the longest
    /// vocabulary entry (added tokens included). A token's entry is at least as long as the
    /// text it covers (byte-level alphabets spend 1–2 bytes per byte, `▁` 3 per space, byte
    /// fallback 6 per byte), so a longer text needs more tokens. Checked before encoding: the
    /// tokenizer holds ~140 bytes of memory per byte of text it encodes.
    pub fn max_bytes_for(&self, tokens: usize) -> usize {
        let longest = *self.longest.get_or_init(|| {
            let vocab = self.inner.get_vocab(true);
            vocab.keys().map(|k| k.len()).max().unwrap_or(1).max(1)
        });
        tokens.saturating_mul(longest)
    }

    /// Loads a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| Error::file(path, format!("cannot load tokenizer: {e}")))?;
        Ok(Self::wrap(inner))
    }

    /// A tokenizer from a `tokenizer.json` value (e.g. one rebuilt from GGUF metadata).
    pub fn from_json(spec: &serde_json::Value) -> Result<Self> {
        let inner: tokenizers::Tokenizer = spec
            .to_string()
            .parse()
            .map_err(|e| Error::Tokenizer(format!("cannot build tokenizer: {e}")))?;
        Ok(Self::wrap(inner))
    }

    /// The `tokenizer.json` value of this tokenizer.
    pub fn to_json(&self) -> Result<serde_json::Value> {
        let text = self
            .inner
            .to_string(false)
            .map_err(|e| Error::Tokenizer(format!("serialising: {e}")))?;
        serde_json::from_str(&text).map_err(|e| Error::Tokenizer(format!("serialising: {e}")))
    }

    /// The built-in byte-level tokenizer (GPT-2 byte-to-unicode alphabet, every byte one token).
    pub fn byte_level() -> Result<Self> {
        let chars = byte_alphabet();
        let vocab: serde_json::Map<String, serde_json::Value> = chars
            .iter()
            .enumerate()
            .map(|(i, c)| (c.to_string(), serde_json::Value::from(i)))
            .chain(
                SPECIALS
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (s.to_string(), serde_json::Value::from(256 + i))),
            )
            .collect();
        let added: Vec<serde_json::Value> = SPECIALS
            .iter()
            .enumerate()
            .map(|(i, s)| {
                serde_json::json!({"id": 256 + i, "content": s, "single_word": false,
                    "lstrip": false, "rstrip": false, "normalized": false, "special": true})
            })
            .collect();
        let spec = serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            "post_processor": null,
            "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                      "ignore_merges": false, "vocab": vocab, "merges": []}
        });
        let inner: tokenizers::Tokenizer = spec
            .to_string()
            .parse()
            .map_err(|e| Error::Tokenizer(format!("built-in byte tokenizer: {e}")))?;
        Ok(Self::wrap(inner))
    }

    /// Token ids of `text` without added special tokens (specials written in the text match).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| Error::Tokenizer(format!("encode: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of `ids`, without special tokens when `skip_special`.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| Error::Tokenizer(format!("decode: {e}")))
    }

    /// Id of a token string (e.g. `<|endoftext|>`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Writes `tokenizer.json`.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.inner
            .save(path, false)
            .map_err(|e| Error::file(path, format!("cannot write tokenizer: {e}")))
    }
}

const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// GPT-2's reversible byte → printable-char map, indexed by byte value.
fn byte_alphabet() -> Vec<char> {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut extra = 0u32;
    (0u32..256)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap_or('?')
            } else {
                extra += 1;
                char::from_u32(255 + extra).unwrap_or('?')
            }
        })
        .collect()
}
