//! Running the `comlrl` binary on the tiny scenario: arguments, spawning, signals, and reading
//! back metrics and checkpoints (shared by the run-directory tests).
use super::bin;
use comlrl::metrics::read_jsonl;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn scenario() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/story_len_ratio_tiny.yaml")
}

/// `comlrl run <tiny> --quiet` into `out` (20 steps: 2 epochs of 10 prompts), with `extra`
/// `--set` overrides and then the flags in `flags`.
pub fn args(out: &Path, extra: &[&str], flags: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "run".into(),
        scenario().display().to_string(),
        "--quiet".into(),
    ];
    let sets = [
        format!("output_dir={}", out.display()),
        "agents.max_new_tokens=16".into(),
        "trainer.num_train_epochs=2".into(),
        "trainer.num_generations=4".into(),
        "logging.steps=1".into(),
    ];
    for s in sets.iter().map(String::as_str).chain(extra.iter().copied()) {
        a.extend(["--set".to_string(), s.to_string()]);
    }
    a.extend(flags.iter().map(|s| s.to_string()));
    a
}

pub fn run(out: &Path, extra: &[&str], flags: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(bin())
        .args(args(out, extra, flags))
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

pub fn spawn(out: &Path, extra: &[&str], flags: &[&str]) -> Child {
    Command::new(bin())
        .args(args(out, extra, flags))
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

pub fn rows(out: &Path) -> usize {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

pub fn wait_rows(out: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(180);
    while rows(out) < n {
        assert!(Instant::now() < deadline, "training did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn signal(child: &Child, sig: i32) {
    // SAFETY: sends a signal to our own child process, which has not been reaped yet.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0);
}

pub fn finish(child: Child) -> (Option<i32>, String) {
    let Output { status, stderr, .. } = child.wait_with_output().unwrap();
    (status.code(), String::from_utf8_lossy(&stderr).into_owned())
}

pub fn steps(out: &Path) -> Vec<i64> {
    read_jsonl(&out.join("metrics.jsonl"))
        .unwrap()
        .iter()
        .map(|r| r["step"].as_i64().unwrap())
        .collect()
}

/// Metrics rows without the wall-clock fields.
pub fn metrics_without_timing(dir: &Path) -> Vec<serde_json::Value> {
    read_jsonl(&dir.join("metrics.jsonl"))
        .unwrap()
        .into_iter()
        .map(|mut r| {
            r.as_object_mut().unwrap().retain(|k, _| {
                !(k == "step_seconds"
                    || k == "tokens_per_s"
                    || k == "train_gflops_per_s"
                    || k.starts_with("time/"))
            });
            r
        })
        .collect()
}

pub fn checkpoint_names(out: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(out.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    v.sort();
    v
}

pub fn latest(out: &Path) -> String {
    std::fs::read_to_string(out.join("checkpoints/latest"))
        .unwrap()
        .trim()
        .to_string()
}
