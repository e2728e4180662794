//! The `trainer` section: CoMLRL's `MAGRPOConfig` settings plus optimizer extras — defaults
//! applied, ranges checked, and warnings for settings that are moot in this combination.
use crate::code::resolve_code;
use crate::collect::Diags;
use crate::defaults as def;
use crate::error::ErrorKind;
use crate::plan::{AdvantageMode, JointMode, TrainerPlan, TransitionPlan};
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
}

pub(crate) fn resolve(d: &mut Diags, raw: RawTrainer, cx: &TrainerContext) -> TrainerPlan {
    let p = KeyPath::root().key("trainer");
    let at = |k: &str| p.key(k);

    let num_train_epochs = raw.num_train_epochs.unwrap_or(def::NUM_TRAIN_EPOCHS);
    if num_train_epochs < 1 {
        d.invalid(
            &at("num_train_epochs"),
            "num_train_epochs must be at least 1",
            "set `num_train_epochs: 1` or more",
        );
    }
    let agent_learning_rate = raw.agent_learning_rate.unwrap_or(def::AGENT_LEARNING_RATE);
    check_lr(d, &at("agent_learning_rate"), agent_learning_rate);

    let num_generations = raw.num_generations.unwrap_or(def::NUM_GENERATIONS);
    if num_generations < 2 {
        d.invalid(
            &at("num_generations"),
            format!("num_generations must be at least 2 (got {num_generations}): the group baseline compares several generations of the same prompt"),
            "set `num_generations: 2` or more (CoMLRL default 4; the story example uses 8)",
        );
    }
    let joint_mode = raw.joint_mode.unwrap_or(def::JOINT_MODE);
    let advantage_mode = raw.advantage_mode.unwrap_or(def::ADVANTAGE_MODE);
    let advantage_normalization = raw
        .advantage_normalization
        .unwrap_or(def::ADVANTAGE_NORMALIZATION);

    let rollout_buffer_size = raw.rollout_buffer_size.unwrap_or(def::ROLLOUT_BUFFER_SIZE);
    if rollout_buffer_size < 1 {
        d.invalid(
            &at("rollout_buffer_size"),
            "rollout_buffer_size must be at least 1",
            "set `rollout_buffer_size: 1` or more (CoMLRL default 2)",
        );
    }
    let train_batch_size = raw.train_batch_size.unwrap_or(rollout_buffer_size);
    if train_batch_size < 1 {
        d.invalid(
            &at("train_batch_size"),
            "train_batch_size must be at least 1",
            "set it to 1 or more, or remove it to use rollout_buffer_size",
        );
    } else if train_batch_size > rollout_buffer_size && rollout_buffer_size >= 1 {
        d.warn(&at("train_batch_size"), format!("{train_batch_size} is larger than rollout_buffer_size ({rollout_buffer_size}); a mini-batch never holds more than the buffer, so this acts as {rollout_buffer_size}"));
    }

    let num_turns = raw.num_turns.unwrap_or(def::NUM_TURNS);
    if num_turns < 1 {
        d.invalid(
            &at("num_turns"),
            "num_turns must be at least 1",
            "set `num_turns: 1` for single-turn training",
        );
    }
    let discount = raw.discount.unwrap_or(def::DISCOUNT);
    if !(0.0..=1.0).contains(&discount) {
        d.invalid(
            &at("discount"),
            format!("discount must be in [0, 1] (got {discount})"),
            "use e.g. `discount: 0.9`",
        );
    }
    let early_termination_threshold = match raw.early_termination_threshold {
        Some(v) => v,
        None => def::EARLY_TERMINATION_THRESHOLD,
    };
    let external_transition = transition(d, &raw, num_turns, cx);
    let multi_turn_only = [
        ("discount", raw.discount.is_some()),
        (
            "early_termination_threshold",
            raw.early_termination_threshold.is_some(),
        ),
        (
            "external_prompt_passthrough",
            raw.external_prompt_passthrough.is_some(),
        ),
    ];
    if num_turns == 1 {
        for (key, set) in multi_turn_only {
            if set {
                d.warn(
                    &at(key),
                    "has no effect with num_turns: 1 (it only matters between turns)",
                );
            }
        }
    }

    let eval_interval = raw.eval_interval.unwrap_or(def::EVAL_INTERVAL);
    let eval_num_samples = raw.eval_num_samples.unwrap_or(def::EVAL_NUM_SAMPLES);
    let eval_batch_size = raw.eval_batch_size.unwrap_or(def::EVAL_BATCH_SIZE);
    if eval_batch_size < 1 {
        d.invalid(
            &at("eval_batch_size"),
            "eval_batch_size must be at least 1",
            "set `eval_batch_size: 1`",
        );
    }
    if !cx.has_eval {
        for (key, set) in [
            ("eval_interval", raw.eval_interval.is_some()),
            ("eval_num_samples", raw.eval_num_samples.is_some()),
            ("eval_batch_size", raw.eval_batch_size.is_some()),
        ] {
            if set {
                d.warn(
                    &at(key),
                    "has no effect without an evaluation set (add `dataset.eval`)",
                );
            }
        }
    }

    let max_grad_norm = raw.max_grad_norm.or(def::MAX_GRAD_NORM);
    if let Some(n) = max_grad_norm {
        if !(n > 0.0 && n.is_finite()) {
            d.invalid(
                &at("max_grad_norm"),
                format!("max_grad_norm must be > 0 (got {n})"),
                "use e.g. `max_grad_norm: 1.0`, or remove it to disable clipping",
            );
        }
    }
    let kl_coef = raw.kl_coef.unwrap_or(def::KL_COEF);
    if !(kl_coef >= 0.0 && kl_coef.is_finite()) {
        d.invalid(
            &at("kl_coef"),
            format!("kl_coef must be ≥ 0 (got {kl_coef})"),
            "use 0 to disable the reference-KL penalty, or a small value such as 0.04",
        );
    }
    let adam_beta1 = raw.adam_beta1.unwrap_or(def::ADAM_BETA1);
    let adam_beta2 = raw.adam_beta2.unwrap_or(def::ADAM_BETA2);
    for (key, b) in [("adam_beta1", adam_beta1), ("adam_beta2", adam_beta2)] {
        if !(0.0..1.0).contains(&b) {
            d.invalid(
                &at(key),
                format!("{key} must be in [0, 1) (got {b})"),
                "torch defaults: adam_beta1 0.9, adam_beta2 0.999",
            );
        }
    }
    let adam_epsilon = raw.adam_epsilon.unwrap_or(def::ADAM_EPSILON);
    if !(adam_epsilon > 0.0 && adam_epsilon.is_finite()) {
        d.invalid(
            &at("adam_epsilon"),
            format!("adam_epsilon must be > 0 (got {adam_epsilon})"),
            "torch default: 1e-8",
        );
    }
    let weight_decay = raw.weight_decay.unwrap_or(def::WEIGHT_DECAY);
    if !(weight_decay >= 0.0 && weight_decay.is_finite()) {
        d.invalid(
            &at("weight_decay"),
            format!("weight_decay must be ≥ 0 (got {weight_decay})"),
            "torch AdamW default: 0.01; 0 disables it",
        );
    }

    if advantage_normalization
        && raw.advantage_mode.is_some()
        && advantage_mode != AdvantageMode::Mean
    {
        d.warn(&at("advantage_mode"), format!(
            "`{}` gives the same advantages as `mean` while advantage_normalization is true: every baseline shifts the group's returns (rloo also rescales them), and normalization removes shift and scale; set `advantage_normalization: false` for the baseline to matter",
            mode_name(advantage_mode)
        ));
    }
    if raw.joint_mode.is_some() && joint_mode == JointMode::Cross && cx.num_agents == 1 {
        d.warn(
            &at("joint_mode"),
            "`cross` is the same as `aligned` with a single agent",
        );
    }
    let max_joint_actions = raw.max_joint_actions.unwrap_or(def::MAX_JOINT_ACTIONS);
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

    TrainerPlan {
        num_train_epochs,
        agent_learning_rate,
        num_generations,
        joint_mode,
        advantage_mode,
        advantage_normalization,
        rollout_buffer_size,
        train_batch_size,
        num_turns,
        discount,
        early_termination_threshold,
        external_transition,
        external_prompt_passthrough: raw
            .external_prompt_passthrough
            .unwrap_or(def::EXTERNAL_PROMPT_PASSTHROUGH),
        eval_interval,
        eval_num_samples,
        eval_batch_size,
        max_grad_norm,
        warmup_steps: raw.warmup_steps.unwrap_or(def::WARMUP_STEPS),
        lr_scheduler: raw.lr_scheduler.unwrap_or(def::LR_SCHEDULER),
        kl_coef,
        adam_beta1,
        adam_beta2,
        adam_epsilon,
        weight_decay,
        parallel_sampling: raw.parallel_sampling.unwrap_or(def::PARALLEL_SAMPLING),
        batch_buffer_sampling: raw
            .batch_buffer_sampling
            .unwrap_or(def::BATCH_BUFFER_SAMPLING),
        parallel_updates: raw.parallel_updates.unwrap_or(def::PARALLEL_UPDATES),
        micro_batch_size: raw.micro_batch_size.unwrap_or(def::MICRO_BATCH_SIZE),
        max_joint_actions,
        gradient_checkpointing: raw
            .gradient_checkpointing
            .unwrap_or(def::GRADIENT_CHECKPOINTING),
    }
}

/// A learning rate must be a positive finite number.
pub(crate) fn check_lr(d: &mut Diags, path: &KeyPath, lr: f64) {
    if !(lr > 0.0 && lr.is_finite()) {
        d.invalid(
            path,
            format!("the learning rate must be > 0 (got {lr})"),
            "use a small positive value, e.g. `5e-6` (CoMLRL default) or `5e-5`",
        );
    }
}

fn transition(
    d: &mut Diags,
    raw: &RawTrainer,
    num_turns: usize,
    cx: &TrainerContext,
) -> Option<TransitionPlan> {
    let path = KeyPath::root().key("trainer").key("external_transition");
    match &raw.external_transition {
        None if num_turns > 1 => {
            d.error(
                ErrorKind::MissingKey,
                &KeyPath::root().key("trainer").key("num_turns"),
                format!("num_turns: {num_turns} needs `trainer.external_transition`, which writes each agent's next-turn prompt"),
                Some("add `external_transition: {rhai: path/to/transition.rhai}` under `trainer`, or set `num_turns: 1`".into()),
            );
            None
        }
        None => None,
        Some(t) => {
            if num_turns == 1 {
                d.warn(&path, "is never called with num_turns: 1");
            }
            let source = resolve_code(
                d,
                &path,
                t.rhai.as_deref(),
                t.plugin.as_deref(),
                cx.base,
                cx.opts,
            )?;
            let params = t
                .params
                .clone()
                .unwrap_or_else(|| serde_json::Value::Object(Default::default()));
            if !params.is_object() {
                d.error(
                    ErrorKind::WrongType,
                    &path.key("params"),
                    "params must be a mapping",
                    Some("write `params: {key: value}`".into()),
                );
            }
            Some(TransitionPlan { source, params })
        }
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
