//! The preference trainers on MPI ranks, one agent per rank: MADPO and iterative MADPO (each
//! rank scores its agent's Δ of a mini-batch and the ranks exchange them) and MARLHF (every
//! rank holds a copy of the reward model and trains it alike) give the one-process run's
//! metrics rows and final weights bit for bit on two ranks, resume included (iterative MADPO
//! with its comparator the current policy or a frozen model; MARLHF online with MAGRPO and with
//! MAAC, the latter with replicas too; iterative MARLHF, each rank with its copy of every round's reward model); MADPO with
//! two replicas per agent agrees up to f32 rounding; the comparators not supported on ranks are
//! refused, naming the key.
use crate::common;
use crate::ranks::{mpirun_ok, rows_close, run_np, same_models, weights_diff};
use common::tiny_run::*;
use std::path::Path;

/// Both files of `f` (relative to the run directories) hold the same bytes.
fn same_file(a: &Path, b: &Path, f: &str, what: &str) {
    let (x, y) = (std::fs::read(a.join(f)), std::fs::read(b.join(f)));
    assert!(
        x.as_ref().expect(f) == y.as_ref().expect(f),
        "{what}: {f} differs"
    );
}

/// Runs `sets` in one process into `one` and on two ranks into `two`; asserts the same rows
/// and agents, and returns the rows.
fn one_and_two(one: &Path, two: &Path, sets: &[&str]) -> Vec<serde_json::Value> {
    let (code, err) = run_np(None, one, sets, &[]);
    assert_eq!(code, Some(0), "one process: {err}");
    let (code, err) = run_np(Some(2), two, sets, &[]);
    assert_eq!(code, Some(0), "two ranks: {err}");
    let rows = metrics_without_timing(one);
    assert_eq!(metrics_without_timing(two), rows, "metrics rows differ");
    same_models(one, two, "two ranks");
    rows
}

/// Rewinds `out` to its checkpoint before the latest and resumes it on two ranks: the run ends
/// with `rows` again and the agents of `reference`.
fn resume_on_two(out: &Path, reference: &Path, sets: &[&str], rows: &[serde_json::Value]) {
    let names = checkpoint_names(out);
    assert_eq!(names.len(), 2, "{names:?}");
    std::fs::write(out.join("checkpoints/latest"), &names[0]).unwrap();
    std::fs::remove_dir_all(out.join("checkpoints").join(&names[1])).unwrap();
    let (code, err) = run_np(Some(2), out, sets, &["--resume"]);
    assert_eq!(code, Some(0), "resume on two ranks: {err}");
    assert!(err.contains("resuming from"), "{err}");
    assert_eq!(metrics_without_timing(out), rows, "resumed metrics differ");
    same_models(reference, out, "resumed on two ranks");
}

#[test]
fn madpo_on_two_ranks_matches_one_process_and_resumes() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    // Two epochs: the first builds the set (and trains once on it), the second samples nothing.
    let sets = [
        "trainer.algorithm=madpo",
        "preference.num_candidates=4",
        "trainer.train_batch_size=4",
        "checkpoint_every=5",
    ];
    let rows = one_and_two(&one, &two, &sets);
    assert_eq!(rows.len(), 20);
    let trained = |k: &str| rows.iter().filter(|r| r[k].is_number()).count();
    assert!(
        trained("agent_1/dpo_margin") >= 2,
        "agent 1 trains each epoch: {rows:?}"
    );
    // Agent 0's rank wrote the set; the resume (in the second epoch) reads it on both ranks.
    let ck = two.join("checkpoints").join(latest(&two));
    assert!(ck.join("madpo_preference.json").is_file());
    resume_on_two(&two, &one, &sets, &rows);

    // Two replicas per agent on four ranks: each replica scores the whole mini-batch's Δ and
    // computes its share of the passes; the gradients are summed in another order than one
    // process sums them, so the numbers that follow the weights agree up to f32 rounding.
    let mut replicated = sets[..3].to_vec();
    replicated.push("agents.replicas=2");
    let (one, four) = (tmp.path().join("one_r"), tmp.path().join("four"));
    let (code, err) = run_np(None, &one, &replicated, &[]);
    assert_eq!(code, Some(0), "one process: {err}");
    let (code, err) = run_np(Some(4), &four, &replicated, &[]);
    assert_eq!(code, Some(0), "four ranks: {err}");
    let (a, b) = (metrics_without_timing(&one), metrics_without_timing(&four));
    assert_eq!(a.len(), b.len());
    for (n, (x, y)) in a.iter().zip(&b).enumerate() {
        let (x, y) = (x.as_object().unwrap(), y.as_object().unwrap());
        assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>());
        for (k, u) in x {
            let rounded = ["/loss", "/grad_norm", "/dpo_margin"]
                .iter()
                .any(|s| k.ends_with(s));
            match (u.as_f64(), y[k].as_f64()) {
                (Some(p), Some(q)) if rounded => assert!(
                    (p - q).abs() <= 1e-5 * p.abs().max(q.abs()).max(1.0),
                    "row {n}, {k}: {p} vs {q}"
                ),
                _ => assert_eq!(u, &y[k], "row {n}, {k}"),
            }
        }
    }
    for i in 0..2 {
        let (w, _) = weights_diff(&one, &four, i);
        assert!(w <= 1e-5, "four ranks: agent {i} differs by {w:e} relative");
    }
}

#[test]
fn madpo_iter_on_two_ranks_matches_one_process() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    // Two rounds against the current policy (sampled in the agents' own batch).
    let sets = [
        "trainer.algorithm=madpo_iter",
        "preference.num_candidates=4",
        "preference.num_iterations=2",
        "trainer.train_batch_size=4",
    ];
    let rows = one_and_two(&one, &two, &sets);
    assert!(
        rows.iter().any(|r| r["agent_1/iter_round"].is_number()),
        "{rows:?}"
    );

    // A frozen comparator model, loaded beside each rank's agent.
    let (one, two) = (tmp.path().join("one_model"), tmp.path().join("two_model"));
    let mut model = sets.to_vec();
    model.extend([
        "agents.model=builtin:tiny",
        "preference.comparator_policy=model",
        "preference.comparator_model=builtin:tiny",
        "preference.comparator_num_candidates=2",
    ]);
    one_and_two(&one, &two, &model);

    // The history comparator's saved policies cross ranks between collectives: refused.
    let mut history = sets.to_vec();
    history.push("preference.comparator_policy=history");
    let (code, err) = run_np(Some(2), &tmp.path().join("history"), &history, &[]);
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("preference.comparator_policy history") && err.contains("2 MPI ranks"),
        "{err}"
    );
}

/// Iterative MARLHF on two ranks (issue 46): each rank samples its agent's candidates and the
/// comparator's (the current policy, or a frozen model loaded beside the agent), every rank
/// collects the same pairs from the all-gathered candidates and trains its own copy of each
/// round's fresh reward model, then scores its online rollouts with it. Two rounds of a
/// collecting and an online epoch give the one-process run's metrics rows, agents and last
/// reward model bit for bit; a resume on two ranks from step 35 (round 2's online epoch: rank 1
/// reads the round's reward model and state from agent 0's files) ends the same. With
/// `scoring_reward: reward_model` the second round is ranked by the first round's model on
/// every rank.
#[test]
fn marlhf_iter_on_two_ranks_matches_one_process_and_resumes() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    // Two rounds over 10 prompts, each a collecting and an online epoch: 40 steps.
    let sets = [
        "trainer.algorithm=marlhf_iter",
        "trainer.num_train_epochs=1",
        "preference.num_iterations=2",
        "preference.num_candidates=4",
        "preference.reward_train_batch_size=4",
        "preference.reward_num_train_epochs=1",
        "preference.reward_learning_rate=1e-3",
        "checkpoint_every=35",
    ];
    let rows = one_and_two(&one, &two, &sets);
    assert_eq!(rows.len(), 40);
    assert!(
        rows.iter().any(|r| r["agent_1/iter_round"].is_number())
            && rows
                .iter()
                .any(|r| r["agent_1/reward_model_accuracy"].is_number()),
        "{rows:?}"
    );
    for f in [
        "models/reward_model/model.safetensors",
        "models/reward_model/reward_head.safetensors",
    ] {
        same_file(&one, &two, f, "two ranks");
    }
    resume_on_two(&two, &one, &sets, &rows);
    same_file(
        &one,
        &two,
        "models/reward_model/reward_head.safetensors",
        "resumed on two ranks",
    );

    // A frozen comparator model beside each rank's agent, the second round ranked by the first
    // round's reward model.
    let (one, two) = (tmp.path().join("one_model"), tmp.path().join("two_model"));
    let mut model = sets[..7].to_vec();
    model.extend([
        "agents.model=builtin:tiny",
        "preference.comparator_policy=model",
        "preference.comparator_model=builtin:tiny",
        "preference.comparator_num_candidates=2",
        "preference.scoring_reward=reward_model",
    ]);
    one_and_two(&one, &two, &model);
    same_file(
        &one,
        &two,
        "models/reward_model/reward_head.safetensors",
        "model comparator",
    );

    // Two replicas per agent on four ranks (the online phase's MAGRPO sums the replicas'
    // gradients): the one-process run up to that rounding, over one round (10 online steps, as
    // `two_replicas_per_agent_on_four_ranks_match_one_process`: AdamW lets the rounding grow
    // step by step, past 1e-6 of the gradient norm after 20); the reward model reads only the
    // candidates' texts, which stay the same.
    let four = tmp.path().join("four");
    let mut replicated: Vec<&str> = sets[..7]
        .iter()
        .copied()
        .filter(|s| !s.starts_with("preference.num_iterations"))
        .collect();
    replicated.extend(["preference.num_iterations=1", "agents.replicas=2"]);
    let (code, err) = run_np(Some(4), &four, &replicated, &[]);
    assert_eq!(code, Some(0), "four ranks: {err}");
    let (code, err) = run_np(None, &tmp.path().join("one_r"), &replicated, &[]);
    assert_eq!(code, Some(0), "one process: {err}");
    let one = tmp.path().join("one_r");
    let exact = rows_close(
        &metrics_without_timing(&one),
        &metrics_without_timing(&four),
    );
    for i in 0..2 {
        let (w, k) = weights_diff(&one, &four, i);
        eprintln!(
            "marlhf_iter replicas: rows identical: {exact}; agent {i} within {w:e} relative, \
             key biases {k:e} apart"
        );
        assert!(w <= 1e-6, "four ranks: agent {i} differs by {w:e} relative");
    }
    same_file(
        &one,
        &four,
        "models/reward_model/reward_head.safetensors",
        "replicas",
    );

    // An endpoint would be asked by every rank: refused, naming the key and the algorithm.
    let mut api = sets[..7].to_vec();
    api.extend([
        "preference.comparator_policy=api",
        "preference.comparator_api_url=http://127.0.0.1:9/v1/chat/completions",
    ]);
    let (code, err) = run_np(Some(2), &tmp.path().join("api"), &api, &[]);
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("preference.comparator_policy api")
            && err.contains("trainer.algorithm marlhf_iter")
            && err.contains("2 MPI ranks"),
        "{err}"
    );
}

#[test]
fn marlhf_on_two_ranks_matches_one_process_and_resumes() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    // The collecting epoch trains the reward model; the second epoch is MAGRPO against it.
    let sets = [
        "trainer.algorithm=marlhf",
        "trainer.num_train_epochs=1",
        "preference.num_candidates=4",
        "preference.reward_train_batch_size=4",
        "preference.reward_learning_rate=1e-3",
        "checkpoint_every=15",
    ];
    let rows = one_and_two(&one, &two, &sets);
    assert_eq!(rows.len(), 20);
    assert!(
        rows.iter()
            .any(|r| r["agent_1/reward_model_accuracy"].is_number()),
        "{rows:?}"
    );
    for f in [
        "models/reward_model/model.safetensors",
        "models/reward_model/reward_head.safetensors",
    ] {
        same_file(&one, &two, f, "two ranks");
    }
    // From step 15 (the online phase): rank 1 reads the reward model from agent 0's files.
    resume_on_two(&two, &one, &sets, &rows);
    same_file(
        &one,
        &two,
        "models/reward_model/reward_head.safetensors",
        "resumed on two ranks",
    );

    // Online with MAAC: its critic on agent 0's rank, against the reward model.
    let mut maac = sets[..5].to_vec();
    maac.extend([
        "preference.rl_algorithm=maac",
        "trainer.rollout_buffer_size=3",
        "trainer.critic.learning_rate=1e-3",
    ]);
    let (one, two) = (tmp.path().join("one_maac"), tmp.path().join("two_maac"));
    let rows = one_and_two(&one, &two, &maac);
    assert!(
        rows.iter().any(|r| r["agent_1/value_loss"].is_number()),
        "{rows:?}"
    );
    same_file(&one, &two, "models/critic/value_head.safetensors", "maac");

    // With two replicas per agent on four ranks (ignored by the one-process run above): the
    // critic on agent 0's first replica scores against the reward model each rank holds; the
    // one-process run up to the replicas' rounding of the actors' gradient sums.
    let four = tmp.path().join("four_maac");
    let mut replicated = maac.clone();
    replicated.push("agents.replicas=2");
    let (code, err) = run_np(Some(4), &four, &replicated, &[]);
    assert_eq!(code, Some(0), "maac, four ranks: {err}");
    rows_close(&rows, &metrics_without_timing(&four));
    for i in 0..2 {
        let (w, _) = weights_diff(&one, &four, i);
        assert!(
            w <= 1e-6,
            "maac, four ranks: agent {i} differs by {w:e} relative"
        );
    }
    same_file(
        &one,
        &four,
        "models/critic/value_head.safetensors",
        "maac replicas",
    );
}

#[test]
fn centralized_is_refused_on_ranks() {
    if let Err(why) = mpirun_ok() {
        comlrl_testutil::skip(&why);
        return;
    }
    // One policy for every role: nothing to place on ranks (CoMLRL has no distributed form).
    let tmp = tempfile::tempdir().unwrap();
    let sets = ["trainer.collaboration_mode=centralized"];
    let (code, err) = run_np(Some(2), &tmp.path().join("run"), &sets, &[]);
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("trainer.collaboration_mode centralized") && err.contains("2 MPI ranks"),
        "{err}"
    );
}
