//! The weighted stack and processors end to end, with exact expected values.
use crate::common;

use comlrl_reward::spec::{ExpScaleSpec, OnError, ProcessorSpec, RewardSpec};
use comlrl_reward::{JointSample, RewardError, RewardStack};
use serde_json::json;
use std::path::PathBuf;

fn rhai_term(path: PathBuf, weight: f64, params: serde_json::Value) -> RewardSpec {
    RewardSpec {
        rhai: Some(path),
        plugin: None,
        name: None,
        weight,
        params,
        ..RewardSpec::default()
    }
}

fn samples() -> Vec<JointSample> {
    vec![
        JointSample::new("p", vec!["ab".into(), "abcde".into()]), // ratio 2.5 → 1
        JointSample::new("p", vec!["ab".into(), "ab".into()]),    // ratio 1 → e^-1
        JointSample::new("p", vec![String::new(), "x".into()]),   // len1 = 0 → 0
    ]
}

#[test]
fn two_weighted_terms_then_processors() {
    let count = common::script(
        "count_chars",
        "fn reward(c, ctx) { c[1].len() * ctx.params.k }\n",
    );
    let specs = vec![
        rhai_term(common::len_ratio_script(), 2.0, json!({})),
        rhai_term(count, 0.5, json!({"k": 2})),
    ];
    let processors = [
        ProcessorSpec::Shift(1.0),
        ProcessorSpec::Scale(10.0),
        ProcessorSpec::Clamp {
            min: 0.0,
            max: 50.0,
        },
    ];
    let stack = RewardStack::build(&specs, &processors, std::path::Path::new("/")).expect("build");
    assert_eq!(stack.component_names(), ["len_ratio", "count_chars"]);
    let scored = stack.score(&samples()).expect("score");
    // sample 0: 2*1 + 0.5*(5*2) = 7 → +1 = 8 → ×10 = 80 → clamp 50
    assert_eq!(scored[0].components, vec![1.0, 10.0]);
    assert_eq!(scored[0].reward, 50.0);
    // sample 1: 2*e^-1 + 0.5*4 → (+1)×10
    let e1 = (-1f64).exp() as f32;
    assert_eq!(scored[1].components, vec![e1, 4.0]);
    let want = ((2.0 * f64::from(e1) + 2.0 + 1.0) * 10.0) as f32;
    assert_eq!(scored[1].reward, want);
    // sample 2: 0 + 0.5*2 = 1 → 2 → 20
    assert_eq!(scored[2].components, vec![0.0, 2.0]);
    assert_eq!(scored[2].reward, 20.0);
}

#[test]
fn seed_scenario_scale_100_with_native_and_script() {
    // Plugins are isolated by default; the host is this crate's `comlrl-plugin-host`.
    std::env::set_var(
        comlrl_reward::isolate::HOST_ENV,
        env!("CARGO_BIN_EXE_comlrl-plugin-host"),
    );
    let plugin = common::plugin("comlrl_len_ratio");
    let specs = vec![
        RewardSpec {
            rhai: None,
            plugin: Some(plugin.with_file_name("comlrl_len_ratio")),
            name: Some("native".into()),
            weight: 1.0,
            params: json!({}),
            ..RewardSpec::default()
        },
        RewardSpec {
            name: Some("script".into()),
            ..rhai_term(common::len_ratio_script(), 0.0, json!({}))
        },
    ];
    let stack = RewardStack::build(
        &specs,
        &[ProcessorSpec::Scale(100.0)],
        std::path::Path::new("/"),
    )
    .expect("build");
    let scored = stack.score(&samples()).expect("score");
    let rewards: Vec<f32> = scored.iter().map(|s| s.reward).collect();
    assert_eq!(
        rewards,
        vec![100.0, ((-1f64).exp() as f32 as f64 * 100.0) as f32, 0.0]
    );
    for s in &scored {
        assert_eq!(s.components[0], s.components[1], "native and script agree");
    }
}

#[test]
fn sigmoid_and_exp_scale_in_a_chain() {
    let specs = vec![rhai_term(
        common::script("const_one", "fn reward(c, ctx) { 1 }\n"),
        1.0,
        json!({}),
    )];
    let chain = [
        ProcessorSpec::ExpScale(ExpScaleSpec { factor: 2.0 }),
        ProcessorSpec::Shift(-1.0),
        ProcessorSpec::Sigmoid,
    ];
    let stack = RewardStack::build(&specs, &chain, std::path::Path::new("/")).expect("build");
    let got = stack.score(&samples()[..1]).expect("score")[0].reward;
    let x = 2f64.exp() - 1.0 - 1.0;
    assert_eq!(got, (1.0 / (1.0 + (-x).exp())) as f32);
    let neg = vec![rhai_term(
        common::script("const_neg", "fn reward(c, ctx) { -1.5 }\n"),
        1.0,
        json!({}),
    )];
    let stack = RewardStack::build(
        &neg,
        &[ProcessorSpec::ExpScale(ExpScaleSpec::default())],
        std::path::Path::new("/"),
    )
    .expect("build");
    assert_eq!(
        stack.score(&samples()[..1]).expect("score")[0].reward,
        (1.0 - 1.5f64.exp()) as f32
    );
}

#[test]
fn relative_paths_use_base_dir_and_names_must_be_unique() {
    let path = common::script("rel_term", "fn reward(c, ctx) { 0.25 }\n");
    let dir = path.parent().expect("dir").to_path_buf();
    let rel = rhai_term(PathBuf::from("rel_term.rhai"), 1.0, json!({}));
    let stack = RewardStack::build(std::slice::from_ref(&rel), &[], &dir).expect("relative");
    assert_eq!(stack.score(&samples()[..1]).expect("score")[0].reward, 0.25);
    let err = RewardStack::build(&[rel.clone(), rel], &[], &dir).expect_err("duplicate");
    assert!(
        matches!(err, RewardError::Config(_)) && err.to_string().contains("`rel_term`"),
        "{err}"
    );
}

#[test]
fn configuration_errors() {
    let base = std::path::Path::new("/");
    let err = RewardStack::build(&[], &[], base).expect_err("empty");
    assert!(err.to_string().contains("no reward terms"), "{err}");
    let both = RewardSpec {
        plugin: Some("x".into()),
        ..rhai_term("y.rhai".into(), 1.0, json!({}))
    };
    let err = RewardStack::build(&[both], &[], base).expect_err("both");
    assert!(
        err.to_string()
            .contains("exactly one of `rhai:` or `plugin:`"),
        "{err}"
    );
    let ok = rhai_term(common::len_ratio_script(), 1.0, json!({}));
    let err = RewardStack::build(
        std::slice::from_ref(&ok),
        &[ProcessorSpec::Clamp { min: 1.0, max: 0.0 }],
        base,
    )
    .expect_err("clamp");
    assert!(err.to_string().contains("min <= max"), "{err}");
    let err = RewardStack::build(
        &[RewardSpec {
            weight: f64::NAN,
            ..ok
        }],
        &[],
        base,
    )
    .expect_err("nan weight");
    assert!(err.to_string().contains("weight NaN"), "{err}");
}

#[test]
fn yaml_shape_of_processors() {
    let yaml = r#"[{"scale": 100.0}, {"shift": -1}, {"clamp": {"min": 0, "max": 1}}, "sigmoid", {"exp_scale": {"factor": 0.5}}, {"exp_scale": {}}, {"clamp": {}}]"#;
    let chain: Vec<ProcessorSpec> = serde_json::from_str(yaml).expect("parse");
    assert_eq!(chain[0], ProcessorSpec::Scale(100.0));
    assert_eq!(chain[3], ProcessorSpec::Sigmoid);
    assert_eq!(
        chain[4],
        ProcessorSpec::ExpScale(ExpScaleSpec { factor: 0.5 })
    );
    assert_eq!(
        chain[5],
        ProcessorSpec::ExpScale(ExpScaleSpec { factor: 1.0 })
    );
    assert_eq!(
        chain[6],
        ProcessorSpec::Clamp {
            min: -10.0,
            max: 10.0
        }
    );
}

#[test]
fn time_budget_from_the_term_and_on_error_skip_step() {
    let stall = common::script(
        "stack_stall",
        "fn reward(c, ctx) {\n    let a = [];\n    a.pad(1000, 0);\n    loop { a.map(|x| { let n = 0; while n < 100_000 { n += 1; } x }); }\n}\n",
    );
    let spec = RewardSpec {
        time_budget_ms: Some(150),
        ..rhai_term(stall, 1.0, json!({}))
    };
    let base = std::path::Path::new("/");
    let stack = RewardStack::build(std::slice::from_ref(&spec), &[], base).expect("builds");
    let err = stack.score(&samples()).expect_err("stalls");
    assert!(
        matches!(err, RewardError::Script { .. }),
        "`fail` keeps the error as it is: {err:?}"
    );
    assert!(
        err.to_string()
            .contains("exceeded its time budget (150 ms)"),
        "{err}"
    );
    let skip = RewardSpec {
        on_error: OnError::SkipStep,
        name: Some("stall".into()),
        ..spec
    };
    let stack = RewardStack::build(&[skip], &[], base).expect("builds");
    match stack.score(&samples()).expect_err("stalls") {
        RewardError::SkipStep { term, source } => {
            assert_eq!(term, "stall");
            assert!(source.to_string().contains("(150 ms)"), "{source}");
        }
        other => panic!("expected SkipStep, got {other:?}"),
    }
    let zero = RewardSpec {
        time_budget_ms: Some(0),
        ..rhai_term(common::len_ratio_script(), 1.0, json!({}))
    };
    let err = RewardStack::build(&[zero], &[], base).expect_err("zero budget");
    assert!(err.to_string().contains("time_budget_ms: 0"), "{err}");
}

#[test]
fn new_term_keys_parse_and_default() {
    let spec: RewardSpec = serde_json::from_str(
        r#"{"plugin": "x", "isolate": false, "on_error": "skip_step", "time_budget_ms": 250}"#,
    )
    .expect("parse");
    assert_eq!(spec.isolate, Some(false));
    assert_eq!(spec.on_error, OnError::SkipStep);
    assert_eq!(spec.time_budget_ms, Some(250));
    let spec: RewardSpec = serde_json::from_str(r#"{"rhai": "x.rhai"}"#).expect("parse");
    assert_eq!(
        spec,
        RewardSpec {
            rhai: Some("x.rhai".into()),
            ..RewardSpec::default()
        }
    );
    assert_eq!(
        serde_json::to_string(&spec).expect("emit"),
        r#"{"rhai":"x.rhai","weight":1.0,"params":{}}"#
    );
    let err = serde_json::from_str::<RewardSpec>(r#"{"rhai": "x", "on_error": "ignore"}"#)
        .expect_err("bad on_error");
    assert!(err.to_string().contains("skip_step"), "{err}");
}
