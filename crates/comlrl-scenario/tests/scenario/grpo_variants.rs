//! The GRPO-variant keys of `trainer`: their defaults are MAGRPO's, every value reads from the
//! file and from `--set` and survives the resolved YAML, `logprob_temperature` is written `1` or
//! `sampling` and needs a sampling temperature above 0, and spread keys where nothing is divided
//! by a spread are warned about.
use crate::common;

use comlrl_scenario::{
    load_str, AdvantageScale, AdvantageStd, ImportanceLevel, LogprobTemperature, LossAggregation,
};
use common::{Fixture, BASE};

#[test]
fn defaults_are_magrpo_and_every_value_reads_and_reloads() {
    let f = Fixture::new();
    let t = f.ok(BASE, &[]).trainer;
    assert_eq!(t.loss_aggregation, LossAggregation::SequenceSum);
    assert_eq!(t.advantage_scale, AdvantageScale::Group);
    assert_eq!(t.advantage_std, AdvantageStd::Population);
    assert!(!t.mask_truncated_completions);
    assert_eq!(t.logprob_temperature, LogprobTemperature::One);
    for (agg, want) in [
        ("sequence_sum", LossAggregation::SequenceSum),
        ("sequence_mean", LossAggregation::SequenceMean),
        ("token_mean", LossAggregation::TokenMean),
        ("constant", LossAggregation::Constant),
    ] {
        let s = f.ok(BASE, &[&format!("trainer.loss_aggregation={agg}")]);
        assert_eq!(s.trainer.loss_aggregation, want);
    }
    let text = format!(
        "{BASE}  loss_aggregation: token_mean\n  advantage_scale: batch\n  advantage_std: sample\n  \
         mask_truncated_completions: true\n  logprob_temperature: sampling\n"
    );
    let s = f.ok(&text, &[]);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let t = &s.trainer;
    assert_eq!(t.advantage_scale, AdvantageScale::Batch);
    assert_eq!(t.advantage_std, AdvantageStd::Sample);
    assert!(t.mask_truncated_completions);
    assert_eq!(t.logprob_temperature, LogprobTemperature::Sampling);
    let yaml = s.to_yaml();
    let again = load_str(&yaml, &f.origin(), &[]).expect("the resolved YAML reloads");
    assert_eq!(again.trainer, s.trainer);
    // `1` is written as a number and reads back as one.
    let one = f.ok(&format!("{BASE}  logprob_temperature: 1\n"), &[]);
    assert_eq!(one.trainer.logprob_temperature, LogprobTemperature::One);
    assert!(
        one.to_yaml().contains("logprob_temperature: 1\n"),
        "{}",
        one.to_yaml()
    );
}

#[test]
fn logprob_temperature_refuses_other_values_and_greedy_agents() {
    let f = Fixture::new();
    for bad in ["0.7", "2", "sample"] {
        let (msg, _) = f.errs(&format!("{BASE}  logprob_temperature: {bad}\n"), &[]);
        assert!(msg.contains("logprob_temperature"), "{bad}: {msg}");
    }
    let (msg, _) = f.errs(
        &format!("{BASE}  logprob_temperature: sampling\n"),
        &["agents.temperature=0"],
    );
    assert!(
        msg.contains("agent 0 samples greedily") && msg.contains("logprob_temperature: 1"),
        "{msg}"
    );
}

#[test]
fn spread_keys_without_a_spread_are_warned_about() {
    let f = Fixture::new();
    let s = f.ok(
        &format!("{BASE}  advantage_normalization: false\n  advantage_scale: batch\n"),
        &[],
    );
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("advantage_scale") && w.contains("no effect")),
        "{:?}",
        s.warnings
    );
    let s = f.ok(
        &format!("{BASE}  advantage_scale: none\n  advantage_std: sample\n"),
        &[],
    );
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("advantage_std") && w.contains("only re-centred")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn reward_aggregation_reads_and_warns_where_it_cannot_matter() {
    use comlrl_scenario::RewardAggregation;
    let f = Fixture::new();
    assert_eq!(
        f.ok(BASE, &[]).trainer.reward_aggregation,
        RewardAggregation::SumThenNormalize
    );
    let two_terms = BASE.replace(
        "reward:\n  rhai: r.rhai\n",
        "reward:\n  - {name: a, rhai: r.rhai}\n  - {name: b, rhai: r.rhai, weight: 0.5}\n",
    );
    let s = f.ok(
        &format!("{two_terms}  reward_aggregation: normalize_then_sum\n"),
        &[],
    );
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    assert_eq!(
        s.trainer.reward_aggregation,
        RewardAggregation::NormalizeThenSum
    );
    let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("the resolved YAML reloads");
    assert_eq!(again.trainer, s.trainer);
    // One term: nothing to balance. Processors: they shape only the logged reward.
    let one = f.ok(BASE, &["trainer.reward_aggregation=normalize_then_sum"]);
    assert_eq!(one.warnings.len(), 1, "{:?}", one.warnings);
    assert!(
        one.warnings[0].contains("single reward term"),
        "{:?}",
        one.warnings
    );
    let processed = f.ok(
        &format!("{two_terms}  reward_aggregation: normalize_then_sum\nreward_processors:\n  - scale: 100.0\n"),
        &[],
    );
    assert_eq!(processed.warnings.len(), 1, "{:?}", processed.warnings);
    assert!(
        processed.warnings[0].contains("reward_processors"),
        "{:?}",
        processed.warnings
    );
    let (msg, _) = f.errs(&format!("{BASE}  reward_aggregation: sum\n"), &[]);
    assert!(msg.contains("reward_aggregation"), "{msg}");
}

#[test]
fn a_preset_sets_its_keys_shows_them_and_refuses_contradictions() {
    use comlrl_scenario::Preset;
    let f = Fixture::new();
    let s = f.ok(BASE, &["trainer.preset=dr_grpo"]);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    assert_eq!(s.trainer.preset, Some(Preset::DrGrpo));
    assert_eq!(s.trainer.loss_aggregation, LossAggregation::Constant);
    assert_eq!(s.trainer.advantage_scale, AdvantageScale::None);
    // Nothing hidden: the resolved scenario names the preset and the values it set, and
    // reloads to the same plan.
    let yaml = s.to_yaml();
    for line in [
        "preset: dr_grpo\n",
        "loss_aggregation: constant\n",
        "advantage_scale: none\n",
    ] {
        assert!(yaml.contains(line), "{line} not in {yaml}");
    }
    let again = load_str(&yaml, &f.origin(), &[]).expect("the resolved YAML reloads");
    assert_eq!(again.trainer, s.trainer);
    // The same values written out agree with the preset; another value contradicts it.
    f.ok(
        BASE,
        &[
            "trainer.preset=dr_grpo",
            "trainer.loss_aggregation=constant",
        ],
    );
    let (msg, _) = f.errs(
        &format!("{BASE}  preset: dr_grpo\n  advantage_scale: group\n"),
        &[],
    );
    assert!(
        msg.contains("advantage_scale") && msg.contains("preset: dr_grpo"),
        "{msg}"
    );
    // DAPO and GSPO set their clipped ratios, shown in the resolved scenario.
    let dapo = f.ok(BASE, &["trainer.preset=dapo", "trainer.train_batch_size=1"]);
    let t = &dapo.trainer;
    assert_eq!(t.loss_aggregation, LossAggregation::TokenMean);
    assert!(t.mask_truncated_completions);
    assert_eq!(t.importance_level, ImportanceLevel::Token);
    assert_eq!((t.clip_eps, t.clip_eps_high), (0.2, Some(0.28)));
    let yaml = dapo.to_yaml();
    for line in [
        "preset: dapo
",
        "loss_aggregation: token_mean
",
        "mask_truncated_completions: true
",
        "importance_level: token
",
        "clip_eps_high: 0.28
",
    ] {
        assert!(yaml.contains(line), "{line} not in {yaml}");
    }
    let again = load_str(&yaml, &f.origin(), &[]).expect("the resolved YAML reloads");
    assert_eq!(again.trainer, dapo.trainer);
    let gspo = f.ok(BASE, &["trainer.preset=gspo", "trainer.ppo_epochs=2"]);
    assert!(gspo.warnings.is_empty(), "{:?}", gspo.warnings);
    let t = &gspo.trainer;
    assert_eq!(t.importance_level, ImportanceLevel::Sequence);
    assert_eq!(t.loss_aggregation, LossAggregation::SequenceMean);
    assert_eq!((t.clip_eps, t.clip_eps_high), (3e-4, Some(4e-4)));
    let (msg, _) = f.errs(
        BASE,
        &["trainer.preset=gspo", "trainer.importance_level=token"],
    );
    assert!(
        msg.contains("importance_level") && msg.contains("preset: gspo"),
        "{msg}"
    );
    let (msg, _) = f.errs(BASE, &["trainer.preset=dapo", "trainer.clip_eps_high=0.2"]);
    assert!(
        msg.contains("clip_eps_high") && msg.contains("preset: dapo"),
        "{msg}"
    );
    // Without a preset, the defaults are MAGRPO's.
    let plain = f.ok(BASE, &[]);
    assert_eq!(plain.trainer.preset, None);
    assert_eq!(plain.trainer.loss_aggregation, LossAggregation::SequenceSum);
}

#[test]
fn ratio_keys_default_to_no_ratio_and_check_their_company() {
    let f = Fixture::new();
    let t = f.ok(BASE, &[]).trainer;
    assert_eq!(
        (t.ppo_epochs, t.importance_level),
        (1, ImportanceLevel::None)
    );
    assert_eq!(
        (t.clip_eps, t.clip_eps_high, t.clip_delta),
        (0.2, None, None)
    );
    // Several passes take a token ratio unless told otherwise; `none` with them is refused.
    let s = f.ok(BASE, &["trainer.ppo_epochs=2"]);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    assert_eq!(s.trainer.importance_level, ImportanceLevel::Token);
    let s = f.ok(
        BASE,
        &[
            "trainer.ppo_epochs=3",
            "trainer.importance_level=sequence",
            "trainer.clip_delta=1.5",
        ],
    );
    let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("the resolved YAML reloads");
    assert_eq!(again.trainer, s.trainer);
    let (msg, _) = f.errs(
        BASE,
        &["trainer.ppo_epochs=2", "trainer.importance_level=none"],
    );
    assert!(
        msg.contains("importance_level") && msg.contains("stale"),
        "{msg}"
    );
    for bad in [
        "trainer.ppo_epochs=0",
        "trainer.clip_eps=0",
        "trainer.clip_delta=1.0",
    ] {
        let (msg, _) = f.errs(BASE, &[bad]);
        let key = bad
            .split('=')
            .next()
            .unwrap()
            .trim_start_matches("trainer.");
        assert!(msg.contains(key), "{bad}: {msg}");
    }
    // Clip keys without a ratio, or a ratio that is always 1, are warned about.
    let s = f.ok(BASE, &["trainer.clip_eps=0.1"]);
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("clip_eps") && w.contains("no effect")),
        "{:?}",
        s.warnings
    );
    let s = f.ok(BASE, &["trainer.importance_level=token"]);
    assert!(
        s.warnings.iter().any(|w| w.contains("exactly 1")),
        "{:?}",
        s.warnings
    );
    // Not for the algorithms without rollout log-probs.
    for alg in ["iac", "madpo"] {
        let (msg, _) = f.errs(
            BASE,
            &[&format!("trainer.algorithm={alg}"), "trainer.ppo_epochs=2"],
        );
        assert!(
            msg.contains("ppo_epochs") && msg.contains(alg),
            "{alg}: {msg}"
        );
        // Only what was written: the level `ppo_epochs` implies is not reported as well.
        assert!(!msg.contains("importance_level"), "{alg}: {msg}");
    }
}

/// `top_entropy_quantile`: 1 (every token) by default, a number in [0, 1], refused with MADPO
/// (no policy-gradient loss to mask) and warned about with an actor-critic.
#[test]
fn top_entropy_quantile_reads_checks_and_names_where_it_does_nothing() {
    let f = Fixture::new();
    assert_eq!(f.ok(BASE, &[]).trainer.top_entropy_quantile, 1.0);
    let s = f.ok(BASE, &["trainer.top_entropy_quantile=0.2"]);
    assert_eq!(s.trainer.top_entropy_quantile, 0.2);
    let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("the resolved YAML reloads");
    assert_eq!(again.trainer.top_entropy_quantile, 0.2);
    for bad in ["1.5", "-0.1"] {
        let (msg, _) = f.errs(BASE, &[&format!("trainer.top_entropy_quantile={bad}")]);
        assert!(
            msg.contains("top_entropy_quantile must be in [0, 1]"),
            "{bad}: {msg}"
        );
    }
    let (msg, _) = f.errs(
        BASE,
        &[
            "trainer.algorithm=madpo",
            "trainer.top_entropy_quantile=0.5",
        ],
    );
    assert!(msg.contains("`madpo` has none"), "{msg}");
    let s = f.ok(
        BASE,
        &["trainer.algorithm=iac", "trainer.top_entropy_quantile=0.5"],
    );
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("top_entropy_quantile") && w.contains("no effect")),
        "{:?}",
        s.warnings
    );
}

/// `kl_in_loss` (TRL's `beta`): 0 by default, ≥ 0, one of it and `kl_coef`, at temperature 1
/// only, refused with MADPO.
#[test]
fn kl_in_loss_reads_and_refuses_what_it_cannot_do() {
    let f = Fixture::new();
    assert_eq!(f.ok(BASE, &[]).trainer.kl_in_loss, 0.0);
    let s = f.ok(BASE, &["trainer.kl_in_loss=0.04"]);
    assert_eq!(s.trainer.kl_in_loss, 0.04);
    let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("the resolved YAML reloads");
    assert_eq!(again.trainer.kl_in_loss, 0.04);
    let (msg, _) = f.errs(BASE, &["trainer.kl_in_loss=-1"]);
    assert!(msg.contains("kl_in_loss"), "{msg}");
    let (msg, _) = f.errs(BASE, &["trainer.kl_in_loss=0.04", "trainer.kl_coef=0.1"]);
    assert!(msg.contains("charged twice"), "{msg}");
    let (msg, _) = f.errs(
        BASE,
        &[
            "trainer.kl_in_loss=0.04",
            "trainer.logprob_temperature=sampling",
        ],
    );
    assert!(msg.contains("temperature 1"), "{msg}");
    let (msg, _) = f.errs(
        BASE,
        &["trainer.algorithm=madpo", "trainer.kl_in_loss=0.04"],
    );
    assert!(msg.contains("`madpo` has none"), "{msg}");
}

/// `entropy_coef` (TRL's entropy bonus): 0 by default, a finite number ≥ 0, refused with MADPO
/// (no policy-gradient loss to add it to) and warned about with an actor-critic.
#[test]
fn entropy_coef_reads_checks_and_names_where_it_does_nothing() {
    let f = Fixture::new();
    assert_eq!(f.ok(BASE, &[]).trainer.entropy_coef, 0.0);
    let s = f.ok(BASE, &["trainer.entropy_coef=0.01"]);
    assert_eq!(s.trainer.entropy_coef, 0.01);
    let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("the resolved YAML reloads");
    assert_eq!(again.trainer.entropy_coef, 0.01);
    for bad in ["-0.01", ".nan", ".inf"] {
        let (msg, _) = f.errs(BASE, &[&format!("trainer.entropy_coef={bad}")]);
        assert!(msg.contains("trainer.entropy_coef"), "{bad}: {msg}");
        assert!(
            msg.contains("must be ≥ 0") || msg.contains("not a finite number"),
            "{bad}: {msg}"
        );
    }
    let (msg, _) = f.errs(
        BASE,
        &["trainer.algorithm=madpo", "trainer.entropy_coef=0.01"],
    );
    assert!(
        msg.contains("entropy_coef") && msg.contains("`madpo` has none"),
        "{msg}"
    );
    let s = f.ok(
        BASE,
        &["trainer.algorithm=iac", "trainer.entropy_coef=0.01"],
    );
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("entropy_coef") && w.contains("no effect")),
        "{:?}",
        s.warnings
    );
}

/// Adaptive entropy control: off by default with TRL's settings; its bounds ordered; its
/// settings warned about without it; refused with MADPO.
#[test]
fn adaptive_entropy_reads_checks_and_warns_when_moot() {
    let f = Fixture::new();
    let t = f.ok(BASE, &[]).trainer;
    assert!(!t.use_adaptive_entropy);
    assert_eq!(
        (
            t.entropy_coef_min,
            t.entropy_coef_max,
            t.entropy_coef_delta,
            t.entropy_target
        ),
        (0.0, 1.0, 0.005, 0.2)
    );
    let on = [
        "trainer.use_adaptive_entropy=true",
        "trainer.entropy_target=1.5",
        "trainer.entropy_coef_max=0.1",
    ];
    let s = f.ok(BASE, &on);
    assert!(s.trainer.use_adaptive_entropy && s.trainer.entropy_target == 1.5);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let again = load_str(&s.to_yaml(), &f.origin(), &[]).expect("the resolved YAML reloads");
    assert_eq!(again.trainer, s.trainer);
    let (msg, _) = f.errs(
        BASE,
        &[
            "trainer.use_adaptive_entropy=true",
            "trainer.entropy_coef_min=0.5",
            "trainer.entropy_coef_max=0.1",
        ],
    );
    assert!(
        msg.contains("trainer.entropy_coef_min") && msg.contains("above entropy_coef_max"),
        "{msg}"
    );
    let (msg, _) = f.errs(BASE, &["trainer.entropy_coef_delta=-1"]);
    assert!(msg.contains("entropy_coef_delta must be ≥ 0"), "{msg}");
    let s = f.ok(BASE, &["trainer.entropy_target=1.5"]);
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("entropy_target") && w.contains("use_adaptive_entropy")),
        "{:?}",
        s.warnings
    );
    let (msg, _) = f.errs(
        BASE,
        &[
            "trainer.algorithm=madpo",
            "trainer.use_adaptive_entropy=true",
        ],
    );
    assert!(
        msg.contains("use_adaptive_entropy") && msg.contains("`madpo` has none"),
        "{msg}"
    );
}
