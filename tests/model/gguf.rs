//! GGUF checkpoints: export → import parity with the HF-directory load (exact logits at f32,
//! within the quantization error at q8_0), files written by the `gguf` Python package (llama
//! q/k un-permutation, qwen3 norms, config from metadata), the tokenizer rebuilt from metadata
//! against tokenizer.json, and bad files.
use crate::common;
use candle_core::quantized::gguf_file::{self, Content, Value};
use candle_core::{DType, Device, Tensor};
use comlrl::model::decoder::batch::{causal_mask, position_ids};
use comlrl::model::io::gguf::{self as g, Quant};
use comlrl::model::{LoadOptions, Mode, ModelSource, Policy, Tokenizer};
use common::*;
use std::collections::HashMap;
use std::path::Path;

fn load(src: ModelSource) -> Policy {
    Policy::load(&src, &LoadOptions::default()).expect("load model")
}

fn hf(name: &str) -> Policy {
    load(ModelSource::Local(fixtures().join(name)))
}

fn gguf(path: &Path) -> Policy {
    load(ModelSource::Gguf(path.to_path_buf()))
}

/// Logits of the fixture's left-padded reference prompts, real rows only.
fn logits(p: &Policy, fixture: &str) -> Vec<f32> {
    let r = load_st(&fixtures().join(fixture).join("reference.safetensors"));
    let valid: Vec<Vec<bool>> = rows_i64(&r["attention_mask"])
        .iter()
        .map(|row| row.iter().map(|&m| m == 1).collect())
        .collect();
    let t = r["input_ids"].dims2().unwrap().1;
    let ids = r["input_ids"].to_dtype(DType::U32).unwrap();
    let pos = position_ids(&valid, t, &Device::Cpu).unwrap();
    let m = causal_mask(&valid, t, &Device::Cpu).unwrap();
    let h = p
        .model
        .hidden(&ids, &pos, &m, None, p.products(Mode::Infer))
        .unwrap();
    let l = p.model.logits(&h).unwrap().to_vec3::<f32>().unwrap();
    let mut out = Vec::new();
    for (b, row) in valid.iter().enumerate() {
        for (ti, &v) in row.iter().enumerate() {
            if v {
                out.extend(&l[b][ti]);
            }
        }
    }
    out
}

fn max_abs(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |m, x| m.max(x.abs()))
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn export(p: &Policy, q: Quant, dir: &Path, name: &str) -> std::path::PathBuf {
    let out = dir.join(name);
    p.export_gguf(q, &out).expect("export");
    out
}

#[test]
fn f32_export_reloads_with_identical_weights_and_logits() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["tiny-qwen2", "tiny-qwen2-untied"] {
        let a = hf(name);
        let b = gguf(&export(&a, Quant::F32, tmp.path(), &format!("{name}.gguf")));
        assert_eq!(b.config.tie_word_embeddings, a.config.tie_word_embeddings);
        assert_eq!(b.config.num_parameters(), a.config.num_parameters());
        assert_eq!((b.eos_ids.clone(), b.pad_id), (a.eos_ids.clone(), a.pad_id));
        let (va, vb) = (a.vars(), b.vars());
        assert_eq!(va.len(), vb.len());
        for ((na, ta), (nb, tb)) in va.iter().zip(&vb) {
            assert_eq!(na, nb);
            assert_eq!(f32s(ta.as_tensor()), f32s(tb.as_tensor()), "{name}: {na}");
        }
        assert_eq!(
            logits(&a, name),
            logits(&b, name),
            "{name}: logits must be bit-identical"
        );
    }
}

#[test]
fn quantized_exports_stay_within_the_quantization_error() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "tiny-qwen2";
    let a = hf(name);
    let want = logits(&a, name);
    let scale = max_abs(&want);
    let mut seen = Vec::new();
    for (q, tol) in [(Quant::F16, 2e-3), (Quant::Q8_0, 2e-2)] {
        let path = export(&a, q, tmp.path(), &format!("{q:?}.gguf"));
        let got = logits(&gguf(&path), name);
        let rel = max_diff(&got, &want) / scale;
        println!(
            "{q:?}: logits max |diff| / max |logit| = {rel:.2e}, file {} bytes",
            std::fs::metadata(&path).unwrap().len()
        );
        assert!(rel > 0.0, "{q:?} should not be lossless");
        assert!(rel < tol, "{q:?}: relative logit error {rel} ≥ {tol}");
        seen.push(rel);
    }
    assert!(
        seen[0] < seen[1],
        "f16 ({}) should be closer than q8_0 ({})",
        seen[0],
        seen[1]
    );
}

#[test]
fn python_written_qwen2_gguf_matches_the_reference() {
    let path = fixtures().join("gguf/tiny-qwen2.q8_0.gguf");
    let p = gguf(&path);
    assert_eq!(p.config.architectures, vec!["Qwen2ForCausalLM".to_string()]);
    assert!(p.config.tie_word_embeddings);
    assert_eq!(g::config::rope_theta(&p.saved_config().unwrap()), 1e6);
    assert_eq!(p.config.rms_norm_eps, 1e-6);
    assert_eq!(
        p.chat_template().map(|t| t.contains("<|im_start|>")),
        Some(true)
    );
    let want = logits(&hf("tiny-qwen2"), "tiny-qwen2");
    let rel = max_diff(&logits(&p, "tiny-qwen2"), &want) / max_abs(&want);
    println!("python q8_0 file: relative logit error {rel:.2e}");
    assert!(rel > 0.0 && rel < 2e-2, "{rel}");
    // The tokenizer rebuilt from its metadata encodes the reference prompts identically.
    let refj = json(&fixtures().join("tiny-qwen2/reference.json"));
    for pr in refj["prompts"].as_array().unwrap() {
        let text = pr["text"].as_str().unwrap();
        assert_eq!(
            p.tokenizer.encode(text).unwrap(),
            ids(&pr["ids"]),
            "{text:?}"
        );
    }
}

/// Loaded tensors against the HF checkpoint: same names and shapes, values within q8_0's
/// error (a q/k row permutation left in place would be off by whole weights).
fn check_against_checkpoint(fixture: &str) -> serde_json::Value {
    let path = fixtures().join(format!("gguf/{fixture}.q8_0.gguf"));
    let m = g::load(&path, DType::F32, None, &Device::Cpu).expect("gguf load");
    let st = load_st(&fixtures().join(fixture).join("model.safetensors"));
    let mut names: Vec<&String> = st.keys().collect();
    names.sort();
    let got: Vec<&String> = {
        let mut v: Vec<&String> = m.tensors.keys().collect();
        v.sort();
        v
    };
    assert_eq!(got, names, "{fixture}: tensor names");
    for n in names {
        let want = st[n].to_dtype(DType::F32).unwrap();
        let have: &Tensor = &m.tensors[n];
        assert_eq!(have.dims(), want.dims(), "{n}");
        let (w, h) = (f32s(&want), f32s(have));
        if want.rank() == 1 {
            assert_eq!(w, h, "{fixture} {n}: vectors are stored f32");
            continue;
        }
        let cols = want.dims()[1];
        for (r, (wr, hr)) in w.chunks(cols).zip(h.chunks(cols)).enumerate() {
            // q8_0: blocks of 32 scaled by d = max|x|/127 (stored f16): error ≤ d/2 + 127·d·2⁻¹¹.
            for (wb, hb) in wr.chunks(32).zip(hr.chunks(32)) {
                let tol = max_abs(wb) / 127.0 * 0.6 + 1e-6;
                assert!(
                    max_diff(wb, hb) <= tol,
                    "{fixture} {n} row {r}: {} > {tol}",
                    max_diff(wb, hb)
                );
            }
        }
    }
    m.config
}

#[test]
fn llama_gguf_unpermutes_q_and_k_and_maps_names_and_config() {
    let c = check_against_checkpoint("tiny-llama");
    let want = json(&fixtures().join("tiny-llama/config.json"));
    for k in [
        "architectures",
        "model_type",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "rope_theta",
        "tie_word_embeddings",
        "vocab_size",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "max_position_embeddings",
        "attention_bias",
        "mlp_bias",
    ] {
        assert_eq!(c[k], want[k], "tiny-llama config `{k}`");
    }
    // llama3 scaling, recovered from the `rope_freqs.weight` factors.
    for k in [
        "rope_type",
        "factor",
        "low_freq_factor",
        "high_freq_factor",
        "original_max_position_embeddings",
    ] {
        assert_eq!(
            c["rope_scaling"][k], want["rope_scaling"][k],
            "tiny-llama rope_scaling `{k}`"
        );
    }
}

#[test]
fn qwen3_gguf_maps_qk_norms_and_head_dim() {
    let c = check_against_checkpoint("tiny-qwen3");
    let want = json(&fixtures().join("tiny-qwen3/config.json"));
    for k in [
        "architectures",
        "model_type",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "tie_word_embeddings",
        "vocab_size",
        "eos_token_id",
        "max_position_embeddings",
    ] {
        assert_eq!(c[k], want[k], "tiny-qwen3 config `{k}`");
    }
    assert_eq!(
        c["rope_parameters"]["rope_theta"],
        want["rope_parameters"]["rope_theta"]
    );
}

/// Writes a GGUF holding only `tokenizer.json`'s vocabulary as `tokenizer.ggml.*` metadata.
fn vocab_only_gguf(tok_json: &Path, vocab: usize, pre_check: &str, out: &Path) {
    let tok: serde_json::Value = json(tok_json);
    let mut meta = g::tokenizer::tokenizer_metadata(&tok, vocab).unwrap();
    let pre = meta
        .iter()
        .find(|(k, _)| k == "tokenizer.ggml.pre")
        .unwrap();
    assert!(matches!(&pre.1, Value::String(s) if s == pre_check));
    meta.push(("general.architecture".into(), Value::String("qwen2".into())));
    let refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(out).unwrap();
    gguf_file::write(&mut f, &refs, &[]).unwrap();
}

fn tokenizer_of(path: &Path) -> Tokenizer {
    let (content, _) = g::read::read_header(path).unwrap();
    let t = g::tokenizer::tokenizer_json(&content.metadata).unwrap();
    Tokenizer::from_json(&t).unwrap()
}

#[test]
fn qwen25_tokenizer_from_gguf_metadata_encodes_like_tokenizer_json() {
    let dir = fixtures().join("qwen25-tokenizer");
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("qwen25-vocab.gguf");
    let cases = json(&dir.join("encode_cases.json"));
    let n = cases["vocab_size_with_added"].as_u64().unwrap() as usize;
    vocab_only_gguf(&dir.join("tokenizer.json"), n, "qwen2", &path);
    let tok = tokenizer_of(&path);
    assert_eq!(tok.vocab_size(), n);
    let cases = cases["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let got = tok.encode(text).unwrap();
        assert_eq!(got, ids(&c["ids"]), "encode {text:?}");
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
fn export_import_export_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let a = hf("tiny-qwen2");
    let first = export(&a, Quant::Q8_0, tmp.path(), "a.gguf");
    let b = gguf(&first);
    // Save in HF layout and reload: the chat-template-less tiny model keeps its specials.
    let saved = tmp.path().join("hf");
    b.save(&saved).unwrap();
    let c = hf_at(&saved);
    assert_eq!(logits(&b, "tiny-qwen2"), logits(&c, "tiny-qwen2"));
    let second = export(&b, Quant::Q8_0, tmp.path(), "b.gguf");
    let read = |p: &Path| {
        let mut f = std::fs::File::open(p).unwrap();
        let content = Content::read(&mut f).unwrap();
        let mut tensors = HashMap::new();
        for n in content.tensor_infos.keys() {
            let q = content.tensor(&mut f, n, &Device::Cpu).unwrap();
            tensors.insert(
                n.clone(),
                (
                    format!("{:?}", q.dtype()),
                    f32s(&q.dequantize(&Device::Cpu).unwrap()),
                ),
            );
        }
        let mut meta: Vec<(String, String)> = content
            .metadata
            .iter()
            .filter(|(k, _)| k.as_str() != "general.name")
            .map(|(k, v)| (k.clone(), format!("{v:?}")))
            .collect();
        meta.sort();
        (meta, tensors)
    };
    let (m1, t1) = read(&first);
    let (m2, t2) = read(&second);
    assert_eq!(m1, m2, "metadata survives import → export");
    assert_eq!(t1, t2, "q8_0 tensors re-quantize to the same blocks");
}

fn hf_at(dir: &Path) -> Policy {
    load(ModelSource::Local(dir.to_path_buf()))
}

#[test]
fn bad_gguf_inputs_are_named() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let e = ModelSource::parse("./no/such/model.gguf", here)
        .unwrap_err()
        .to_string();
    assert!(e.contains("GGUF file") && e.contains("model.gguf"), "{e}");
    assert_eq!(
        ModelSource::parse("tests/fixtures/gguf/tiny-qwen2.q8_0.gguf", here).unwrap(),
        ModelSource::Gguf(here.join("tests/fixtures/gguf/tiny-qwen2.q8_0.gguf"))
    );
    let tmp = tempfile::tempdir().unwrap();
    let junk = tmp.path().join("junk.gguf");
    std::fs::write(&junk, b"not a gguf file at all").unwrap();
    let e = Policy::load(&ModelSource::Gguf(junk.clone()), &LoadOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("junk.gguf") && e.contains("not a readable GGUF file"),
        "{e}"
    );
    // A vocab-only file: a tokenizer but no tensors, and no architecture keys.
    let vocab = tmp.path().join("vocab.gguf");
    vocab_only_gguf(
        &fixtures().join("tiny-qwen2/tokenizer.json"),
        3000,
        "qwen2",
        &vocab,
    );
    let e = Policy::load(&ModelSource::Gguf(vocab), &LoadOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("qwen2.embedding_length") && e.contains("missing"),
        "{e}"
    );
    let e = Quant::parse("q4_k").unwrap_err().to_string();
    assert!(e.contains("q8_0"), "{e}");
}

#[test]
fn cli_exports_and_generates_from_the_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("agent.gguf");
    let model = fixtures().join("tiny-qwen2");
    let run = |args: &[&str]| {
        let o = comlrl(args).output();
        assert!(o.ok, "{args:?}: {}", o.stderr);
        o.stdout
    };
    let msg = run(&[
        "export",
        "--gguf",
        "--quant",
        "f32",
        "--model",
        model.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(msg.contains("agent.gguf"), "{msg}");
    let gen = |m: &str| {
        run(&[
            "generate",
            "--model",
            m,
            "--prompt",
            "Once upon a time",
            "--greedy",
            "--max-new-tokens",
            "12",
            "--json",
        ])
    };
    assert_eq!(gen(out.to_str().unwrap()), gen(model.to_str().unwrap()));
    let o = comlrl(&[
        "export",
        "--model",
        model.to_str().unwrap(),
        "--out",
        "x.gguf",
    ])
    .output();
    assert!(!o.ok);
    assert!(o.stderr.contains("--gguf"), "{}", o.stderr);
}

/// Llama and Qwen3 through GGUF end to end.
#[test]
fn llama_and_qwen3_ggufs_match_their_hf_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["tiny-llama", "tiny-qwen3"] {
        let a = hf(name);
        let want = logits(&a, name);
        // The gguf-py file (q8_0; llama q/k permuted, llama3 scaling as rope_freqs).
        let b = gguf(&fixtures().join(format!("gguf/{name}.q8_0.gguf")));
        let rel = max_diff(&logits(&b, name), &want) / max_abs(&want);
        println!("{name}: python q8_0 file, relative logit error {rel:.2e}");
        assert!(rel < 2e-2, "{name}: {rel}");
        // Our f32 export reloads bit-identically.
        let c = gguf(&export(&a, Quant::F32, tmp.path(), &format!("{name}.gguf")));
        assert_eq!(logits(&c, name), want, "{name}: f32 export → import");
    }
}

/// `src` rewritten with the metadata `changes` (each replacing or adding a key).
fn with_metadata(src: &Path, out: &Path, changes: &[(&str, Value)]) {
    let mut f = std::fs::File::open(src).unwrap();
    let c = Content::read(&mut f).unwrap();
    let mut md: Vec<(String, Value)> = c
        .metadata
        .iter()
        .filter(|(k, _)| !changes.iter().any(|(c, _)| c == k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    md.extend(changes.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let tensors: Vec<(String, candle_core::quantized::QTensor)> = c
        .tensor_infos
        .keys()
        .map(|n| (n.clone(), c.tensor(&mut f, n, &Device::Cpu).unwrap()))
        .collect();
    let md: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &candle_core::quantized::QTensor)> =
        tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut std::fs::File::create(out).unwrap(), &md, &ts).unwrap();
}

/// `comlrl args` under a 4 GiB address-space limit (`ulimit -v 4194304`): (exit code, stderr,
/// seconds). An allocation sized by a number in a model file aborts the process there.
fn under_4gib(args: &[&str]) -> (Option<i32>, String, f64) {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(bin());
    cmd.args(args);
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit,
    // which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            match libc::setrlimit(libc::RLIMIT_AS, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let t = std::time::Instant::now();
    let out = cmd.output().unwrap();
    let secs = t.elapsed().as_secs_f64();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        secs,
    )
}

/// Model files declaring absurd sizes (positions, layers, alignment 0, more layers than
/// stored) end in an error naming the file and the field, quickly, under a 4 GiB limit; a
/// model declaring 2^24 positions (allowed) generates, its RoPE tables built for what it uses.
#[test]
fn absurd_sizes_in_model_files_are_clear_errors_under_a_memory_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("gguf/tiny-qwen2.q8_0.gguf");
    let gguf_cases: [(&str, Value, &str); 4] = [
        (
            "qwen2.context_length",
            Value::U64(1 << 31),
            "a model may declare",
        ),
        (
            "qwen2.block_count",
            Value::U32(1_000_000_000),
            "a model may declare",
        ),
        ("general.alignment", Value::U32(0), "power of two"),
        (
            "qwen2.block_count",
            Value::U32(100),
            "holds tensors of 2 layer",
        ),
    ];
    let mut cases = Vec::new();
    for (i, (key, v, want)) in gguf_cases.into_iter().enumerate() {
        let out = tmp.path().join(format!("bad{i}.gguf"));
        with_metadata(&src, &out, &[(key, v)]);
        cases.push((out, key.to_string(), want, false));
    }
    for (i, (key, v, want, ok)) in [
        (
            "max_position_embeddings",
            "2147483648",
            "a model may declare",
            false,
        ),
        (
            "num_hidden_layers",
            "1000000000",
            "a model may declare",
            false,
        ),
        (
            "num_hidden_layers",
            "100",
            "holds tensors of 2 layer",
            false,
        ),
        ("max_position_embeddings", "16777216", "", true),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = tmp.path().join(format!("hf{i}"));
        std::fs::create_dir(&dir).unwrap();
        for f in [
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "generation_config.json",
        ] {
            std::fs::copy(fixtures().join("tiny-qwen2").join(f), dir.join(f)).unwrap();
        }
        let mut cfg: serde_json::Value = json(&fixtures().join("tiny-qwen2/config.json"));
        cfg[key] = serde_json::from_str(v).unwrap();
        std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
        cases.push((dir, key.to_string(), want, ok));
    }
    for (model, key, want, ok) in cases {
        let m = model.to_str().unwrap();
        let (code, err, secs) = under_4gib(&[
            "generate",
            "--model",
            m,
            "--prompt",
            "hi",
            "--max-new-tokens",
            "4",
            "--greedy",
        ]);
        if ok {
            assert_eq!(code, Some(0), "{m}: {err}");
            continue;
        }
        assert_eq!(code, Some(1), "{m} ({key}): {err}");
        assert!(
            err.contains(m) && err.contains(&key) && err.contains(want),
            "{m}: {err}"
        );
        assert!(secs < 5.0, "{m}: {secs:.1} s");
    }
}
