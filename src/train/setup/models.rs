//! The agents' models as the scenario names them: where each loads from, loaded (in parallel,
//! only those a rank holds), and how each samples. Agents with an `adapter` that name the same
//! model with the same load settings share one base: it loads once, and each of them is that
//! base (the same tensors) with its own adapter.
use crate::error::{Error, Result};
use crate::model::decoder::lora::LoraSpec;
use crate::model::io::peft::Adapter;
use crate::model::{LoadOptions, ModelSource, Policy, RolloutCopies, SamplingParams};
use comlrl_scenario::{AdapterPlan, AgentPlan, BaseDtype, Dtype, Scenario};
use std::path::Path;

/// The model source of an agent, in the model loader's terms.
pub fn model_source(agent: &AgentPlan, base_dir: &Path) -> Result<ModelSource> {
    source_of(&agent.model, base_dir)
}

/// A scenario's model reference (an agent's, a critic's) in the model loader's terms.
pub fn source_of(model: &comlrl_scenario::ModelRef, base_dir: &Path) -> Result<ModelSource> {
    Ok(match &model.source {
        comlrl_scenario::ModelSource::Builtin(name) => {
            ModelSource::parse(&format!("builtin:{name}"), base_dir)?
        }
        comlrl_scenario::ModelSource::Local(p) => ModelSource::local(p.clone()),
        comlrl_scenario::ModelSource::Hub(id) => ModelSource::parse(id, base_dir)?,
    })
}

/// Loads every agent's policy (f32 on CPU; built-in weights seeded by the scenario seed), with
/// the agents' sampling weight copies when `sampling` (frozen reference policies only score).
pub fn load_policies(s: &Scenario, sampling: bool) -> Result<Vec<Policy>> {
    load_placed(s, |_| true, sampling)?
        .into_iter()
        .map(|p| p.ok_or_else(|| Error::Internal("an agent was not loaded".into())))
        .collect()
}

/// Loads the policies of the agents `here` selects (by index; `None` for the others): the
/// agents a rank holds a replica of, or those it samples; with sampling copies when `sampling`.
///
/// The agents' weights load at the same time, one agent per thread of the pool: loading is
/// mostly the kernel clearing fresh pages, which the threads do side by side. Their sampling copies are built afterwards on this thread (see
/// [`LoadOptions::copies_now`]). Errors name the first failing agent by index, as a
/// sequential load would.
pub fn load_placed(
    s: &Scenario,
    here: impl Fn(usize) -> bool + Sync,
    sampling: bool,
) -> Result<Vec<Option<Policy>>> {
    use rayon::prelude::*;
    // An adapted agent whose base an earlier agent here loads shares that one.
    let shares: Vec<Option<usize>> = s
        .agents
        .iter()
        .map(|a| {
            let first = s
                .agents
                .iter()
                .find(|b| here(b.index) && b.adapter.is_some() && same_base(a, b));
            first
                .map(|b| b.index)
                .filter(|&b| here(a.index) && a.adapter.is_some() && b < a.index)
        })
        .collect();
    let loaded: Vec<Result<Option<Policy>>> = s
        .agents
        .par_iter()
        .map(|a| {
            (here(a.index) && shares[a.index].is_none())
                .then(|| load_agent(s, a, sampling))
                .transpose()
        })
        .collect();
    let mut policies: Vec<Option<Policy>> = loaded.into_iter().collect::<Result<_>>()?;
    for a in &s.agents {
        if let Some(b) = shares[a.index] {
            let base = policies[b]
                .as_ref()
                .ok_or_else(|| Error::Internal("a shared base was not loaded".into()))?;
            let adapter = agent_adapter(s, a, base)?
                .ok_or_else(|| Error::Internal("an agent sharing a base has no adapter".into()))?;
            let p = base
                .share_base(adapter)
                .map_err(|e| Error::from(e).for_agent(a.index, Some(a.model.spec.clone())))?;
            policies[a.index] = Some(p);
        }
    }
    for (a, p) in s.agents.iter().zip(&policies) {
        if let Some(p) = p {
            p.weights_changed()
                .map_err(|e| Error::from(e).for_agent(a.index, Some(a.model.spec.clone())))?;
        }
    }
    Ok(policies)
}

/// The frozen reference policies of the KL penalty (`trainer.kl_coef`) for the agents `here`
/// selects: each agent's initial policy. An adapted agent's is its own base, which training
/// never changes (the same tensors, no second copy of the model), with a fresh copy of its
/// initial adapter (built as [`agent_adapter`] built the trained one: the same `init`
/// directory, or the same seed); a fully fine-tuned agent's is a second load of its model.
pub fn load_references(
    s: &Scenario,
    policies: &[Option<Policy>],
    here: impl Fn(usize) -> bool + Sync,
) -> Result<Vec<Option<Policy>>> {
    let on_base: Vec<Option<Policy>> = s
        .agents
        .iter()
        .map(|a| {
            let held = policies.get(a.index).and_then(|p| p.as_ref());
            match (here(a.index), held) {
                (true, Some(p)) if a.adapter.is_some() => {
                    let adapter = agent_adapter(s, a, p)?
                        .ok_or_else(|| Error::Internal("an adapted agent has no adapter".into()))?;
                    p.share_base(adapter)
                        .map(Some)
                        .map_err(|e| Error::from(e).for_agent(a.index, Some(a.model.spec.clone())))
                }
                _ => Ok(None),
            }
        })
        .collect::<Result<_>>()?;
    let loaded = load_placed(s, |i| here(i) && on_base[i].is_none(), false)?;
    Ok(on_base
        .into_iter()
        .zip(loaded)
        .map(|(shared, loaded)| shared.or(loaded))
        .collect())
}

/// Loads agent `a`'s policy; with its bf16 sampling copies when `sampling` and the agent's
/// `sampling_dtype` is bf16.
fn load_agent(s: &Scenario, a: &AgentPlan, sampling: bool) -> Result<Policy> {
    match a.dtype {
        Dtype::Auto | Dtype::F32 => {}
        other => {
            return Err(Error::Config(format!(
                "agent {}: dtype {other:?} cannot be trained on the CPU yet (AdamW updates f32 weights); \
                 set `dtype: f32` (checkpoints in bf16/f16 are converted on load)",
                a.index
            )))
        }
    }
    let src = model_source(a, &s.base_dir)?;
    let sampling_dtype = match a.sampling_dtype {
        Dtype::Bf16 if sampling => candle_core::DType::BF16,
        _ => candle_core::DType::F32,
    };
    let opts = LoadOptions {
        seed: s.seed,
        sampling_dtype,
        // A policy that only scores (a KL reference) never decodes: copies for decoding would
        // hold up to another copy of its weights for nothing.
        rollout_copies: match a.sampling_copies && sampling {
            true => RolloutCopies::Auto,
            false => RolloutCopies::Never,
        },
        copies_now: false,
        base_dtype: base_dtype(a),
        ..LoadOptions::default()
    };
    let p = Policy::load(&src, &opts)
        .map_err(|e| Error::from(e).for_agent(a.index, Some(a.model.spec.clone())))?;
    match agent_adapter(s, a, &p)? {
        Some(adapter) => p
            .with_adapter(adapter)
            .map_err(|e| Error::from(e).for_agent(a.index, Some(a.model.spec.clone()))),
        None => Ok(p),
    }
}

/// The dtype agent `a`'s projections' weights are held in: bf16 or Q8_0 blocks
/// (`q8_weight::HELD`) under an adapter with `base_dtype: bf16` / `q8_0` (the scenario refuses
/// them without one), else `None`: the model's dtype.
pub(crate) fn base_dtype(a: &AgentPlan) -> Option<candle_core::DType> {
    held_dtype(a.adapter.is_some(), a.base_dtype)
}

/// The dtype a frozen base holds its projections in (`base_dtype` of an agent or a critic with
/// an adapter), else `None`: the model's dtype.
pub(crate) fn held_dtype(adapter: bool, base: BaseDtype) -> Option<candle_core::DType> {
    match (adapter, base) {
        (true, BaseDtype::Bf16) => Some(candle_core::DType::BF16),
        (true, BaseDtype::Q8_0) => Some(crate::model::kernels::q8_weight::HELD),
        _ => None,
    }
}

/// Whether agents `a` and `b` load the same base: the same model, dtype, base dtype and
/// sampling settings.
pub(crate) fn same_base(a: &AgentPlan, b: &AgentPlan) -> bool {
    a.model.source == b.model.source
        && a.dtype == b.dtype
        && a.base_dtype == b.base_dtype
        && a.sampling_dtype == b.sampling_dtype
        && a.sampling_copies == b.sampling_copies
}

/// Agent `a`'s adapter on `base` as its `adapter` key says: read from its `init` directory, or
/// PEFT's fresh init seeded by the scenario seed and the agent's index; `None` without one.
pub fn agent_adapter(s: &Scenario, a: &AgentPlan, base: &Policy) -> Result<Option<Adapter>> {
    let Some(plan) = &a.adapter else {
        return Ok(None);
    };
    let seed = s.seed ^ (0x1057_u64 << 32) ^ a.index as u64;
    let key = crate::model::decoder::lora_dropout::agent_key(s.seed, a.index as u64);
    build_adapter(plan, base, seed, key)
        .map(Some)
        .map_err(|e| Error::from(e).for_agent(a.index, Some(a.model.spec.clone())))
}

/// An adapter on `base` as `plan` says (an agent's or a critic's): read from its `init`
/// directory (the plan's dropout replacing the directory's where set), or PEFT's fresh init
/// from `seed`; its dropout masks keyed by `dropout_key`.
pub(crate) fn build_adapter(
    plan: &AdapterPlan,
    base: &Policy,
    seed: u64,
    dropout_key: u64,
) -> std::result::Result<Adapter, crate::model::Error> {
    let dev = base.model.device();
    let dtype = base.model.dtype();
    let mut adapter = match &plan.init {
        Some(dir) => {
            let mut ad = Adapter::load(dir, &base.config, dtype, dev)?;
            // The scenario's dropout where it sets one (a training setting), else the
            // directory's `lora_dropout` (checked in [0, 1) as it was read).
            if let Some(p) = plan.dropout {
                ad.dropout = p;
            }
            ad
        }
        None => {
            let spec = LoraSpec {
                rank: plan.rank,
                alpha: plan.alpha,
                rslora: plan.rslora,
                targets: plan.targets.clone(),
            };
            let p = plan.dropout.unwrap_or(0.0);
            Adapter::init(spec, p, &base.config, seed, dtype, dev)?
        }
    };
    adapter.dropout_key = dropout_key;
    Ok(adapter)
}

/// The sampling settings of agent `a`'s rollouts.
pub fn sampling(a: &AgentPlan) -> SamplingParams {
    SamplingParams {
        max_new_tokens: a.sampling.max_new_tokens,
        temperature: a.sampling.temperature,
        top_p: a.sampling.top_p,
        top_k: a.sampling.top_k.unwrap_or(0),
        greedy: false,
        ignore_eos: false,
    }
}
