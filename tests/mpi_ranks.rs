//! Agents on their own MPI ranks (feature `mpi`): the tiny seed scenario under
//! `mpirun --oversubscribe -np 2`, each rank single-threaded, gives the same metrics rows and
//! bit-identical final weights as the one-process run; a resume from a checkpoint written by
//! two ranks continues exactly (also with the KL penalty and two turns, where rank 0 runs the
//! transition); a bad placement ends the job with an error naming the rank.
//! Skips, saying why, when `mpirun` is missing.
#![cfg(feature = "mpi")]
mod common;
use common::bin;
use common::tiny_run::*;
use std::path::Path;
use std::process::Command;

/// `mpirun` can start processes here; else the reason it cannot.
fn mpirun_ok() -> Result<(), String> {
    match Command::new("mpirun").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`mpirun --version` failed: {}",
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => Err(format!("`mpirun` not found ({e}); install openmpi-bin")),
    }
}

/// One thread per process, so the one-process run computes in the same order as each rank.
fn single_threaded(c: &mut Command) -> &mut Command {
    c.env("RAYON_NUM_THREADS", "1")
        .env("CANDLE_NUM_THREADS", "1")
        // Containers and CI often run as root; Open MPI refuses that without these.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
}

/// `comlrl run` on the tiny scenario into `out`, under `mpirun -np <np>` when `np` is given.
fn run_np(np: Option<usize>, out: &Path, sets: &[&str], flags: &[&str]) -> (Option<i32>, String) {
    let mut c = match np {
        Some(n) => {
            let mut c = Command::new("mpirun");
            c.args(["--oversubscribe", "-np", &n.to_string()])
                .arg(bin());
            c
        }
        None => Command::new(bin()),
    };
    c.args(args(out, sets, flags));
    let o = single_threaded(&mut c).output().unwrap();
    let mut text = String::from_utf8_lossy(&o.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&o.stdout));
    (o.status.code(), text)
}

fn same_models(a: &Path, b: &Path, what: &str) {
    for i in 0..2 {
        let f = format!("models/agent_{i}/model.safetensors");
        let (x, y) = (std::fs::read(a.join(&f)), std::fs::read(b.join(&f)));
        assert!(
            x.as_ref().unwrap() == y.as_ref().unwrap(),
            "{what}: {f} differs"
        );
    }
}

#[test]
fn two_ranks_match_one_process_and_resume_exactly() {
    if let Err(why) = mpirun_ok() {
        eprintln!("skipped: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    let sets = ["checkpoint_every=5"];
    let (code, err) = run_np(None, &one, &sets, &[]);
    assert_eq!(code, Some(0), "one process: {err}");
    let (code, err) = run_np(Some(2), &two, &sets, &[]);
    assert_eq!(code, Some(0), "two ranks: {err}");
    let rows = metrics_without_timing(&one);
    assert_eq!(rows.len(), 20);
    assert_eq!(metrics_without_timing(&two), rows, "metrics rows differ");
    same_models(&one, &two, "two ranks");
    // Each rank wrote its own agent and state; rank 0 the manifest over all of them.
    let ck = two.join("checkpoints").join(latest(&two));
    for f in [
        "state.json",
        "state.rank1.json",
        "agent_0.safetensors",
        "agent_1.safetensors",
        "optimizer_1.safetensors",
    ] {
        assert!(ck.join(f).is_file(), "{f} missing in {}", ck.display());
    }
    let manifest = std::fs::read_to_string(ck.join("manifest.json")).unwrap();
    assert!(manifest.contains("state.rank1.json"), "{manifest}");
    let timing = comlrl::metrics::read_jsonl(&two.join("metrics.jsonl")).unwrap();
    assert!(
        timing
            .iter()
            .all(|r| r["time/comm_s"].as_f64().unwrap() > 0.0),
        "two ranks spend time communicating"
    );

    // Rewind to the step-15 checkpoint (the one kept before the latest) and resume on 2 ranks.
    assert_eq!(checkpoint_names(&two), ["step-00000015", "step-00000020"]);
    std::fs::write(two.join("checkpoints/latest"), "step-00000015").unwrap();
    std::fs::remove_dir_all(two.join("checkpoints/step-00000020")).unwrap();
    let (code, err) = run_np(Some(2), &two, &sets, &["--resume"]);
    assert_eq!(code, Some(0), "resume on two ranks: {err}");
    assert!(err.contains("resuming from"), "{err}");
    assert_eq!(metrics_without_timing(&two), rows, "resumed metrics differ");
    same_models(&one, &two, "resumed on two ranks");

    // A two-rank checkpoint is refused by a one-process resume, naming the placement.
    std::fs::write(two.join("checkpoints/latest"), "step-00000015").unwrap();
    let (code, err) = run_np(None, &two, &sets, &["--resume"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("ranks") && err.contains("mpirun -np"), "{err}");
}

#[test]
fn a_rank_outside_the_world_ends_the_job_naming_it() {
    if let Err(why) = mpirun_ok() {
        eprintln!("skipped: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bad");
    let (code, err) = run_np(Some(2), &out, &["agents.rank=5"], &[]);
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("agents[0].rank is 5") && err.contains("rank ") && err.contains(" of 2"),
        "{err}"
    );
}

#[test]
fn kl_penalty_and_two_turns_match_one_process() {
    if let Err(why) = mpirun_ok() {
        eprintln!("skipped: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("revise.rhai");
    std::fs::write(
        &script,
        "fn transition(ctx) {\n    let out = [];\n    for i in 0..ctx.agent_count {\n        out.push(`Turn ${ctx.turn}: improve \"${ctx.response_history[i][-1]}\"`);\n    }\n    out\n}\n",
    )
    .unwrap();
    let transition = format!("trainer.external_transition={{rhai: {}}}", script.display());
    let sets = [
        "trainer.num_train_epochs=1",
        "trainer.num_generations=2",
        "agents.max_new_tokens=8",
        "trainer.kl_coef=0.1",
        "trainer.num_turns=2",
        "trainer.early_termination_threshold=null",
        transition.as_str(),
    ];
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    let (code, err) = run_np(None, &one, &sets, &[]);
    assert_eq!(code, Some(0), "one process: {err}");
    let (code, err) = run_np(Some(2), &two, &sets, &[]);
    assert_eq!(code, Some(0), "two ranks: {err}");
    let rows = metrics_without_timing(&one);
    assert_eq!(rows.len(), 10);
    assert!(
        rows.iter()
            .all(|r| r["agent_1/kl"].is_number() && r["turn_2/reward_mean"].is_number()),
        "{rows:?}"
    );
    assert_eq!(metrics_without_timing(&two), rows, "metrics rows differ");
    same_models(&one, &two, "two ranks, KL and two turns");
}
