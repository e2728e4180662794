//! Metric names on the trackers: every `metrics.jsonl` key as is, plus the name CoMLRL (the
//! Python library) or TRL's `GRPOTrainer` logs the same quantity under, so dashboards built on
//! their runs keep working.
//!
//! | comlrl (`metrics.jsonl`) | also sent as | when |
//! | --- | --- | --- |
//! | `reward_mean` (first-turn rewards) | `turn_1/reward_mean` (CoMLRL) | always |
//! | `reward_mean` | `turn_1/expected_return` (CoMLRL) | single-turn runs (the return of one turn is its reward) |
//! | `eval/reward_mean` | `eval/turn_1/mean_reward` (CoMLRL) | single-turn runs |
//! | `eval/return_mean` | `eval/turn_1/mean_return` (CoMLRL) | single-turn runs |
//! | `reward_mean` | `reward` (TRL) | always |
//! | `reward/<term>`, `reward/<term>/std` | `rewards/<term>/mean`, `rewards/<term>/std` (TRL) | always |
//! | `completion_length_mean` | `completions/mean_length` (TRL) | always |
//! | `clipped_ratio` | `completions/clipped_ratio` (TRL) | always |
//! | `lr` | `learning_rate` (TRL) | always |
//! | `agent_0/loss`, `agent_0/grad_norm`, `agent_0/kl`, `agent_0/entropy` | `loss`, `grad_norm`, `kl`, `entropy` (TRL) | one-agent runs (TRL trains one model) |
//!
//! `turn_<t>/reward_mean` for later turns is already CoMLRL's name in `metrics.jsonl`, and
//! `reward_std` and `frac_reward_zero_std` are TRL's. Everything else is comlrl's own and keeps
//! its name. `step` is not a value: it is the x axis (W&B `_step`, TensorBoard's step).
//! Non-finite values (written as `null` in `metrics.jsonl`) are left out.

/// `(comlrl name, other name)` pairs that apply to every run.
pub const ALIASES: &[(&str, &str)] = &[
    ("reward_mean", "turn_1/reward_mean"),
    ("reward_mean", "reward"),
    ("completion_length_mean", "completions/mean_length"),
    ("clipped_ratio", "completions/clipped_ratio"),
    ("lr", "learning_rate"),
];

/// `(comlrl name, CoMLRL name)` pairs that apply to single-turn runs only.
pub const SINGLE_TURN_ALIASES: &[(&str, &str)] = &[
    ("reward_mean", "turn_1/expected_return"),
    ("eval/reward_mean", "eval/turn_1/mean_reward"),
    ("eval/return_mean", "eval/turn_1/mean_return"),
];

/// `(comlrl name, TRL name)` pairs that apply to one-agent runs only.
pub const ONE_AGENT_ALIASES: &[(&str, &str)] = &[
    ("agent_0/loss", "loss"),
    ("agent_0/grad_norm", "grad_norm"),
    ("agent_0/kl", "kl"),
    ("agent_0/entropy", "entropy"),
];

/// TRL's name of a reward term's metric: `reward/<term>` → `rewards/<term>/mean`,
/// `reward/<term>/std` → `rewards/<term>/std`.
fn term_alias(name: &str) -> Option<String> {
    let term = name.strip_prefix("reward/")?;
    Some(match term.strip_suffix("/std") {
        Some(t) => format!("rewards/{t}/std"),
        None => format!("rewards/{term}/mean"),
    })
}

/// The values a tracker sends for `row`: its finite values except `step`, each followed by its
/// aliases (one that the row already holds under that name is not sent twice).
pub fn with_aliases(row: &[(String, f64)], num_turns: usize) -> Vec<(String, f64)> {
    let mut out = Vec::with_capacity(row.len() + 8);
    let single: &[(&str, &str)] = if num_turns == 1 {
        SINGLE_TURN_ALIASES
    } else {
        &[]
    };
    // A one-agent run's rows have agent 0's columns and no other agent's.
    let one_agent: &[(&str, &str)] = if row.iter().any(|(k, _)| k.starts_with("agent_0/"))
        && !row.iter().any(|(k, _)| k.starts_with("agent_1/"))
    {
        ONE_AGENT_ALIASES
    } else {
        &[]
    };
    for (k, v) in row {
        if k == "step" || !v.is_finite() {
            continue;
        }
        out.push((k.clone(), *v));
        let fixed = ALIASES
            .iter()
            .chain(single)
            .chain(one_agent)
            .filter(|(ours, _)| ours == k)
            .map(|(_, alias)| alias.to_string());
        for alias in fixed.chain(term_alias(k)) {
            if !row.iter().any(|(other, _)| *other == alias) {
                out.push((alias, *v));
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
                "reward",
                "turn_1/expected_return",
                "eval/reward_mean",
                "eval/turn_1/mean_reward",
                "lr",
                "learning_rate"
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
            ("reward", 2.5),
            ("turn_2/reward_mean", 3.0),
            ("eval/reward_mean", 1.0),
        ]);
        assert_eq!(with_aliases(&r, 2), want);
    }

    #[test]
    fn trl_names_for_terms_lengths_and_a_single_agents_loss() {
        let r = row(&[
            ("reward/len_ratio", 0.5),
            ("reward/len_ratio/std", 0.25),
            ("completion_length_mean", 12.0),
            ("clipped_ratio", 0.1),
            ("frac_reward_zero_std", 0.2),
            ("agent_0/loss", -1.0),
            ("agent_0/grad_norm", 3.0),
        ]);
        let got = with_aliases(&r, 1);
        let get = |k: &str| got.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        assert_eq!(get("rewards/len_ratio/mean"), Some(0.5));
        assert_eq!(get("rewards/len_ratio/std"), Some(0.25));
        assert_eq!(get("completions/mean_length"), Some(12.0));
        assert_eq!(get("completions/clipped_ratio"), Some(0.1));
        assert_eq!(get("frac_reward_zero_std"), Some(0.2));
        assert_eq!(get("loss"), Some(-1.0));
        assert_eq!(get("grad_norm"), Some(3.0));
        // Two agents: no single `loss` (TRL's names describe one model).
        let mut two = r.clone();
        two.push(("agent_1/loss".into(), 2.0));
        let got = with_aliases(&two, 1);
        assert!(!got.iter().any(|(k, _)| k == "loss" || k == "grad_norm"));
    }
}
