//! A centralized comparator with a local policy (`preference.comparator_generation_mode:
//! centralized` with `comparator_policy: current | current_copy | model | history`) on the small tiny
//! scenario: agent `comparator_centralized_agent_index`'s policy (or the comparator model)
//! samples CoMLRL's tagged prompt, and each answer is split into the agents' candidates. The
//! tiny model never writes the tags, so every split candidate is empty: what the rounds'
//! states hold shows the split, and the agents' own (non-empty) candidates win the pairs.
//! The prompt and the split themselves are checked against CoMLRL's methods in
//! `centralized_protocol.rs`.
use crate::common;
use common::tiny_run::{metrics_without_timing, small};
use serde_json::Value;
use std::path::Path;

fn latest_state(out: &Path, file: &str) -> Value {
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    let path = out.join("checkpoints").join(latest.trim()).join(file);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn run(out: &Path, algorithm: &str, policy: &str, extra: &[&str]) -> Vec<Value> {
    let mut sets = vec![
        format!("trainer.algorithm={algorithm}"),
        "preference.num_candidates=4".to_string(),
        "preference.num_iterations=1".to_string(),
        "trainer.train_batch_size=4".to_string(),
        "trainer.num_train_epochs=1".to_string(),
        "checkpoint_every=4".to_string(),
        "logging.steps=10".to_string(),
        "preference.comparator_generation_mode=centralized".to_string(),
        "preference.comparator_centralized_agent_index=1".to_string(),
        format!("preference.comparator_policy={policy}"),
    ];
    sets.extend(extra.iter().map(|s| s.to_string()));
    let (ok, _, err) = small(out, &sets).output().parts();
    assert!(ok, "{algorithm} / {policy}: {err}");
    metrics_without_timing(out)
}

#[test]
fn madpo_iter_compares_with_a_local_centralized_comparator() {
    let tmp = tempfile::tempdir().unwrap();
    for (policy, extra) in [
        ("current", &[][..]),
        ("current_copy", &[][..]),
        ("model", &["preference.comparator_model=builtin:tiny"][..]),
    ] {
        let out = tmp.path().join(policy);
        let rows = run(&out, "madpo_iter", policy, extra);
        let pairs = rows[0]["agent_0/iter_round_pairs"].as_f64().unwrap();
        assert!(pairs > 0.0, "{policy}: {}", rows[0]);
        let state = latest_state(&out, "madpo_iter_state.json");
        let entries = state["set"]["entries"].as_array().unwrap();
        assert!(!entries.is_empty(), "{policy}");
        for e in entries {
            for a in e["agents"].as_array().unwrap() {
                // Each pair is an agent candidate (its EOS at least) against a comparator one
                // split from an untagged answer: empty.
                let c = a["candidates"].as_array().unwrap();
                let empty = c
                    .iter()
                    .filter(|x| x.as_array().unwrap().is_empty())
                    .count();
                assert!(empty > 0 && 2 * empty == c.len(), "{policy}: {a}");
            }
        }
    }
}

#[test]
fn marlhf_iter_compares_with_a_local_centralized_comparator() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let rows = run(&out, "marlhf_iter", "current", &[]);
    assert!(
        rows[0]["agent_0/iter_round_pairs"].as_f64().unwrap() > 0.0,
        "{}",
        rows[0]
    );
    let state = latest_state(&out, "marlhf_iter_state.json");
    let text = serde_json::to_string(&state).unwrap();
    // A comparator's side: both agents' responses empty in the reward model's layout.
    assert!(
        text.contains("Agent 1 response:\\n\\n\\nAgent 2 prompt:"),
        "no empty comparator response in {}",
        &text[..text.len().min(2000)]
    );
}

#[test]
fn madpo_iter_compares_with_a_centralized_history_comparator() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("history");
    let rows = run(
        &out,
        "madpo_iter",
        "history",
        &["preference.num_iterations=2"],
    );
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert!(
            row["agent_0/iter_round_pairs"].as_f64().unwrap() > 0.0,
            "{row}"
        );
    }
    // Every agent's policy is saved (CoMLRL's layout), and agent 1's samples the next round
    // (which one: `comparator::tests`).
    let dir = out.join("policy_checkpoints");
    for d in ["initial", "iteration_0000"] {
        for a in ["agent_0", "agent_1"] {
            assert!(dir.join(d).join(a).join("config.json").is_file(), "{d}/{a}");
        }
    }
}

#[test]
fn check_describes_a_centralized_comparator() {
    let tmp = tempfile::tempdir().unwrap();
    for (extra, who) in [
        (None, "agent 1's policy"),
        (
            Some("preference.comparator_policy=history"),
            "agent 1's policy as saved 1 round(s) back",
        ),
    ] {
        let mut sets = vec![
            format!("output_dir={}", tmp.path().join("x").display()),
            "agents.model=builtin:tiny".to_string(),
            "trainer.algorithm=madpo_iter".to_string(),
            "preference.num_candidates=8".to_string(),
            "preference.comparator_generation_mode=centralized".to_string(),
            "preference.comparator_centralized_agent_index=1".to_string(),
        ];
        sets.extend(extra.map(String::from));
        let (ok, _, err) = common::cli::on_scenario("check", &common::cli::tiny_scenario())
            .sets(&sets)
            .output()
            .parts();
        assert!(ok, "{err}");
        let line =
            format!("comparator: centralized, {who} answers the tagged prompt for all 2 agents");
        assert!(err.contains(&line), "{line} not in {err}");
    }
}
