//! A whole run with `trainer.compute_dtype: bf16` on the tiny scenario: it trains (finite
//! losses and gradient norms, rewards logged), the setting reaches the update (the first
//! update's loss differs from the f32 run's on the same samples, by a bf16-sized amount), and
//! the resolved scenario in the checkpoint records it; on a CPU where bf16 products are slower
//! than f32 the run says so. A run resumes with another
//! `compute_dtype`, like any other changed trainer setting (with the scenario-changed warning),
//! and `comlrl bench train` takes the setting as an override.
use crate::common;
use common::cli::{comlrl, metrics, tiny_scenario};
use common::tiny_run::{latest, run};

#[test]
fn tiny_scenario_trains_with_a_bf16_update() {
    let tmp = tempfile::tempdir().unwrap();
    let (f32_dir, bf16_dir) = (tmp.path().join("f32"), tmp.path().join("bf16"));
    let (c, err) = run(&f32_dir, &[], &[]);
    assert_eq!(c, Some(0), "{err}");
    let note = "trainer.compute_dtype is bf16, but this CPU";
    assert!(!err.contains(note), "{err}");
    let (c, err) = run(&bf16_dir, &["trainer.compute_dtype=bf16"], &[]);
    assert_eq!(c, Some(0), "{err}");
    // The run says so where bf16 products are slower than f32 on this CPU, and only there.
    let slow = comlrl::model::kernels::bf16_gemm::slower_than_f32();
    assert_eq!(
        err.contains(note),
        slow,
        "slower than f32 here: {slow}; {err}"
    );

    let rows = metrics(&bf16_dir);
    assert_eq!(rows.len(), 20, "one row per step (logging.steps 1)");
    let mut updates = 0;
    for r in &rows {
        let reward = r["reward_mean"].as_f64().expect("reward_mean logged");
        assert!(reward.is_finite(), "{r}");
        for a in ["agent_0", "agent_1"] {
            if let Some(loss) = r[format!("{a}/loss")].as_f64() {
                let norm = r[format!("{a}/grad_norm")].as_f64().unwrap();
                assert!(loss.is_finite() && norm.is_finite() && norm > 0.0, "{r}");
                updates += 1;
            }
        }
    }
    assert!(
        updates >= 10 * 2,
        "an update every 2 steps per agent: {updates}"
    );

    // Rows 1-2 sample from the initial weights with the same RNG in both runs, so the first
    // update sees the same samples: its loss differs only by the products' dtype.
    let f32_rows = metrics(&f32_dir);
    assert_eq!(f32_rows[1]["reward_mean"], rows[1]["reward_mean"]);
    for a in ["agent_0", "agent_1"] {
        let key = format!("{a}/loss");
        let (l32, l16) = (
            f32_rows[1][&key].as_f64().unwrap(),
            rows[1][&key].as_f64().unwrap(),
        );
        let rel = ((l16 - l32) / l32).abs();
        assert!(l16 != l32, "{a}: bf16 update loss equals f32's ({l32})");
        assert!(rel < 1e-2, "{a}: first update loss {l16} vs f32 {l32}");
    }
    let saved = bf16_dir
        .join("checkpoints")
        .join(latest(&bf16_dir))
        .join("scenario.yaml");
    let yaml = std::fs::read_to_string(saved).unwrap();
    assert!(yaml.contains("compute_dtype: bf16"), "{yaml}");
}

#[test]
fn resume_with_another_compute_dtype_continues() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (c, err) = run(
        &out,
        &["trainer.num_train_epochs=1", "checkpoint_every=5"],
        &[],
    );
    assert_eq!(c, Some(0), "{err}");
    let (c, err) = run(
        &out,
        &["trainer.compute_dtype=bf16", "checkpoint_every=5"],
        &["--resume"],
    );
    assert_eq!(c, Some(0), "{err}");
    assert!(err.contains("the scenario differs"), "{err}");
    assert_eq!(metrics(&out).len(), 20, "{err}");
    let saved = out
        .join("checkpoints")
        .join(latest(&out))
        .join("scenario.yaml");
    let yaml = std::fs::read_to_string(saved).unwrap();
    assert!(yaml.contains("compute_dtype: bf16"), "{yaml}");
}

#[test]
fn bench_train_takes_the_setting() {
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("train.json");
    let (ok, _, err) = comlrl(&["bench", "train", tiny_scenario().to_str().unwrap()])
        .set("trainer.compute_dtype=bf16")
        .set("agents.max_new_tokens=16")
        .flags(&["--steps", "4", "--out", report.to_str().unwrap()])
        .output()
        .parts();
    assert!(ok, "{err}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(r["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .any(|o| o == "trainer.compute_dtype=bf16"));
    let update = r["train"]["phases_per_step"]["update"].as_f64().unwrap();
    assert!(update.is_finite() && update > 0.0, "{r}");
}
