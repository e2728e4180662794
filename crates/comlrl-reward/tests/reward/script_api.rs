//! What a reward script sees and can do: `ctx` fields, N agents, the batched entry point,
//! `print`/`debug` routed to the log, deterministic parallel scoring.
use crate::common;

use comlrl_reward::script::Entry;
use comlrl_reward::{JointSample, RewardFn, RhaiReward};
use serde_json::json;
use std::sync::Mutex;

static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;
impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if let Ok(mut v) = LOGGED.lock() {
            v.push(format!("{} {}", record.level(), record.args()));
        }
    }
    fn flush(&self) {}
}
static CAPTURE: Capture = Capture;

fn sample_with_fields() -> JointSample {
    let mut s = JointSample::new("Say hi", vec!["hé".into(), "日本".into(), "🙂🙂🙂".into()]);
    s.fields.insert("answer".into(), json!(42));
    s.fields.insert("tags".into(), json!(["a", "b"]));
    s
}

#[test]
fn ctx_carries_prompt_params_fields_and_agent_count() {
    let src = r#"
fn reward(completions, ctx) {
    let total = 0;
    for c in completions { total += c.len(); }
    if ctx.prompt != "Say hi" { throw "prompt"; }
    if ctx.fields.tags[1] != "b" { throw "fields"; }
    total * 1000 + ctx.agent_count * 100 + ctx.fields.answer + ctx.params.bonus
}
"#;
    let path = common::script("ctx_fields", src);
    let reward = RhaiReward::load(&path, &json!({"bonus": 0.5})).expect("load");
    assert_eq!(reward.entry(), Entry::PerSample);
    assert_eq!(reward.name(), "ctx_fields");
    // chars: 2 + 2 + 3 = 7; 3 agents; answer 42; bonus 0.5
    assert_eq!(
        reward.score(&[sample_with_fields()]).expect("score"),
        vec![7342.5]
    );
}

#[test]
fn batched_entry_sees_every_sample() {
    let src = r#"
fn reward_batch(samples, ctx) {
    let out = [];
    for s in samples {
        out.push(s.completions[s.agent_count - 1].len() + ctx.batch_size * 10 + ctx.params.k);
    }
    out
}
"#;
    let path = common::script("batched", src);
    let reward = RhaiReward::load(&path, &json!({"k": 1})).expect("load");
    assert_eq!(reward.entry(), Entry::Batch);
    let batch = vec![
        sample_with_fields(),
        JointSample::new("p", vec!["abcd".into()]),
    ];
    assert_eq!(reward.score(&batch).expect("score"), vec![24.0, 25.0]);
    assert_eq!(reward.score(&[]).expect("empty"), Vec::<f32>::new());
}

#[test]
fn print_and_debug_go_to_the_log() {
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(log::LevelFilter::Trace);
    let path = common::script(
        "chatty",
        "fn reward(c, ctx) {\n    print(`hello ${c.len()}`);\n    debug(\"dbg\");\n    1\n}\n",
    );
    let reward = RhaiReward::load(&path, &json!({})).expect("load");
    reward
        .score(&[JointSample::new("p", vec!["a".into(), "b".into()])])
        .expect("score");
    let logged = LOGGED.lock().expect("lock").clone();
    let name = path.display().to_string();
    assert!(
        logged
            .iter()
            .any(|l| l.starts_with("INFO") && l.contains(&name) && l.ends_with("hello 2")),
        "{logged:?}"
    );
    assert!(
        logged.iter().any(|l| l.starts_with("DEBUG")
            && l.contains(&format!("{name}:3:"))
            && l.contains("dbg")),
        "{logged:?}"
    );
}

#[test]
fn parallel_scoring_is_deterministic_and_ordered() {
    let path = common::script(
        "ordered",
        "fn reward(c, ctx) { c[0].len() * 3 + c[1].len() }\n",
    );
    let reward = RhaiReward::load(&path, &json!({})).expect("load");
    let batch: Vec<JointSample> = (0..2000)
        .map(|i| JointSample::new("p", vec![common::text(i % 97, i), common::text(i % 13, 0)]))
        .collect();
    let want: Vec<f32> = (0..2000).map(|i| ((i % 97) * 3 + i % 13) as f32).collect();
    for _ in 0..3 {
        assert_eq!(reward.score(&batch).expect("score"), want);
    }
}

#[test]
fn first_failing_sample_is_reported() {
    let path = common::script(
        "fails_late",
        "fn reward(c, ctx) {\n    if c[0].len() >= 5 { throw \"long\"; }\n    1\n}\n",
    );
    let reward = RhaiReward::load(&path, &json!({})).expect("load");
    let batch: Vec<JointSample> = (0..500)
        .map(|i| JointSample::new("p", vec!["x".repeat(i % 7)]))
        .collect();
    let err = reward.score(&batch).expect_err("fails");
    assert!(err.to_string().contains("joint sample #5"), "{err}");
}
