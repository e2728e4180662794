//! The `preference` section and `trainer.algorithm: madpo`: CoMLRL's `MADPOConfig` defaults,
//! `num_candidates` as the rollout's `num_generations`, and the errors for what MADPO cannot
//! run (cross joint actions, several turns, a contradicting `num_generations`, a pair limit
//! under `all`, an unbounded candidate count, centralized agents); the keys warn under another
//! algorithm; the resolved YAML reads back to the same plan.
use crate::common;

use comlrl_scenario::ErrorKind::*;
use comlrl_scenario::{load_str, Algorithm, CollaborationMode, PairSelection, MAX_CANDIDATES};
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
    let cases: [(&str, &str, &str); 7] = [
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
        (
            "preference:\n  collaboration_mode: centralized\n",
            "preference.collaboration_mode",
            "not ported",
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
fn preference_keys_warn_under_another_algorithm() {
    let f = Fixture::new();
    let s = f.ok(&format!("{BASE}preference:\n  dpo_beta: 0.2\n"), &[]);
    assert!(!s.preference.active);
    assert_eq!(s.trainer.num_generations, 8, "untouched");
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0].contains("preference.dpo_beta")
            && s.warnings[0].contains("unless `trainer.algorithm` is `madpo`"),
        "{}",
        s.warnings[0]
    );
}
