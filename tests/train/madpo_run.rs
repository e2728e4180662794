//! `trainer.algorithm: madpo` end to end on the small tiny scenario (built-in tiny model, 10
//! prompts, 2 epochs): the first epoch builds the preference set and trains once on it, the
//! second samples nothing and trains again; the metrics carry the DPO statistics, the
//! checkpoint holds the set, and a run interrupted in either epoch resumes to the same metrics
//! and weights as an uninterrupted one (the set is restored, never sampled again).
use crate::common;
use comlrl::train::Trainer;
use common::tiny_run::StopAt;
use common::tiny_run::{load_small, metrics_without_timing, resume_matches, small};
use std::path::Path;

const MADPO: [&str; 4] = [
    "trainer.algorithm=madpo",
    "preference.num_candidates=4",
    "trainer.train_batch_size=4",
    "checkpoint_every=4",
];

/// The preference set of the latest checkpoint of `out`.
fn saved_set(out: &Path) -> serde_json::Value {
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    let file = out
        .join("checkpoints")
        .join(latest.trim())
        .join("madpo_preference.json");
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

#[test]
fn a_short_run_builds_its_set_then_trains_on_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut sets = MADPO.to_vec();
    sets.push("logging.steps=10");
    let (ok, _, err) = small(&out, &sets).output().parts();
    assert!(ok, "{err}");
    let rows = metrics_without_timing(&out);
    assert_eq!(rows.len(), 2, "one row per epoch");
    let set = saved_set(&out);
    let pairs = set["set"]["pairs"].as_array().unwrap().len();
    let entries = set["set"]["entries"].as_array().unwrap().len();
    let tied = set["set"]["tied_prompts"].as_u64().unwrap() as usize;
    assert_eq!(entries + tied, 10, "every training prompt sampled once");
    assert!(
        pairs > 0 && pairs <= 10 * 6,
        "{pairs} pairs of 4 candidates"
    );
    for (e, row) in rows.iter().enumerate() {
        for a in 0..2 {
            let m = |k: &str| row[format!("agent_{a}/{k}")].as_f64().unwrap();
            assert_eq!(m("preference_pairs"), pairs as f64);
            assert!((0.0..=1.0).contains(&m("dpo_accuracy")));
            assert!(m("loss") > 0.0 && m("loss").is_finite());
            assert!(m("pair_reward_gap") > 0.0);
            assert!(m("dpo_margin").is_finite());
        }
        // Sampling happens in the first epoch only.
        let sampled = row["agent_0/completion_length_mean"].as_f64().unwrap();
        assert_eq!(sampled > 0.0, e == 0, "epoch {}: {row}", e + 1);
    }
    // The loss falls from the first pass over the set to the second.
    let loss = |r: &serde_json::Value| r["agent_0/loss"].as_f64().unwrap();
    assert!(loss(&rows[1]) < loss(&rows[0]), "{rows:?}");
    assert!(out.join("models/agent_1/model.safetensors").is_file());
}

#[test]
fn an_interrupted_run_resumes_without_sampling_again() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let full = Trainer::new(load_small(&a, &MADPO))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(full.steps_done, 20);
    // Step 7: the set half built (its prompts so far in the checkpoint); step 13: the set
    // complete and trained on once, the second epoch under way.
    for stop in [7, 13] {
        let b = tmp.path().join(format!("b{stop}"));
        let mut t = Trainer::new(load_small(&b, &MADPO)).unwrap();
        let flag = t.interrupt_flag();
        let part = t.run(false, &mut StopAt(stop, flag)).unwrap();
        assert!(part.interrupted && part.steps_done == stop);
        let set = saved_set(&b);
        let entries = set["set"]["entries"].as_array().unwrap().len()
            + set["set"]["tied_prompts"].as_u64().unwrap() as usize;
        assert_eq!(entries, stop.min(10), "stopped at {stop}");
        resume_matches(&a, &b, &MADPO);
        assert_eq!(
            saved_set(&a)["set"],
            saved_set(&b)["set"],
            "stopped at {stop}"
        );
    }
}
