//! TensorBoard tracking end to end: the real binary trains the tiny scenario with
//! `logging.tensorboard: true`; the event files under `<output_dir>/tb/` are read back (by our
//! reader, which checks every record's CRCs, and by Python's EventAccumulator where tensorboard
//! is installed) and must hold the same values as `metrics.jsonl`.
use crate::common;
use comlrl::track::tensorboard::read_dir;
use common::python_with;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn train(out: &Path) -> (bool, String) {
    let o = common::on_scenario("run", &common::tiny_scenario())
        .sets(&[
            "agents.max_new_tokens=16",
            "trainer.num_train_epochs=1",
            "logging.steps=2",
            "logging.tensorboard=true",
        ])
        .set(format!("output_dir={}", out.display()))
        .flags(&["--quiet"])
        .output();
    (o.ok, o.stderr)
}

fn metrics(out: &Path) -> Vec<serde_json::Map<String, Value>> {
    common::metrics(out)
        .into_iter()
        .map(|r| r.as_object().unwrap().clone())
        .collect()
}

/// The scalars metrics.jsonl implies: (tag, step) → value as f32, CoMLRL's and TRL's aliases
/// included.
fn expected(rows: &[serde_json::Map<String, Value>]) -> BTreeMap<(String, u64), f32> {
    let mut want = BTreeMap::new();
    for row in rows {
        let step = row["step"].as_u64().unwrap();
        for (k, v) in row {
            if let (false, Some(x)) = (k == "step", v.as_f64()) {
                want.insert((k.clone(), step), x as f32);
            }
        }
        let r = row["reward_mean"].as_f64().unwrap() as f32;
        want.insert(("turn_1/reward_mean".into(), step), r);
        want.insert(("turn_1/expected_return".into(), step), r);
        // TRL's names.
        want.insert(("reward".into(), step), r);
        for (ours, trl) in [
            ("completion_length_mean", "completions/mean_length"),
            ("clipped_ratio", "completions/clipped_ratio"),
            ("lr", "learning_rate"),
        ] {
            if let Some(x) = row[ours].as_f64() {
                want.insert((trl.into(), step), x as f32);
            }
        }
        for (k, v) in row {
            let Some(term) = k.strip_prefix("reward/") else {
                continue;
            };
            let trl = match term.strip_suffix("/std") {
                Some(t) => format!("rewards/{t}/std"),
                None => format!("rewards/{term}/mean"),
            };
            want.insert((trl, step), v.as_f64().unwrap() as f32);
        }
    }
    want
}

/// EventAccumulator's view of `dir` as (tag, step) → value, or `None` (skipped, with the
/// reason) without tensorboard.
fn python_scalars(dir: &Path) -> Option<BTreeMap<(String, u64), f32>> {
    let py = python_with(&["tensorboard"])?;
    let script = "import json,sys\n\
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n\
ea = EventAccumulator(sys.argv[1], size_guidance={'scalars': 0}); ea.Reload()\n\
print(json.dumps([[t, e.step, e.value] for t in ea.Tags()['scalars'] for e in ea.Scalars(t)]))\n";
    let o = Command::new(&py)
        .args(["-c", script])
        .arg(dir)
        .output()
        .expect("run python");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Vec<(String, u64, f64)> = serde_json::from_slice(&o.stdout).unwrap();
    Some(v.into_iter().map(|(t, s, x)| ((t, s), x as f32)).collect())
}

#[test]
fn tensorboard_scalars_match_metrics_jsonl() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (ok, stderr) = train(&out);
    assert!(ok, "{stderr}");
    assert!(!stderr.contains("warning: TensorBoard"), "{stderr}");
    let rows = metrics(&out);
    let steps: Vec<u64> = rows.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [2, 4, 6, 8, 10]);
    let want = expected(&rows);

    let tb = out.join("tb");
    let log = read_dir(&tb).expect("readable event files with valid CRCs");
    assert_eq!(log.file_versions, ["brain.Event:2"]);
    let mut got = BTreeMap::new();
    for s in &log.scalars {
        assert!(
            got.insert((s.tag.clone(), s.step), s.value).is_none(),
            "{} twice at {}",
            s.tag,
            s.step
        );
        assert!(s.wall_time > 1.0e9);
    }
    // The same scalars, equal to f32 precision (metrics.jsonl's text can parse back a unit in
    // the last place away from the f64 the trainer held).
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (k, w) in &want {
        let g = got[k];
        assert!(
            (g - w).abs() <= f32::EPSILON * w.abs().max(g.abs()),
            "{k:?}: {g} vs {w}"
        );
    }
    // Rows are written in step order.
    let order: Vec<u64> = log.scalars.iter().map(|s| s.step).collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]));

    if let Some(py) = python_scalars(&tb) {
        assert_eq!(
            py, got,
            "EventAccumulator reads the same scalars as our reader"
        );
    }
}

#[test]
fn an_unwritable_tensorboard_dir_warns_once_and_training_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    std::fs::create_dir_all(&out).unwrap();
    // A previous run's record (one that stopped before its first row) owns `tb`, which is a
    // file where the folder should go: the new run starts, its tracker cannot write.
    let record = serde_json::json!({
        "run_id": "0123456789abcdef",
        "created": comlrl::train::run::dir::CLEARED,
    });
    std::fs::write(out.join("run.json"), record.to_string()).unwrap();
    std::fs::write(out.join("tb"), "a file where the tb/ folder should go").unwrap();
    let (ok, stderr) = train(&out);
    assert!(ok, "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("TensorBoard"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].starts_with("warning: TensorBoard") && warnings[0].contains("training goes on")
    );
    assert_eq!(metrics(&out).len(), 5, "metrics.jsonl is complete");
}
