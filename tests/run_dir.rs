//! The run directory on the real binary: one run at a time, no silent reuse (`--resume` /
//! `--overwrite`), pruning by recency, SIGTERM/SIGHUP checkpointing, a CSV with every column,
//! and kill -9 at random points.
mod common;
use comlrl::metrics::read_jsonl;
use common::tiny_run::*;
use std::time::{Duration, Instant};

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
