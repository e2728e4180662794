//! Helpers shared by the integration tests: fixture paths, tensor conversions, and running the
//! binary ([`cli`]).
#![allow(dead_code)]
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::PathBuf;

pub mod cli;
pub mod grad;
pub mod tiny_run;

/// A Python interpreter that imports `modules` (`$COMLRL_PYTHON`, else `python3`), or `None`
/// after skipping with the reason there is none ([`comlrl_testutil::skip`]: a failure under
/// `COMLRL_REQUIRE_ALL=1`); the caller returns.
pub fn python_with(modules: &[&str]) -> Option<String> {
    let py = std::env::var("COMLRL_PYTHON").unwrap_or_else(|_| "python3".into());
    let import = format!("import {}", modules.join(", "));
    let why = match std::process::Command::new(&py)
        .args(["-c", &import])
        .output()
    {
        Ok(o) if o.status.success() => return Some(py),
        Ok(o) => format!(
            "{py} cannot `{import}`: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
                .trim()
        ),
        Err(e) => format!("{py} not runnable: {e}"),
    };
    comlrl_testutil::skip(&why);
    None
}

#[allow(unused_imports)]
pub use cli::{comlrl, metrics, metrics_without_timing, on_scenario, run_comlrl, tiny_scenario};

/// `tests/fixtures` (the project's own reference data; see its README).
pub fn fixtures() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    assert!(p.is_dir(), "fixtures not found at {}", p.display());
    p
}

pub fn load_st(path: &std::path::Path) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(path, &Device::Cpu).expect("reference safetensors")
}

pub fn rows_i64(t: &Tensor) -> Vec<Vec<i64>> {
    t.to_vec2::<i64>().expect("i64 matrix")
}

/// The completions of a reference set (`completion_ids` where `completion_mask` is 1).
pub fn masked_completions(r: &HashMap<String, Tensor>) -> Vec<Vec<u32>> {
    rows_i64(&r["completion_ids"])
        .iter()
        .zip(rows_i64(&r["completion_mask"]))
        .map(|(ids, m)| {
            ids.iter()
                .zip(m)
                .filter(|(_, m)| *m == 1)
                .map(|(&i, _)| i as u32)
                .collect()
        })
        .collect()
}

pub fn f32s(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

pub fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read json")).expect("parse json")
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// The files of a fixture model directory (config, weights, tokenizer, generation config).
pub const MODEL_FILES: [&str; 5] = [
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
];

/// Copies the [`MODEL_FILES`] of model directory `from` into the existing directory `to`.
pub fn copy_model(from: &std::path::Path, to: &std::path::Path) {
    for f in MODEL_FILES {
        std::fs::copy(from.join(f), to.join(f))
            .unwrap_or_else(|e| panic!("copy {}: {e}", from.join(f).display()));
    }
}

/// Path of the built `comlrl` binary.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_comlrl"))
}

/// A tensor's elements as f64, whatever its dtype, flattened.
pub fn as_f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(candle_core::DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// Asserts `a` equals the reference `b` within 1e-5 relative (absolute where |b| < 1): the
/// parity tests' tolerance against the Python originals' own numbers.
pub fn close(what: &str, a: f64, b: f64) {
    assert!(
        (a - b).abs() <= 1e-5 * b.abs().max(1.0),
        "{what}: {a} vs {b}"
    );
}

/// [`close`] for each element, the lengths equal.
pub fn close_all(what: &str, a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        close(&format!("{what}[{i}]"), *x, *y);
    }
}
