//! The `trainer.critic` section's key table (`keys.rs` has the macro and the row syntax): the
//! critic of the actor-critic algorithms (`trainer.algorithm: iac` or `maac`), every field of
//! CoMLRL 1.4.3's `IACConfig` and `MAACConfig` that concerns the critic under a key of its own. [`RawCritic`],
//! [`CriticPlan`] and the docs table derive from it; `resolve` turns the section into the
//! trainer plan's `critic` (`None` under an algorithm without a critic, where writing it is
//! warned about).
//!
//! Also here: the trainer defaults that CoMLRL's `IACConfig` sets apart from its
//! `MAGRPOConfig` (generations, buffer, epochs, discount), as `Algorithm` methods the trainer
//! table's defaults name.
use crate::agents::model_ref;
use crate::collect::Diags;
use crate::keys::SectionContext;
use crate::keys::{at_least, if_set, learning_rate, non_negative, positive, section};
use crate::plan::{AdapterPlan, Algorithm, BaseDtype, ModelRef, ModelSource};
use crate::positions::KeyPath;
use crate::raw::RawAdapter;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Where a critic reads its value (`trainer.critic.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CriticType {
    /// V(h): the value of the prompt alone, read at its last token.
    V,
    /// Q(h, a): the value of prompt and response, read at the response's last token.
    Q,
}

/// What the critic's defaults and resolvers need from the rest of the scenario.
pub(crate) struct CriticContext<'a> {
    /// The scenario's directory (a relative critic model path).
    pub base: &'a Path,
}

impl SectionContext for CriticContext<'_> {}

section! {
    raw /// `trainer.critic:` — the critic of `algorithm: iac` or `maac` (CoMLRL's critic fields).
        RawCritic;
    plan /// The critic's settings, defaults applied.
        CriticPlan, context cx: CriticContext<'_>;
    keys {
        /// `true`: each agent's critic is a causal LM of its own with a value head, trained by
        /// its own AdamW at `learning_rate` (CoMLRL `use_separate_critic`). `false`: a value
        /// head on the agent's own backbone, trained at the agent's learning rate with the
        /// actor (its value gradient joins the actor's; `model` and `learning_rate` do not
        /// apply), its value clipped by `value_clip_range`. Not with `agents.replicas` > 1.
        /// `maac`'s one critic is always a model of its own (`false` is an error there).
        separate: bool = true, kind "bool", why "CoMLRL `use_separate_critic`";
        /// The critic's AdamW learning rate (CoMLRL `critic_learning_rate`; the other AdamW
        /// settings are the trainer's).
        learning_rate: f64 = 5.0e-6, kind "number > 0", why "CoMLRL `critic_learning_rate`",
            check learning_rate;
        /// What the critic values (CoMLRL `critic_type`): `v`, V(h) of the prompt alone, read
        /// at its last token; `q`, Q(h, a) of prompt and response, read at the response's last
        /// token. `maac`'s critic reads the joint text (`[Agent 0] <prompt>\n\n[Agent 1] …`,
        /// with `q` followed by the joint action) at its last token.
        r#type: CriticType = CriticType::V, kind "`v` \\| `q`", why "CoMLRL `critic_type`";
        /// The value head's hidden width d: `Linear(H → d) → tanh → Linear(d → 1)`; `null` is
        /// one `Linear(H → 1)` (CoMLRL `critic_value_head_hidden_dim` for a separate critic,
        /// `value_head_hidden_dim` for a head on the actor). Weights N(0, 0.02²), biases 0.
        value_head_hidden_dim: Option<usize> = None, kind "integer ≥ 1 or `null`", shown "`null`",
            why "CoMLRL", check if_set(at_least(1, "use `value_head_hidden_dim: null` for one linear layer"));
        /// The critic loss is this times the mean squared error between target and value
        /// (CoMLRL `value_loss_coef`).
        value_loss_coef: f64 = 0.6, kind "number ≥ 0", why "CoMLRL",
            check non_negative("CoMLRL default: 0.6");
        /// A value head on the actor (`separate: false`) clips its new value to V_old ± this
        /// in the loss (PPO's value clipping, CoMLRL `value_clip_range`); `null` does not clip.
        /// A separate critic never clips, as in CoMLRL.
        value_clip_range: Option<f64> = Some(0.2), kind "number > 0 or `null`", why "CoMLRL",
            check if_set(positive("use e.g. `value_clip_range: 0.2`, or `null` not to clip"));
        /// `maac` only. CoMLRL 1.4.3 steps its one critic inside each agent's update, so the
        /// critic takes N optimizer steps per mini-batch (one per agent, each on that agent's
        /// targets, the later ones reading the critic the earlier ones moved). `false` (the
        /// fix): one step per mini-batch on every agent's targets, mean_(a,b)((t_a,b − V_b)²).
        /// `true` reproduces CoMLRL.
        compat_critic_steps: bool = false, kind "bool",
            why "the fix (CoMLRL 1.4.3 steps the critic once per agent)";
        /// CoMLRL 1.4.3's IAC and MAAC cut each sampled response at its first pad token before
        /// the actor's loss, so wherever the tokenizer's pad is its EOS (Qwen2.5's; CoMLRL makes
        /// it so for a tokenizer without one) the EOS never enters it and the agents are never
        /// trained on when to stop. `false` (the fix): every sampled token counts, as in
        /// comlrl's MAGRPO. `true` reproduces CoMLRL.
        compat_pad_cut: bool = false, kind "bool",
            why "the fix (CoMLRL 1.4.3 leaves a pad-equal EOS out of the actor's loss)";
        /// How a separate critic with an `adapter` holds its frozen base's projections, as
        /// `agents.base_dtype` does for an agent: `f32`, `bf16` or `q8_0`. A critic whose model
        /// and base dtype are those of an adapted agent's base shares that base (one copy in
        /// memory); critics with adapters on the same model and base dtype share one base among
        /// themselves. Needs `adapter`.
        base_dtype: BaseDtype = BaseDtype::F32, kind "`f32` \\| `bf16` \\| `q8_0`",
            why "the base exactly as it loads";
    }
    resolved {
        /// The critic's causal LM, written as an agent's `model` (`builtin:tiny`, a local
        /// directory, a `*.gguf` file, a hub id); every agent gets a critic of its own loaded
        /// from it. Absent: each agent's critic starts from that agent's own model (CoMLRL
        /// needs `critic_model` named; the actor's is the usual choice). `maac`: its one critic,
        /// by default agent 0's model.
        model: String => Option<ModelRef>, kind "string", shown "the agent's model", why "",
            via |d, p, raw| raw.map(|spec| model_ref(d, &p.key("model"), spec, cx.base)),
            emit model_setting;
        /// LoRA adapters on a separate critic's frozen backbone (`separate: true`): the same
        /// settings as `agents.adapter` (`{rank, alpha, dropout, targets, init, rslora}`, the
        /// same defaults and checks). Only the adapters and the value head train, with AdamW
        /// state for those alone; the critic saves as a PEFT adapter directory beside its
        /// `value_head.safetensors`. A critic on the model of an adapted agent (same file, same
        /// `base_dtype`) shares that agent's base. With `separate: false` there is no critic
        /// model to adapt (the head reads the agent's backbone, adapted when the agent is):
        /// an error. See [algorithms.md](algorithms.md#critics-with-adapters-trainercriticadapter).
        adapter: RawAdapter => Option<AdapterPlan>, kind "mapping", shown "none",
            why "a critic fully fine-tuned, as CoMLRL trains its critics",
            via |d, p, raw| crate::adapter::resolve(d, p, raw, cx.base, base_dtype.to_owned()),
            emit crate::adapter::emit;
    }
}

fn model_setting(m: &Option<ModelRef>) -> Option<String> {
    m.as_ref().map(|m| match &m.source {
        ModelSource::Local(p) => p.display().to_string(),
        _ => m.spec.clone(),
    })
}

/// The trainer's `critic` for `algorithm`: the section resolved under an actor-critic
/// algorithm (all defaults when absent), `None` otherwise (a written one is warned about).
pub(crate) fn resolve(
    d: &mut Diags,
    p: &KeyPath,
    raw: Option<&RawCritic>,
    algorithm: Algorithm,
    base: &Path,
) -> Option<CriticPlan> {
    if !algorithm.has_critic() {
        if raw.is_some() {
            d.warn(
                p,
                format!(
                    "has no effect with algorithm: {} (only `iac` and `maac` train a critic)",
                    algorithm.name()
                ),
            );
        }
        return None;
    }
    let raw = raw.cloned().unwrap_or_default();
    let plan = CriticPlan::from_raw(d, p, &raw, &CriticContext { base });
    match algorithm {
        Algorithm::Maac => {
            if !plan.separate {
                d.invalid(
                    &p.key("separate"),
                    "`maac` has one critic for all agents, a model of its own (CoMLRL's \
                     `MAACTrainer` has no value head on an actor)",
                    "remove `separate` (`true`)",
                );
            }
        }
        _ => {
            // Only `true` is warned about: the resolved scenario writes every key back.
            if plan.compat_critic_steps {
                d.warn(
                    &p.key("compat_critic_steps"),
                    format!(
                        "has no effect with algorithm: {} (only `maac`'s one critic is stepped per agent)",
                        algorithm.name()
                    ),
                );
            }
        }
    }
    // `maac`'s `separate: false` is refused above; a head on the agent has no model to adapt.
    if !plan.separate && plan.adapter.is_some() && algorithm != Algorithm::Maac {
        d.invalid(
            &p.key("adapter"),
            "a value head on the agent's backbone (`separate: false`) has no critic model \
             of its own to adapt: it trains on the agent's backbone, adapted when the agent \
             has `agents.adapter`",
            "remove `trainer.critic.adapter` (and give the agents an `adapter`), or set \
             `separate: true`",
        );
    }
    Some(plan)
}

/// The critic as the resolved scenario writes it.
pub(crate) fn to_raw(c: &Option<CriticPlan>) -> Option<RawCritic> {
    c.as_ref().map(|c| c.to_raw(false))
}

impl Algorithm {
    /// Whether the algorithm trains a critic (reads `trainer.critic`).
    pub fn has_critic(self) -> bool {
        matches!(self, Algorithm::Iac | Algorithm::Maac)
    }

    /// `trainer.num_generations`' default: CoMLRL's `IACConfig` samples one completion per
    /// agent (its advantage needs no group), `MAGRPOConfig` four.
    pub fn default_num_generations(self) -> usize {
        match self.has_critic() {
            true => 1,
            false => 4,
        }
    }

    /// The fewest `trainer.num_generations`: the group baseline needs two, a critic one.
    pub fn min_num_generations(self) -> usize {
        match self.has_critic() {
            true => 1,
            false => 2,
        }
    }

    /// `trainer.rollout_buffer_size`' default (`IACConfig`: 8, `MAGRPOConfig`: 2).
    pub fn default_rollout_buffer_size(self) -> usize {
        match self.has_critic() {
            true => 8,
            false => 2,
        }
    }

    /// `trainer.num_train_epochs`' default (`IACConfig`: 40, `MAGRPOConfig`: 20).
    pub fn default_num_train_epochs(self) -> usize {
        match self {
            // `MADPOIterConfig`: one pass over each round's set.
            Algorithm::MadpoIter => return 1,
            // `MARLHFIterConfig`: two online epochs per round.
            Algorithm::MarlhfIter => return 2,
            _ => {}
        }
        match self.has_critic() {
            true => 40,
            false => 20,
        }
    }
}

/// The trainer settings an actor-critic algorithm refuses or ignores: more than one completion
/// per agent with more than one turn (CoMLRL's multi-turn IAC and MAAC raise), `joint_mode: cross` (CoMLRL's IAC pairs the g-th completions), and the
/// MAGRPO loss and baseline settings set away from their defaults (warned: no effect).
pub(crate) fn check_trainer(
    d: &mut Diags,
    p: &KeyPath,
    raw: &crate::raw::RawTrainer,
    t: &crate::plan::TrainerPlan,
) {
    use crate::plan::{AdvantageMode, AdvantageScale, AdvantageStd, JointMode, LossAggregation};
    let alg = t.algorithm.name();
    if t.num_turns > 1 && t.num_generations != 1 {
        d.invalid(
            &p.key("num_generations"),
            format!("`{alg}` with num_turns: {} trains one completion per agent and turn (CoMLRL's multi-turn actor-critic refuses more), and num_generations is {}", t.num_turns, t.num_generations),
            "remove `num_generations` (1 with an actor-critic), or set `num_turns: 1`",
        );
    }
    if t.joint_mode == JointMode::Cross {
        d.invalid(
            &p.key("joint_mode"),
            format!("`{alg}` scores the g-th completions of the agents together, as CoMLRL's IAC does; `cross` has no meaning for it"),
            "remove `joint_mode` (`aligned`)",
        );
    }
    let moot = [
        ("advantage_mode", t.advantage_mode != AdvantageMode::Mean),
        (
            "advantage_scale",
            t.advantage_scale != AdvantageScale::Group,
        ),
        ("advantage_std", t.advantage_std != AdvantageStd::Population),
        (
            "loss_aggregation",
            t.loss_aggregation != LossAggregation::SequenceSum,
        ),
        (
            "logprob_temperature",
            raw.logprob_temperature.is_some()
                && t.logprob_temperature != crate::plan::LogprobTemperature::One,
        ),
        ("mask_truncated_completions", t.mask_truncated_completions),
        ("top_entropy_quantile", t.top_entropy_quantile < 1.0),
        ("kl_in_loss", t.kl_in_loss != 0.0),
        ("entropy_coef", t.entropy_coef != 0.0),
        ("use_adaptive_entropy", t.use_adaptive_entropy),
    ];
    for (key, set) in moot {
        if set {
            d.warn(
                &p.key(key),
                format!("has no effect with algorithm: {alg} (its advantage is the critic's: target − V_old, z-scored over the buffer; its loss −(Σ_t log π)·Â)"),
            );
        }
    }
}
