//! A separate critic's backbone as `trainer.critic` names it (IAC's per agent, MAAC's one):
//! its model fully trained, or with `trainer.critic.adapter` a frozen base with LoRA adapters
//! on it. A critic with adapters shares a base already in memory where it can — an adapted
//! agent's (the same model, an f32 `dtype`, the same `base_dtype`: the same tensors the agent
//! trains on, which never change), else an earlier critic's on the same model — and loads its
//! own otherwise; only its adapters (and the value head beside it) are then trainable.
use super::models::{build_adapter, held_dtype, source_of};
use crate::error::Result;
use crate::model::{LoadOptions, Policy, RolloutCopies};
use comlrl_scenario::{CriticPlan, Dtype, ModelRef, Scenario};

/// Which critic of the run: IAC's agent `i`'s, or MAAC's one (seeds and dropout masks differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CriticId {
    /// The critic of agent `i` (IAC).
    Agent(usize),
    /// The one central critic (MAAC).
    Central,
}

impl CriticId {
    /// A number of its own for seeds and dropout keys (never an agent's: the critics' keys are
    /// salted apart from the agents' below).
    fn number(self) -> u64 {
        match self {
            CriticId::Agent(i) => i as u64,
            CriticId::Central => u64::MAX,
        }
    }
}

/// Salt of a critic's adapter seed and dropout key, apart from the agents'.
const CRITIC_SALT: u64 = 0xc217_1c00_0000_0000;

/// Loads the critic `id`'s backbone from `model` as `c` says. Without `c.adapter` a model of
/// its own, every weight trainable. With it: on the base of an adapted agent in `agents` (held
/// here, the same model source, f32 weights and `base_dtype`), else on the base of a critic in
/// `earlier` (the same model source), else on a base of its own loaded with `c.base_dtype`;
/// then the adapter (PEFT's init from the run's seed and `id`, or `c.adapter.init`).
pub fn load_critic(
    s: &Scenario,
    c: &CriticPlan,
    id: CriticId,
    model: &ModelRef,
    agents: &[Option<Policy>],
    earlier: &[&Policy],
) -> Result<Policy> {
    let Some(plan) = &c.adapter else {
        return load_base(s, c, model);
    };
    let on_agent = s.agents.iter().find_map(|a| {
        let p = agents.get(a.index)?.as_ref()?;
        let same = a.adapter.is_some()
            && a.model.source == model.source
            && matches!(a.dtype, Dtype::Auto | Dtype::F32)
            && a.base_dtype == c.base_dtype;
        same.then_some(p)
    });
    let src = source_of(model, &s.base_dir)?;
    let on_critic = || {
        earlier
            .iter()
            .copied()
            .find(|p| p.adapter().is_some() && p.source == src)
    };
    let seed = s.seed ^ CRITIC_SALT ^ id.number();
    let key = crate::model::decoder::lora_dropout::agent_key(s.seed ^ CRITIC_SALT, id.number());
    let base = match on_agent.or_else(on_critic) {
        Some(base) => {
            log::debug!("the critic ({id:?}) shares the base of {}", model.spec);
            let adapter = build_adapter(plan, base, seed, key)?;
            return Ok(base.share_base(adapter)?);
        }
        None => load_base(s, c, model)?,
    };
    let adapter = build_adapter(plan, &base, seed, key)?;
    Ok(base.with_adapter(adapter)?)
}

/// The critic's model as it loads (its projections in `c.base_dtype` under an adapter); a
/// critic never samples, so no sampling copies.
fn load_base(s: &Scenario, c: &CriticPlan, model: &ModelRef) -> Result<Policy> {
    let opts = LoadOptions {
        seed: s.seed,
        rollout_copies: RolloutCopies::Never,
        copies_now: false,
        base_dtype: held_dtype(c.adapter.is_some(), c.base_dtype),
        ..LoadOptions::default()
    };
    Ok(Policy::load(&source_of(model, &s.base_dir)?, &opts)?)
}
