//! The scenario files shipped in `scenarios/` load and resolve to the seed example's values.
use crate::common;

use comlrl_scenario::spec::ProcessorSpec;
use comlrl_scenario::{
    load, load_str, load_with, CodeSource, DataSource, Dtype, ErrorKind, JointMode, LoadOptions,
    ModelSource, Scenario,
};
use common::scenarios_dir;

const PROMPTS: [&str; 10] = [
    "Describe a city in the clouds:",
    "Invent a new holiday and explain it:",
    "Write a bedtime story for a dragon:",
    "Explain how teleportation might work:",
    "Tell a joke about dinosaurs:",
    "Describe a world without electricity:",
    "Create a superhero with a unique power:",
    "Write a scene where the moon talks:",
    "Invent a new type of fruit:",
    "Design a playground on Mars:",
];

/// The seed's settings; the tiny quick start differs in its model, learning rate and epochs.
fn check_seed(s: &Scenario, model: &str) {
    check_seed_with(s, model, 5e-5, 3);
}

fn check_seed_with(s: &Scenario, model: &str, lr: f64, epochs: usize) {
    assert_eq!(s.dataset.train.source, DataSource::Inline);
    let prompts: Vec<&str> = s
        .dataset
        .train
        .rows
        .iter()
        .map(|r| r.prompt.as_str())
        .collect();
    assert_eq!(prompts, PROMPTS);
    assert!(s.dataset.eval.is_none());
    assert_eq!(s.agents.len(), 2);
    for (i, a) in s.agents.iter().enumerate() {
        assert_eq!(a.index, i);
        assert_eq!(a.model.spec, model);
        assert_eq!(a.dtype, Dtype::Auto);
        assert_eq!(a.sampling.max_new_tokens, 128);
        assert_eq!(a.sampling.temperature, 0.6);
        assert_eq!(a.sampling.top_p, 0.6);
        assert_eq!(a.sampling.top_k, Some(50));
        assert_eq!(a.learning_rate, lr);
        assert_eq!(a.template.as_str(), "{prompt}");
    }
    let t = &s.trainer;
    assert_eq!(t.num_train_epochs, epochs);
    assert_eq!(t.agent_learning_rate, lr);
    assert_eq!(t.num_generations, 8);
    assert_eq!(t.num_turns, 1);
    assert_eq!(t.joint_mode, JointMode::Aligned);
    assert!(t.external_transition.is_none());
    assert_eq!(s.logging.steps, 10);
    assert_eq!(s.seed, 42);
    assert_eq!(s.reward.processors, vec![ProcessorSpec::Scale(100.0)]);
    assert_eq!(s.reward.terms.len(), 1);
    let term = &s.reward.terms[0];
    assert_eq!(term.weight, 1.0);
    assert_eq!(
        term.params,
        serde_json::json!({"target_min": 2, "target_max": 3})
    );
    let root = s.base_dir.parent().expect("scenarios/ has a parent");
    assert!(
        s.output_dir.starts_with(root.join("runs")),
        "{}",
        s.output_dir.display()
    );
    assert_eq!(s.models_dir(), s.output_dir.join("models"));
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn seed_scenario() {
    let s =
        load(&scenarios_dir().join("story_len_ratio.yaml"), &[]).unwrap_or_else(|e| panic!("{e}"));
    check_seed(&s, "Qwen/Qwen2.5-0.5B");
    assert_eq!(s.name, "story_len_ratio");
    assert_eq!(
        s.agents[0].model.source,
        ModelSource::Hub("Qwen/Qwen2.5-0.5B".into())
    );
    let term = &s.reward.terms[0];
    assert_eq!(term.name.as_deref(), Some("len_ratio"));
    let script = term.rhai.clone().expect("rhai");
    assert!(script.ends_with("rewards/len_ratio.rhai") && script.is_absolute() && script.is_file());
    assert!(s.output_dir.ends_with("runs/story_len_ratio"));
}

#[test]
fn tiny_scenario() {
    let s = load(&scenarios_dir().join("story_len_ratio_tiny.yaml"), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    check_seed_with(&s, "../models/tiny-story", 1e-4, 5);
    let root = s.base_dir.parent().expect("scenarios/ has a parent");
    assert_eq!(
        s.agents[1].model.source,
        ModelSource::Local(root.join("models/tiny-story"))
    );
}

#[test]
fn lora_kl_scenario_is_the_seed_with_the_readable_setting() {
    let s = load(&scenarios_dir().join("story_len_ratio_lora_kl.yaml"), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    check_seed_with(&s, "Qwen/Qwen2.5-0.5B", 1e-4, 3);
    for a in &s.agents {
        let adapter = a.adapter.as_ref().expect("an adapter per agent");
        assert_eq!((adapter.rank, adapter.alpha), (16, 32.0));
        assert_eq!(adapter.targets.len(), comlrl_scenario::PROJECTIONS.len());
        assert_eq!(a.base_dtype, comlrl_scenario::BaseDtype::Bf16);
        assert_eq!(a.sampling_dtype, Dtype::Bf16);
    }
    let t = &s.trainer;
    assert_eq!(t.compute_dtype, Dtype::Bf16);
    assert_eq!(t.kl_in_loss, 0.5);
    // The measured runs (docs/grpo_variants.md) were the seed scenario with these keys set, so
    // the seed's update settings stay.
    assert!(!t.parallel_updates);
    assert_eq!(t.micro_batch_size, 8);
    assert!(s.output_dir.ends_with("runs/story_len_ratio_lora_kl"));
}

/// Every scenario shipped in `scenarios/` loads; those naming a native plugin only ask for the
/// workspace build when it is missing (the plugin's own tests cover them built).
#[test]
fn every_shipped_scenario_loads() {
    let mut names = vec![];
    for e in std::fs::read_dir(scenarios_dir()).expect("scenarios/") {
        let path = e.expect("dir entry").path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        let opts = LoadOptions {
            require_reward_files: false,
            ..LoadOptions::default()
        };
        if let Err(e) = load_with(&path, &[], &opts) {
            panic!("{}: {e}", path.display());
        }
    }
    assert!(names.len() >= 10, "{names:?}");
}

#[test]
fn native_scenario_loads_or_asks_for_the_build() {
    let path = scenarios_dir().join("story_len_ratio_native.yaml");
    match load(&path, &[]) {
        Ok(s) => check_seed(&s, "Qwen/Qwen2.5-0.5B"),
        Err(e) => {
            let ds = e.diagnostics();
            assert_eq!(ds.len(), 1, "{e}");
            assert_eq!(ds[0].kind, ErrorKind::MissingFile);
            assert_eq!(ds[0].key, "reward.plugin");
            let hint = ds[0].hint.clone().unwrap_or_default();
            assert!(hint.contains("cargo build --release --workspace"), "{e}");
            assert!(
                e.to_string().contains("story_len_ratio_native.yaml:"),
                "{e}"
            );
        }
    }
    // Without the file check it always resolves.
    let opts = LoadOptions {
        require_reward_files: false,
        ..LoadOptions::default()
    };
    let s = load_with(&path, &[], &opts).unwrap_or_else(|e| panic!("{e}"));
    check_seed(&s, "Qwen/Qwen2.5-0.5B");
    let term = &s.reward.terms[0];
    assert!(term.rhai.is_none());
    let plugin = term.plugin.clone().expect("plugin");
    assert!(plugin.ends_with("target/release/comlrl_len_ratio") && plugin.is_absolute());
    assert_eq!(term.name.as_deref(), Some("comlrl_len_ratio"));
}

#[test]
fn resolved_yaml_round_trips() {
    let path = scenarios_dir().join("story_len_ratio.yaml");
    let sets = ["trainer.num_generations=4".to_string()];
    let s = load(&path, &sets).unwrap_or_else(|e| panic!("{e}"));
    let yaml = s.to_yaml();
    assert!(yaml.contains("- scale: 100.0"), "{yaml}");
    assert!(yaml.contains("# --set trainer.num_generations=4"), "{yaml}");
    let again = load_str(&yaml, &path, &[]).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!(again.trainer, s.trainer);
    assert_eq!(again.agents, s.agents);
    assert_eq!(again.dataset, s.dataset);
    assert_eq!(again.reward, s.reward);
    assert_eq!(again.logging, s.logging);
    assert_eq!(again.output_dir, s.output_dir);
    assert_eq!(again.seed, s.seed);
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
}

#[test]
fn transition_is_resolved_for_multi_turn() {
    let f = common::Fixture::new();
    f.write("t.rhai", "fn transition(x, ctx) { x }");
    let text = format!(
        "{}  num_turns: 2\n  external_transition: {{rhai: t.rhai, params: {{k: 1}}}}\n",
        common::BASE
    );
    let s = f.ok(&text, &[]);
    let t = s.trainer.external_transition.expect("transition");
    assert_eq!(t.source, CodeSource::Rhai(f.dir.path().join("t.rhai")));
    assert_eq!(t.params, serde_json::json!({"k": 1}));
}

#[test]
fn yaml_anchors_and_merge_keys_share_agent_settings() {
    let f = common::Fixture::new();
    let text = common::BASE.replace(
        "agents:\n  count: 2\n  model: builtin:tiny\n",
        "agents:\n  - &base {model: builtin:tiny, temperature: 0.9, max_new_tokens: 64}\n  - <<: *base\n    temperature: 0.3\n",
    );
    let s = f.ok(&text, &[]);
    assert_eq!(s.agents[0].sampling.temperature, 0.9);
    assert_eq!(s.agents[1].sampling.temperature, 0.3);
    assert_eq!(s.agents[1].sampling.max_new_tokens, 64);
}

#[test]
fn smollm2_chat_scenario() {
    let s = load(&scenarios_dir().join("smollm2_len_ratio.yaml"), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    assert_eq!(s.agents.len(), 2);
    for a in &s.agents {
        assert_eq!(
            a.model.source,
            ModelSource::Hub("HuggingFaceTB/SmolLM2-135M-Instruct".into())
        );
        assert_eq!(a.chat_template, comlrl_scenario::ChatTemplateSpec::Auto);
        assert_eq!(
            a.system_prompt.as_deref(),
            Some("You are a creative writer. Answer in plain prose.")
        );
    }
    assert_eq!(s.dataset.train.rows.len(), 10);
    let yaml = s.to_yaml();
    assert!(yaml.contains("chat_template: auto"), "{yaml}");
}
