//! The run directory on the real binary: one run at a time, no silent reuse (`--resume` /
//! `--overwrite`), SIGTERM/SIGHUP checkpointing, verified checkpoints (damage is an error, never a
//! panic), a CSV with every column, joint-action limits, and kill -9 at random points.
mod common;
use comlrl::train::metrics::read_jsonl;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn scenario() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/story_len_ratio_tiny.yaml")
}

/// `comlrl run <tiny> --quiet` into `out` (20 steps: 2 epochs of 10 prompts), with `extra`
/// `--set` overrides and then the flags in `flags`.
fn args(out: &Path, extra: &[&str], flags: &[&str]) -> Vec<String> {
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

fn run(out: &Path, extra: &[&str], flags: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(bin())
        .args(args(out, extra, flags))
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn spawn(out: &Path, extra: &[&str], flags: &[&str]) -> Child {
    Command::new(bin())
        .args(args(out, extra, flags))
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn rows(out: &Path) -> usize {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn wait_rows(out: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(180);
    while rows(out) < n {
        assert!(Instant::now() < deadline, "training did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: sends a signal to our own child process, which has not been reaped yet.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0);
}

fn finish(child: Child) -> (Option<i32>, String) {
    let Output { status, stderr, .. } = child.wait_with_output().unwrap();
    (status.code(), String::from_utf8_lossy(&stderr).into_owned())
}

fn steps(out: &Path) -> Vec<i64> {
    read_jsonl(&out.join("metrics.jsonl"))
        .unwrap()
        .iter()
        .map(|r| r["step"].as_i64().unwrap())
        .collect()
}

/// Metrics rows without the wall-clock fields.
fn metrics_without_timing(dir: &Path) -> Vec<serde_json::Value> {
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

fn checkpoint_names(out: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(out.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    v.sort();
    v
}

fn latest(out: &Path) -> String {
    std::fs::read_to_string(out.join("checkpoints/latest"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn reused_output_dir_is_refused_until_resume_or_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (code, err) = run(&out, &["checkpoint_every=5"], &[]);
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = run(&out, &["checkpoint_every=2"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("holds a previous run")
            && err.contains("--resume")
            && err.contains("--overwrite"),
        "{err}"
    );
    assert_eq!(steps(&out).len(), 20, "the refused run wrote nothing");
    let (code, err) = run(
        &out,
        &["checkpoint_every=2", "trainer.num_train_epochs=1"],
        &["--overwrite"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(steps(&out), (1..=10).collect::<Vec<_>>());
    assert_eq!(checkpoint_names(&out), ["step-00000008", "step-00000010"]);
    assert_eq!(latest(&out), "step-00000010");
    for i in 0..2 {
        let p = out.join(format!("models/agent_{i}/model.safetensors"));
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&p).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o644, "{}", p.display());
    }
    let (code, err) = run(&out, &[], &["--resume", "--overwrite"]);
    assert_eq!(code, Some(2), "the flags conflict: {err}");
}

#[test]
fn pruning_keeps_the_latest_two_by_recency_not_step_number() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let sets = ["checkpoint_every=2", "trainer.num_train_epochs=10"];
    let child = spawn(&out, &sets, &[]);
    wait_rows(&out, 3);
    signal(&child, libc::SIGINT);
    let (code, err) = finish(child);
    assert_eq!(code, Some(130), "{err}");
    // Leftovers with higher step numbers than this run will reach.
    let ck = out.join("checkpoints");
    let cur = ck.join(latest(&out));
    for stale in ["step-00000990", "step-00000999"] {
        let dst = ck.join(stale);
        std::fs::create_dir_all(&dst).unwrap();
        for f in std::fs::read_dir(&cur).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), dst.join(f.file_name())).unwrap();
        }
    }
    let (code, err) = run(&out, &sets, &["--resume"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(checkpoint_names(&out), ["step-00000098", "step-00000100"]);
    assert_eq!(latest(&out), "step-00000100");
    assert_eq!(steps(&out), (1..=100).collect::<Vec<_>>());
}

#[test]
fn second_run_is_refused_and_sigterm_sighup_checkpoint_then_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let sets = ["trainer.num_train_epochs=10"];
    let mut done = 0;
    for (sig, code) in [(libc::SIGTERM, 143), (libc::SIGHUP, 129)] {
        let flags: &[&str] = if done == 0 { &[] } else { &["--resume"] };
        let child = spawn(&out, &sets, flags);
        wait_rows(&out, done + 2);
        if done == 0 {
            let (c, err) = run(&out, &sets, &["--overwrite"]);
            assert_eq!(c, Some(1), "{err}");
            assert!(
                err.contains("in use by another run")
                    && err.contains(&format!("pid {}", child.id())),
                "{err}"
            );
        }
        signal(&child, sig);
        let (c, err) = finish(child);
        assert_eq!(c, Some(code), "{err}");
        assert!(err.contains("checkpoint written at step"), "{err}");
        let n: usize = latest(&out).trim_start_matches("step-").parse().unwrap();
        assert!(n > done && n < 100, "{n}");
        done = n;
    }
    let (c, err) = run(&out, &sets, &["--resume"]);
    assert_eq!(c, Some(0), "{err}");
    assert_eq!(
        steps(&out),
        (1..=100).collect::<Vec<_>>(),
        "every step once, in order"
    );
}

#[test]
fn a_second_signal_stops_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    // Long steps, so that the second signal arrives while the first step is still running.
    let child = spawn(
        &out,
        &["agents.max_new_tokens=128", "trainer.num_generations=8"],
        &[],
    );
    wait_rows(&out, 1);
    signal(&child, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(20));
    signal(&child, libc::SIGTERM);
    let (c, err) = finish(child);
    assert_eq!(c, Some(143), "{err}");
    assert!(err.contains("stopping now"), "{err}");
}

#[test]
fn csv_has_every_column_of_the_jsonl() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (c, err) = run(&out, &["trainer.num_train_epochs=1"], &[]);
    assert_eq!(c, Some(0), "{err}");
    let mut r = csv::Reader::from_path(out.join("metrics.csv")).unwrap();
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    let records: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    let json = read_jsonl(&out.join("metrics.jsonl")).unwrap();
    assert_eq!(records.len(), json.len());
    assert!(
        json[0]["lr"].is_null(),
        "no optimizer step in row 1: lr is null, not 0"
    );
    assert!(json
        .iter()
        .any(|r| r["lr"].as_f64().is_some_and(|x| x > 0.0)));
    for key in ["agent_0/loss", "agent_1/grad_norm", "lr", "step"] {
        assert!(
            header.iter().any(|h| h == key),
            "{key} missing from {header:?}"
        );
    }
    for (rec, row) in records.iter().zip(&json) {
        for (k, v) in row.as_object().unwrap() {
            let i = header
                .iter()
                .position(|h| h == k)
                .unwrap_or_else(|| panic!("{k} not in the CSV"));
            match v.as_f64() {
                Some(x) => assert!(
                    (rec[i].parse::<f64>().unwrap() - x).abs() <= 1e-9 * x.abs().max(1.0),
                    "{k}"
                ),
                None => assert_eq!(&rec[i], "", "{k}"),
            }
        }
    }
}

#[test]
fn cross_joint_actions_beyond_the_limit_are_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let cases = [
        ("22", "4", "17592186044416"),
        ("21", "4", "4398046511104"),
        ("13", "4", "67108864"),
        ("22", "8", "more than"),
    ];
    for (count, g, shown) in cases {
        let c = format!("agents.count={count}");
        let g = format!("trainer.num_generations={g}");
        let (code, err) = run(&out, &[&c, &g, "trainer.joint_mode=cross"], &[]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("max_joint_actions") && err.contains(shown),
            "{count}: {err}"
        );
    }
    assert!(!out.join("metrics.jsonl").exists(), "nothing trained");
    let (code, err) = run(
        &out,
        &[
            "trainer.joint_mode=cross",
            "trainer.max_joint_actions=8",
            "trainer.num_train_epochs=1",
        ],
        &[],
    );
    assert_eq!(code, Some(1), "4^2 = 16 > 8: {err}");
    assert!(err.contains("16"), "{err}");
}

struct StopAt(usize, std::sync::Arc<std::sync::atomic::AtomicBool>);

impl comlrl::train::Observer for StopAt {
    fn step(&mut self, step: usize, _: f64, _: f64) {
        if step == self.0 {
            self.1.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// Resumes with the binary; it must fail (exit 1, no panic) with every piece of `want` in the
/// message.
fn resume_fails(out: &Path, extra: &[&str], want: &[&str]) {
    let (code, err) = run(out, extra, &["--resume"]);
    assert_eq!(code, Some(1), "{want:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for w in want {
        assert!(err.contains(w), "`{w}` missing: {err}");
    }
}

/// Edits `state.json` with `f` and re-seals the manifest (as a careful hand edit would).
fn edit_state(ck: &Path, f: impl Fn(&mut serde_json::Value)) {
    let p = ck.join("state.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, v.to_string()).unwrap();
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ck.join("manifest.json")).unwrap()).unwrap();
    comlrl::train::manifest::write(
        ck,
        m["run_id"].as_str().unwrap(),
        v["step"].as_u64().unwrap() as usize,
    )
    .unwrap();
}

#[test]
fn damaged_or_edited_checkpoints_are_errors_not_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let sets: Vec<String> = args(&out, &[], &[])[3..]
        .chunks(2)
        .map(|c| c[1].clone())
        .collect();
    let sc = comlrl_scenario::load(&scenario(), &sets).unwrap();
    let mut t = comlrl::train::Trainer::new(sc).unwrap();
    let flag = t.interrupt_flag();
    let s = t.run(false, &mut StopAt(7, flag)).unwrap();
    assert!(s.interrupted && s.steps_done == 7);
    drop(t);
    let ck = out.join("checkpoints/step-00000007");
    let backup = tmp.path().join("backup");
    std::fs::create_dir_all(&backup).unwrap();
    let save = |restore: bool| {
        for f in std::fs::read_dir(if restore { &backup } else { &ck }).unwrap() {
            let f = f.unwrap();
            let dst = if restore { &ck } else { &backup };
            std::fs::copy(f.path(), dst.join(f.file_name())).unwrap();
        }
    };
    save(false);
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ck.join("state.json")).unwrap()).unwrap();
    assert!(
        !state["buffer"].as_array().unwrap().is_empty(),
        "step 7 is mid-buffer"
    );

    edit_state(&ck, |v| v["opt_steps"] = serde_json::json!([7]));
    resume_fails(
        &out,
        &[],
        &["state.json", "`opt_steps`", "1 entries for 2 agents"],
    );
    save(true);
    edit_state(&ck, |v| {
        v["buffer"][0]["agents"].as_array_mut().unwrap().pop();
    });
    resume_fails(&out, &[], &["`buffer[0].agents`"]);
    save(true);
    edit_state(&ck, |v| {
        v["window"]["agents"].as_array_mut().unwrap().pop();
    });
    resume_fails(&out, &[], &["`window.agents`"]);
    save(true);
    edit_state(&ck, |v| {
        v["buffer"][0]["agents"][1]["completions"][0][0] = 999_999.into()
    });
    resume_fails(&out, &[], &["`buffer[0].agents[1]`", "token id 999999"]);
    save(true);
    edit_state(&ck, |v| v["step"] = 0.into());
    resume_fails(&out, &[], &["metrics.jsonl", "`step` is 7", "step 0"]);
    save(true);
    // An unsealed edit and flipped bytes: the manifest catches them.
    let p = ck.join("state.json");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replacen("\"step\":7", "\"step\":0", 1);
    std::fs::write(&p, text).unwrap();
    resume_fails(&out, &[], &["state.json", "SHA-256"]);
    save(true);
    for f in ["agent_1.safetensors", "optimizer_0.safetensors"] {
        let p = ck.join(f);
        let mut bytes = std::fs::read(&p).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x10;
        std::fs::write(&p, bytes).unwrap();
        resume_fails(&out, &[], &[f, "SHA-256"]);
        save(true);
    }
    std::fs::remove_file(ck.join("manifest.json")).unwrap();
    resume_fails(&out, &[], &["manifest.json"]);
    save(true);
    let ptr = out.join("checkpoints/latest");
    for bad in ["../../backup", "/tmp", "step-7/../../x"] {
        std::fs::write(&ptr, bad).unwrap();
        resume_fails(&out, &[], &["latest", "refusing"]);
    }
    std::fs::write(&ptr, "step-00000007").unwrap();
    let run_json = out.join("run.json");
    let original = std::fs::read_to_string(&run_json).unwrap();
    std::fs::write(&run_json, "{\"run_id\": \"someone-else\"}").unwrap();
    resume_fails(&out, &[], &["another run", "someone-else"]);
    std::fs::write(&run_json, original).unwrap();
    resume_fails(&out, &["agents.count=3"], &["agent_2.safetensors"]);
    resume_fails(&out, &["trainer.num_generations=2"], &["`buffer[0]"]);
    // Intact again: the resume finishes the run.
    let (code, err) = run(&out, &[], &["--resume"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(steps(&out), (1..=20).collect::<Vec<_>>());
}

/// A small deterministic generator for the kill points.
fn next(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *seed >> 33
}

#[test]
fn kill_9_at_random_points_then_resume_matches_an_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    let reference = tmp.path().join("reference");
    let sets = ["checkpoint_every=1"];
    let t0 = Instant::now();
    let (code, err) = run(&reference, &sets, &[]);
    assert_eq!(code, Some(0), "{err}");
    // Kill points spread over the run's length (model loading included).
    let span = t0.elapsed().as_millis().max(200) as u64;
    let mut total_kills = 0;
    for trial in 0..3u64 {
        let out = tmp.path().join(format!("trial{trial}"));
        let mut seed = 0x5eed + trial;
        let mut kills = 0;
        loop {
            let flags: &[&str] = if !out.join("run.json").exists() {
                &[]
            } else if out.join("checkpoints/latest").exists() {
                &["--resume"]
            } else {
                &["--overwrite"]
            };
            let mut child = spawn(&out, &sets, flags);
            let wait = Duration::from_millis(next(&mut seed) % span);
            std::thread::sleep(wait);
            if kills < 6 && child.try_wait().unwrap().is_none() {
                signal(&child, libc::SIGKILL);
                let _ = child.wait();
                kills += 1;
                continue;
            }
            let (code, err) = finish(child);
            assert_eq!(code, Some(0), "trial {trial} after {kills} kills: {err}");
            break;
        }
        total_kills += kills;
        assert_eq!(
            metrics_without_timing(&out),
            metrics_without_timing(&reference),
            "trial {trial} ({kills} kills)"
        );
        for i in 0..2 {
            let f = format!("models/agent_{i}/model.safetensors");
            assert!(
                std::fs::read(out.join(&f)).unwrap() == std::fs::read(reference.join(&f)).unwrap(),
                "trial {trial}: {f} differs"
            );
        }
    }
    assert!(
        total_kills > 0,
        "no run was killed: the kill points missed every run"
    );
}

/// `comlrl check <tiny> --quiet`-style call with `--set` overrides (and a scenario path).
fn check(scen: &Path, sets: &[String]) -> (Option<i32>, String) {
    let mut a = vec!["check".to_string(), scen.display().to_string()];
    for s in sets {
        a.extend(["--set".to_string(), s.clone()]);
    }
    let o = Command::new(bin()).args(&a).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn check_rejects_what_run_would_reject() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, err) = check(&scenario(), &["agents.max_new_tokens=100000000".into()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("max_new_tokens (100000000)"), "{err}");
    // A 1 MB prompt.
    let yaml = std::fs::read_to_string(scenario())
        .unwrap()
        .replace("Describe a city in the clouds:", &"cloud ".repeat(170_000))
        .replace(
            "../rewards/",
            &format!("{}/rewards/", env!("CARGO_MANIFEST_DIR")),
        );
    let big = tmp.path().join("big.yaml");
    std::fs::write(&big, yaml).unwrap();
    let (code, err) = check(&big, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("training prompt 1 encodes to"), "{err}");
    let (code, err) = run(&tmp.path().join("run"), &[], &[]);
    assert_eq!(code, Some(0), "the tiny scenario itself passes: {err}");
    let (code, err) = check(&scenario(), &[]);
    assert_eq!(code, Some(0), "{err}");
}

/// A copy of the tiny-qwen2 fixture with `edit` applied to its config.json.
fn model_copy(tmp: &Path, name: &str, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
    let src = fixtures().join("tiny-qwen2");
    let dst = tmp.join(name);
    std::fs::create_dir_all(&dst).unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dst.join(f.file_name())).unwrap();
    }
    let p = dst.join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&p, v.to_string()).unwrap();
    dst
}

#[test]
fn checkpoints_that_do_not_match_their_config_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let ok = model_copy(tmp.path(), "ok", |_| {});
    let (code, err) = check(&scenario(), &[format!("agents.model={}", ok.display())]);
    assert_eq!(code, Some(0), "the fixture itself loads: {err}");
    let one = model_copy(tmp.path(), "one-layer", |v| {
        v["num_hidden_layers"] = 1.into()
    });
    let (code, err) = check(&scenario(), &[format!("agents.model={}", one.display())]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("does not use")
            && err.contains("model.layers.1.")
            && err.contains("num_hidden_layers 1"),
        "{err}"
    );
    let eos = model_copy(tmp.path(), "eos", |v| v["eos_token_id"] = 5000.into());
    std::fs::remove_file(eos.join("generation_config.json")).unwrap();
    let (code, err) = check(&scenario(), &[format!("agents.model={}", eos.display())]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("eos_token_id 5000 is outside the vocabulary"),
        "{err}"
    );
}
