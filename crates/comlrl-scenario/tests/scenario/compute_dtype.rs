//! `trainer.compute_dtype`: f32 by default, bf16 on request (in the file or with `--set`),
//! kept by the resolved YAML; any other dtype, and bf16 without gradient checkpointing, is an
//! error naming the line, the key and the fix.
use crate::common;

use comlrl_scenario::load_str;
use comlrl_scenario::Dtype;
use comlrl_scenario::ErrorKind::*;
use common::{check, Fixture, BASE};

#[test]
fn defaults_to_f32_and_reads_bf16() {
    let f = Fixture::new();
    assert_eq!(f.ok(BASE, &[]).trainer.compute_dtype, Dtype::F32);
    let s = f.ok(&format!("{BASE}  compute_dtype: bf16\n"), &[]);
    assert_eq!(s.trainer.compute_dtype, Dtype::Bf16);
    let set = f.ok(BASE, &["trainer.compute_dtype=bf16"]);
    assert_eq!(set.trainer.compute_dtype, Dtype::Bf16);
    let yaml = s.to_yaml();
    assert!(yaml.contains("compute_dtype: bf16"), "{yaml}");
    let again = load_str(&yaml, &f.origin(), &[]).expect("the resolved YAML reloads");
    assert_eq!(again.trainer.compute_dtype, Dtype::Bf16);
}

#[test]
fn other_dtypes_are_errors_with_a_fix() {
    let f = Fixture::new();
    for bad in ["f16", "auto"] {
        let (msg, d) = f.one(&format!("{BASE}  compute_dtype: {bad}\n"), &[]);
        check(
            &d,
            InvalidValue,
            "trainer.compute_dtype",
            10,
            3,
            &[
                &format!("compute_dtype {bad} is not supported"),
                "`compute_dtype: f32`",
                "`bf16`",
            ],
        );
        assert!(msg.contains("s.yaml:10:3"), "{msg}");
    }
    let (_, d) = f.one(&format!("{BASE}  compute_dtype: bfloat16\n"), &[]);
    check(
        &d,
        InvalidValue,
        "trainer.compute_dtype",
        10,
        3,
        &["did you mean `bf16`?"],
    );
}

#[test]
fn bf16_needs_gradient_checkpointing() {
    let f = Fixture::new();
    let (_, d) = f.one(
        &format!("{BASE}  compute_dtype: bf16\n  gradient_checkpointing: false\n"),
        &[],
    );
    check(
        &d,
        InvalidValue,
        "trainer.compute_dtype",
        10,
        3,
        &["recomputed loss", "`gradient_checkpointing: true`"],
    );
    f.ok(
        &format!("{BASE}  compute_dtype: f32\n  gradient_checkpointing: false\n"),
        &[],
    );
}
