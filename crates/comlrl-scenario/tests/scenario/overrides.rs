//! `--set key.path=value` overrides: applied before validation, located as "(from --set ...)".
use crate::common;

use comlrl_scenario::{ErrorKind, JointMode, Location};
use common::{Fixture, BASE};

#[test]
fn override_changes_the_value() {
    let f = Fixture::new();
    let s = f.ok(BASE, &["trainer.num_generations=2"]);
    assert_eq!(s.trainer.num_generations, 2);
    assert_eq!(s.overrides, vec!["trainer.num_generations=2".to_string()]);
    let s = f.ok(
        BASE,
        &[
            "trainer.joint_mode=cross",
            "agents.max_new_tokens=16",
            "seed=7",
        ],
    );
    assert_eq!(s.trainer.joint_mode, JointMode::Cross);
    assert!(s.agents.iter().all(|a| a.sampling.max_new_tokens == 16));
    assert_eq!(s.seed, 7);
}

#[test]
fn override_creates_missing_sections_and_sets_lists() {
    let f = Fixture::new();
    let s = f.ok(
        BASE,
        &[
            "logging.steps=5",
            "logging.wandb.project=demo",
            "reward.params.target_min=1.5",
        ],
    );
    assert_eq!(s.logging.steps, 5);
    assert_eq!(
        s.logging.wandb.as_ref().map(|w| w.project.as_str()),
        Some("demo")
    );
    assert_eq!(s.reward.terms[0].params["target_min"], 1.5);
    let s = f.ok(
        BASE,
        &["dataset.prompts=[x, y, z]", "agents.learning_rate=1e-4"],
    );
    assert_eq!(s.dataset.train.rows.len(), 3);
    assert!(s.agents.iter().all(|a| a.learning_rate == 1e-4));
    let list = BASE.replace(
        "agents:\n  count: 2\n  model: builtin:tiny\n",
        "agents:\n  - model: builtin:tiny\n  - model: builtin:tiny\n",
    );
    let s = f.ok(&list, &["agents[1].temperature=0.9", "agents.0.top_k=null"]);
    assert_eq!(s.agents[1].sampling.temperature, 0.9);
    assert_eq!(s.agents[0].sampling.top_k, None);
    assert_eq!(s.agents[1].sampling.top_k, Some(50));
}

#[test]
fn unknown_override_key_is_an_error_naming_it() {
    let f = Fixture::new();
    let (msg, d) = f.one(BASE, &["trainer.nope=1"]);
    assert_eq!(d.kind, ErrorKind::UnknownKey);
    assert_eq!(d.key, "trainer.nope");
    assert_eq!(d.location, Location::Override("trainer.nope=1".into()));
    assert!(
        msg.contains("s.yaml (from --set trainer.nope=1): error at `trainer.nope`"),
        "{msg}"
    );
    let (_, d) = f.one(BASE, &["trainer.num_generaitons=4"]);
    assert!(d
        .hint
        .unwrap_or_default()
        .contains("did you mean `num_generations`?"));
}

#[test]
fn override_to_an_invalid_value_is_an_error() {
    let f = Fixture::new();
    let (msg, d) = f.one(BASE, &["trainer.num_generations=1"]);
    assert_eq!(d.kind, ErrorKind::InvalidValue);
    assert_eq!(d.key, "trainer.num_generations");
    assert_eq!(
        d.location,
        Location::Override("trainer.num_generations=1".into())
    );
    assert!(msg.contains("at least 2"), "{msg}");
    let (_, d) = f.one(BASE, &["trainer.joint_mode=crossed"]);
    assert!(d.hint.unwrap_or_default().contains("did you mean `cross`?"));
    let (_, d) = f.one(BASE, &["trainer.num_generations=many"]);
    assert_eq!(d.kind, ErrorKind::WrongType);
}

#[test]
fn malformed_overrides() {
    let f = Fixture::new();
    for (arg, needle) in [
        ("trainer.num_generations", "no `=`"),
        ("=3", "empty key path"),
        ("agents[0].model=x", "is a mapping, not a list"),
        (
            "trainer.num_generations.x=1",
            "cannot go into `trainer.num_generations`",
        ),
        ("reward[3].weight=1", "cannot go into `reward`"),
        ("trainer.joint_mode=[a", "not valid YAML"),
    ] {
        let (msg, d) = f.one(BASE, &[arg]);
        assert_eq!(d.kind, ErrorKind::Override, "{arg}: {msg}");
        assert!(msg.contains(needle), "{arg}: {msg}");
    }
    let list = BASE.replace("reward:\n  rhai: r.rhai\n", "reward:\n  - rhai: r.rhai\n");
    let (msg, _) = f.one(&list, &["reward[3].weight=1"]);
    assert!(msg.contains("has 1 item(s), no index 3"), "{msg}");
    let s = f.ok(&list, &["reward[0].weight=2"]);
    assert_eq!(s.reward.terms[0].weight, 2.0);
}

#[test]
fn malformed_override_is_located_at_the_argument() {
    let f = Fixture::new();
    let (msg, d) = f.one(BASE, &["trainer.num_generations"]);
    assert_eq!(
        d.location,
        Location::Override("trainer.num_generations".into())
    );
    assert_eq!(d.key, "trainer.num_generations");
    assert!(
        msg.contains("(from --set trainer.num_generations)"),
        "{msg}"
    );
}

#[test]
fn reward_robustness_keys_are_accepted_and_checked() {
    use comlrl_scenario::spec::OnError;
    let f = Fixture::new();
    let s = f.ok(
        BASE,
        &["reward.time_budget_ms=2500", "reward.on_error=skip_step"],
    );
    assert_eq!(s.reward.terms[0].time_budget_ms, Some(2500));
    assert_eq!(s.reward.terms[0].on_error, OnError::SkipStep);
    assert_eq!(s.reward.terms[0].isolate, None);
    let yaml = s.to_yaml();
    assert!(yaml.contains("time_budget_ms: 2500"), "{yaml}");
    assert!(yaml.contains("on_error: skip_step"), "{yaml}");
    let (msg, d) = f.one(BASE, &["reward.time_budget_ms=0"]);
    assert!(msg.contains("at least 1"), "{msg}");
    assert_eq!(d.key, "reward.time_budget_ms", "{d:?}");
    let (msg, d) = f.one(BASE, &["reward.isolate=true"]);
    assert!(msg.contains("plugins only"), "{msg}");
    assert_eq!(d.key, "reward.isolate", "{d:?}");
    let (msg, _) = f.one(BASE, &["reward.on_error=ignore"]);
    assert!(msg.contains("skip_step"), "{msg}");
}

#[test]
fn transition_robustness_keys_are_accepted_and_checked() {
    use comlrl_scenario::spec::OnError;
    let f = Fixture::new();
    f.write("t.rhai", "fn transition(ctx) { [] }");
    f.write(
        "t.so",
        "not really a library; only its existence is checked here",
    );
    let text = format!(
        "{BASE}  num_turns: 2\n  external_transition: {{plugin: t.so, params: {{k: 1}}}}\n"
    );
    let s = f.ok(
        &text,
        &[
            "trainer.external_transition.time_budget_ms=2500",
            "trainer.external_transition.isolate=false",
            "trainer.external_transition.on_error=skip_step",
        ],
    );
    let t = s.trainer.external_transition.as_ref().expect("transition");
    assert_eq!(
        (t.time_budget_ms, t.isolate, t.on_error),
        (Some(2500), Some(false), OnError::SkipStep)
    );
    // The resolved YAML keeps them (a resumed run isolates and skips the same way).
    let yaml = s.to_yaml();
    assert!(
        yaml.contains("time_budget_ms: 2500")
            && yaml.contains("isolate: false")
            && yaml.contains("on_error: skip_step"),
        "{yaml}"
    );
    let plain = f.ok(&text, &[]);
    let t = plain
        .trainer
        .external_transition
        .as_ref()
        .expect("transition");
    assert_eq!(
        (t.time_budget_ms, t.isolate, t.on_error),
        (None, None, OnError::Fail)
    );
    let (msg, d) = f.one(&text, &["trainer.external_transition.time_budget_ms=0"]);
    assert!(msg.contains("at least 1"), "{msg}");
    assert_eq!(d.key, "trainer.external_transition.time_budget_ms", "{d:?}");
    let script = text.replace("plugin: t.so", "rhai: t.rhai");
    let (msg, d) = f.one(&script, &["trainer.external_transition.isolate=true"]);
    assert!(msg.contains("plugins only"), "{msg}");
    assert_eq!(d.key, "trainer.external_transition.isolate", "{d:?}");
    let (msg, _) = f.one(&text, &["trainer.external_transition.on_error=ignore"]);
    assert!(msg.contains("skip_step"), "{msg}");
}
