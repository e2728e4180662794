//! Running the `comlrl` binary on the tiny scenario: arguments, spawning, signals, and reading
//! back metrics and checkpoints (shared by the run-directory tests).
use super::cli::{comlrl, metrics, tiny_scenario, Comlrl};
use std::path::Path;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use super::cli::{metrics_without_timing, tiny_scenario as scenario};

/// `comlrl run <tiny> --quiet` into `out` (20 steps: 2 epochs of 10 prompts), with `extra`
/// `--set` overrides and then the flags in `flags`.
pub fn tiny(out: &Path, extra: &[&str], flags: &[&str]) -> Comlrl {
    comlrl(&["run", &tiny_scenario().display().to_string(), "--quiet"])
        .set(format!("output_dir={}", out.display()))
        .sets(&[
            "agents.max_new_tokens=16",
            "trainer.num_train_epochs=2",
            "trainer.num_generations=4",
            "logging.steps=1",
        ])
        .sets(extra)
        .flags(flags)
}

pub fn run(out: &Path, extra: &[&str], flags: &[&str]) -> (Option<i32>, String) {
    tiny(out, extra, flags).output().code_and_stderr()
}

pub fn spawn(out: &Path, extra: &[&str], flags: &[&str]) -> Child {
    tiny(out, extra, flags).spawn()
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
    metrics(out)
        .iter()
        .map(|r| r["step"].as_i64().unwrap())
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

/// The tiny scenario shrunk for tests: the built-in tiny model (random weights, byte
/// tokenizer; ~10× cheaper than the quick start's story model), 16 new tokens, 2 epochs, K = 4,
/// a metrics row every 3 steps, into `out`, then the `--set` overrides in `sets`.
pub fn small<S: AsRef<str>>(out: &Path, sets: &[S]) -> Comlrl {
    comlrl(&["run", &tiny_scenario().display().to_string(), "--quiet"])
        .set(format!("output_dir={}", out.display()))
        .sets(&[
            "agents.model=builtin:tiny",
            "agents.max_new_tokens=16",
            "trainer.num_train_epochs=2",
            "trainer.num_generations=4",
            "logging.steps=3",
        ])
        .sets(sets)
}

/// The scenario [`small`] runs, loaded in-process (for driving the trainer directly).
pub fn load_small<S: AsRef<str>>(out: &Path, sets: &[S]) -> comlrl_scenario::Scenario {
    comlrl_scenario::load(&tiny_scenario(), &small(out, sets).overrides()).unwrap()
}

/// Resumes the interrupted [`small`] run in `b` in-process to its end (20 steps) and asserts it
/// matches the uninterrupted run in `a`: the same metrics (timing aside) and final weights.
pub fn resume_matches<S: AsRef<str>>(a: &Path, b: &Path, sets: &[S]) {
    let done = comlrl::train::Trainer::new(load_small(b, sets))
        .unwrap()
        .run(true, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 20);
    assert_eq!(metrics_without_timing(a), metrics_without_timing(b));
    for i in 0..2 {
        let file = format!("models/agent_{i}/model.safetensors");
        let (wa, wb) = (std::fs::read(a.join(&file)), std::fs::read(b.join(&file)));
        assert!(
            wa.unwrap() == wb.unwrap(),
            "agent {i}: resumed weights differ"
        );
    }
}

/// An observer that raises the trainer's interrupt flag (`.1`, from `Trainer::interrupt_flag`)
/// when step `.0` finishes: an in-process run stopped there, as by Ctrl-C.
pub struct StopAt(pub usize, pub std::sync::Arc<std::sync::atomic::AtomicBool>);

impl comlrl::train::Observer for StopAt {
    fn step(&mut self, step: usize, _: f64, _: f64) {
        if step == self.0 {
            self.1.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}
