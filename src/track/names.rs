//! Metric names on the trackers: every `metrics.jsonl` key as is, plus the name CoMLRL (the
//! Python library) logs the same quantity under, so dashboards built on CoMLRL runs keep working.
//!
//! | comlrl (`metrics.jsonl`) | also sent as (CoMLRL) | when |
//! | --- | --- | --- |
//! | `reward_mean` (first-turn rewards) | `turn_1/reward_mean` | always |
//! | `reward_mean` | `turn_1/expected_return` | single-turn runs (the return of one turn is its reward) |
//! | `eval/reward_mean` | `eval/turn_1/mean_reward` | single-turn runs |
//! | `eval/return_mean` | `eval/turn_1/mean_return` | single-turn runs |
//!
//! `turn_<t>/reward_mean` for later turns is already CoMLRL's name in `metrics.jsonl`.
//! Everything else is comlrl's own and keeps its name (`reward_std`, `reward/<term>`,
//! `agent_<i>/loss`, `agent_<i>/grad_norm`, `agent_<i>/completion_length_mean`,
//! `agent_<i>/return_mean`, `agent_<i>/zero_advantage_frac`, `agent_<i>/kl`, `lr`, `step_seconds`, `tokens_per_s`, `epoch`).
//! `step` is not a value: it is the x axis (W&B `_step`, TensorBoard's step).
//! Non-finite values (written as `null` in `metrics.jsonl`) are left out.

/// `(comlrl name, CoMLRL name)` pairs that apply to every run.
pub const ALIASES: &[(&str, &str)] = &[("reward_mean", "turn_1/reward_mean")];

/// `(comlrl name, CoMLRL name)` pairs that apply to single-turn runs only.
pub const SINGLE_TURN_ALIASES: &[(&str, &str)] = &[
    ("reward_mean", "turn_1/expected_return"),
    ("eval/reward_mean", "eval/turn_1/mean_reward"),
    ("eval/return_mean", "eval/turn_1/mean_return"),
];

/// The values a tracker sends for `row`: its finite values except `step`, each followed by its
/// CoMLRL aliases.
pub fn with_aliases(row: &[(String, f64)], num_turns: usize) -> Vec<(String, f64)> {
    let mut out = Vec::with_capacity(row.len() + 2);
    for (k, v) in row {
        if k == "step" || !v.is_finite() {
            continue;
        }
        out.push((k.clone(), *v));
        let single: &[(&str, &str)] = if num_turns == 1 {
            SINGLE_TURN_ALIASES
        } else {
            &[]
        };
        for (_, alias) in ALIASES.iter().chain(single).filter(|(ours, _)| ours == k) {
            if !row.iter().any(|(other, _)| other == alias) {
                out.push((alias.to_string(), *v));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pairs: &[(&str, f64)]) -> Vec<(String, f64)> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn single_turn_rows_get_comlrl_names() {
        let r = row(&[
            ("step", 10.0),
            ("reward_mean", 2.5),
            ("eval/reward_mean", 1.0),
            ("lr", 1e-5),
        ]);
        let got = with_aliases(&r, 1);
        let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "reward_mean",
                "turn_1/reward_mean",
                "turn_1/expected_return",
                "eval/reward_mean",
                "eval/turn_1/mean_reward",
                "lr"
            ]
        );
        assert!(got
            .iter()
            .filter(|(k, _)| k.starts_with("turn_1/"))
            .all(|(_, v)| *v == 2.5));
    }

    #[test]
    fn multi_turn_rows_keep_only_the_turn_1_alias_and_drop_non_finite_values() {
        let r = row(&[
            ("step", 1.0),
            ("reward_mean", 2.5),
            ("turn_2/reward_mean", 3.0),
            ("eval/reward_mean", 1.0),
            ("lr", f64::NAN),
        ]);
        let want = row(&[
            ("reward_mean", 2.5),
            ("turn_1/reward_mean", 2.5),
            ("turn_2/reward_mean", 3.0),
            ("eval/reward_mean", 1.0),
        ]);
        assert_eq!(with_aliases(&r, 2), want);
    }
}
