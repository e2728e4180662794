//! `comlrl check` / `comlrl run` with Hub datasets and chat templates: the first prompt of each
//! agent shown by `check --print` (as YAML comments), the shipped SmolLM2 scenario checked
//! offline, and an uncached Hub dataset refused by `run` with the cache path it looked at.
use crate::common;
use common::{comlrl, fixtures};
use std::path::{Path, PathBuf};

/// Runs the binary with an empty, offline Hub cache.
fn run_bin(hf_home: &Path, args: &[&str]) -> (bool, String, String) {
    comlrl(args)
        .env("HF_HOME", hf_home)
        .env_remove("HF_HUB_CACHE")
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .parts()
}

#[test]
fn check_prints_each_agents_first_prompt() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A Llama model directory whose tokenizer_config.json carries Llama 3.1's chat template.
    let model = dir.path().join("model");
    std::fs::create_dir(&model).expect("mkdir");
    for f in [
        "config.json",
        "tokenizer.json",
        "generation_config.json",
        "model.safetensors",
    ] {
        std::fs::copy(fixtures().join("tiny-llama").join(f), model.join(f)).expect("copy");
    }
    std::fs::copy(
        fixtures().join("chat_templates/llama31/tokenizer_config.json"),
        model.join("tokenizer_config.json"),
    )
    .expect("copy");
    let scenario =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/smollm2_len_ratio.yaml");
    let model_set = format!("agents.model={}", model.display());
    let (ok, stdout, stderr) = run_bin(
        dir.path(),
        &[
            "check",
            "--print",
            scenario.to_str().expect("utf8"),
            "--set",
            &model_set,
        ],
    );
    assert!(ok, "{stderr}");
    let want = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\\n\\nCutting Knowledge Date: December 2023\\nToday Date: 26 Jul 2024\\n\\nYou are a creative writer. Answer in plain prose.<|eot_id|><|start_header_id|>user<|end_header_id|>\\n\\nDescribe a city in the clouds.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\n";
    for i in 0..2 {
        assert!(
            stdout.contains(&format!(
                "# agent {i}: first training prompt as the model sees it:\n#   \"{want}\""
            )),
            "{stdout}"
        );
    }
    // The printed text is still a scenario.
    let s = comlrl_scenario::load_str(&stdout, &scenario, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        s.agents[0].system_prompt.as_deref(),
        Some("You are a creative writer. Answer in plain prose.")
    );

    // As shipped (the model not cached, no network): valid, with a note instead of the prompt.
    let (ok, stdout, stderr) = run_bin(
        dir.path(),
        &["check", "--print", scenario.to_str().expect("utf8")],
    );
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("HuggingFaceTB/SmolLM2-135M-Instruct is not in the Hub cache"),
        "{stderr}"
    );
    assert!(
        stdout.contains("(not rendered: the model's chat template is read when it is loaded)"),
        "{stdout}"
    );
}

#[test]
fn run_refuses_an_uncached_hub_dataset_offline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tiny = common::tiny_scenario();
    let (ok, _, stderr) = run_bin(
        dir.path(),
        &[
            "run",
            tiny.to_str().expect("utf8"),
            "--set",
            "dataset={hub: org/absent, split: \"train[:10]\"}",
            "--set",
            &format!("output_dir={}", dir.path().join("out").display()),
        ],
    );
    assert!(!ok);
    let looked = dir.path().join("hub/datasets--org--absent");
    assert!(stderr.contains("error at `dataset.hub`"), "{stderr}");
    assert!(stderr.contains(&looked.display().to_string()), "{stderr}");
    assert!(
        stderr.contains("downloading failed: HF_HUB_OFFLINE is set"),
        "{stderr}"
    );
}
