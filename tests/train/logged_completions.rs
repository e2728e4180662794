//! `logging.completions` and the TRL-named statistics end to end: the real binary trains the
//! tiny scenario; `completions.jsonl` holds the last N joint actions of each logged window, the
//! TensorBoard event files hold them as text (read by our reader and, where tensorboard is
//! installed, by Python's EventAccumulator), and the rows carry `frac_reward_zero_std`,
//! `clipped_ratio` and each term's spread.
use crate::common;
use comlrl::track::tensorboard::read_dir;
use common::python_with;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn train(out: &Path, extra: &[&str]) -> (bool, String) {
    let mut sets = vec![
        "agents.max_new_tokens=12",
        "trainer.num_train_epochs=1",
        "trainer.num_generations=3",
        "logging.steps=2",
        "logging.tensorboard=true",
    ];
    sets.extend_from_slice(extra);
    let o = common::on_scenario("run", &common::tiny_scenario())
        .sets(&sets)
        .set(format!("output_dir={}", out.display()))
        .flags(&["--quiet"])
        .output();
    (o.ok, o.stderr)
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// EventAccumulator's texts of `dir` as (tag, step, text), or `None` (skipped, with the
/// reason) without tensorboard.
fn python_texts(dir: &Path) -> Option<Vec<(String, u64, String)>> {
    let py = python_with(&["tensorboard"])?;
    let script = r#"import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util
ea = EventAccumulator(sys.argv[1], size_guidance={'tensors': 0}); ea.Reload()
out = []
for t in ea.Tags()['tensors']:
    assert ea.SummaryMetadata(t).plugin_data.plugin_name == 'text'
    for e in ea.Tensors(t):
        out.append([t, e.step, tensor_util.make_ndarray(e.tensor_proto).item().decode()])
print(json.dumps(out))
"#;
    let o = Command::new(&py)
        .args(["-c", script])
        .arg(dir)
        .output()
        .expect("run python");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(serde_json::from_slice(&o.stdout).unwrap())
}

#[test]
fn sampled_completions_are_logged_with_each_row_and_shown_in_tensorboard() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (ok, stderr) = train(&out, &["logging.completions=4"]);
    assert!(ok, "{stderr}");
    let rows = common::metrics(&out);
    let steps: Vec<u64> = rows.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [2, 4, 6, 8, 10]);
    let logged = lines(&out.join("completions.jsonl"));
    // Each window holds 2 steps × 3 joint actions: its last 4 are logged.
    assert_eq!(logged.len(), 4 * rows.len());
    let terms: Vec<String> = rows[0]
        .as_object()
        .unwrap()
        .keys()
        .filter_map(|k| k.strip_prefix("reward/"))
        .filter(|k| !k.ends_with("/std"))
        .map(str::to_string)
        .collect();
    assert!(!terms.is_empty());
    for (row, chunk) in rows.iter().zip(logged.chunks(4)) {
        let step = row["step"].as_u64().unwrap();
        // The window's last step's 3 joint actions, after one of the step before.
        let at: Vec<u64> = chunk.iter().map(|s| s["step"].as_u64().unwrap()).collect();
        assert_eq!(at, [step - 1, step, step, step]);
        for s in chunk {
            assert_eq!(s["turn"], 1);
            assert!(!s["prompt"].as_str().unwrap().is_empty());
            assert_eq!(s["completions"].as_array().unwrap().len(), 2);
            assert!(s["reward"].as_f64().is_some());
            assert_eq!(s["returns"].as_array().unwrap().len(), 2);
            assert_eq!(s["advantages"].as_array().unwrap().len(), 2);
            for t in &terms {
                assert!(s["terms"][t].as_f64().is_some(), "{s}");
            }
        }
        // Aligned joint actions: a step's 3 samples have the step's group of rewards, whose
        // mean the advantages of agent 0 are relative to.
        let f = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("no {k} in {row}"));
        let zero = f("frac_reward_zero_std");
        assert!(
            (0.0..=1.0).contains(&zero) && (zero * 2.0).fract() == 0.0,
            "{zero}"
        );
        let clipped = f("clipped_ratio");
        let per_agent = (f("agent_0/clipped_ratio") + f("agent_1/clipped_ratio")) / 2.0;
        assert!((clipped - per_agent).abs() < 1e-12);
        for t in &terms {
            assert!(f(&format!("reward/{t}/std")) >= 0.0);
        }
        let lengths =
            (f("agent_0/completion_length_mean") + f("agent_1/completion_length_mean")) / 2.0;
        assert!((f("completion_length_mean") - lengths).abs() < 1e-9);
    }
    // 12 new tokens at most: the tiny model runs out of room in some completions.
    assert!(rows
        .iter()
        .any(|r| r["clipped_ratio"].as_f64().unwrap() > 0.0));

    let tb = out.join("tb");
    let log = read_dir(&tb).expect("readable event files");
    let texts: Vec<(String, u64, String)> = log
        .texts
        .iter()
        .map(|t| (t.tag.clone(), t.step, t.text.clone()))
        .collect();
    assert_eq!(texts.len(), rows.len());
    for ((tag, step, text), (row, chunk)) in texts.iter().zip(rows.iter().zip(logged.chunks(4))) {
        assert_eq!(tag, "completions");
        assert_eq!(*step, row["step"].as_u64().unwrap());
        for s in chunk {
            for c in s["completions"].as_array().unwrap() {
                assert!(text.contains(c.as_str().unwrap()), "{c} not in {text}");
            }
        }
    }
    // The trackers get TRL's names as aliases.
    let tag = |name: &str| log.scalars.iter().any(|s| s.tag == name);
    for name in [
        "reward",
        "completions/clipped_ratio",
        "completions/mean_length",
        "frac_reward_zero_std",
    ] {
        assert!(tag(name), "no {name} in TensorBoard");
    }
    assert!(tag(&format!("rewards/{}/mean", terms[0])));
    assert!(tag(&format!("rewards/{}/std", terms[0])));
    if let Some(py) = python_texts(&tb) {
        assert_eq!(
            py, texts,
            "EventAccumulator reads the same texts as our reader"
        );
    }
}

#[test]
fn no_completions_file_unless_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (ok, stderr) = train(&out, &[]);
    assert!(ok, "{stderr}");
    assert!(!out.join("completions.jsonl").exists());
    let log = read_dir(&out.join("tb")).expect("readable event files");
    assert!(log.texts.is_empty());
    let o = common::on_scenario("check", &common::tiny_scenario())
        .sets(&["logging.completions=5000"])
        .output();
    assert!(!o.ok);
    assert!(o.stderr.contains("logging.completions"), "{}", o.stderr);
}
