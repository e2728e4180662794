//! Chat templates against transformers: every case of tests/fixtures/chat_templates/expected.json
//! (written by scripts/fixtures/chat_templates.py with transformers 5.24.0's
//! `apply_chat_template(..., add_generation_prompt=True)`) renders byte for byte the same; and
//! the `agents.chat_template` / `agents.system_prompt` keys of a scenario.
use crate::common;

use comlrl_scenario::{ChatTemplate, ChatTemplateSpec, ErrorKind};
use common::{Fixture, BASE};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

#[test]
fn renders_like_transformers() {
    let text = std::fs::read_to_string(fixtures().join("chat_templates/expected.json"))
        .expect("expected.json");
    let expected: serde_json::Value = serde_json::from_str(&text).expect("json");
    let cases = expected["cases"].as_array().expect("cases");
    assert!(cases.len() >= 40);
    let mut by_template = std::collections::BTreeMap::new();
    for c in cases {
        let dir = fixtures().join(c["model_dir"].as_str().expect("dir"));
        let t = ChatTemplate::from_model_dir(&dir)
            .unwrap_or_else(|e| panic!("{e}"))
            .expect("the fixture has a chat template");
        let system = c["system"].as_str();
        let prompt = c["prompt"].as_str().expect("prompt");
        let got = t.render(system, prompt).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            got,
            c["rendered"].as_str().expect("rendered"),
            "{} with system {system:?}, prompt {prompt:?}",
            c["template"]
        );
        *by_template.entry(c["template"].to_string()).or_insert(0) += 1;
    }
    assert_eq!(by_template.len(), 2, "{by_template:?}");
}

#[test]
fn a_template_string_with_special_tokens() {
    // As a GGUF loader hands it over: the template text and the special tokens.
    let t = ChatTemplate::new("gguf", "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")
        .expect("compiles")
        .with_special_tokens([("bos_token", "<s>")]);
    assert_eq!(
        t.render(Some("sys "), " hi").expect("renders"),
        "<s><system>sys<user>hi<assistant>"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(ChatTemplate::from_model_dir(dir.path())
        .expect("ok")
        .is_none());
    std::fs::write(
        dir.path().join("chat_template.jinja"),
        "[{{ messages[0].content }}]",
    )
    .expect("write");
    let t = ChatTemplate::from_model_dir(dir.path())
        .expect("ok")
        .expect("template");
    assert_eq!(t.render(None, "x").expect("renders"), "[x]");
}

fn with_agent_lines(lines: &str) -> String {
    BASE.replace(
        "  model: builtin:tiny\n",
        &format!("  model: builtin:tiny\n{lines}"),
    )
}

#[test]
fn scenario_chat_template_keys() {
    let f = Fixture::new();
    // Default: none, as the seed example.
    let s = f.ok(BASE, &[]);
    assert_eq!(s.agents[0].chat_template, ChatTemplateSpec::None);
    f.write(
        "chat.jinja",
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:",
    );
    let s = f.ok(
        &with_agent_lines("  chat_template: chat.jinja\n  system_prompt: Be brief.\n"),
        &[],
    );
    let a = &s.agents[1];
    let ChatTemplateSpec::File { path, source } = &a.chat_template else {
        panic!("{:?}", a.chat_template)
    };
    assert!(path.is_absolute() && path.ends_with("chat.jinja"));
    let t = ChatTemplate::new(path.display().to_string(), source.clone()).expect("compiles");
    assert_eq!(
        t.render(a.system_prompt.as_deref(), "a").expect("renders"),
        "system: Be brief.\nuser: a\nassistant:"
    );
    // The resolved YAML keeps both keys and reloads to the same agents.
    let yaml = s.to_yaml();
    assert!(
        yaml.contains("chat_template: ") && yaml.contains("system_prompt: Be brief."),
        "{yaml}"
    );
    let again =
        comlrl_scenario::load_str(&yaml, &f.origin(), &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.agents, s.agents);
    let s = f.ok(BASE, &[]);
    assert!(
        s.to_yaml().contains("chat_template: none"),
        "{}",
        s.to_yaml()
    );
}

#[test]
fn scenario_chat_template_errors() {
    let f = Fixture::new();
    let (msg, d) = f.one(&with_agent_lines("  chat_template: auto\n"), &[]);
    assert_eq!(
        (d.kind, d.key.as_str()),
        (ErrorKind::InvalidValue, "agents.chat_template")
    );
    assert!(msg.contains("`builtin:tiny` has no chat template"), "{msg}");
    let (msg, d) = f.one(&with_agent_lines("  chat_template: missing.jinja\n"), &[]);
    assert_eq!(d.kind, ErrorKind::MissingFile);
    assert!(msg.contains("missing.jinja"), "{msg}");
    f.write("broken.jinja", "{% if messages %}never closed");
    let (msg, d) = f.one(&with_agent_lines("  chat_template: broken.jinja\n"), &[]);
    assert_eq!(d.kind, ErrorKind::Template);
    assert!(
        msg.contains("broken.jinja") && msg.contains("does not compile"),
        "{msg}"
    );
    f.write(
        "raises.jinja",
        "{{ raise_exception('system messages are not supported') }}",
    );
    let (msg, _) = f.one(&with_agent_lines("  chat_template: raises.jinja\n"), &[]);
    assert!(
        msg.contains("raises.jinja failed to render the prompt \"a\"")
            && msg.contains("system messages are not supported"),
        "{msg}"
    );
    let s = f.ok(&with_agent_lines("  system_prompt: hi\n"), &[]);
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("agents.system_prompt") && w.contains("no effect")),
        "{:?}",
        s.warnings
    );
}
