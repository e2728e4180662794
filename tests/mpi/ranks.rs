//! Agents on their own MPI ranks (feature `mpi`): the tiny seed scenario under
//! `mpirun --oversubscribe -np 2`, each rank single-threaded, gives the same metrics rows and
//! bit-identical final weights as the one-process run; a resume from a checkpoint written by
//! two ranks continues exactly (also with the KL penalty and two turns, where rank 0 runs the
//! transition); with bf16 optimizer state as well; a bad placement ends the job with an error
//! naming the rank.
//! Skips, saying why, when `mpirun` is missing (a failure under `COMLRL_REQUIRE_ALL=1`).
use crate::common;
use common::bin;
use common::tiny_run::*;
use std::path::Path;
use std::process::Command;

/// `mpirun` can start processes here; else the reason it cannot.
pub(crate) fn mpirun_ok() -> Result<(), String> {
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
pub(crate) fn single_threaded(c: &mut Command) -> &mut Command {
    c.env("RAYON_NUM_THREADS", "1")
        .env("CANDLE_NUM_THREADS", "1")
        // Containers and CI often run as root; Open MPI refuses that without these.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
}

/// `comlrl run` on the tiny scenario into `out`, under `mpirun -np <np>` when `np` is given.
pub(crate) fn run_np(
    np: Option<usize>,
    out: &Path,
    sets: &[&str],
    flags: &[&str],
) -> (Option<i32>, String) {
    let mut c = match np {
        Some(n) => {
            let mut c = Command::new("mpirun");
            c.args(["--oversubscribe", "-np", &n.to_string()])
                .arg(bin());
            c
        }
        None => Command::new(bin()),
    };
    c.args(tiny(out, sets, flags).argv());
    let o = single_threaded(&mut c).output().unwrap();
    let mut text = String::from_utf8_lossy(&o.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&o.stdout));
    (o.status.code(), text)
}

pub(crate) fn same_models(a: &Path, b: &Path, what: &str) {
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
        comlrl_testutil::skip(&why);
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
        comlrl_testutil::skip(&why);
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
        comlrl_testutil::skip(&why);
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

/// The metrics rows of `a` and `b` (timing columns dropped) agree: every column exactly but
/// the agents' `grad_norm` and `entropy` (within 1e-6 relative) and `loss` (within 1e-5 of max(1, |loss|):
/// the loss is a sum of ±A·log π terms ~100× its size that mostly cancel, so its relative
/// error is that much larger than the weights'). Returns whether they are identical.
pub(crate) fn rows_close(a: &[serde_json::Value], b: &[serde_json::Value]) -> bool {
    assert_eq!(a.len(), b.len(), "row count");
    for (n, (x, y)) in a.iter().zip(b).enumerate() {
        let (x, y) = (x.as_object().unwrap(), y.as_object().unwrap());
        assert_eq!(
            x.keys().collect::<Vec<_>>(),
            y.keys().collect::<Vec<_>>(),
            "row {n}: columns"
        );
        for (k, u) in x {
            let v = &y[k];
            let tol = match (u.as_f64(), v.as_f64()) {
                // The entropy is summed per pass, then over passes: replicas group the f32
                // terms differently from one process.
                (Some(p), Some(q)) if k.ends_with("/grad_norm") || k.ends_with("/entropy") => {
                    1e-6 * p.abs().max(q.abs())
                }
                (Some(p), Some(q)) if k.ends_with("/loss") => 1e-5 * p.abs().max(q.abs()).max(1.0),
                // After the first step the replicas' weights differ by rounding (their gradients
                // are summed in another order), and k3 is a difference of nearly equal
                // log-probs: a few ulps of the weights become ~1e-5 of the KL. A mean over part
                // of the mini-batch's tokens would be off by far more (~1e-3 here).
                (Some(p), Some(q)) if k.ends_with("/kl") || k.ends_with("/kl_in_loss") => {
                    1e-5 * p.abs().max(q.abs()).max(0.1)
                }
                _ => {
                    assert_eq!(u, v, "row {n}, {k}");
                    continue;
                }
            };
            let (p, q) = (u.as_f64().unwrap(), v.as_f64().unwrap());
            assert!((p - q).abs() <= tol, "row {n}, {k}: {p} vs {q}");
        }
    }
    a == b
}

/// The largest relative difference (per tensor: ‖a − b‖ / ‖a‖) between the final weights of
/// agent `i` in two runs, and the largest absolute difference in the attention key biases.
/// Those are apart because their gradient is zero in exact arithmetic (softmax ignores a
/// constant added to every key's score), so what they get is rounding noise, which AdamW
/// scales up to steps of about the learning rate: summing the noise in another order moves
/// them by up to ~lr per step, not by ~1e-7.
pub(crate) fn weights_diff(a: &Path, b: &Path, i: usize) -> (f64, f64) {
    tensors_diff(a, b, &format!("models/agent_{i}/model.safetensors"))
}

/// [`weights_diff`] for any safetensors file `f` of two runs (a critic's, say).
pub(crate) fn tensors_diff(a: &Path, b: &Path, f: &str) -> (f64, f64) {
    let dev = candle_core::Device::Cpu;
    let x = candle_core::safetensors::load(a.join(f), &dev).unwrap();
    let y = candle_core::safetensors::load(b.join(f), &dev).unwrap();
    assert_eq!(
        x.keys().collect::<std::collections::BTreeSet<_>>(),
        y.keys().collect::<std::collections::BTreeSet<_>>()
    );
    let flat = |t: &candle_core::Tensor| {
        t.to_dtype(candle_core::DType::F64)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f64>()
            .unwrap()
    };
    let (mut worst, mut key_bias) = (0f64, 0f64);
    for (name, t) in &x {
        let (p, q) = (flat(t), flat(&y[name]));
        if name.ends_with("k_proj.bias") {
            let d = p.iter().zip(&q).map(|(a, b)| (a - b).abs());
            key_bias = d.fold(key_bias, f64::max);
            continue;
        }
        let diff: f64 = p.iter().zip(&q).map(|(a, b)| (a - b).powi(2)).sum::<f64>();
        let norm: f64 = p.iter().map(|a| a * a).sum::<f64>();
        worst = worst.max((diff / norm.max(f64::MIN_POSITIVE)).sqrt());
    }
    (worst, key_bias)
}

#[test]
fn two_replicas_per_agent_on_four_ranks_match_one_process() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (one, four) = (tmp.path().join("one"), tmp.path().join("four"));
    // One epoch (10 steps); `replicas` is ignored by the one-process run.
    let sets = [
        "trainer.num_train_epochs=1",
        "agents.replicas=2",
        "checkpoint_every=5",
    ];
    let (code, err) = run_np(None, &one, &sets, &[]);
    assert_eq!(code, Some(0), "one process: {err}");
    let (code, err) = run_np(Some(4), &four, &sets, &[]);
    assert_eq!(code, Some(0), "four ranks: {err}");
    let rows = metrics_without_timing(&one);
    assert_eq!(rows.len(), 10);
    let got = metrics_without_timing(&four);
    let exact = rows_close(&rows, &got);
    let (mut worst, mut key_bias) = (0f64, 0f64);
    for i in 0..2 {
        let (w, k) = weights_diff(&one, &four, i);
        (worst, key_bias) = (worst.max(w), key_bias.max(k));
    }
    eprintln!(
        "replicas: metrics rows identical: {exact}; largest relative weight difference \
         {worst:e}, key biases {key_bias:e} apart"
    );
    assert!(worst <= 1e-6, "final weights differ by {worst:e} relative");
    // 5 optimizer steps at lr 1e-4: rounding noise moves a key bias by less than that.
    assert!(key_bias <= 5e-4, "key biases {key_bias:e} apart");
    // Agent 0 on ranks 0-1, agent 1 on ranks 2-3: the first replicas wrote the agents' files,
    // every rank its state.
    let ck = four.join("checkpoints").join(latest(&four));
    for f in [
        "state.json",
        "state.rank1.json",
        "state.rank3.json",
        "agent_0.safetensors",
        "agent_1.safetensors",
        "optimizer_1.safetensors",
    ] {
        assert!(ck.join(f).is_file(), "{f} missing in {}", ck.display());
    }
    assert!(!ck.join("agent_2.safetensors").exists());

    // Rewind to step 5 and resume on 4 ranks: every replica loads its agent from the first
    // replica's files, and the run ends exactly as the uninterrupted 4-rank run did.
    let models: Vec<Vec<u8>> = (0..2)
        .map(|i| std::fs::read(four.join(format!("models/agent_{i}/model.safetensors"))).unwrap())
        .collect();
    assert_eq!(checkpoint_names(&four), ["step-00000005", "step-00000010"]);
    std::fs::write(four.join("checkpoints/latest"), "step-00000005").unwrap();
    std::fs::remove_dir_all(four.join("checkpoints/step-00000010")).unwrap();
    let (code, err) = run_np(Some(4), &four, &sets, &["--resume"]);
    assert_eq!(code, Some(0), "resume on four ranks: {err}");
    assert_eq!(metrics_without_timing(&four), got, "resumed metrics differ");
    for (i, m) in models.iter().enumerate() {
        let f = four.join(format!("models/agent_{i}/model.safetensors"));
        assert!(std::fs::read(f).unwrap() == *m, "resumed agent {i} differs");
    }
}

/// The entropy bonus under adaptive control with two replicas per agent: the replicas' passes
/// add up to the one-process run's loss, entropy (which the controller reads) and coefficient,
/// and each agent's controller state is in the checkpoint its first replica writes. With the
/// reference KL in the loss beside it, the logged `kl_in_loss` is the whole mini-batch's mean,
/// the one process's up to rounding (each replica computes half of the passes).
#[test]
fn adaptive_entropy_on_replicas_matches_one_process() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (one, four) = (tmp.path().join("one"), tmp.path().join("four"));
    let sets = [
        "trainer.num_train_epochs=1",
        "agents.replicas=2",
        "checkpoint_every=5",
        "trainer.entropy_coef=0.01",
        "trainer.use_adaptive_entropy=true",
        "trainer.entropy_target=100",
        "trainer.entropy_coef_delta=0.002",
        "trainer.kl_in_loss=0.04",
    ];
    let (code, err) = run_np(None, &one, &sets, &[]);
    assert_eq!(code, Some(0), "one process: {err}");
    let (code, err) = run_np(Some(4), &four, &sets, &[]);
    assert_eq!(code, Some(0), "four ranks: {err}");
    let rows = metrics_without_timing(&one);
    // Rows of steps without an update (mid buffer) carry no coefficient.
    let coefs: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.get("agent_0/entropy_coef").and_then(|c| c.as_f64()))
        .collect();
    assert!(
        !coefs.is_empty() && coefs.iter().all(|&c| c > 0.01),
        "{coefs:?}"
    );
    assert!(
        rows.iter().any(|r| r["agent_1/kl_in_loss"].is_number()),
        "no kl_in_loss logged: {rows:?}"
    );
    // `rows_close` holds `kl_in_loss` to the rounding the replicas' weights bring.
    rows_close(&rows, &metrics_without_timing(&four));
    for i in 0..2 {
        let (w, _) = weights_diff(&one, &four, i);
        assert!(
            w <= 1e-6,
            "agent {i}: final weights differ by {w:e} relative"
        );
    }
    let ck = four.join("checkpoints").join(latest(&four));
    for i in 0..2 {
        let f = format!("entropy_control.agent{i}.json");
        assert!(ck.join(&f).is_file(), "{f} missing in {}", ck.display());
    }
}

#[test]
fn a_world_too_small_for_the_replicas_is_refused() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("small");
    let (code, err) = run_np(Some(2), &out, &["agents.replicas=3"], &[]);
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("agents[0].replicas is 3")
            && err.contains("the run has 2 ranks")
            && err.contains("mpirun -np 3"),
        "{err}"
    );
}

#[test]
fn bf16_optimizer_state_on_ranks_and_replicas() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    // The rounding streams are keyed by the run seed and the agent, never the rank: two ranks
    // give the one-process run's bits, and an agent's two replicas round alike (their weight
    // checksums, compared at every checkpoint, agree).
    let tmp = tempfile::tempdir().unwrap();
    let (one, two, four) = (
        tmp.path().join("one"),
        tmp.path().join("two"),
        tmp.path().join("four"),
    );
    let sets = [
        "trainer.num_train_epochs=1",
        "checkpoint_every=5",
        "trainer.optimizer_state_dtype=bf16",
    ];
    let (code, err) = run_np(None, &one, &sets, &[]);
    assert_eq!(code, Some(0), "one process: {err}");
    let (code, err) = run_np(Some(2), &two, &sets, &[]);
    assert_eq!(code, Some(0), "two ranks: {err}");
    assert_eq!(metrics_without_timing(&two), metrics_without_timing(&one));
    same_models(&one, &two, "bf16 state on two ranks");
    let mut replicated = sets.to_vec();
    replicated.push("agents.replicas=2");
    let (code, err) = run_np(Some(4), &four, &replicated, &[]);
    assert_eq!(code, Some(0), "two replicas per agent: {err}");
    assert_eq!(checkpoint_names(&four), ["step-00000005", "step-00000010"]);
}

/// `trainer.algorithm: iac` on ranks: each critic lives with its agent (the rank, or each
/// replica of it, holds and trains it; the first replica writes it). Two ranks give the
/// one-process run's metrics, agents and critics bit for bit; two replicas per agent on four
/// ranks (each replica computes its critic's whole mini-batch) give them up to the order of the
/// actor's gradient sums.
#[test]
fn iac_critics_live_with_their_agents() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (one, two, four) = (
        tmp.path().join("one"),
        tmp.path().join("two"),
        tmp.path().join("four"),
    );
    let sets = [
        "trainer.algorithm=iac",
        "trainer.num_train_epochs=1",
        "trainer.rollout_buffer_size=3",
        "trainer.critic.learning_rate=1e-3",
        "agents.replicas=2",
    ];
    let (code, err) = run_np(None, &one, &sets, &[]);
    assert_eq!(code, Some(0), "one process: {err}");
    // `replicas` asks for 4 ranks; 2 ranks hold one agent each without them.
    let (code, err) = run_np(Some(2), &two, &sets[..4], &[]);
    assert_eq!(code, Some(0), "two ranks: {err}");
    let (code, err) = run_np(Some(4), &four, &sets, &[]);
    assert_eq!(code, Some(0), "four ranks: {err}");
    let (code, err) = run_np(None, &tmp.path().join("one4"), &sets[..4], &[]);
    assert_eq!(code, Some(0), "one process, no replicas key: {err}");
    let rows = metrics_without_timing(&one);
    assert_eq!(rows.len(), 10);
    assert!(rows[9]["agent_1/value_loss"].as_f64().is_some());
    assert_eq!(
        metrics_without_timing(&two),
        rows,
        "two ranks: metrics rows differ"
    );
    same_models(&one, &two, "two ranks");
    for i in 0..2 {
        for f in [
            format!("models/critic_{i}/model.safetensors"),
            format!("models/critic_{i}/value_head.safetensors"),
        ] {
            let (x, y) = (std::fs::read(one.join(&f)), std::fs::read(two.join(&f)));
            assert!(x.unwrap() == y.unwrap(), "two ranks: {f} differs");
            assert!(four.join(&f).is_file(), "four ranks: {f} missing");
        }
    }
    rows_close(&rows, &metrics_without_timing(&four));
    for i in 0..2 {
        let (w, _) = weights_diff(&one, &four, i);
        assert!(w <= 1e-5, "four ranks: agent {i} differs by {w:e} relative");
    }
    let ck = four.join("checkpoints").join(latest(&four));
    for f in [
        "critic_0.safetensors",
        "critic_1.json",
        "critic_optimizer_1.safetensors",
    ] {
        assert!(ck.join(f).is_file(), "{f} missing in {}", ck.display());
    }
}

/// Multi-turn IAC on ranks: each agent's TD(0) targets read only its own critic's values (the
/// next turn's V_old), so two ranks, one agent and its critic each, give the one-process run's
/// metrics (the per-turn ones too), agents and critics bit for bit.
#[test]
fn iac_two_turns_on_two_ranks_match_one_process() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("revise.rhai");
    std::fs::write(
        &script,
        "fn transition(ctx) {\n    let out = [];\n    for i in 0..ctx.agent_count {\n        out.push(`Improve: ${ctx.response_history[i][-1]}`);\n    }\n    out\n}\n",
    )
    .unwrap();
    let transition = format!("trainer.external_transition={{rhai: {}}}", script.display());
    let sets = [
        "trainer.algorithm=iac",
        "trainer.num_train_epochs=1",
        "trainer.num_generations=1",
        "trainer.num_turns=2",
        "trainer.discount=0.9",
        "trainer.early_termination_threshold=null",
        "trainer.rollout_buffer_size=3",
        "trainer.critic.learning_rate=1e-3",
        "agents.max_new_tokens=8",
        transition.as_str(),
    ];
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    let (code, err) = run_np(None, &one, &sets, &[]);
    assert_eq!(code, Some(0), "one process: {err}");
    let (code, err) = run_np(Some(2), &two, &sets, &[]);
    assert_eq!(code, Some(0), "two ranks: {err}");
    let rows = metrics_without_timing(&one);
    // A round every second step (two episodes of two turns fill the buffer of 3).
    assert_eq!(
        rows.iter()
            .filter(|r| r["agent_1/turn_2/value_loss"].is_number())
            .count(),
        rows.len() / 2,
        "{rows:?}"
    );
    assert_eq!(metrics_without_timing(&two), rows, "metrics rows differ");
    same_models(&one, &two, "two ranks");
    for i in 0..2 {
        let f = format!("models/critic_{i}/value_head.safetensors");
        let (x, y) = (std::fs::read(one.join(&f)), std::fs::read(two.join(&f)));
        assert!(x.unwrap() == y.unwrap(), "two ranks: {f} differs");
    }
}

/// The MAAC MPI tests' three cases, each its settings plus `extra`: `v` (a V critic), `q` (a Q
/// critic with CoMLRL's N critic steps, `compat_critic_steps`) and `turns` (two-turn episodes,
/// one completion per agent and turn, TD(0) targets read from the next turn's V_old on the
/// critic's rank; the transition script is written into `dir`).
fn maac_cases(dir: &Path, extra: &[&str]) -> Vec<(&'static str, Vec<String>)> {
    let base: Vec<String> = [
        "trainer.algorithm=maac",
        "trainer.num_generations=2",
        "trainer.rollout_buffer_size=3",
        "trainer.train_batch_size=2",
        "trainer.critic.learning_rate=1e-3",
        "checkpoint_every=5",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    let with = |more: &[&str]| -> Vec<String> {
        let mut v = base.clone();
        v.extend(more.iter().map(|s| s.to_string()));
        v
    };
    let script = dir.join("revise.rhai");
    std::fs::write(
        &script,
        "fn transition(ctx) {\n    let out = [];\n    for i in 0..ctx.agent_count {\n        out.push(`Improve: ${ctx.response_history[i][-1]}`);\n    }\n    out\n}\n",
    )
    .unwrap();
    let transition = format!("trainer.external_transition={{rhai: {}}}", script.display());
    vec![
        ("v", base.clone()),
        (
            "q",
            with(&[
                "trainer.critic.type=q",
                "trainer.critic.compat_critic_steps=true",
            ]),
        ),
        (
            "turns",
            with(&[
                "trainer.num_generations=1",
                "trainer.num_turns=2",
                "trainer.discount=0.9",
                "trainer.early_termination_threshold=null",
                "agents.max_new_tokens=8",
                &transition,
            ]),
        ),
    ]
}

/// `trainer.algorithm: maac` on ranks: the one critic on agent 0's rank reads V_old, trains, and
/// sends every agent's advantages and critic statistics; each rank steps its own actor. Two
/// ranks give the one-process run's metrics, agents and critic bit for bit (a V critic, a Q
/// critic with CoMLRL's N critic steps, two-turn episodes with TD(0) targets), and a resume on
/// two ranks from the critic rank's checkpoint ends the same.
#[test]
fn maac_critic_on_agent_0s_rank_matches_one_process() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for (name, owned) in maac_cases(tmp.path(), &[]) {
        let sets: Vec<&str> = owned.iter().map(String::as_str).collect();
        let (one, two) = (
            tmp.path().join(format!("one_{name}")),
            tmp.path().join(name),
        );
        let (code, err) = run_np(None, &one, &sets, &[]);
        assert_eq!(code, Some(0), "{name}, one process: {err}");
        let (code, err) = run_np(Some(2), &two, &sets, &[]);
        assert_eq!(code, Some(0), "{name}, two ranks: {err}");
        let rows = metrics_without_timing(&one);
        assert_eq!(rows.len(), 20);
        assert!(
            rows.iter()
                .any(|r| r["agent_1/value_loss"].as_f64().is_some_and(|v| v > 0.0)),
            "{name}: {rows:?}"
        );
        assert_eq!(
            metrics_without_timing(&two),
            rows,
            "{name}: metrics rows differ"
        );
        same_models(&one, &two, name);
        let critic = |d: &Path, f: &str| std::fs::read(d.join("models/critic").join(f)).unwrap();
        for f in ["model.safetensors", "value_head.safetensors"] {
            assert!(
                critic(&one, f) == critic(&two, f),
                "{name}: critic {f} differs"
            );
        }
        if name == "v" {
            // Rank 0 (agent 0's) wrote the critic into the checkpoint.
            let ck = two.join("checkpoints").join(latest(&two));
            assert!(ck.join("critic.safetensors").is_file());
            assert_eq!(checkpoint_names(&two), ["step-00000015", "step-00000020"]);
            std::fs::write(two.join("checkpoints/latest"), "step-00000015").unwrap();
            std::fs::remove_dir_all(two.join("checkpoints/step-00000020")).unwrap();
            let (code, err) = run_np(Some(2), &two, &sets, &["--resume"]);
            assert_eq!(code, Some(0), "resume on two ranks: {err}");
            assert_eq!(metrics_without_timing(&two), rows, "resumed metrics differ");
            same_models(&one, &two, "maac resumed on two ranks");
            let f = "value_head.safetensors";
            assert!(critic(&one, f) == critic(&two, f), "resumed critic differs");
        }
    }
}

/// `trainer.algorithm: maac` with two replicas per agent on four ranks (agent 0 on ranks 0-1,
/// agent 1 on ranks 2-3): the one critic on agent 0's first replica (rank 0) reads V_old and
/// trains as in one process, its advantages reach all four ranks, and each agent's replicas
/// split the actor's passes and sum their gradients. Against the one-process run, with
/// `compat_critic_steps` off (a V critic) and on (a Q critic, one critic step per agent), and
/// two-turn episodes (TD(0) targets): the metrics rows up to the replicas' rounding
/// (`rows_close`), the actors within 1e-6 relative, the critic within 1e-6 relative (bit for
/// bit while the samples are the same: the critic reads only tokens and rewards). Only rank 0
/// writes the critic; a resume on four ranks from the step-15 checkpoint (rank 1, agent 0's
/// second replica, loads no critic) ends as the uninterrupted four-rank run.
#[test]
fn maac_replicas_on_four_ranks_match_one_process() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for (name, owned) in maac_cases(tmp.path(), &["agents.replicas=2"]) {
        let sets: Vec<&str> = owned.iter().map(String::as_str).collect();
        let (one, four) = (
            tmp.path().join(format!("one_{name}")),
            tmp.path().join(name),
        );
        // `replicas` is ignored by the one-process run.
        let (code, err) = run_np(None, &one, &sets, &[]);
        assert_eq!(code, Some(0), "{name}, one process: {err}");
        let (code, err) = run_np(Some(4), &four, &sets, &[]);
        assert_eq!(code, Some(0), "{name}, four ranks: {err}");
        let rows = metrics_without_timing(&one);
        assert_eq!(rows.len(), 20);
        assert!(
            rows.iter()
                .any(|r| r["agent_1/value_loss"].as_f64().is_some_and(|v| v > 0.0)),
            "{name}: {rows:?}"
        );
        let got = metrics_without_timing(&four);
        let exact = rows_close(&rows, &got);
        let (mut worst, mut key_bias) = (0f64, 0f64);
        for i in 0..2 {
            let (w, k) = weights_diff(&one, &four, i);
            (worst, key_bias) = (worst.max(w), key_bias.max(k));
        }
        let (mut critic, mut critic_key_bias) = (0f64, 0f64);
        for f in ["model.safetensors", "value_head.safetensors"] {
            let (w, k) = tensors_diff(&one, &four, &format!("models/critic/{f}"));
            (critic, critic_key_bias) = (critic.max(w), critic_key_bias.max(k));
        }
        eprintln!(
            "maac {name} replicas: metrics rows identical: {exact}; largest relative actor \
             weight difference {worst:e} (key biases {key_bias:e} apart); critic {critic:e} \
             (key biases {critic_key_bias:e})"
        );
        assert!(worst <= 1e-6, "{name}: actors differ by {worst:e} relative");
        assert!(key_bias <= 5e-4, "{name}: key biases {key_bias:e} apart");
        assert!(critic <= 1e-6, "{name}: the critic differs by {critic:e}");
        assert!(critic_key_bias <= 5e-4, "{name}: critic key biases apart");
        // Rank 0 (agent 0's first replica) wrote the critic; agent 0's second replica (rank 1)
        // holds none, so only the first replicas' and every rank's state files are there.
        let ck = four.join("checkpoints").join(latest(&four));
        for f in [
            "critic.safetensors",
            "critic_optimizer.safetensors",
            "critic.json",
            "agent_0.safetensors",
            "agent_1.safetensors",
            "state.rank1.json",
            "state.rank3.json",
        ] {
            assert!(
                ck.join(f).is_file(),
                "{name}: {f} missing in {}",
                ck.display()
            );
        }
        if name == "v" {
            let models = |d: &Path| -> Vec<Vec<u8>> {
                [
                    "agent_0/model.safetensors",
                    "agent_1/model.safetensors",
                    "critic/model.safetensors",
                    "critic/value_head.safetensors",
                ]
                .iter()
                .map(|f| std::fs::read(d.join("models").join(f)).unwrap())
                .collect()
            };
            let before = models(&four);
            assert_eq!(checkpoint_names(&four), ["step-00000015", "step-00000020"]);
            std::fs::write(four.join("checkpoints/latest"), "step-00000015").unwrap();
            std::fs::remove_dir_all(four.join("checkpoints/step-00000020")).unwrap();
            let (code, err) = run_np(Some(4), &four, &sets, &["--resume"]);
            assert_eq!(code, Some(0), "resume on four ranks: {err}");
            assert_eq!(metrics_without_timing(&four), got, "resumed metrics differ");
            assert!(models(&four) == before, "resumed models differ");
        }
    }
}
