//! `trainer.algorithm: madpo_iter` (CoMLRL 1.4.3's `MADPOIterTrainer`): what CoMLRL's own code
//! decides deterministically in a round, against `tests/fixtures/madpo/madpo_iter_select.json`
//! (`scripts/fixtures/make_madpo_iter.py`): the pairs of the current policy's candidates
//! against a comparator's for each selection mode and limit, `lambda_decay`'s weights, and which
//! rounds each replay mode draws from, how many pairs and with which weights. Then runs of the
//! binary on the small tiny scenario: rounds that sample and train, each comparator, and a run
//! interrupted mid-round that resumes to the same metrics and weights without sampling again.
use crate::common;
use comlrl::train::algorithms::preference::replay::{draw, lambda_decay_weights, Draw, Replay};
use comlrl::train::rollout::pairs::{select_compared_pairs, PairSelection};
use comlrl::train::Trainer;
use comlrl_scenario::ReplayMode;
use common::tiny_run::{load_small, metrics_without_timing, resume_matches, small, StopAt};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use std::path::Path;

fn fixture() -> Value {
    let path = common::fixtures().join("madpo/madpo_iter_select.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// A pair's side as the fixture names it: (`current` or `comparator`, candidate index).
type Side<'a> = (&'a str, usize);

#[test]
fn comparison_pairs_match_comlrl() {
    let fx = fixture();
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let cases = fx["pairs"].as_array().unwrap();
    assert_eq!(cases.len(), 5 * 3 * 4);
    for case in cases {
        let selection = match case["selection"].as_str().unwrap() {
            "comparator_reward" => PairSelection::ComparatorReward,
            "reward_gap" => PairSelection::RewardGap,
            "all" => PairSelection::All,
            other => panic!("{other}"),
        };
        let limit = case["limit"].as_u64().map(|n| n as usize);
        let got: Vec<(Side, Side)> = select_compared_pairs(
            &f32s(&case["current"]),
            &f32s(&case["comparator"]),
            selection,
            limit,
            &mut rng,
        )
        .iter()
        .map(|p| {
            let (cur, cmp) = (("current", p.index), ("comparator", p.index));
            match p.current_wins {
                true => (cur, cmp),
                false => (cmp, cur),
            }
        })
        .collect();
        fn side(v: &Value) -> (&str, usize) {
            (v[0].as_str().unwrap(), v[1].as_u64().unwrap() as usize)
        }
        let want: Vec<_> = case["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (side(&p["winner"]), side(&p["loser"])))
            .collect();
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn lambda_decay_weights_match_comlrl() {
    for case in fixture()["lambda_weights"].as_array().unwrap() {
        let lambda = case["lambda"].as_f64().unwrap();
        let n = case["n"].as_u64().unwrap() as usize;
        let got = lambda_decay_weights(n, lambda);
        let want: Vec<f64> = case["weights"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_f64().unwrap())
            .collect();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-12,
                "λ {lambda}, n {n}: {got:?} vs {want:?}"
            );
        }
    }
}

#[test]
fn replay_draws_match_comlrl() {
    for case in fixture()["replay"].as_array().unwrap() {
        let mode = match case["mode"].as_str().unwrap() {
            "current" => ReplayMode::Current,
            "nearest_k" => ReplayMode::NearestK,
            "all_history" => ReplayMode::AllHistory,
            "lambda_decay" => ReplayMode::LambdaDecay,
            other => panic!("{other}"),
        };
        let replay = Replay {
            mode,
            k: case["k"].as_u64().map(|n| n as usize),
            lambda: case["lambda"].as_f64(),
            sample_size: case["sample_size"].as_u64().map(|n| n as usize),
        };
        let rounds: Vec<usize> = case["rounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap() as usize)
            .collect();
        let r = &case["result"];
        match draw(&replay, &rounds) {
            Draw::Current => assert!(r.get("current_only").is_some(), "{case}"),
            Draw::Sample {
                shards,
                weights,
                sample_size,
            } => {
                let want: Vec<usize> = r["shards"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n.as_u64().unwrap() as usize)
                    .collect();
                assert_eq!(shards, want, "{case}");
                assert_eq!(
                    sample_size as u64,
                    r["sample_size"].as_u64().unwrap(),
                    "{case}"
                );
                match (weights, r["weights"].as_array()) {
                    (None, None) => {}
                    (Some(g), Some(w)) => {
                        assert_eq!(g.len(), w.len(), "{case}");
                        for (g, w) in g.iter().zip(w) {
                            assert!((g - w.as_f64().unwrap()).abs() <= 1e-12, "{case}");
                        }
                    }
                    (g, w) => panic!("{case}: weights {g:?} vs {w:?}"),
                }
            }
        }
    }
}

/// Two rounds of 10 prompts, 4 candidates a side, 2 DPO passes per round.
const ITER: [&str; 5] = [
    "trainer.algorithm=madpo_iter",
    "preference.num_candidates=4",
    "preference.num_iterations=2",
    "trainer.train_batch_size=4",
    "checkpoint_every=4",
];

/// The iteration state of the latest checkpoint of `out`.
fn saved_state(out: &Path) -> Value {
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    let file = out
        .join("checkpoints")
        .join(latest.trim())
        .join("madpo_iter_state.json");
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

fn run_rounds(out: &Path, extra: &[&str]) -> Vec<Value> {
    let mut sets = ITER.to_vec();
    sets.push("logging.steps=10");
    sets.extend_from_slice(extra);
    let (ok, _, err) = small(out, &sets).output().parts();
    assert!(ok, "{err}");
    metrics_without_timing(out)
}

/// Every round samples (its own metrics row) and trains on pairs of that round.
fn check_rounds(out: &Path, rows: &[Value]) {
    assert_eq!(rows.len(), 2, "one row per round: {rows:?}");
    let state = saved_state(out);
    assert_eq!(state["iteration"], 2);
    let shards = state["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 2);
    let entries = state["set"]["entries"].as_array().unwrap().len();
    let tied = state["set"]["tied_prompts"].as_u64().unwrap() as usize;
    assert_eq!(entries + tied, 20, "every prompt sampled once a round");
    for (e, row) in rows.iter().enumerate() {
        let m = |k: &str| row[format!("agent_0/{k}")].as_f64().unwrap();
        assert!(m("completion_length_mean") > 0.0, "round {}: {row}", e + 1);
        assert_eq!(m("iter_round"), (e + 1) as f64);
        let pairs = m("iter_round_pairs");
        // At most one pair per index (4) and pairs_per_sample (4) per prompt.
        assert!(pairs <= 40.0, "{row}");
        assert_eq!(m("iter_train_pairs"), pairs, "replay_mode current");
        if pairs > 0.0 {
            assert!(m("loss") > 0.0 && m("loss").is_finite());
            assert!((0.0..=1.0).contains(&m("dpo_accuracy")));
        }
    }
}

#[test]
fn rounds_sample_against_the_current_policy_and_train() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let rows = run_rounds(&out, &[]);
    check_rounds(&out, &rows);
    assert!(out.join("models/agent_1/model.safetensors").is_file());
}

#[test]
fn the_history_comparator_reads_the_saved_rounds() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let rows = run_rounds(
        &out,
        &[
            "preference.comparator_policy=history",
            "preference.replay_mode=all_history",
        ],
    );
    assert_eq!(rows.len(), 2);
    let dir = out.join("policy_checkpoints");
    for d in ["initial", "iteration_0000", "iteration_0001"] {
        assert!(dir.join(d).join("agent_1/config.json").is_file(), "{d}");
    }
    // all_history draws as many pairs as the round made.
    let m = |r: &Value, k: &str| r[format!("agent_0/{k}")].as_f64().unwrap();
    assert_eq!(
        m(&rows[1], "iter_train_pairs"),
        m(&rows[1], "iter_round_pairs")
    );
}

#[test]
fn the_model_comparator_samples_a_fixed_model() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let rows = run_rounds(
        &out,
        &[
            "preference.comparator_policy=model",
            "preference.comparator_model=builtin:tiny",
            "preference.comparator_num_candidates=2",
        ],
    );
    assert_eq!(rows.len(), 2);
    for row in &rows {
        // Two comparator candidates: at most two pairs a prompt.
        assert!(
            row["agent_0/iter_round_pairs"].as_f64().unwrap() <= 20.0,
            "{row}"
        );
    }
}

#[test]
fn an_interrupted_round_resumes_without_sampling_again() {
    resumes(&ITER);
}

#[test]
fn an_interrupted_round_resumes_with_its_history_comparator() {
    let mut sets = ITER.to_vec();
    sets.extend([
        "preference.comparator_policy=history",
        "preference.replay_mode=all_history",
    ]);
    resumes(&sets);
}

/// Runs `sets` whole, and stopped at step 7 (the first round half collected) and 13 (the first
/// round trained, the second under way) then resumed: the same metrics, weights and set.
fn resumes(sets: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let full = Trainer::new(load_small(&a, sets))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(full.steps_done, 20);
    for stop in [7, 13] {
        let b = tmp.path().join(format!("b{stop}"));
        let mut t = Trainer::new(load_small(&b, sets)).unwrap();
        let flag = t.interrupt_flag();
        let part = t.run(false, &mut StopAt(stop, flag)).unwrap();
        assert!(part.interrupted && part.steps_done == stop);
        let state = saved_state(&b);
        let entries = state["set"]["entries"].as_array().unwrap().len()
            + state["set"]["tied_prompts"].as_u64().unwrap() as usize;
        assert_eq!(entries, stop, "stopped at {stop}");
        assert_eq!(state["iteration"], stop as u64 / 10);
        resume_matches(&a, &b, sets);
        assert_eq!(
            saved_state(&a)["set"],
            saved_state(&b)["set"],
            "stopped at {stop}"
        );
    }
}

#[test]
fn the_shipped_scenario_runs_its_rounds() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let scenario = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/story_len_ratio_madpo_iter.yaml");
    // Its history comparator and λ-decay replay as shipped, fewer candidates and tokens.
    let (ok, _, err) = common::cli::comlrl(&["run", &scenario.display().to_string(), "--quiet"])
        .sets(&[
            format!("output_dir={}", out.display()),
            "preference.num_iterations=2".into(),
            "preference.num_candidates=4".into(),
            "agents.max_new_tokens=24".into(),
        ])
        .output()
        .parts();
    assert!(ok, "{err}");
    let rows = metrics_without_timing(&out);
    let rounds: Vec<f64> = rows
        .iter()
        .filter_map(|r| r["agent_0/iter_round"].as_f64())
        .collect();
    assert_eq!(rounds, [1.0, 2.0], "{rows:?}");
    assert!(out
        .join("policy_checkpoints/iteration_0001/agent_0")
        .is_dir());
}
