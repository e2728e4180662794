//! The real binary on the Llama and Qwen3 fixtures: `generate --greedy` gives the reference
//! tokens, `score` the reference log-probs, and `run` trains both agents of the tiny scenario
//! on them for a few steps and saves models that load again.
use crate::common;
use common::run_comlrl as run;
use common::*;

const MODELS: [&str; 2] = ["tiny-llama", "tiny-qwen3"];

#[test]
fn generate_greedy_matches_reference() {
    for name in MODELS {
        let model = fixtures().join(name);
        let refj = json(&model.join("reference.json"));
        for row in 0..3 {
            let prompt = ids(&refj["prompts"][row]["ids"])
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",");
            let (ok, out, err) = run(&[
                "generate",
                "--model",
                model.to_str().unwrap(),
                "--prompt-ids",
                &prompt,
                "--greedy",
                "--ignore-eos",
                "--max-new-tokens",
                "16",
                "--json",
            ]);
            assert!(ok, "{name}: {err}");
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(
                ids(&v["samples"][0]["ids"]),
                ids(&refj["greedy"][row]["ids"]),
                "{name} row {row}"
            );
        }
    }
}

#[test]
fn score_matches_reference_logprobs() {
    for name in MODELS {
        let model = fixtures().join(name);
        let refj = json(&model.join("reference.json"));
        let want = load_st(&model.join("reference.safetensors"))["completion_logprobs"]
            .to_vec2::<f32>()
            .unwrap();
        let (ok, out, err) = run(&[
            "score",
            "--model",
            model.to_str().unwrap(),
            "--prompt",
            refj["prompts"][2]["text"].as_str().unwrap(),
            "--completion",
            refj["completions"][2]["text"].as_str().unwrap(),
            "--json",
        ]);
        assert!(ok, "{name}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(ids(&v["prompt_ids"]), ids(&refj["prompts"][2]["ids"]));
        let lps = v["logprobs"].as_array().unwrap();
        assert!(!lps.is_empty());
        // tiny-qwen3's stored log-probs are off transformers' own by up to 2.7e-4 (see
        // tests/model/reference.rs); tiny-llama's match it exactly.
        let tol = if name == "tiny-qwen3" { 1e-3 } else { 1e-4 };
        for (j, lp) in lps.iter().enumerate() {
            let lp = lp.as_f64().unwrap() as f32;
            assert!(
                (lp - want[2][j]).abs() < tol,
                "{name} token {j}: {lp} vs {}",
                want[2][j]
            );
        }
    }
}

#[test]
fn run_trains_the_tiny_scenario_on_each_architecture() {
    for name in MODELS {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("run");
        let sets = [
            format!("agents.model={}", fixtures().join(name).display()),
            format!("output_dir={}", out.display()),
            "agents.max_new_tokens=8".into(),
            "trainer.num_train_epochs=1".into(),
            "trainer.num_generations=2".into(),
            r#"dataset.prompts=["Once upon a time", "The robot", "A dragon"]"#.into(),
            "logging.steps=1".into(),
        ];
        let (ok, _, err) = on_scenario("run", &tiny_scenario())
            .sets(&sets)
            .flags(&["--quiet"])
            .output()
            .parts();
        assert!(ok, "{name}: {err}");
        let rows = metrics(&out);
        assert_eq!(rows.len(), 3, "{name}: one row per prompt");
        assert!(
            rows.iter()
                .any(|r| r["time/update_s"].as_f64().unwrap_or(0.0) > 0.0
                    && r["train_gflops_per_s"].as_f64().unwrap_or(0.0) > 0.0),
            "{name}: no optimizer update ran"
        );
        let saved = out.join("models/agent_0");
        let cfg = json(&saved.join("config.json"));
        let src = json(&fixtures().join(name).join("config.json"));
        assert_eq!(cfg["architectures"], src["architectures"]);
        assert_eq!(cfg["rope_scaling"], src["rope_scaling"]);
        assert_eq!(cfg["rope_parameters"], src["rope_parameters"]);
        let (ok, _, err) = run(&[
            "generate",
            "--model",
            saved.to_str().unwrap(),
            "--prompt",
            "Once",
            "--max-new-tokens",
            "4",
        ]);
        assert!(ok, "{name}: the saved model does not load: {err}");
    }
}
