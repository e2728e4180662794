//! The real Qwen2.5 tokenizer's encode/decode cases, and the built-in byte tokenizer's round trip.
use crate::common;
use comlrl::model::Tokenizer;
use common::*;

#[test]
fn qwen25_cases_encode_and_decode_exactly() {
    let dir = fixtures().join("qwen25-tokenizer");
    let tok = Tokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    let cases = json(&dir.join("encode_cases.json"));
    let cases = cases["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let want = ids(&c["ids"]);
        let got = tok.encode(text).unwrap();
        assert_eq!(got, want, "encode {text:?}");
        assert_eq!(
            tok.decode(&got, false).unwrap(),
            c["decoded"].as_str().unwrap(),
            "decode {text:?}"
        );
        assert_eq!(
            tok.decode(&got, true).unwrap(),
            c["decoded_skip_special"].as_str().unwrap(),
            "decode(skip_special) {text:?}"
        );
    }
}

#[test]
fn byte_tokenizer_round_trips_any_text() {
    let tok = Tokenizer::byte_level().unwrap();
    for text in ["hello world", "é日本🙂\n\t", "a<|endoftext|>b", ""] {
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
    }
    let ids = tok.encode("é").unwrap();
    assert_eq!(ids.len(), 2, "one token per UTF-8 byte");
    assert_eq!(tok.encode("<|endoftext|>").unwrap(), vec![256]);
    assert_eq!(tok.vocab_size(), 259);
}
