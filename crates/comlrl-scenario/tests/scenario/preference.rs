//! The `preference` section and `trainer.algorithm: madpo`: CoMLRL's `MADPOConfig` defaults,
//! `num_candidates` as the rollout's `num_generations`, and the errors for what MADPO cannot
//! run (cross joint actions, several turns, a contradicting `num_generations`, a pair limit
//! under `all`, an unbounded candidate count); centralized MADPO as an alias of the trainer's
//! switch; the keys warn under another
//! algorithm; the resolved YAML reads back to the same plan. `madpo_iter`: `MADPOIterConfig`'s
//! defaults, its rounds as the run's epochs, and CoMLRL's checks of the replay and comparator
//! keys. `marlhf_iter`: `MARLHFIterConfig`'s defaults, each round a collecting epoch and its
//! online ones, and what is refused there.
use crate::common;

use comlrl_scenario::ErrorKind::*;
use comlrl_scenario::{
    load_str, AdvantageMode, Algorithm, CollaborationMode, ComparatorPolicy, PairSelection,
    ReplayMode, RlAlgorithm, ScoringReward, MAX_CANDIDATES,
};
use common::{Fixture, BASE};

/// BASE without its `num_generations`, under madpo.
fn madpo(extra: &str) -> String {
    format!(
        "{}  algorithm: madpo\n{extra}",
        BASE.replace("  num_generations: 8\n", "")
    )
}

#[test]
fn defaults_are_comlrls_and_candidates_are_the_generations() {
    let f = Fixture::new();
    let s = f.ok(&madpo(""), &[]);
    assert_eq!(s.trainer.algorithm, Algorithm::Madpo);
    let p = &s.preference;
    assert!(p.active);
    assert_eq!(p.num_candidates, 80);
    assert_eq!(p.pairs_per_sample, Some(16));
    assert_eq!(p.pair_selection, PairSelection::RewardGap);
    assert_eq!(p.dpo_beta, 0.1);
    assert_eq!(p.collaboration_mode, CollaborationMode::Decentralized);
    assert!(p.use_environment_step);
    assert_eq!(p.environment_steps_per_pair, 2);
    assert!(!p.compat_last_token, "the last token counts by default");
    assert_eq!(s.trainer.num_generations, 80);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    // `all` has no limit by default.
    let s = f.ok(
        &madpo("preference:\n  pair_selection: all\n  num_candidates: 6\n"),
        &[],
    );
    assert_eq!(s.preference.pairs_per_sample, None);
    assert_eq!(s.trainer.num_generations, 6);
    // The resolved YAML reads back to the same plan, without a word.
    let yaml = s.to_yaml();
    assert!(yaml.contains("  num_candidates: 6\n"), "{yaml}");
    let again = load_str(&yaml, &f.origin(), &[]).expect("reload");
    assert_eq!(again.preference, s.preference);
    assert_eq!(again.trainer, s.trainer);
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    // An equal num_generations is allowed.
    let same = f.ok(&madpo("  num_generations: 80\n"), &[]);
    assert_eq!(same.trainer, f.ok(&madpo(""), &[]).trainer);
}

#[test]
fn what_madpo_cannot_run_is_an_error() {
    let f = Fixture::new();
    let cases: [(&str, &str, &str); 6] = [
        (
            "  joint_mode: cross\n",
            "trainer.joint_mode",
            "`joint_mode: aligned`",
        ),
        ("  num_turns: 2\n", "trainer.num_turns", "`num_turns: 1`"),
        (
            "  num_generations: 8\n",
            "trainer.num_generations",
            "preference.num_candidates",
        ),
        (
            "preference:\n  pair_selection: all\n  pairs_per_sample: 4\n",
            "preference.pairs_per_sample",
            "`pair_selection: all`",
        ),
        (
            "preference:\n  num_candidates: 1\n",
            "preference.num_candidates",
            "2..=1024",
        ),
        (
            "preference:\n  num_candidates: 5000\n",
            "preference.num_candidates",
            "2..=1024",
        ),
    ];
    assert_eq!(MAX_CANDIDATES, 1024);
    for (extra, key, part) in cases {
        let text = madpo(extra);
        let (msg, ds) = f.errs(&text, &[]);
        // (`num_turns: 2` also misses its transition: that error comes beside this one.)
        assert!(
            ds.iter().any(|d| d.key == key && d.kind == InvalidValue),
            "{key}: {msg}"
        );
        assert!(msg.contains(part), "{key}: {msg}");
    }
    for bad in [
        "dpo_beta: 0",
        "environment_steps_per_pair: 0",
        "pairs_per_sample: 0",
    ] {
        let (msg, _) = f.errs(&madpo(&format!("preference:\n  {bad}\n")), &[]);
        assert!(msg.contains(bad.split(':').next().unwrap()), "{msg}");
    }
}

#[test]
fn centralized_madpo_is_the_trainers_switch() {
    let f = Fixture::new();
    let s = f.ok(
        &madpo("preference:\n  collaboration_mode: centralized\n"),
        &[],
    );
    assert_eq!(s.trainer.collaboration_mode, CollaborationMode::Centralized);
    let s = f.ok(&madpo("  collaboration_mode: centralized\n"), &[]);
    assert_eq!(
        s.preference.collaboration_mode,
        CollaborationMode::Centralized
    );
    // The resolved YAML reads back to the same plan.
    let again = f.ok(&s.to_yaml(), &[]);
    assert_eq!(again.trainer, s.trainer);
    assert_eq!(again.preference, s.preference);
    let one =
        madpo("preference:\n  collaboration_mode: centralized\n").replace("count: 2", "count: 1");
    let (msg, _) = f.errs(&one, &[]);
    assert!(msg.contains("two or more agents"), "{msg}");
    // Centralized MARLHF is ported (the same switch); its iterative form is not.
    let marlhf = format!(
        "{}  algorithm: marlhf\npreference:\n  collaboration_mode: centralized\n",
        BASE.replace("  num_generations: 8\n", "")
    );
    let s = f.ok(&marlhf, &[]);
    assert_eq!(s.trainer.collaboration_mode, CollaborationMode::Centralized);
    let (msg, ds) = f.errs(&marlhf.replace("marlhf", "marlhf_iter"), &[]);
    assert!(
        ds.iter()
            .any(|d| d.key == "preference.collaboration_mode" && d.kind == InvalidValue),
        "{msg}"
    );
    assert!(msg.contains("not ported"), "{msg}");
}

#[test]
fn a_local_centralized_comparator_is_ported() {
    let f = Fixture::new();
    for policy in ["current", "current_copy", "history"] {
        let s = f.ok(
            &madpo_iter(&format!(
                "preference:\n  comparator_generation_mode: centralized\n  comparator_policy: {policy}\n  comparator_centralized_agent_index: 1\n"
            )),
            &[],
        );
        assert_eq!(s.preference.comparator_centralized_agent_index, 1);
    }
}

#[test]
fn preference_keys_warn_under_another_algorithm() {
    let f = Fixture::new();
    let s = f.ok(&format!("{BASE}preference:\n  dpo_beta: 0.2\n"), &[]);
    assert!(!s.preference.active);
    assert_eq!(s.trainer.num_generations, 8, "untouched");
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0].contains("preference.dpo_beta")
            && s.warnings[0].contains(
                "unless `trainer.algorithm` is `madpo`, `marlhf`, `madpo_iter` or `marlhf_iter`"
            ),
        "{}",
        s.warnings[0]
    );
}

/// BASE under marlhf.
fn marlhf(extra: &str) -> String {
    format!("{BASE}  algorithm: marlhf\n{extra}")
}

#[test]
fn marlhf_defaults_are_comlrls_and_its_generations_stay_the_online_ones() {
    let f = Fixture::new();
    let s = f.ok(&marlhf(""), &[]);
    assert_eq!(s.trainer.algorithm, Algorithm::Marlhf);
    let p = &s.preference;
    assert!(p.active && p.marlhf);
    assert_eq!(p.rl_algorithm, RlAlgorithm::Magrpo);
    assert_eq!(p.reward_learning_rate, 1.0e-5);
    assert_eq!(p.reward_num_train_epochs, 1);
    assert_eq!(p.reward_train_batch_size, 1);
    assert_eq!(p.reward_max_length, None);
    assert!(!p.reward_freeze_backbone);
    assert_eq!(p.reward_model, None, "agent 0's model");
    assert_eq!(p.num_candidates, 80);
    // K of the online phase is the trainer's; the first epoch samples num_candidates.
    assert_eq!(s.trainer.num_generations, 8);
    assert_eq!(s.trainer.advantage_mode, AdvantageMode::Mean);
    // One collecting epoch before the online ones.
    assert_eq!(s.trainer.run_epochs(), s.trainer.num_train_epochs + 1);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    // CoMLRL's rl_algorithm picks the MAGRPO advantage mode.
    for (alg, mode) in [
        ("mareinforce", AdvantageMode::Raw),
        ("marloo", AdvantageMode::Rloo),
        ("maremax", AdvantageMode::Max),
    ] {
        let text = marlhf(&format!(
            "  advantage_normalization: false\npreference:\n  rl_algorithm: {alg}\n  reward_model: builtin:small\n  reward_max_length: 64\n"
        ));
        let s = f.ok(&text, &[]);
        assert!(s.warnings.is_empty(), "{alg}: {:?}", s.warnings);
        assert_eq!(s.trainer.advantage_mode, mode, "{alg}");
        assert_eq!(
            s.preference.reward_model.as_ref().unwrap().spec,
            "builtin:small"
        );
        // The resolved YAML reads back to the same plan, without a word.
        let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("reload");
        assert_eq!(again.preference, s.preference);
        assert_eq!(again.trainer, s.trainer);
        assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    }
    // CoMLRL's actor-critic backends: their critic is `trainer.critic`, resolved as under
    // `iac` / `maac` themselves, and nothing warns.
    for alg in ["iac", "maac"] {
        let s = f.ok(
            &marlhf(&format!(
                "  critic: {{learning_rate: 1.0e-4}}\npreference:\n  rl_algorithm: {alg}\n"
            )),
            &[],
        );
        assert!(s.warnings.is_empty(), "{alg}: {:?}", s.warnings);
        let c = s.trainer.critic.as_ref().expect("a critic");
        assert_eq!(c.learning_rate, 1.0e-4);
        assert_eq!(s.trainer.num_generations, 8, "MARLHF's, not IAC's default");
        let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("reload");
        assert_eq!(again.trainer, s.trainer);
        assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    }
    // With normalization on (the default) a baseline other than the mean changes nothing,
    // which the scenario says.
    let s = f.ok(&marlhf("preference:\n  rl_algorithm: marloo\n"), &[]);
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0].contains("preference.rl_algorithm"),
        "{:?}",
        s.warnings
    );
}

#[test]
fn what_marlhf_cannot_run_is_an_error() {
    let f = Fixture::new();
    let cases: [(&str, &str, &str); 7] = [
        (
            "  ppo_epochs: 2\npreference:\n  rl_algorithm: iac\n",
            "trainer.ppo_epochs",
            "`iac`",
        ),
        (
            "  critic: {separate: false}\npreference:\n  rl_algorithm: maac\n",
            "trainer.critic.separate",
            "maac",
        ),
        (
            "  advantage_mode: rloo\npreference:\n  rl_algorithm: mareinforce\n",
            "trainer.advantage_mode",
            "rl_algorithm",
        ),
        (
            "  reward_aggregation: normalize_then_sum\n",
            "trainer.reward_aggregation",
            "reward model's one score",
        ),
        ("  joint_mode: cross\n", "trainer.joint_mode", "MARLHF"),
        (
            "preference:\n  reward_num_train_epochs: 0\n",
            "preference.reward_num_train_epochs",
            "1..=10000",
        ),
        (
            "preference:\n  reward_train_batch_size: 0\n",
            "preference.reward_train_batch_size",
            "reward_train_batch_size",
        ),
    ];
    for (extra, key, part) in cases {
        let (msg, ds) = f.errs(&marlhf(extra), &[]);
        assert!(ds.iter().any(|d| d.key == key), "{key}: {msg}");
        assert!(msg.contains(part), "{key}: {msg}");
    }
    // The reward keys warn under an algorithm that has no reward model.
    let s = f.ok(
        &madpo("preference:\n  reward_learning_rate: 0.001\n  reward_model: builtin:tiny\n"),
        &[],
    );
    assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
    assert!(
        s.warnings
            .iter()
            .all(|w| w.contains("unless `trainer.algorithm` is `marlhf`")),
        "{:?}",
        s.warnings
    );
}

/// BASE without its `num_generations`, under madpo_iter.
fn madpo_iter(extra: &str) -> String {
    madpo(extra).replace("algorithm: madpo\n", "algorithm: madpo_iter\n")
}

#[test]
fn madpo_iter_defaults_are_comlrls_and_rounds_are_epochs() {
    let f = Fixture::new();
    let s = f.ok(&madpo_iter(""), &[]);
    assert_eq!(s.trainer.algorithm, Algorithm::MadpoIter);
    let p = &s.preference;
    assert!(p.active && p.iter && !p.marlhf);
    assert_eq!(p.num_candidates, 20);
    assert_eq!(p.pairs_per_sample, Some(4));
    assert_eq!(p.pair_selection, PairSelection::ComparatorReward);
    assert_eq!(p.num_iterations, 6);
    assert_eq!(p.replay_mode, ReplayMode::Current);
    assert_eq!(p.comparator_policy, ComparatorPolicy::Current);
    assert_eq!(p.comparator_num_candidates, None);
    assert_eq!(p.comparator_history_k, None);
    assert_eq!(s.trainer.num_train_epochs, 1, "one pass per round");
    assert_eq!(s.trainer.num_generations, 20);
    assert_eq!(s.run_epochs(), 6);
    assert_eq!(s.collect_epochs(), 6);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    // `history` takes the last round by default; the resolved YAML reads back the same.
    let s = f.ok(
        &madpo_iter("preference:\n  comparator_policy: history\n  replay_mode: lambda_decay\n  replay_lambda: 0.5\n  num_iterations: 3\n"),
        &[],
    );
    assert_eq!(s.preference.comparator_history_k, Some(1));
    assert_eq!(s.run_epochs(), 3);
    let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("reload");
    assert_eq!(again.preference, s.preference);
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
}

#[test]
fn what_madpo_iter_cannot_run_is_an_error() {
    let f = Fixture::new();
    for (bad, key) in [
        ("replay_mode: nearest_k", "replay_k"),
        ("replay_mode: lambda_decay", "replay_lambda"),
        ("replay_k: 2", "replay_k"),
        ("replay_sample_size: 5", "replay_sample_size"),
        ("replay_lambda: 0.5", "replay_lambda"),
        ("comparator_history_k: 2", "comparator_history_k"),
        ("comparator_policy: model", "comparator_policy"),
        ("comparator_policy: api", "comparator_policy"),
        ("comparator_api_retries: 11", "comparator_api_retries"),
        ("comparator_api_timeout: 0", "comparator_api_timeout"),
        ("comparator_model: builtin:tiny", "comparator_model"),
        ("num_iterations: 0", "num_iterations"),
        ("comparator_num_candidates: 0", "comparator_num_candidates"),
        (
            "comparator_centralized_agent_index: 2",
            "comparator_centralized_agent_index",
        ),
    ] {
        let (msg, _) = f.errs(&madpo_iter(&format!("preference:\n  {bad}\n")), &[]);
        assert!(msg.contains(&format!("preference.{key}")), "{bad}: {msg}");
    }
    let (bad, key) = (
        "replay_mode: lambda_decay\n  replay_lambda: 1.5",
        "replay_lambda",
    );
    let (msg, _) = f.errs(&madpo_iter(&format!("preference:\n  {bad}\n")), &[]);
    assert!(msg.contains(key), "{msg}");
    // A replay sample sizes an allocation: bounded.
    let (msg, _) = f.errs(
        &madpo_iter(
            "preference:\n  replay_mode: all_history\n  replay_sample_size: 100000000000\n",
        ),
        &[],
    );
    assert!(
        msg.contains("preference.replay_sample_size must be in 1..=1000000"),
        "{msg}"
    );
    // `comparator_reward` needs a comparator.
    let (msg, _) = f.errs(
        &madpo("preference:\n  pair_selection: comparator_reward\n"),
        &[],
    );
    assert!(msg.contains("pair_selection"), "{msg}");
}

/// BASE under marlhf_iter (its `num_generations` stays the online phase's).
fn marlhf_iter(extra: &str) -> String {
    format!("{BASE}  algorithm: marlhf_iter\n{extra}")
}

#[test]
fn marlhf_iter_defaults_are_comlrls_and_a_round_is_a_collecting_epoch_and_its_online_ones() {
    let f = Fixture::new();
    let s = f.ok(&marlhf_iter(""), &[]);
    assert_eq!(s.trainer.algorithm, Algorithm::MarlhfIter);
    let p = &s.preference;
    assert!(p.active && p.iter && p.marlhf && p.marlhf_iter);
    // `MARLHFIterConfig`'s own defaults.
    assert_eq!(p.num_candidates, 20);
    assert_eq!(p.pairs_per_sample, Some(4));
    assert_eq!(p.pair_selection, PairSelection::ComparatorReward);
    assert_eq!(p.reward_num_train_epochs, 2);
    assert_eq!(p.scoring_reward, ScoringReward::Task);
    assert_eq!(p.num_iterations, 6);
    assert_eq!(p.rl_algorithm, RlAlgorithm::Magrpo);
    assert_eq!(s.trainer.num_train_epochs, 2, "two online epochs per round");
    assert_eq!(
        s.trainer.num_generations, 8,
        "the online phase's, untouched"
    );
    assert_eq!(s.epochs_per_round(), 3);
    assert_eq!(s.run_epochs(), 18);
    let collecting: Vec<usize> = (0..20).filter(|&e| s.collecting(e)).collect();
    assert_eq!(collecting, [0, 3, 6, 9, 12, 15]);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let s = f.ok(
        &marlhf_iter("preference:\n  scoring_reward: reward_model\n  replay_mode: nearest_k\n  replay_k: 2\n  num_iterations: 2\n"),
        &[],
    );
    assert_eq!(s.preference.scoring_reward, ScoringReward::RewardModel);
    assert_eq!(s.run_epochs(), 6);
    let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("reload");
    assert_eq!(again.preference, s.preference);
    // The key of marlhf_iter alone warns elsewhere.
    let s = f.ok(
        &format!("{}preference:\n  scoring_reward: task\n", madpo_iter("")),
        &[],
    );
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("preference.scoring_reward")
                && w.contains("unless `trainer.algorithm` is `marlhf_iter`")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn what_marlhf_iter_cannot_run_is_an_error() {
    let f = Fixture::new();
    for (bad, key, why) in [
        (
            "rl_algorithm: iac",
            "rl_algorithm",
            "not ported for `marlhf_iter`",
        ),
        (
            "rl_algorithm: maac",
            "rl_algorithm",
            "not ported for `marlhf_iter`",
        ),
        (
            "comparator_policy: history",
            "comparator_policy",
            "not ported for `marlhf_iter`",
        ),
        (
            "replay_mode: nearest_k",
            "replay_k",
            "needs the number of rounds",
        ),
        (
            "comparator_policy: model",
            "comparator_policy",
            "needs the comparator's model",
        ),
        ("scoring_reward: oracle", "scoring_reward", ""),
        (
            "reward_num_train_epochs: 0",
            "reward_num_train_epochs",
            "1..=10000",
        ),
    ] {
        let (msg, _) = f.errs(&marlhf_iter(&format!("preference:\n  {bad}\n")), &[]);
        assert!(
            msg.contains(&format!("preference.{key}")) && msg.contains(why),
            "{bad}: {msg}"
        );
    }
}
