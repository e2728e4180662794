//! `trainer.algorithm: iac` and its `trainer.critic` section: CoMLRL `IACConfig`'s defaults,
//! one generation accepted, the critic written back and reloaded, and the errors (a critic key
//! of the wrong type, an unknown one, what IAC does not train).
use crate::common;

use comlrl_scenario::ErrorKind::*;
use comlrl_scenario::{load_str, Algorithm, CriticType};
use common::{check, Fixture};

/// BASE without `num_generations` (IAC's default is 1).
const IAC: &str = "\
dataset:
  prompts: [\"a\", \"b\"]
agents:
  count: 2
  model: builtin:tiny
reward:
  rhai: r.rhai
trainer:
  algorithm: iac
";

#[test]
fn iac_takes_comlrl_iac_config_defaults() {
    let f = Fixture::new();
    let s = f.ok(IAC, &[]);
    let t = &s.trainer;
    assert_eq!(t.algorithm, Algorithm::Iac);
    assert_eq!(
        (t.num_generations, t.rollout_buffer_size, t.train_batch_size),
        (1, 8, 8)
    );
    assert_eq!((t.num_train_epochs, t.discount), (40, 1.0));
    assert_eq!(t.agent_learning_rate, 5e-6);
    let c = t.critic.as_ref().expect("iac has a critic");
    assert!(c.separate);
    assert_eq!(c.learning_rate, 5e-6);
    assert_eq!(c.r#type, CriticType::V);
    assert_eq!(c.value_head_hidden_dim, None);
    assert_eq!(c.value_loss_coef, 0.6);
    assert_eq!(c.value_clip_range, Some(0.2));
    assert_eq!(c.model, None);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    // MAGRPO keeps its own defaults and has no critic.
    let m = f.ok(&IAC.replace("  algorithm: iac\n", ""), &[]);
    assert_eq!(
        (m.trainer.num_generations, m.trainer.rollout_buffer_size),
        (4, 2)
    );
    assert_eq!(m.trainer.critic, None);
}

#[test]
fn the_critic_survives_the_resolved_yaml() {
    let f = Fixture::new();
    let text = format!(
        "{IAC}  num_generations: 2\n  critic:\n    model: builtin:tiny\n    learning_rate: 1.0e-5\n    type: q\n    value_head_hidden_dim: 8\n    value_loss_coef: 0.5\n    value_clip_range: null\n"
    );
    let s = f.ok(&text, &[]);
    let c = s.trainer.critic.as_ref().unwrap();
    assert_eq!(c.r#type, CriticType::Q);
    assert_eq!(c.model.as_ref().unwrap().spec, "builtin:tiny");
    assert_eq!(c.value_head_hidden_dim, Some(8));
    assert_eq!(c.value_clip_range, None);
    let yaml = s.to_yaml();
    for key in [
        "critic:",
        "type: q",
        "value_head_hidden_dim: 8",
        "model: builtin:tiny",
    ] {
        assert!(yaml.contains(key), "{key} not written:\n{yaml}");
    }
    let again = load_str(&yaml, &f.origin(), &[]).expect("reload the resolved scenario");
    assert_eq!(again.trainer, s.trainer);
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    // The override form reaches into the section.
    let set = f.ok(
        IAC,
        &["trainer.critic.type=q", "trainer.critic.learning_rate=1e-5"],
    );
    let c = set.trainer.critic.unwrap();
    assert_eq!((c.r#type, c.learning_rate), (CriticType::Q, 1e-5));
}

#[test]
fn a_critic_key_of_the_wrong_type_or_name_is_an_error() {
    let f = Fixture::new();
    let (msg, d) = f.one(&format!("{IAC}  critic:\n    learning_rate: fast\n"), &[]);
    assert!(msg.contains("trainer.critic.learning_rate"), "{msg}");
    assert_eq!(d.kind, WrongType, "{msg}");
    let (msg, d) = f.one(&format!("{IAC}  critic:\n    type: z\n"), &[]);
    assert!(msg.contains("trainer.critic.type"), "{msg}");
    assert!(msg.contains("`v`") && msg.contains("`q`"), "{msg}");
    assert_eq!(d.kind, InvalidValue, "{msg}");
    let (msg, d) = f.one(&format!("{IAC}  critic:\n    learning_rat: 1.0e-5\n"), &[]);
    assert!(msg.contains("learning_rate"), "did you mean: {msg}");
    assert_eq!(d.kind, UnknownKey, "{msg}");
    let (_, d) = f.one(&format!("{IAC}  critic:\n    learning_rate: 0\n"), &[]);
    check(
        &d,
        InvalidValue,
        "trainer.critic.learning_rate",
        11,
        5,
        &["the learning rate must be > 0"],
    );
}

#[test]
fn what_iac_does_not_train_is_refused() {
    let f = Fixture::new();
    let s = f.ok(&format!("{IAC}  critic:\n    separate: false\n"), &[]);
    assert!(!s.trainer.critic.unwrap().separate);
    // Multi-turn trains one completion per agent and turn (TD(0) targets), as CoMLRL's.
    let two = format!("{IAC}  num_turns: 2\n  external_transition: {{rhai: r.rhai}}\n");
    let s = f.ok(&two, &["trainer.discount=0.9"]);
    assert_eq!((s.trainer.num_turns, s.trainer.discount), (2, 0.9));
    let (msg, d) = f.one(&format!("{two}  num_generations: 2\n"), &[]);
    assert_eq!(d.key, "trainer.num_generations", "{msg}");
    assert!(msg.contains("one completion per agent and turn"), "{msg}");
    let (_, d) = f.one(
        &format!("{IAC}  num_generations: 2\n  joint_mode: cross\n"),
        &[],
    );
    assert_eq!(d.key, "trainer.joint_mode");
}

#[test]
fn one_generation_is_refused_for_magrpo_only() {
    let f = Fixture::new();
    let s = f.ok(&format!("{IAC}  num_generations: 1\n"), &[]);
    assert_eq!(s.trainer.num_generations, 1);
    let magrpo = IAC.replace("  algorithm: iac\n", "  num_generations: 1\n");
    let (_, d) = f.one(&magrpo, &[]);
    check(
        &d,
        InvalidValue,
        "trainer.num_generations",
        9,
        3,
        &["at least 2", "group baseline"],
    );
    let (_, d) = f.one(&format!("{IAC}  num_generations: 0\n"), &[]);
    assert_eq!(d.key, "trainer.num_generations");
}

#[test]
fn a_critic_under_magrpo_and_magrpo_keys_under_iac_are_warned_about() {
    let f = Fixture::new();
    let s = f.ok(
        &IAC.replace("  algorithm: iac\n", "  critic: {type: q}\n"),
        &[],
    );
    assert_eq!(s.trainer.critic, None);
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0].contains("only `iac` and `maac` train a critic"),
        "{:?}",
        s.warnings
    );
    let s = f.ok(&format!("{IAC}  loss_aggregation: token_mean\n"), &[]);
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0].contains("`trainer.loss_aggregation`"),
        "{:?}",
        s.warnings
    );
}

/// `trainer.algorithm: maac`: IAC's defaults (`MAACConfig` has the same), one critic that is a
/// model of its own, CoMLRL's N critic steps per mini-batch behind `compat_critic_steps`.
#[test]
fn maac_takes_comlrl_maac_config_defaults_and_a_separate_critic_only() {
    let f = Fixture::new();
    let maac = IAC.replace("algorithm: iac", "algorithm: maac");
    let s = f.ok(&maac, &[]);
    let t = &s.trainer;
    assert_eq!(t.algorithm, Algorithm::Maac);
    assert_eq!(
        (t.num_generations, t.rollout_buffer_size, t.num_train_epochs),
        (1, 8, 40)
    );
    let c = t.critic.as_ref().expect("maac has a critic");
    assert!(c.separate && !c.compat_critic_steps);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let s = f.ok(&maac, &["trainer.critic.compat_critic_steps=true"]);
    assert!(s.trainer.critic.as_ref().unwrap().compat_critic_steps);
    let (msg, d) = f.one(&format!("{maac}  critic:\n    separate: false\n"), &[]);
    assert_eq!(d.key, "trainer.critic.separate", "{msg}");
    assert!(msg.contains("one critic for all agents"), "{msg}");
    let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("reload");
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    // The quirk's switch means nothing to IAC's critics: warned about.
    let s = f.ok(IAC, &["trainer.critic.compat_critic_steps=true"]);
    assert!(
        s.warnings[0].contains("only `maac`'s one critic"),
        "{:?}",
        s.warnings
    );
}

/// `trainer.critic.adapter` takes `agents.adapter`'s settings, defaults and checks (one
/// declaration), `base_dtype` beside it; both survive the resolved YAML. Bad settings name the
/// critic's key: rank 0, a target that is no projection, `base_dtype` without an adapter, an
/// adapter on a head that reads the agent's backbone (`separate: false`).
#[test]
fn a_critic_adapter_takes_the_agents_settings_and_names_its_key_when_bad() {
    let f = Fixture::new();
    let text = format!(
        "{IAC}  critic:\n    adapter: {{rank: 4, alpha: 16, targets: [v_proj, q_proj]}}\n    base_dtype: bf16\n"
    );
    let s = f.ok(&text, &[]);
    let c = s.trainer.critic.as_ref().unwrap();
    let a = c.adapter.as_ref().expect("an adapter");
    assert_eq!(
        (a.rank, a.alpha, a.dropout, a.rslora),
        (4, 16.0, Some(0.0), false)
    );
    // The decoder's order, as for an agent's.
    assert_eq!(a.targets, ["q_proj", "v_proj"]);
    assert_eq!(c.base_dtype, comlrl_scenario::BaseDtype::Bf16);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("reload");
    assert_eq!(again.trainer.critic, s.trainer.critic);
    // Defaults as `agents.adapter`'s: PEFT's r 8, α 8, every projection.
    let d = f.ok(IAC, &["trainer.critic.adapter.rank=8"]);
    let a = d.trainer.critic.unwrap().adapter.unwrap();
    assert_eq!((a.rank, a.alpha, a.targets.len()), (8, 8.0, 7));
    // No adapter by default: the critic is fully fine-tuned, as CoMLRL's.
    assert_eq!(f.ok(IAC, &[]).trainer.critic.unwrap().adapter, None);

    let (msg, d) = f.one(IAC, &["trainer.critic.adapter.rank=0"]);
    assert_eq!(d.key, "trainer.critic.adapter.rank", "{msg}");
    assert!(msg.contains("rank 0 is outside"), "{msg}");
    let (msg, d) = f.one(
        &format!("{IAC}  critic:\n    adapter: {{targets: [q_proj, lm_head]}}\n"),
        &[],
    );
    assert_eq!(d.key, "trainer.critic.adapter.targets", "{msg}");
    assert!(msg.contains("`lm_head` is not a projection"), "{msg}");
    let (msg, d) = f.one(IAC, &["trainer.critic.base_dtype=q8_0"]);
    assert_eq!(d.key, "trainer.critic.base_dtype", "{msg}");
    assert!(msg.contains("needs an `adapter`"), "{msg}");
    let (msg, d) = f.one(
        &format!("{IAC}  critic:\n    separate: false\n    adapter: {{rank: 4}}\n"),
        &[],
    );
    assert_eq!(d.key, "trainer.critic.adapter", "{msg}");
    assert!(
        msg.contains("separate: false") && msg.contains("agents.adapter"),
        "{msg}"
    );
    // MAAC's one critic takes adapters too.
    let m = f.ok(
        &IAC.replace("algorithm: iac", "algorithm: maac"),
        &["trainer.critic.adapter.rank=2"],
    );
    assert_eq!(m.trainer.critic.unwrap().adapter.unwrap().rank, 2);
}
