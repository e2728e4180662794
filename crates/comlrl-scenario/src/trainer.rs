//! The `trainer` section's cross-key checks: the key table (`trainer_keys.rs`) applies defaults,
//! checks each key's range and warns about moot keys; this adds what involves several keys or
//! the rest of the scenario (mini-batch vs buffer, baseline vs normalization, `cross` size).
use crate::collect::Diags;
use crate::plan::{
    AdvantageMode, AdvantageScale, AdvantageStd, Dtype, ImportanceLevel, JointMode, Preset,
    RewardAggregation, TrainerPlan,
};
use crate::positions::KeyPath;
use crate::raw::RawTrainer;
use crate::LoadOptions;
use std::path::Path;

/// What the trainer checks need to know about the rest of the scenario.
pub(crate) struct TrainerContext<'a> {
    pub base: &'a Path,
    pub opts: &'a LoadOptions,
    pub has_eval: bool,
    pub num_agents: usize,
    /// The actor-critic algorithm MARLHF trains with online (`preference.rl_algorithm: iac`
    /// or `maac` under `algorithm: marlhf`), whose critic the `critic` section configures.
    pub critic_for: Option<crate::plan::Algorithm>,
}

impl crate::keys::SectionContext for TrainerContext<'_> {
    fn has_eval(&self) -> bool {
        self.has_eval
    }
}

/// `reward_aggregation: normalize_then_sum` beside the reward it reshapes: with one term it is
/// the plain z-score of that term, and the processors shape only the logged reward.
pub(crate) fn check_reward_aggregation(
    d: &mut Diags,
    t: &TrainerPlan,
    r: &crate::plan::RewardPlan,
) {
    if t.reward_aggregation != RewardAggregation::NormalizeThenSum {
        return;
    }
    let at = KeyPath::root().key("trainer").key("reward_aggregation");
    if r.terms.len() < 2 {
        d.warn(
            &at,
            "`normalize_then_sum` with a single reward term only z-scores that term within each group, which advantage normalization does anyway; it matters with two or more terms",
        );
    }
    if !r.processors.is_empty() {
        d.warn(
            &at,
            "with `normalize_then_sum` the training return is the weighted sum of the z-scored raw terms, so `reward_processors` shape only the logged reward; remove them or use `sum_then_normalize`",
        );
    }
}

/// `trainer.preset`: a key the recipe sets, written with another value, contradicts it.
fn check_preset(d: &mut Diags, p: &KeyPath, raw: &RawTrainer, t: &TrainerPlan) {
    let Some(preset) = t.preset else {
        return;
    };
    let name = preset.name();
    let some = Some(preset);
    // (key, written, the value it resolved to, the preset's value), the last two as a
    // scenario writes them; only the keys this preset sets.
    let mut rows = vec![
        (
            "loss_aggregation",
            raw.loss_aggregation.is_some(),
            serde_name(&t.loss_aggregation),
            serde_name(&Preset::loss_aggregation(some)),
        ),
        (
            "advantage_scale",
            raw.advantage_scale.is_some(),
            serde_name(&t.advantage_scale),
            serde_name(&Preset::advantage_scale(some)),
        ),
    ];
    if matches!(preset, Preset::Dapo | Preset::Gspo) {
        rows.extend([
            (
                "mask_truncated_completions",
                raw.mask_truncated_completions.is_some(),
                serde_name(&t.mask_truncated_completions),
                serde_name(&Preset::mask_truncated_completions(some)),
            ),
            (
                "importance_level",
                raw.importance_level.is_some(),
                serde_name(&t.importance_level),
                serde_name(&Preset::importance_level(some, t.ppo_epochs)),
            ),
            (
                "clip_eps",
                raw.clip_eps.is_some(),
                serde_name(&t.clip_eps),
                serde_name(&Preset::clip_eps(some)),
            ),
            (
                "clip_eps_high",
                raw.clip_eps_high.is_some(),
                serde_name(&t.clip_eps_high),
                serde_name(&Preset::clip_eps_high(some)),
            ),
        ]);
    }
    for (key, written, got, want) in rows {
        if written && got != want {
            d.invalid(
                &p.key(key),
                format!("contradicts `trainer.preset: {name}`, which sets `{key}: {want}`"),
                format!("remove `{key}` or the preset"),
            );
        }
    }
}

/// The clipped ratio of re-used samples (`ppo_epochs`, `importance_level`, the clip keys):
/// MAGRPO's family only, a ratio whenever a buffer is passed over more than once, and clip
/// keys that only matter with a ratio.
fn check_ratio(d: &mut Diags, p: &KeyPath, t: &TrainerPlan, alg: crate::plan::Algorithm) {
    // Set away from their defaults (the resolved scenario writes every key, so a written key
    // at its default says nothing).
    let written = [
        ("ppo_epochs", t.ppo_epochs != 1),
        (
            "importance_level",
            t.importance_level != Preset::importance_level(t.preset, t.ppo_epochs),
        ),
        ("clip_eps", t.clip_eps != Preset::clip_eps(t.preset)),
        (
            "clip_eps_high",
            t.clip_eps_high != Preset::clip_eps_high(t.preset),
        ),
        ("clip_delta", t.clip_delta.is_some()),
    ];
    if alg.has_critic()
        || matches!(
            alg,
            crate::plan::Algorithm::Madpo | crate::plan::Algorithm::MadpoIter
        )
    {
        for (key, set) in written {
            if set {
                d.invalid(
                    &p.key(key),
                    format!(
                        "the clipped ratio of re-used samples is MAGRPO's (and its family's); `{}` has no rollout log-probs to compare with",
                        alg.name()
                    ),
                    format!("remove `{key}`, or use `algorithm: magrpo`"),
                );
            }
        }
        return;
    }
    if t.ppo_epochs > 1 && t.importance_level == ImportanceLevel::None {
        d.invalid(
            &p.key("importance_level"),
            format!(
                "`none` with ppo_epochs: {}: later passes would step on stale samples with no correction",
                t.ppo_epochs
            ),
            "remove `importance_level` (`token` with several passes) or set `ppo_epochs: 1`",
        );
    }
    if t.importance_level != ImportanceLevel::None
        && t.ppo_epochs == 1
        && t.train_batch_size >= t.rollout_buffer_size
    {
        d.warn(
            &p.key("importance_level"),
            "the ratio is exactly 1 with one pass of one mini-batch per buffer (every step is on-policy); it matters with `ppo_epochs` above 1 or `train_batch_size` below `rollout_buffer_size`",
        );
    }
    if t.importance_level == ImportanceLevel::None {
        for (key, set) in &written[2..] {
            if *set {
                d.warn(
                    &p.key(key),
                    "has no effect with importance_level: none (no ratio to clip; set `ppo_epochs` above 1 or `importance_level: token`)",
                );
            }
        }
    }
}

/// A plain setting as a scenario writes it.
fn serde_name<T: serde::Serialize>(v: &T) -> String {
    crate::keys::shown(v).trim_matches('`').to_string()
}

pub(crate) fn resolve(d: &mut Diags, raw: RawTrainer, cx: &TrainerContext) -> TrainerPlan {
    let p = KeyPath::root().key("trainer");
    let at = |k: &str| p.key(k);
    let t = TrainerPlan::from_raw(d, &p, &raw, cx);
    let (num_generations, rollout_buffer_size, train_batch_size) =
        (t.num_generations, t.rollout_buffer_size, t.train_batch_size);
    let (joint_mode, advantage_mode) = (t.joint_mode, t.advantage_mode);
    if let Some(b) = crate::trainer_keys::group_size(t.algorithm, num_generations) {
        d.invalid(&at("num_generations"), b.message, b.hint);
    }
    // The algorithm that trains the agents online: MARLHF's actor-critic backend where it has
    // one.
    let online = cx.critic_for.unwrap_or(t.algorithm);
    if online.has_critic() {
        crate::critic_keys::check_trainer(d, &p, &raw, &t);
    }
    // Under `madpo` a mini-batch is train_batch_size preference pairs, not buffered prompts.
    let pairs = matches!(
        t.algorithm,
        crate::plan::Algorithm::Madpo | crate::plan::Algorithm::MadpoIter
    );
    if train_batch_size > rollout_buffer_size && rollout_buffer_size >= 1 && !pairs {
        d.warn(&at("train_batch_size"), format!("{train_batch_size} is larger than rollout_buffer_size ({rollout_buffer_size}); a mini-batch never holds more than the buffer, so this acts as {rollout_buffer_size}"));
    }
    check_preset(d, &p, &raw, &t);
    check_ratio(d, &p, &t, online);
    if t.kl_in_loss != 0.0 {
        if t.kl_coef != 0.0 {
            d.invalid(
                &at("kl_in_loss"),
                "with `kl_coef` also set the reference KL would be charged twice (in the return and in the loss)",
                "keep one: `kl_coef` (CoMLRL's reward shaping) or `kl_in_loss` (TRL's `beta`)",
            );
        }
        if t.logprob_temperature != crate::plan::LogprobTemperature::One {
            d.invalid(
                &at("kl_in_loss"),
                "the reference log-probs are taken at temperature 1, the loss's at the sampling temperature",
                "set `logprob_temperature: 1`, or use `kl_coef` instead",
            );
        }
        if online == crate::plan::Algorithm::Madpo {
            d.invalid(
                &at("kl_in_loss"),
                "the KL term is added to MAGRPO's (and its family's) policy-gradient loss; `madpo` has none",
                "remove `kl_in_loss`, or use `algorithm: magrpo`",
            );
        }
    }
    // The actor-critics warn (critic_keys); MADPO's loss is over preference pairs.
    if online == crate::plan::Algorithm::Madpo && t.top_entropy_quantile < 1.0 {
        d.invalid(
            &at("top_entropy_quantile"),
            "the high-entropy token mask weighs MAGRPO's (and its family's) policy-gradient loss; `madpo` has none",
            "remove `top_entropy_quantile`, or use `algorithm: magrpo`",
        );
    }
    if t.entropy_coef_min > t.entropy_coef_max {
        d.invalid(
            &at("entropy_coef_min"),
            format!(
                "{} is above entropy_coef_max ({}): the adaptive coefficient has no room",
                t.entropy_coef_min, t.entropy_coef_max
            ),
            "set entropy_coef_min ≤ entropy_coef_max (TRL's defaults: 0 and 1)",
        );
    }
    if online == crate::plan::Algorithm::Madpo && t.use_adaptive_entropy {
        d.invalid(
            &at("use_adaptive_entropy"),
            "the entropy bonus is a term of MAGRPO's (and its family's) policy-gradient loss; `madpo` has none",
            "remove `use_adaptive_entropy`, or use `algorithm: magrpo`",
        );
    }
    if online == crate::plan::Algorithm::Madpo && t.entropy_coef != 0.0 {
        d.invalid(
            &at("entropy_coef"),
            "the entropy bonus is a term of MAGRPO's (and its family's) policy-gradient loss; `madpo` has none",
            "remove `entropy_coef`, or use `algorithm: magrpo`",
        );
    }
    let fixed_mode = t.algorithm.fixed_advantage_mode();
    if let Some(fixed) = fixed_mode {
        // CoMLRL's MARLOOConfig(advantage_mode="mean") would quietly be MAGRPO under MARLOO's
        // name; here the two keys must agree.
        if advantage_mode != fixed {
            let alg = t.algorithm.name();
            d.invalid(
                &at("advantage_mode"),
                format!(
                    "`{}` contradicts `trainer.algorithm: {alg}`, which is MAGRPO with `advantage_mode: {}`",
                    mode_name(advantage_mode),
                    mode_name(fixed)
                ),
                format!(
                    "remove `advantage_mode` ({alg} sets `{}`), or write `algorithm: magrpo` with `advantage_mode: {}`",
                    mode_name(fixed),
                    mode_name(advantage_mode)
                ),
            );
        } else if t.advantage_normalization && t.advantage_scale == AdvantageScale::Group {
            d.warn(&at("algorithm"), format!(
                "`{}` trains exactly as `magrpo` while advantage_normalization is true (CoMLRL's default for this trainer too): normalization removes the `{}` baseline's shift and scale; set `advantage_normalization: false` for the baseline to matter",
                t.algorithm.name(),
                mode_name(fixed)
            ));
        }
    }
    if t.advantage_normalization
        && fixed_mode.is_none()
        && t.advantage_scale == AdvantageScale::Group
        && raw.advantage_mode.is_some()
        && advantage_mode != AdvantageMode::Mean
    {
        d.warn(&at("advantage_mode"), format!(
            "`{}` gives the same advantages as `mean` while advantage_normalization is true: every baseline shifts the group's returns (rloo also rescales them), and normalization removes shift and scale; set `advantage_normalization: false` for the baseline to matter",
            mode_name(advantage_mode)
        ));
    }
    // The spread keys stay in the resolved scenario with their defaults (they are plain
    // settings); another value where nothing is divided by a spread is warned about.
    let (scale_set, std_set) = (
        t.advantage_scale != AdvantageScale::Group,
        t.advantage_std != AdvantageStd::Population,
    );
    if !t.advantage_normalization {
        for (key, set) in [("advantage_scale", scale_set), ("advantage_std", std_set)] {
            if set {
                d.warn(
                    &at(key),
                    "has no effect with advantage_normalization: false (advantages are not re-centred or scaled)",
                );
            }
        }
    } else if t.advantage_scale == AdvantageScale::None && std_set {
        d.warn(
            &at("advantage_std"),
            "has no effect with advantage_scale: none (advantages are only re-centred)",
        );
    }
    if raw.joint_mode.is_some() && joint_mode == JointMode::Cross && cx.num_agents == 1 {
        d.warn(
            &at("joint_mode"),
            "`cross` is the same as `aligned` with a single agent",
        );
    }
    if t.compute_dtype == Dtype::Bf16 && !t.gradient_checkpointing {
        d.invalid(
            &at("compute_dtype"),
            "`bf16` runs on the recomputed loss only, and gradient_checkpointing is false",
            "set `gradient_checkpointing: true` (the default), or `compute_dtype: f32`",
        );
    }
    check_centralized(d, &p, &raw, &t, cx.num_agents);
    let max_joint_actions = t.max_joint_actions;
    if joint_mode == JointMode::Cross && cx.num_agents > 1 {
        // Checked: num_generations^agents overflows usize long before it stops being absurd.
        let joint = u32::try_from(cx.num_agents)
            .ok()
            .and_then(|n| num_generations.checked_pow(n));
        let shown = joint.map_or_else(|| format!("more than {}", usize::MAX), |j| j.to_string());
        if joint.is_none_or(|j| j > max_joint_actions) {
            d.invalid(
                &at("joint_mode"),
                format!(
                    "`cross` with {num_generations} generations and {} agents scores {num_generations}^{} = {shown} joint actions per prompt (and turn), above trainer.max_joint_actions ({max_joint_actions})",
                    cx.num_agents, cx.num_agents
                ),
                "use `joint_mode: aligned`, fewer num_generations or agents, or raise `trainer.max_joint_actions` knowingly",
            );
        }
    }

    t
}

/// `collaboration_mode: centralized`: CoMLRL's centralized trainers are MAGRPO's, MADPO's and
/// MARLHF's (ported; the iterative ones are not), single-turn, and split one answer into two or
/// more agents' outputs.
fn check_centralized(d: &mut Diags, p: &KeyPath, raw: &RawTrainer, t: &TrainerPlan, agents: usize) {
    use crate::plan::{Algorithm as A, CollaborationMode};
    if t.collaboration_mode != CollaborationMode::Centralized {
        return;
    }
    let at = p.key("collaboration_mode");
    if !matches!(
        t.algorithm,
        A::Magrpo | A::Mareinforce | A::Marloo | A::Maremax | A::Madpo | A::Marlhf
    ) {
        d.invalid(
            &at,
            format!(
                "`centralized` is ported for MAGRPO and its family, MADPO and MARLHF only, and trainer.algorithm is `{}`",
                t.algorithm.name()
            ),
            "use `algorithm: magrpo` (or `mareinforce`, `marloo`, `maremax`, `madpo`, `marlhf`), or `collaboration_mode: decentralized`",
        );
    }
    if t.num_turns != 1 {
        d.invalid(
            &at,
            format!(
                "`centralized` trains single-turn answers (CoMLRL: num_turns=1 only), and num_turns is {}",
                t.num_turns
            ),
            "set `num_turns: 1`, or use `collaboration_mode: decentralized`",
        );
    }
    if agents < 2 {
        d.invalid(
            &at,
            format!("`centralized` writes the outputs of two or more agents in one answer, and the scenario has {agents}"),
            "give `agents` two or more entries (each one's `template` is its part of the prompt), or use `collaboration_mode: decentralized`",
        );
    }
    if raw.joint_mode == Some(JointMode::Cross) {
        d.warn(
            &p.key("joint_mode"),
            "has no effect with `collaboration_mode: centralized`: one policy writes each joint answer whole",
        );
    }
}

pub(crate) fn mode_name(m: AdvantageMode) -> &'static str {
    match m {
        AdvantageMode::Mean => "mean",
        AdvantageMode::Raw => "raw",
        AdvantageMode::Max => "max",
        AdvantageMode::Rloo => "rloo",
    }
}

impl TrainerPlan {
    /// Epochs the run steps through: `num_train_epochs`, after the algorithm's collecting
    /// epochs (MARLHF's preference epoch).
    pub fn run_epochs(&self) -> usize {
        self.num_train_epochs
            .saturating_add(self.algorithm.collect_epochs())
    }
}
