//! The real binary's `generate` and `score` commands, and hub-id resolution through the HF cache.
use crate::common;
use common::*;

fn run(args: &[&str], envs: &[(&str, &str)]) -> (bool, String, String) {
    envs.iter()
        .fold(comlrl(args), |c, (k, v)| c.env(k, v))
        .output()
        .parts()
}

#[test]
fn generate_json_matches_reference_greedy() {
    let model = fixtures().join("tiny-qwen2");
    let refj = json(&model.join("reference.json"));
    let prompt = ids(&refj["prompts"][0]["ids"]);
    let prompt_arg = prompt
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let (ok, out, err) = run(
        &[
            "generate",
            "--model",
            model.to_str().unwrap(),
            "--prompt-ids",
            &prompt_arg,
            "--greedy",
            "--ignore-eos",
            "--max-new-tokens",
            "16",
            "--json",
        ],
        &[],
    );
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(ids(&v["samples"][0]["ids"]), ids(&refj["greedy"][0]["ids"]));
    assert_eq!(v["samples"][0]["text"], refj["greedy"][0]["text"]);
}

#[test]
fn generate_samples_are_seeded() {
    let args = [
        "generate",
        "--model",
        "builtin:tiny",
        "--prompt",
        "Once upon a time",
        "-n",
        "3",
        "--max-new-tokens",
        "20",
        "--seed",
        "5",
        "--json",
    ];
    let (ok1, a, e) = run(&args, &[]);
    let (ok2, b, _) = run(&args, &[]);
    assert!(ok1 && ok2, "{e}");
    assert_eq!(a, b, "same seed, same samples");
    let v: serde_json::Value = serde_json::from_str(&a).unwrap();
    assert_eq!(v["samples"].as_array().unwrap().len(), 3);
}

#[test]
fn score_json_matches_reference_logprobs() {
    let model = fixtures().join("tiny-qwen2");
    let refj = json(&model.join("reference.json"));
    let r = load_st(&model.join("reference.safetensors"));
    let want = r["completion_logprobs"].to_vec2::<f32>().unwrap();
    let (ok, out, err) = run(
        &[
            "score",
            "--model",
            model.to_str().unwrap(),
            "--prompt",
            refj["prompts"][1]["text"].as_str().unwrap(),
            "--completion",
            refj["completions"][1]["text"].as_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(ids(&v["prompt_ids"]), ids(&refj["prompts"][1]["ids"]));
    let lps: Vec<f64> = v["logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let n = lps.len();
    // Completion 1 is text + EOS in the fixture; the text alone is its first n tokens.
    for (j, lp) in lps.iter().enumerate() {
        assert!(
            (*lp as f32 - want[1][j]).abs() < 1e-4,
            "token {j}: {lp} vs {}",
            want[1][j]
        );
    }
    assert!(n >= 1);
}

#[test]
fn hub_ids_resolve_through_the_cache_and_fail_clearly_offline() {
    let cache = tempfile::tempdir().unwrap();
    // Lay the fixture out as the HF cache's snapshot layout.
    let repo = cache.path().join("models--acme--tiny");
    let snap = repo.join("snapshots").join("0123abcd");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "0123abcd").unwrap();
    copy_model(&fixtures().join("tiny-qwen2"), &snap);
    let env = [
        ("HF_HUB_CACHE", cache.path().to_str().unwrap()),
        ("HF_HUB_OFFLINE", "1"),
    ];
    let (ok, out, err) = run(
        &[
            "generate",
            "--model",
            "acme/tiny",
            "--prompt",
            "Once",
            "--greedy",
            "--max-new-tokens",
            "3",
            "--json",
        ],
        &env,
    );
    assert!(ok, "{err}");
    assert!(out.contains("\"samples\""));
    let (ok, _, err) = run(
        &["generate", "--model", "acme/absent", "--prompt", "x"],
        &env,
    );
    assert!(!ok);
    assert!(
        err.contains("models--acme--absent") && err.contains("HF_HUB_OFFLINE"),
        "{err}"
    );
}

/// A ref of the cache that is not a plain commit (a path out of the cache) is an error naming
/// the ref file, and the model it points to outside the cache is not loaded; a revision that
/// climbs out of `refs/` is refused as written.
#[test]
fn tampered_hub_cache_refs_are_refused() {
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("models--acme--tiny");
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::create_dir_all(repo.join("snapshots")).unwrap();
    let outside = cache.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    copy_model(&fixtures().join("tiny-qwen2"), &outside);
    std::fs::write(repo.join("refs/main"), "../../outside").unwrap();
    let env = [
        ("HF_HUB_CACHE", cache.path().to_str().unwrap()),
        ("HF_HUB_OFFLINE", "1"),
    ];
    let args = |model: &'static str| {
        [
            "generate",
            "--model",
            model,
            "--prompt",
            "Once",
            "--greedy",
            "--max-new-tokens",
            "3",
        ]
    };
    let (ok, _, err) = run(&args("acme/tiny"), &env);
    assert!(!ok);
    let ref_file = repo.join("refs").join("main");
    assert!(
        err.contains(&format!("the Hub cache ref {}", ref_file.display()))
            && err.contains("not a commit hash"),
        "{err}"
    );
    let (ok, _, err) = run(&args("acme/tiny@../../../outside"), &env);
    assert!(!ok);
    assert!(err.contains("starts with `.`"), "{err}");
    // `check` looks for the model's own chat template in the cache the same way.
    let (ok, _, err) = env
        .iter()
        .fold(on_scenario("check", &tiny_scenario()), |c, (k, v)| {
            c.env(k, v)
        })
        .sets(&["agents.model=acme/tiny", "agents.chat_template=auto"])
        .output()
        .parts();
    assert!(!ok && err.contains("not a commit hash"), "{err}");
}

#[test]
fn bad_flags_are_clear_errors() {
    let (ok, _, err) = run(
        &["generate", "--model", "builtin:tiny", "--prompt-ids", "1,x"],
        &[],
    );
    assert!(!ok && err.contains("`x` is not a token id"), "{err}");
    let (ok, _, err) = run(
        &[
            "generate",
            "--model",
            "builtin:tiny",
            "--prompt-ids",
            "999999",
        ],
        &[],
    );
    assert!(
        !ok && err.contains("outside the model's vocabulary"),
        "{err}"
    );
    let (ok, _, err) = run(
        &[
            "score",
            "--model",
            "builtin:tiny",
            "--prompt",
            "a",
            "--completion",
            "b",
            "--dtype",
            "f8",
        ],
        &[],
    );
    assert!(!ok && err.contains("unknown dtype `f8`"), "{err}");
}

#[test]
fn export_never_replaces_a_model_file_and_an_existing_file_only_with_force() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    std::fs::create_dir(&model).unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(fixtures().join("tiny-qwen2").join(f), model.join(f)).unwrap();
    }
    let weights = std::fs::read(model.join("model.safetensors")).unwrap();
    let m = model.to_str().unwrap();
    let input = model.join("model.safetensors");
    for force in [&[][..], &["--force"]] {
        let args = [
            &[
                "export",
                "--gguf",
                "--model",
                m,
                "--out",
                input.to_str().unwrap(),
            ],
            force,
        ]
        .concat();
        let (ok, _, err) = run(&args, &[]);
        assert!(
            !ok && err.contains("is a file of the model being exported"),
            "{err}"
        );
    }
    assert_eq!(
        std::fs::read(&input).unwrap(),
        weights,
        "the model was changed"
    );
    let out = tmp.path().join("agent.gguf");
    std::fs::write(&out, "keep").unwrap();
    let args = [
        "export",
        "--gguf",
        "--model",
        m,
        "--out",
        out.to_str().unwrap(),
    ];
    let (ok, _, err) = run(&args, &[]);
    assert!(!ok && err.contains("exists; pass --force"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep");
    let (ok, _, err) = run(&[&args[..], &["--force"]].concat(), &[]);
    assert!(ok, "{err}");
    assert_eq!(&std::fs::read(&out).unwrap()[..4], b"GGUF");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&out).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o644);
}

/// `check` prints the agents' memory estimate (per agent and total) before loading them, and
/// `run` refuses agents that cannot fit with the number and the ways out, before loading any.
#[test]
fn the_memory_estimate_is_printed_and_enforced_before_loading() {
    let o = on_scenario("check", &tiny_scenario()).output();
    assert!(o.ok, "{}", o.stderr);
    for want in [
        "memory estimate (from the model configs, before loading)",
        "agents 0, 1 (../models/tiny-story, 0.9M parameters)",
        "per agent at its peak",
        "AdamW state 7.0 MB",
        "total: ",
        "available: ",
    ] {
        assert!(o.stderr.contains(want), "{want}: {}", o.stderr);
    }
    let tmp = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    let o = on_scenario("run", &tiny_scenario())
        .set("agents.count=100000")
        .set(format!("output_dir={}", tmp.path().join("run").display()))
        .env_remove("COMLRL_IGNORE_MEMORY_ESTIMATE")
        .output();
    assert!(!o.ok);
    for want in [
        "the 100000 agent(s) need about",
        "TB of memory at the peak",
        "is available",
        "fewer agents (`agents.count`)",
        "COMLRL_IGNORE_MEMORY_ESTIMATE=1",
    ] {
        assert!(o.stderr.contains(want), "{want}: {}", o.stderr);
    }
    assert!(t.elapsed().as_secs() < 30, "{:?}", t.elapsed());
}

/// `generate --adapter DIR` applies a PEFT adapter on `--model`: its greedy ids are those of
/// the adapted model in process; an adapter made for another base is refused, naming the file.
#[test]
fn generate_with_a_peft_adapter() {
    use candle_core::Device;
    use comlrl::model::io::peft::Adapter;
    use comlrl::model::{generate, LoadOptions, ModelSource, Policy, SamplingParams};
    let model = fixtures().join("tiny-llama");
    let adapter = fixtures().join("lora/tiny-llama/adapter");
    let base = Policy::load(&ModelSource::Local(model.clone()), &LoadOptions::default()).unwrap();
    let ad = Adapter::load(&adapter, &base.config, base.model.dtype(), &Device::Cpu).unwrap();
    let p = base.with_adapter(ad).unwrap();
    let prompt = [5u32, 17, 230, 41];
    let params = SamplingParams {
        max_new_tokens: 8,
        greedy: true,
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(0);
    let want = generate(
        p.sampler(),
        &[&prompt],
        1,
        &params,
        &p.eos_ids,
        p.pad_id,
        &mut rng,
    )
    .unwrap()[0][0]
        .clone();
    let args = |adapter: &std::path::Path| {
        run(
            &[
                "generate",
                "--model",
                model.to_str().unwrap(),
                "--adapter",
                adapter.to_str().unwrap(),
                "--prompt-ids",
                "5,17,230,41",
                "--greedy",
                "--ignore-eos",
                "--max-new-tokens",
                "8",
                "--json",
            ],
            &[],
        )
    };
    let (ok, out, err) = args(&adapter);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(ids(&v["samples"][0]["ids"]), want);
    let (ok, _, err) = args(&fixtures().join("lora/tiny-qwen3/adapter"));
    assert!(!ok);
    assert!(
        err.contains("adapter_model.safetensors") && err.contains("shape"),
        "{err}"
    );
}

/// `score --adapter DIR --base-dtype bf16|q8_0` holds the base's projections as a run with
/// `agents.base_dtype` does: its log-probs are the in-process policy's loaded that way,
/// not the f32 base's; the flag needs an adapter and an f32 `--dtype`.
#[test]
fn score_with_an_adapter_on_a_bf16_base() {
    use candle_core::{DType, Device};
    use comlrl::model::io::peft::Adapter;
    use comlrl::model::{completion_logprobs, LoadOptions, Mode, ModelSource, Policy, ScoreLayout};
    let model = fixtures().join("tiny-llama");
    let adapter = fixtures().join("lora/tiny-llama/adapter");
    let (prompt, completion) = ([5u32, 17, 230], [41u32, 999, 3, 77]);
    let in_process = |base_dtype: Option<DType>| -> Vec<f32> {
        let opts = LoadOptions {
            base_dtype,
            ..LoadOptions::default()
        };
        let base = Policy::load(&ModelSource::Local(model.clone()), &opts).unwrap();
        let ad = Adapter::load(&adapter, &base.config, DType::F32, &Device::Cpu).unwrap();
        let p = base.with_adapter(ad).unwrap();
        let lay = ScoreLayout::new(&p.model, &[&prompt], &[&completion], p.pad_id).unwrap();
        completion_logprobs(&p.model, &lay, p.products(Mode::Infer))
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let cli = |extra: &[&str]| {
        let mut args = vec![
            "score",
            "--model",
            model.to_str().unwrap(),
            "--prompt-ids",
            "5,17,230",
            "--completion-ids",
            "41,999,3,77",
            "--json",
        ];
        args.extend_from_slice(extra);
        run(&args, &[])
    };
    let (ok, out, err) = cli(&[
        "--adapter",
        adapter.to_str().unwrap(),
        "--base-dtype",
        "bf16",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let got: Vec<f32> = v["logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    let bf16 = in_process(Some(DType::BF16));
    assert_eq!(got, bf16);
    assert_ne!(bf16, in_process(None), "the bf16 base rounds the weights");
    let (ok, out, err) = cli(&[
        "--adapter",
        adapter.to_str().unwrap(),
        "--base-dtype",
        "q8_0",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let got: Vec<f32> = v["logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    let q8 = in_process(Some(comlrl::model::kernels::q8_weight::HELD));
    assert_eq!(got, q8);
    assert_ne!(q8, bf16, "q8_0 blocks are not bf16 weights");
    let (ok, _, err) = cli(&["--base-dtype", "bf16"]);
    assert!(!ok && err.contains("--adapter"), "{err}");
    let (ok, _, err) = cli(&[
        "--adapter",
        adapter.to_str().unwrap(),
        "--base-dtype",
        "bf16",
        "--dtype",
        "bf16",
    ]);
    assert!(!ok && err.contains("--base-dtype bf16"), "{err}");
}
