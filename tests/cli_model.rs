//! The real binary's `generate` and `score` commands, and hub-id resolution through the HF cache.
mod common;
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
