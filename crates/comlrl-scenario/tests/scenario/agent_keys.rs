//! The `agents` key table (`agent_keys.rs`): both shapes give the same plan, every key survives
//! the resolved-YAML round trip, the learning rate defaults to the trainer's, and the table's
//! checks give the diagnostics (key, line, column, message, hint) that agents.rs wrote before.
use crate::common;

use comlrl_scenario::ErrorKind::*;
use comlrl_scenario::{load_str, AgentPlan, Dtype};
use common::{check, check_cases, Fixture, BASE};

const SETTINGS: &str = "    dtype: f32
    learning_rate: 2.0e-5
    system_prompt: Be brief.
    temperature: 0.9
    top_p: 0.8
    top_k: null
    max_new_tokens: 32
    template: \"Q: {prompt}\"
    chat_template: chat.jinja
    adapter: {rank: 4, alpha: 16, targets: [v_proj, q_proj], rslora: true}
";

fn fixture() -> Fixture {
    let f = Fixture::new();
    f.write(
        "chat.jinja",
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>",
    );
    f
}

/// A scenario with the given `agents` section.
fn scenario(agents: &str) -> String {
    format!("dataset:\n  prompts: [\"a\", \"b\"]\n{agents}reward:\n  rhai: r.rhai\n")
}

fn shared() -> String {
    let body: String = SETTINGS.lines().map(|l| format!("{}\n", &l[2..])).collect();
    scenario(&format!(
        "agents:\n  count: 2\n  model: builtin:tiny\n{body}"
    ))
}

fn listed() -> String {
    let entry = format!("  - model: builtin:tiny\n{SETTINGS}");
    scenario(&format!("agents:\n{entry}{entry}"))
}

#[test]
fn both_shapes_give_the_same_agents() {
    let f = fixture();
    let a = f.ok(&shared(), &[]);
    let b = f.ok(&listed(), &[]);
    assert_eq!(a.agents, b.agents);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    let x = &a.agents[1];
    assert_eq!(x.index, 1);
    assert_eq!(x.dtype, Dtype::F32);
    assert_eq!(x.learning_rate, 2.0e-5);
    assert_eq!(x.system_prompt.as_deref(), Some("Be brief."));
    assert_eq!(
        (x.sampling.temperature, x.sampling.top_p, x.sampling.top_k),
        (0.9, 0.8, None)
    );
    assert_eq!(x.sampling.max_new_tokens, 32);
    assert_eq!(x.template.as_str(), "Q: {prompt}");
    assert!(x.chat_template.as_setting().ends_with("chat.jinja"));
}

#[test]
fn every_agent_key_survives_the_resolved_yaml() {
    let f = fixture();
    let s = f.ok(&shared(), &[]);
    let yaml = s.to_yaml();
    for (key, _) in AgentPlan::plan_fields() {
        assert!(
            yaml.contains(&format!(" {key}:")),
            "{key} not written:\n{yaml}"
        );
    }
    assert!(yaml.contains("top_k: null"), "{yaml}");
    let again = load_str(&yaml, &f.origin(), &[]).expect("reload the resolved scenario");
    assert_eq!(again.agents, s.agents);
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    // Defaults are written out too, and reload to the same plan.
    let s = f.ok(BASE, &[]);
    let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("reload");
    assert_eq!(again.agents, s.agents);
}

#[test]
fn defaults_come_from_the_table_and_the_trainer() {
    let f = Fixture::new();
    let s = f.ok(&format!("{BASE}  agent_learning_rate: 1.0e-4\n"), &[]);
    assert_eq!(s.agents.len(), 2);
    for a in &s.agents {
        assert_eq!(a.learning_rate, 1.0e-4);
        assert_eq!(a.dtype, Dtype::Auto);
        assert_eq!(a.sampling.top_k, Some(50));
        assert_eq!(a.sampling.max_new_tokens, 256);
        assert_eq!(a.template.as_str(), "{prompt}");
        assert_eq!(a.system_prompt, None);
    }
    // A bad trainer learning rate is reported once, under trainer, not again per agent.
    let (_, d) = f.one(&format!("{BASE}  agent_learning_rate: -1.0\n"), &[]);
    check(
        &d,
        InvalidValue,
        "trainer.agent_learning_rate",
        10,
        3,
        &["the learning rate must be > 0 (got -1)"],
    );
    // `null` is the default for plain keys and "off" for `top_k`.
    let s = f.ok(
        &BASE.replace(
            "count: 2\n",
            "count: null\n  temperature: null\n  top_k: null\n",
        ),
        &[],
    );
    assert_eq!(s.agents.len(), 2);
    assert_eq!(s.agents[0].sampling.temperature, 0.6);
    assert_eq!(s.agents[0].sampling.top_k, None);
}

#[test]
fn table_checks_give_the_diagnostics_of_the_hand_written_ones() {
    let f = Fixture::new();
    // (line under the second list entry, message, hint): the wording agents.rs had before.
    let cases = [
        (
            "temperature: -0.5",
            "temperature must be ≥ 0 (got -0.5)",
            "use e.g. `temperature: 0.6` (0 = greedy)",
        ),
        (
            "top_p: 1.5",
            "top_p must be in (0, 1] (got 1.5)",
            "1.0 disables nucleus filtering",
        ),
        (
            "top_k: 0",
            "top_k must be at least 1",
            "use `top_k: null` to disable top-k filtering",
        ),
        (
            "max_new_tokens: 0",
            "max_new_tokens must be at least 1",
            "(CoMLRL default 256)",
        ),
        (
            "learning_rate: 0.0",
            "the learning rate must be > 0 (got 0)",
            "e.g. `5e-6`",
        ),
    ];
    let mut entry = String::from("  - model: builtin:tiny\n");
    for (line, ..) in &cases {
        entry.push_str(&format!("    {line}\n"));
    }
    let text = scenario(&format!("agents:\n  - model: builtin:tiny\n{entry}"));
    let (msg, ds) = f.errs(&text, &[]);
    check_cases(&msg, &ds, &cases, "agents[1].", 6, 5);
    let (_, d) = f.one(&BASE.replace("count: 2", "count: 0"), &[]);
    check(
        &d,
        InvalidValue,
        "agents.count",
        4,
        3,
        &["count must be at least 1", "(1 = single-agent GRPO)"],
    );
}

#[test]
fn the_docs_table_lists_count_first_and_the_computed_default() {
    let keys = AgentPlan::keys();
    assert_eq!(keys[0].key, "count");
    assert_eq!(keys[1].key, "model");
    assert_eq!(keys[1].default, "required");
    let lr = keys.iter().find(|k| k.key == "learning_rate").unwrap();
    assert_eq!(lr.default, "`trainer.agent_learning_rate`");
    let fields = AgentPlan::plan_fields();
    assert!(fields.contains(&("top_k", "sampling.top_k")));
    assert!(!fields.iter().any(|(k, _)| *k == "count" || *k == "index"));
}

/// `agents.adapter`: defaults (PEFT's r and alpha, the seven projections, targets in the
/// decoder's order), and each check naming its key.
#[test]
fn adapter_defaults_and_checks() {
    let f = fixture();
    let s = f.ok(
        &BASE.replace("model: builtin:tiny", "model: builtin:tiny\n  adapter: {}"),
        &[],
    );
    let a = s.agents[0].adapter.clone().expect("an adapter");
    assert_eq!(
        (a.rank, a.alpha, a.dropout, a.rslora),
        (8, 8.0, Some(0.0), false)
    );
    let s = f.ok(
        &BASE.replace(
            "model: builtin:tiny",
            "model: builtin:tiny\n  adapter: {dropout: 0.1}",
        ),
        &[],
    );
    assert_eq!(s.agents[0].adapter.as_ref().unwrap().dropout, Some(0.1));
    assert_eq!(a.targets.len(), 7);
    assert_eq!(a.init, None);
    let s = f.ok(&shared(), &[]);
    let a = s.agents[1].adapter.clone().expect("an adapter");
    assert_eq!(a.targets, ["q_proj", "v_proj"]);
    assert!(f.ok(BASE, &[]).agents[0].adapter.is_none());
    for (setting, key, part) in [
        ("{rank: 0}", "agents.adapter.rank", "outside 1..=4096"),
        ("{rank: 5000}", "agents.adapter.rank", "outside"),
        ("{alpha: -1}", "agents.adapter.alpha", "positive"),
        ("{dropout: 1}", "agents.adapter.dropout", "outside [0, 1)"),
        (
            "{dropout: -0.1}",
            "agents.adapter.dropout",
            "outside [0, 1)",
        ),
        (
            "{targets: [lm_head]}",
            "agents.adapter.targets",
            "not a projection",
        ),
        (
            "{targets: [q_proj, q_proj]}",
            "agents.adapter.targets",
            "twice",
        ),
        ("{targets: []}", "agents.adapter.targets", "empty"),
        (
            "{init: nowhere}",
            "agents.adapter.init",
            "not a PEFT adapter directory",
        ),
    ] {
        let text = BASE.replace(
            "model: builtin:tiny",
            &format!("model: builtin:tiny\n  adapter: {setting}"),
        );
        let (msg, d) = f.one(&text, &[]);
        assert_eq!(d.key, key, "{setting}: {msg}");
        assert!(msg.contains(part), "{setting}: {msg}");
    }
    let root = f.write("marker.txt", "");
    std::fs::create_dir_all(root.parent().unwrap().join("peft")).unwrap();
    f.write("peft/adapter_config.json", "{}");
    let (msg, d) = f.one(
        &BASE.replace(
            "model: builtin:tiny",
            "model: builtin:tiny\n  adapter: {init: peft, rank: 4}",
        ),
        &[],
    );
    assert_eq!(d.key, "agents.adapter", "{msg}");
    assert!(msg.contains("come from the `init` directory"), "{msg}");
}

/// `agents.base_dtype`: f32 by default; bf16 or q8_0 with an adapter; refused, naming the key,
/// without one (full fine-tuning trains f32 weights).
#[test]
fn base_dtype_needs_an_adapter() {
    use comlrl_scenario::BaseDtype;
    let f = fixture();
    assert_eq!(f.ok(BASE, &[]).agents[0].base_dtype, BaseDtype::F32);
    let with = |extra: &str| {
        BASE.replace(
            "model: builtin:tiny",
            &format!("model: builtin:tiny\n{extra}"),
        )
    };
    let s = f.ok(&with("  adapter: {}\n  base_dtype: bf16"), &[]);
    assert_eq!(s.agents[0].base_dtype, BaseDtype::Bf16);
    let (msg, d) = f.one(&with("  base_dtype: bf16"), &[]);
    assert_eq!(d.key, "agents.base_dtype", "{msg}");
    assert!(msg.contains("needs an `adapter`"), "{msg}");
    let s = f.ok(&with("  adapter: {}\n  base_dtype: q8_0"), &[]);
    assert_eq!(s.agents[0].base_dtype, BaseDtype::Q8_0);
    let (msg, d) = f.one(&with("  base_dtype: q8_0"), &[]);
    assert_eq!(d.key, "agents.base_dtype", "{msg}");
    assert!(msg.contains("needs an `adapter`"), "{msg}");
}
