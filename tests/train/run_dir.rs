//! The run directory on the real binary: one run at a time, no silent reuse (`--resume` /
//! `--overwrite`), pruning by recency, SIGTERM/SIGHUP checkpointing, a CSV with every column,
//! and kill -9 at random points.
use crate::common;
use comlrl::metrics::read_jsonl;
use common::comlrl;
use common::tiny_run::*;
use std::time::{Duration, Instant};

#[test]
fn reused_output_dir_is_refused_until_resume_or_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (code, err) = run(&out, &["checkpoint_every=5"], &[]);
    assert_eq!(code, Some(0), "{err}");
    // `--quiet`, stderr not a terminal: a line per logging window and one per epoch.
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("step ")).collect();
    assert_eq!(lines.len(), 20, "{err}");
    for part in ["step 3/20 | epoch 1 | reward ", " s/step | ETA ", " GB"] {
        assert!(lines[2].contains(part), "{part:?} in {}", lines[2]);
    }
    let epochs = err.lines().filter(|l| l.starts_with("epoch ")).count();
    assert_eq!(epochs, 2, "{err}");
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
    // The checkpoints folder moved to a user's disk and linked back: pruning goes through
    // the link, and removes only what this run wrote.
    let ck = out.join("checkpoints");
    let elsewhere = tmp.path().join("big-disk");
    std::fs::rename(&ck, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &ck).unwrap();
    let cur = ck.join(latest(&out));
    let copy = |name: &str| {
        let dst = ck.join(name);
        std::fs::create_dir_all(&dst).unwrap();
        for f in std::fs::read_dir(&cur).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), dst.join(f.file_name())).unwrap();
        }
        dst
    };
    // This run's leftovers with higher step numbers than it will reach: pruned.
    for stale in ["step-00000990", "step-00000999"] {
        copy(stale);
    }
    // Another run's checkpoint, a user's folder and another run's temporary: kept.
    let other = copy("step-00000500").join("manifest.json");
    let text = std::fs::read_to_string(&other).unwrap();
    let id = comlrl::train::run::dir::read_run_id(&out).unwrap();
    std::fs::write(&other, text.replace(&id, "0123456789abcdef")).unwrap();
    std::fs::create_dir_all(ck.join("step-best")).unwrap();
    std::fs::write(ck.join("step-best/model.bin"), "user data").unwrap();
    std::fs::create_dir_all(ck.join(".tmp-0123456789abcdef-step-00000004")).unwrap();
    let (code, err) = run(&out, &sets, &["--resume"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        checkpoint_names(&out),
        [
            "step-00000098",
            "step-00000100",
            "step-00000500",
            "step-best"
        ]
    );
    assert_eq!(latest(&out), "step-00000100");
    assert_eq!(steps(&out), (1..=100).collect::<Vec<_>>());
    assert!(ck.join(".tmp-0123456789abcdef-step-00000004").is_dir());
    assert_eq!(
        std::fs::read_to_string(ck.join("step-best/model.bin")).unwrap(),
        "user data"
    );
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
    // Files that would hang a reader, in place of checkpoint files: refused by type, at once.
    let ck = out.join("checkpoints").join(latest(&out));
    let zero = |p: &std::path::Path| std::os::unix::fs::symlink("/dev/zero", p).unwrap();
    type Make<'a> = &'a dyn Fn(&std::path::Path);
    let sabotage: [(&str, Make, &str); 2] = [
        ("optimizer_0.safetensors", &zero, "character device"),
        ("state.json", &mkfifo, "FIFO"),
    ];
    for (name, make, word) in sabotage {
        let (file, kept) = (ck.join(name), ck.join(format!("{name}.kept")));
        std::fs::rename(&file, &kept).unwrap();
        make(&file);
        let t = Instant::now();
        let (c, err) = run(&out, &sets, &["--resume"]);
        assert_eq!(c, Some(1), "{err}");
        assert!(err.contains(name) && err.contains(word), "{err}");
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{name}: {:?}",
            t.elapsed()
        );
        std::fs::remove_file(&file).unwrap();
        std::fs::rename(&kept, &file).unwrap();
    }
    let (c, err) = run(&out, &sets, &["--resume"]);
    assert_eq!(c, Some(0), "{err}");
    assert_eq!(
        steps(&out),
        (1..=100).collect::<Vec<_>>(),
        "every step once, in order"
    );
}

fn mkfifo(p: &std::path::Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path the test owns.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
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

/// Every file under `dir` with its bytes (symlinks as their targets' paths).
fn tree(dir: &std::path::Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                todo.push(p);
            } else if m.file_type().is_symlink() {
                let to = std::fs::read_link(&p).unwrap();
                out.insert(p, to.into_os_string().into_encoded_bytes());
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn user_files(dir: &std::path::Path, names: &[&str]) {
    for n in names {
        let p = dir.join(n);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, format!("user data: {n}")).unwrap();
    }
}

#[test]
fn overwrite_never_deletes_what_comlrl_did_not_write() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // A copy of the project's layout, run with `output_dir: ..` (the project root).
    let proj = tmp.path().join("proj");
    for dir in ["scenarios", "rewards", "models/tiny-story"] {
        std::fs::create_dir_all(proj.join(dir)).unwrap();
    }
    std::fs::copy(scenario(), proj.join("scenarios/tiny.yaml")).unwrap();
    std::fs::copy(
        repo.join("rewards/len_ratio.rhai"),
        proj.join("rewards/len_ratio.rhai"),
    )
    .unwrap();
    for f in std::fs::read_dir(repo.join("models/tiny-story")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), proj.join("models/tiny-story").join(f.file_name())).unwrap();
    }
    user_files(&proj, &["tb/events.out", "checkpoints/mine/x"]);
    // A home directory and a plain folder holding a user's folders under a run's names.
    let home = tmp.path().join("home");
    let plain = tmp.path().join("plain");
    for d in [&home, &plain] {
        user_files(
            d,
            &[
                "models/m.bin",
                "checkpoints/step-1/c.bin",
                "tb/t",
                "metrics.csv",
                "training.svg",
            ],
        );
    }
    let before = tree(tmp.path());
    let cases: [(&std::path::Path, &str, &str); 3] = [
        (
            &proj.join("scenarios/tiny.yaml"),
            "..",
            "contains the scenario file",
        ),
        (&scenario(), home.to_str().unwrap(), "is the home directory"),
        (
            &scenario(),
            plain.to_str().unwrap(),
            "no comlrl run recorded",
        ),
    ];
    for (scen, out, why) in cases {
        for flags in [&["--overwrite"][..], &[]] {
            let (code, err) = comlrl(&["run", scen.to_str().unwrap(), "--quiet"])
                .set(format!("output_dir={out}"))
                .flags(flags)
                .env("HOME", &home)
                .output()
                .code_and_stderr();
            assert_eq!(code, Some(1), "{out} {flags:?}: {err}");
            assert!(err.contains(why), "{out} {flags:?}: {err}");
        }
    }
    let after = tree(tmp.path());
    let changed: Vec<_> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .collect();
    assert!(changed.is_empty(), "a refused run changed {changed:?}");
}
