//! The memory a run's agents will take at its peak, estimated from their model configs and the
//! scenario's settings before any weight is read, so that a run that cannot fit is refused with
//! the number instead of loading agents until the machine runs out.
//!
//! Per agent: what stays for the whole run (f32 weights, AdamW's two moments, the frozen
//! reference with a KL penalty, the transposed f32 sampling copies of small models, the
//! tokenizer), what sampling adds (bf16 copies or f32 MLP panels, both freed for update rounds;
//! the KV cache of a batch of rows; logits) and what an update round adds (gradient
//! accumulators, packed weights, one pass's activations and LM-head logits). The peak is what
//! stays plus the larger of the two phases, with agents counted together where they run at the
//! same time (`parallel_sampling`, `parallel_updates`) and the largest alone where they take
//! turns. Agents with the same model and settings share one line of the report. Agents with
//! adapters on the same base (`setup::models` loads it once) count its weights and sampling
//! copies once: the first such agent a rank holds carries them, the others name it
//! (`shares_base_of`); everything else (tokenizer, KV cache, adapters) is per agent, as loaded.
use crate::error::{Error, Result};
use crate::model::{ModelInfo, ModelSource, RolloutCopies};
use comlrl_scenario::{
    AgentPlan, ComparatorGenerationMode, ComparatorPolicy, CriticPlan, Dtype, ModelRef, Scenario,
};
use std::collections::HashMap;

/// The environment variable that turns a refusal into a warning.
pub const OVERRIDE_ENV: &str = "COMLRL_IGNORE_MEMORY_ESTIMATE";

/// Tokens a chat template adds around a prompt (role markers, a default system message).
const CHAT_TEMPLATE_TOKENS: usize = 64;

/// One agent's estimate, in bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentMemory {
    /// The agent's index.
    pub index: usize,
    /// The model as the scenario names it.
    pub model: String,
    /// Parameters of its model.
    pub parameters: u64,
    /// Parameters it trains: all of them, or its adapter's (`agents.adapter`).
    pub trainable: u64,
    /// The agent whose base this one shares (adapters on one base): its weights are counted
    /// there, not here.
    pub shares_base_of: Option<usize>,
    /// The dtype its frozen base holds the projections in (`agents.base_dtype`): "f32", "q8_0" or
    /// "bf16".
    pub base_dtype: &'static str,
    /// Held for the whole run: (what, bytes).
    pub resident: Vec<(&'static str, u64)>,
    /// Added while it samples.
    pub sampling: Vec<(&'static str, u64)>,
    /// Added while it updates.
    pub update: Vec<(&'static str, u64)>,
    /// A separate critic with adapters beside it (`trainer.critic.adapter`): its trainable
    /// parameters (adapters and value head) and, where it holds no base of its own, what
    /// holds the base it shares.
    pub critic_adapter: Option<(u64, Option<String>)>,
}

fn sum(parts: &[(&'static str, u64)]) -> u64 {
    parts.iter().map(|(_, b)| *b).fold(0, u64::saturating_add)
}

impl AgentMemory {
    /// Bytes held for the whole run.
    pub fn resident_bytes(&self) -> u64 {
        sum(&self.resident)
    }

    /// Bytes while sampling, over what is held.
    pub fn sampling_bytes(&self) -> u64 {
        sum(&self.sampling)
    }

    /// Bytes while updating, over what is held.
    pub fn update_bytes(&self) -> u64 {
        sum(&self.update)
    }

    /// Bytes at the agent's own peak.
    pub fn peak_bytes(&self) -> u64 {
        self.resident_bytes()
            .saturating_add(self.sampling_bytes().max(self.update_bytes()))
    }

    /// Everything but the index: agents that are equal in this share a report line (the
    /// model with its base's dtype, then the rest).
    fn key(&self) -> (String, u64, Option<usize>, Vec<(&'static str, u64)>) {
        let parts = [&self.resident[..], &self.sampling, &self.update].concat();
        (
            format!(
                "{} {} {:?}",
                self.model, self.base_dtype, self.critic_adapter
            ),
            self.trainable,
            self.shares_base_of,
            parts,
        )
    }
}

/// The estimate of a run (or of one rank's agents).
#[derive(Debug, Clone)]
pub struct MemoryEstimate {
    /// The agents whose models could be read, in index order.
    pub agents: Vec<AgentMemory>,
    /// Agents whose model is not on this machine (an uncached Hub model in `check`).
    pub unknown: Vec<usize>,
    /// Bytes the agents add at the run's peak.
    pub peak: u64,
    /// Bytes this process held when the estimate was made (scenario, dataset, rewards).
    pub process: u64,
    /// Bytes the machine has available, and what limits it.
    pub available: Option<(u64, String)>,
    /// Ways to need less, for this scenario's settings.
    pub remedies: Vec<String>,
}

/// `n` bytes for people: `512 kB`, `3.5 MB`, `14.8 GB`, `3.7 TB`.
pub fn human(n: u64) -> String {
    let x = n as f64;
    if x >= 1e12 {
        format!("{:.1} TB", x / 1e12)
    } else if x >= 1e9 {
        format!("{:.1} GB", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.1} MB", x / 1e6)
    } else {
        format!("{:.0} kB", x / 1e3)
    }
}

/// Agent indices as ranges: `0–3, 7`.
fn ranges(ids: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        out.push(match j - i {
            0 => ids[i].to_string(),
            1 => format!("{}, {}", ids[i], ids[j]),
            _ => format!("{}–{}", ids[i], ids[j]),
        });
        i = j + 1;
    }
    out.join(", ")
}

impl MemoryEstimate {
    /// Whether the agents' peak exceeds what the machine has available.
    pub fn exceeds(&self) -> bool {
        self.available.as_ref().is_some_and(|(a, _)| self.peak > *a)
    }

    /// The report `comlrl check` prints: one line per group of equal agents, then the total.
    pub fn report(&self) -> String {
        let mut groups: Vec<(Vec<usize>, &AgentMemory)> = Vec::new();
        let mut at: HashMap<_, usize> = HashMap::new();
        for a in &self.agents {
            match at.get(&a.key()) {
                Some(&g) => groups[g].0.push(a.index),
                None => {
                    at.insert(a.key(), groups.len());
                    groups.push((vec![a.index], a));
                }
            }
        }
        let mut out = String::from("memory estimate (from the model configs, before loading):\n");
        for (ids, a) in &groups {
            let parts = |p: &[(&str, u64)]| {
                p.iter()
                    .filter(|(_, b)| *b > 0)
                    .map(|(w, b)| format!("{w} {}", human(*b)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            // Only adapters train fewer parameters than the model has: say so then.
            let trainable = if a.trainable < a.parameters {
                format!(", {:.3}M trainable", a.trainable as f64 / 1e6)
            } else {
                String::new()
            };
            let shared = match a.shares_base_of {
                Some(j) => format!(", base shared with agent {j}"),
                None => String::new(),
            };
            let shared = match a.base_dtype {
                "f32" => shared,
                d => format!("{shared}, {d} base"),
            };
            let shared = match &a.critic_adapter {
                Some((n, on)) => format!(
                    "{shared}; critic with adapters, {:.3}M trainable{}",
                    *n as f64 / 1e6,
                    on.as_ref()
                        .map_or(String::new(), |w| format!(", on the base of {w}"))
                ),
                None => shared,
            };
            out += &format!(
                "  agent{} {} ({}, {:.1}M parameters{trainable}{shared}): {} per agent at its peak\n    held: {}\n    while sampling: {}\n    while updating: {}\n",
                if ids.len() > 1 { "s" } else { "" },
                ranges(ids),
                a.model,
                a.parameters as f64 / 1e6,
                human(a.peak_bytes()),
                parts(&a.resident),
                parts(&a.sampling),
                parts(&a.update),
            );
        }
        if !self.unknown.is_empty() {
            out += &format!(
                "  agent(s) {}: model not on this machine, not counted (`comlrl run` estimates it once downloaded)\n",
                ranges(&self.unknown)
            );
        }
        out += &format!(
            "  total: {} at the peak for {} agent(s), plus {} this process holds now; available: {}",
            human(self.peak),
            self.agents.len(),
            human(self.process),
            match &self.available {
                Some((b, what)) => format!("{} ({what})", human(*b)),
                None => "unknown".into(),
            }
        );
        out
    }

    /// The refusal: the numbers, and the ways out.
    pub fn refusal(&self) -> String {
        let (avail, what) = self.available.clone().unwrap_or_default();
        let per = self
            .agents
            .iter()
            .map(AgentMemory::peak_bytes)
            .max()
            .unwrap_or(0);
        format!(
            "the {} agent(s) need about {} of memory at the peak (up to {} per agent, from the \
             model configs; `comlrl check` shows the breakdown) but {} is available ({what}); \
             to need less: {}; or set {OVERRIDE_ENV}=1 to run anyway",
            self.agents.len(),
            human(self.peak),
            human(per),
            human(avail),
            self.remedies.join(", ")
        )
    }
}

/// How to find an agent's model without loading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Hub models are downloaded when missing (what loading would do next).
    Download,
    /// Only what is on this machine (`comlrl check` never downloads).
    Local,
}

/// Reads the shape of `src`'s model (`None`: an uncached Hub model with [`Lookup::Local`]).
fn inspect(src: &ModelSource, lookup: Lookup) -> Result<Option<ModelInfo>> {
    match src {
        ModelSource::Builtin(name) => Ok(Some(ModelInfo::builtin(name)?)),
        ModelSource::Gguf(path) => Ok(Some(ModelInfo::gguf(path)?)),
        ModelSource::Local(dir) => Ok(Some(ModelInfo::dir(dir)?)),
        ModelSource::Hub { .. } => {
            let dir = match lookup {
                Lookup::Download => src.resolve_dir()?,
                Lookup::Local => src
                    .cached_dir()?
                    .filter(|d| d.join("config.json").is_file()),
            };
            Ok(dir.map(|d| ModelInfo::dir(&d)).transpose()?)
        }
    }
}

/// The estimate for the agents `holds` selects (those this rank trains), of which `samples`
/// selects those it samples (and keeps a KL reference of). Each distinct model is read once.
pub fn estimate(
    s: &Scenario,
    holds: impl Fn(usize) -> bool,
    samples: impl Fn(usize) -> bool,
    lookup: Lookup,
) -> Result<MemoryEstimate> {
    let process = crate::runtime::rss_bytes().unwrap_or(0);
    let mut infos: HashMap<String, Option<ModelInfo>> = HashMap::new();
    let mut agents = Vec::new();
    let mut unknown = Vec::new();
    let first_held = s.agents.iter().map(|a| a.index).find(|&i| holds(i));
    for a in s.agents.iter().filter(|a| holds(a.index)) {
        let spec = &a.model.spec;
        if !infos.contains_key(spec) {
            let src = super::models::model_source(a, &s.base_dir)?;
            let info =
                inspect(&src, lookup).map_err(|e| e.for_agent(a.index, Some(spec.clone())))?;
            infos.insert(spec.clone(), info);
        }
        // A separate critic (`trainer.critic`) beside the agent: its own model's parts. MAAC's
        // one critic (agent 0's model by default) is counted beside agent 0, on the rank of
        // its first replica only (the one that holds it).
        let maac = one_critic(s);
        let critic = s
            .trainer
            .critic
            .as_ref()
            .filter(|c| c.separate && (!maac || (a.index == 0 && samples(0))));
        let critic_spec = critic.map(|c| c.model.as_ref().unwrap_or(&a.model));
        if let Some(m) = critic_spec.filter(|m| !infos.contains_key(&m.spec)) {
            let src = super::models::source_of(m, &s.base_dir)?;
            let info = inspect(&src, lookup)
                .map_err(|e| e.for_agent(a.index, Some(format!("critic {}", m.spec))))?;
            infos.insert(m.spec.clone(), info);
        }
        let critic_info = critic_spec.map(|m| infos[&m.spec].as_ref());
        match (&infos[spec], critic_info) {
            (Some(info), None) => {
                let trainable = trainable_parameters(a, info)?;
                agents.push(agent_memory(s, a, info, samples(a.index), trainable))
            }
            (Some(info), Some(Some(c))) => {
                let trainable = trainable_parameters(a, info)?;
                let mut m = agent_memory(s, a, info, samples(a.index), trainable);
                let plan =
                    critic.ok_or_else(|| Error::Internal("a critic without a plan".into()))?;
                let model = critic_spec
                    .ok_or_else(|| Error::Internal("a critic without a model".into()))?;
                let on = critic_base(s, plan, model, a.index, &holds, maac);
                add_critic(&mut m, s, plan, c, on)
                    .map_err(|e| e.for_agent(a.index, Some(format!("critic {}", model.spec))))?;
                agents.push(m);
            }
            _ => unknown.push(a.index),
        }
        // MARLHF's reward model (`preference.reward_model`, by default agent 0's model): a copy
        // on every rank, counted beside the first agent the rank holds; at its training's peak
        // it has AdamW state and gradients too.
        if Some(a.index) == first_held && s.trainer.algorithm.learns_reward_model() {
            let rm = s
                .preference
                .reward_model
                .as_ref()
                .unwrap_or(&s.agents[0].model);
            if !infos.contains_key(&rm.spec) {
                let src = super::models::source_of(rm, &s.base_dir)?;
                let info = inspect(&src, lookup)
                    .map_err(|e| e.for_agent(a.index, Some(format!("reward model {}", rm.spec))))?;
                infos.insert(rm.spec.clone(), info);
            }
            match (agents.last_mut(), infos[&rm.spec].as_ref()) {
                (Some(m), Some(info)) if m.index == a.index => add_reward_model(m, s, info),
                _ => unknown.push(a.index),
            }
        }
        // The iterative trainers' comparator: the frozen copies `preference::Comparators` loads.
        if let Some(model) = comparator_model(s, a) {
            if !infos.contains_key(&model.spec) {
                let src = super::models::source_of(model, &s.base_dir)?;
                let info = inspect(&src, lookup).map_err(|e| {
                    e.for_agent(a.index, Some(format!("comparator model {}", model.spec)))
                })?;
                infos.insert(model.spec.clone(), info);
            }
            match (agents.last_mut(), infos[&model.spec].as_ref()) {
                (Some(m), Some(info)) if m.index == a.index => add_comparator(m, info),
                _ => unknown.push(a.index),
            }
        }
    }
    unknown.dedup();
    share_bases(s, &mut agents);
    let t = &s.trainer;
    let phase = |bytes: &dyn Fn(&AgentMemory) -> u64, together: bool| -> u64 {
        let each = agents.iter().map(bytes);
        match together {
            true => each.fold(0, u64::saturating_add),
            false => each.max().unwrap_or(0),
        }
    };
    let resident = phase(&AgentMemory::resident_bytes, true);
    // Agents on one base decode together (`batch_agent_sampling`): their sampling parts are
    // held at once even when the agents' groups sample one after the other.
    let sampling = match t.parallel_sampling || !t.batch_agent_sampling {
        true => phase(&AgentMemory::sampling_bytes, t.parallel_sampling),
        false => {
            let mut by_base: std::collections::BTreeMap<usize, u64> = Default::default();
            for a in &agents {
                let at = by_base
                    .entry(a.shares_base_of.unwrap_or(a.index))
                    .or_default();
                *at = at.saturating_add(a.sampling_bytes());
            }
            by_base.into_values().max().unwrap_or(0)
        }
    };
    let update = phase(&AgentMemory::update_bytes, t.parallel_updates);
    let peak = resident.saturating_add(sampling.max(update));
    Ok(MemoryEstimate {
        remedies: remedies(s, agents.len()),
        agents,
        unknown,
        peak,
        process,
        available: crate::runtime::available_memory(),
    })
}

/// The parts an agent sharing another's base holds only once, in that agent: the base's
/// weights and its sampling copies (`Policy::share_base` shares both).
const SHARED_PARTS: [&str; 4] = [
    "weights",
    "transposed sampling copies",
    "bf16 copies",
    "MLP panels",
];

/// Agents with adapters whose base an earlier agent of `agents` loads (`models::same_base`)
/// hold neither its weights nor its sampling copies: those parts become 0 and the agent names
/// the one that holds them.
fn share_bases(s: &Scenario, agents: &mut [AgentMemory]) {
    let adapted: Vec<usize> = agents
        .iter()
        .map(|m| m.index)
        .filter(|&i| s.agents[i].adapter.is_some())
        .collect();
    for m in agents.iter_mut() {
        let a = &s.agents[m.index];
        if a.adapter.is_none() {
            continue;
        }
        let first = adapted
            .iter()
            .copied()
            .find(|&j| super::models::same_base(&s.agents[j], a));
        if let Some(j) = first.filter(|&j| j < m.index) {
            m.shares_base_of = Some(j);
            for part in m.resident.iter_mut().chain(m.sampling.iter_mut()) {
                if SHARED_PARTS.contains(&part.0) {
                    part.1 = 0;
                }
            }
        }
    }
}

/// Whether the run trains MAAC's one central critic (`algorithm: maac`, or MARLHF online with
/// `rl_algorithm: maac`).
fn one_critic(s: &Scenario) -> bool {
    use comlrl_scenario::{Algorithm as A, RlAlgorithm as R};
    match s.trainer.algorithm {
        A::Maac => true,
        A::Marlhf | A::MarlhfIter => s.preference.rl_algorithm == R::Maac,
        _ => false,
    }
}

/// The settings of this scenario that would lower the estimate.
fn remedies(s: &Scenario, n: usize) -> Vec<String> {
    let t = &s.trainer;
    let mut out = Vec::new();
    if n > 1 {
        out.push("fewer agents (`agents.count`)".to_string());
    }
    if t.optimizer_state_dtype != Dtype::Bf16 {
        out.push("`trainer.optimizer_state_dtype: bf16` (AdamW's state in half the bytes)".into());
    }
    if t.parallel_updates && n > 1 {
        out.push("`trainer.parallel_updates: false` (one agent's gradients at a time)".into());
    }
    if t.parallel_sampling && n > 1 {
        out.push("`trainer.parallel_sampling: false`".into());
    }
    if s.agents.iter().any(|a| a.sampling_copies) {
        out.push("`agents.sampling_copies: false`".into());
    }
    if t.kl_coef != 0.0 || t.kl_in_loss != 0.0 {
        out.push("`trainer.kl_coef: 0` / `kl_in_loss: 0` (no frozen reference copy)".into());
    }
    let critic_adapter = t.critic.as_ref().is_some_and(|c| c.adapter.is_some());
    if t.critic.as_ref().is_some_and(|c| c.separate) && !critic_adapter {
        out.push(
            "`trainer.critic.adapter: {rank: 16}` (LoRA adapters on the critic's frozen base, \
             shared with agents that have `agents.adapter` on the same model)"
                .into(),
        );
    }
    if one_critic(s) {
        out.push("a smaller `trainer.critic.model` (maac's one critic)".into());
    } else if t.critic.as_ref().is_some_and(|c| c.separate) {
        out.push(
            "`trainer.critic.separate: false` (a value head on each agent instead of a critic model per agent), or a smaller `trainer.critic.model`"
                .into(),
        );
    }
    if t.micro_batch_size != 1 {
        out.push("a smaller `trainer.micro_batch_size`".into());
    }
    out.push("a smaller model or `agents.max_new_tokens`".into());
    out
}

/// Longest first-turn prompt in bytes, rendered with the agent's template: an upper bound on
/// its tokens for byte-level BPE vocabularies (every token covers at least one byte).
fn longest_prompt_bytes(s: &Scenario, a: &AgentPlan) -> usize {
    let sets = std::iter::once(&s.dataset.train).chain(s.dataset.eval.as_ref());
    let longest = sets
        .flat_map(|d| d.rows.iter())
        .map(|r| a.template.render(r).len())
        .max()
        .unwrap_or(0);
    match a.chat_template {
        comlrl_scenario::ChatTemplateSpec::None => longest,
        _ => longest + a.system_prompt.as_deref().map_or(0, str::len) + CHAT_TEMPLATE_TOKENS,
    }
}

/// Where a separate critic with adapters (`trainer.critic.adapter`) finds a base already in
/// memory (`setup::critics::load_critic`): an adapted agent this rank holds on the same model,
/// f32 weights and base dtype, else (IAC) the critic of an earlier agent held here on the same
/// model; `None`: a base of its own (also without adapters).
fn critic_base(
    s: &Scenario,
    c: &CriticPlan,
    model: &ModelRef,
    agent: usize,
    holds: &impl Fn(usize) -> bool,
    maac: bool,
) -> Option<String> {
    c.adapter.as_ref()?;
    let on_agent = s.agents.iter().find(|b| {
        holds(b.index)
            && b.adapter.is_some()
            && b.model.source == model.source
            && matches!(b.dtype, Dtype::Auto | Dtype::F32)
            && b.base_dtype == c.base_dtype
    });
    if let Some(b) = on_agent {
        return Some(format!("agent {}", b.index));
    }
    if maac {
        return None;
    }
    s.agents
        .iter()
        .take_while(|b| b.index < agent)
        .find(|b| holds(b.index) && c.model.as_ref().unwrap_or(&b.model).source == model.source)
        .map(|b| format!("agent {}'s critic", b.index))
}

/// A separate critic's parts beside its agent's: its weights and AdamW state for the whole run;
/// in an update round its gradients and one value pass over a mini-batch (each layer's input
/// kept, one layer's activations with their gradients: the recomputed pass). Read at the
/// prompt's or the response's end, over the longest sequence. With adapters only they (and the
/// head) have AdamW state and gradients, and the base is counted where it is held: here unless
/// `on` names what holds it.
fn add_critic(
    m: &mut AgentMemory,
    s: &Scenario,
    plan: &CriticPlan,
    info: &ModelInfo,
    on: Option<String>,
) -> Result<()> {
    let t = &s.trainer;
    let c = &info.config;
    let mul = |x: u64, y: u64| x.saturating_mul(y);
    let head = match plan.value_head_hidden_dim {
        None => c.hidden_size as u64 + 1,
        Some(d) => mul(c.hidden_size as u64 + 2, d as u64).saturating_add(1),
    };
    let (w, trained) = match &plan.adapter {
        None => (info.weight_bytes(), info.weight_bytes()),
        Some(ad) => {
            let q = adapter_parameters(ad, info)?.saturating_add(head);
            m.critic_adapter = Some((q, on.clone()));
            let base = match super::models::held_dtype(true, plan.base_dtype) {
                Some(d) => held_bytes(info, d),
                None => info.weight_bytes(),
            };
            (if on.is_some() { 0 } else { base }, mul(q, 4))
        }
    };
    let moments = match t.optimizer_state_dtype {
        Dtype::Bf16 => trained,
        _ => mul(trained, 2),
    };
    let new = s
        .agents
        .iter()
        .map(|a| a.sampling.max_new_tokens)
        .max()
        .unwrap_or(0);
    let prompt = s
        .agents
        .iter()
        .map(|a| longest_prompt_bytes(s, a))
        .max()
        .unwrap_or(0);
    let seq = (prompt + new).min(c.max_position_embeddings) as u64;
    let rows = mul(t.train_batch_size as u64, t.num_generations as u64);
    let tokens = mul(rows, seq);
    let (h, i) = (c.hidden_size as u64, c.intermediate_size as u64);
    let q = c.num_attention_heads as u64 * c.head_dim() as u64;
    let kv = c.kv_heads() as u64 * c.head_dim() as u64;
    let layer = mul(tokens, mul(8 * h + 4 * i + 2 * q + 4 * kv, 4)).saturating_add(mul(
        mul(rows, c.num_attention_heads as u64),
        mul(mul(seq, seq), 8),
    ));
    let activations = mul(c.num_hidden_layers as u64, mul(tokens, h * 4)).saturating_add(layer);
    m.resident
        .extend([("critic weights", w), ("critic AdamW state", moments)]);
    m.update.extend([
        ("critic gradients", trained),
        ("critic activations", activations),
    ]);
    Ok(())
}

/// The bytes of `info`'s weights with the projections held in `d` (bf16, or Q8_0 blocks).
fn held_bytes(info: &ModelInfo, d: candle_core::DType) -> u64 {
    let proj = info.projection_parameters();
    let held = match d == crate::model::kernels::q8_weight::HELD {
        true => ModelInfo::q8_0_bytes(proj),
        false => proj.saturating_mul(d.size_in_bytes() as u64),
    };
    info.weight_bytes()
        .saturating_sub(proj.saturating_mul(4))
        .saturating_add(held)
}

/// MARLHF's reward model beside agent 0, at the peak of its training (AdamW's f32 state and
/// the gradients of every weight, a Bradley–Terry pass over `reward_train_batch_size` pairs of
/// joint texts as long as every agent's longest prompt and answer together). After its
/// training the optimizer goes and only its weights stay: an upper bound for the online epochs.
fn add_reward_model(m: &mut AgentMemory, s: &Scenario, info: &ModelInfo) {
    let p = &s.preference;
    let c = &info.config;
    let mul = |x: u64, y: u64| x.saturating_mul(y);
    let w = info.weight_bytes();
    let text: usize = s
        .agents
        .iter()
        .map(|a| longest_prompt_bytes(s, a) + a.sampling.max_new_tokens)
        .sum();
    let seq = (text as u64).min(c.max_position_embeddings as u64);
    let rows = mul(p.reward_train_batch_size as u64, 2);
    let tokens = mul(rows, seq);
    let h = c.hidden_size as u64;
    let activations = mul(c.num_hidden_layers as u64, mul(tokens, h * 4)).saturating_add(mul(
        mul(rows, c.num_attention_heads as u64),
        mul(mul(seq, seq), 8),
    ));
    m.resident.extend([
        ("reward model weights", w),
        ("reward model AdamW state", mul(w, 2)),
    ]);
    m.update.extend([
        ("reward model gradients", w),
        ("reward model activations", activations),
    ]);
}

/// The model whose frozen copy `preference::Comparators` loads beside held agent `a` of an
/// iterative trainer: `model` one copy of `comparator_model` per held agent, or one in all
/// beside `comparator_centralized_agent_index` under `comparator_generation_mode:
/// centralized`; `history` every agent's own saved policy (that agent's alone under
/// `centralized`). `current` and `current_copy`
/// sample the agents themselves and `api` an endpoint: no copy.
fn comparator_model<'s>(s: &'s Scenario, a: &'s AgentPlan) -> Option<&'s ModelRef> {
    let p = &s.preference;
    if !s.trainer.algorithm.iterative() {
        return None;
    }
    // A centralized comparator is one policy, beside its agent.
    let centralized = p.comparator_generation_mode == ComparatorGenerationMode::Centralized;
    if centralized && a.index != p.comparator_centralized_agent_index {
        return None;
    }
    match p.comparator_policy {
        ComparatorPolicy::Model => p.comparator_model.as_ref(),
        ComparatorPolicy::History => Some(&a.model),
        ComparatorPolicy::Current | ComparatorPolicy::CurrentCopy | ComparatorPolicy::Api => None,
    }
}

/// A comparator's frozen copy: f32 weights (`Comparators` loads with the default options) and
/// the sampling copies it builds at its first sampling and keeps for the run.
fn add_comparator(m: &mut AgentMemory, info: &ModelInfo) {
    let w = info.weight_bytes();
    let copies = RolloutCopies::Auto;
    let transposed = copies.wanted(usize::try_from(w).unwrap_or(usize::MAX));
    let panels = !transposed
        && copies.large(&candle_core::Device::Cpu) == crate::model::SamplingWeights::MlpPanels;
    m.resident.extend([
        ("comparator weights", w),
        (
            "comparator sampling copies",
            match (transposed, panels) {
                (true, _) => w,
                (false, true) => info.mlp_bytes(),
                (false, false) => 0,
            },
        ),
        ("comparator tokenizer", info.tokenizer_bytes),
    ]);
}

/// One agent's parts.
fn agent_memory(
    s: &Scenario,
    a: &AgentPlan,
    info: &ModelInfo,
    samples: bool,
    trainable: u64,
) -> AgentMemory {
    let t = &s.trainer;
    let c = &info.config;
    let mul = |x: u64, y: u64| x.saturating_mul(y);
    let w = info.weight_bytes();
    let new = a.sampling.max_new_tokens;
    let prompt = longest_prompt_bytes(s, a).min(c.max_position_embeddings.saturating_sub(new));
    let seq = (prompt + new).min(c.max_position_embeddings) as u64;
    let (h, i, v) = (
        c.hidden_size as u64,
        c.intermediate_size as u64,
        c.vocab_size as u64,
    );
    let (layers, heads) = (c.num_hidden_layers as u64, c.num_attention_heads as u64);
    let q = heads * c.head_dim() as u64;
    let kv = c.kv_heads() as u64 * c.head_dim() as u64;
    let reference = samples && (t.kl_coef != 0.0 || t.kl_in_loss != 0.0);

    let f32_sampling = a.sampling_dtype != Dtype::Bf16;
    let copies = match a.sampling_copies {
        true => RolloutCopies::Auto,
        false => RolloutCopies::Never,
    };
    // A bf16 base (`agents.base_dtype`) holds the projections in 2 bytes a parameter, a Q8_0
    // one in 34 bytes per 32 (`ModelInfo::q8_0_bytes`); sampling and the update make no
    // copies of them (only of the f32 LM head; bf16 sampling reads a bf16 base in place).
    let base = super::models::base_dtype(a);
    let frozen_base = base.is_some();
    let (w, copied) = match base {
        Some(d) => (held_bytes(info, d), info.head_bytes()),
        None => (w, w),
    };
    let transposed = f32_sampling && copies.wanted(usize::try_from(w).unwrap_or(usize::MAX));
    let panels = f32_sampling
        && !transposed
        && !frozen_base
        && copies.large(&candle_core::Device::Cpu) == crate::model::SamplingWeights::MlpPanels;
    // With an adapter only its parameters have gradients and AdamW state (f32).
    let trainable = trainable.min(info.parameters());
    let tw = match a.adapter {
        Some(_) => mul(trainable, 4),
        None => info.weight_bytes(),
    };
    let moments = match t.optimizer_state_dtype {
        Dtype::Bf16 => tw,
        _ => mul(tw, 2),
    };
    let resident = vec![
        ("weights", w),
        ("AdamW state", moments),
        // An adapted agent's reference is its own frozen base with a copy of the initial adapter.
        (
            "KL reference",
            match (reference, &a.adapter) {
                (false, _) => 0,
                (true, Some(_)) => mul(trainable, 4),
                (true, None) => w,
            },
        ),
        (
            "transposed sampling copies",
            if transposed { copied } else { 0 },
        ),
        (
            "tokenizer",
            mul(info.tokenizer_bytes, if reference { 2 } else { 1 }),
        ),
    ];

    // Every held policy builds its sampling copies; only a sampling one decodes.
    let mut sampling = vec![
        ("bf16 copies", if f32_sampling { 0 } else { copied / 2 }),
        ("MLP panels", if panels { info.mlp_bytes() } else { 0 }),
    ];
    if samples {
        // Rows decoded together: K generations of each prompt of a buffer sampled at once.
        let prompts = match t.batch_buffer_sampling && t.num_turns == 1 {
            true => t.rollout_buffer_size as u64,
            false => 1,
        };
        let rows = mul(t.num_generations as u64, prompts);
        let width = 2 * h + q + 2 * kv + 3 * i;
        sampling.extend([
            (
                "KV cache",
                mul(mul(rows, seq), info.kv_bytes_per_position()),
            ),
            (
                // The prefill's activations and attention scores, and each step's logits.
                "activations",
                mul(mul(prompts, prompt as u64), mul(width, 4))
                    .saturating_add(mul(
                        mul(prompts, heads),
                        mul(mul(prompt as u64, prompt as u64), 4),
                    ))
                    .saturating_add(mul(mul(rows, v), 12)),
            ),
            (
                // The KL penalty scores a node's completions under the policy and then the
                // reference after sampling: one (K, new tokens, vocabulary) f32 logits at a time.
                "KL scoring logits",
                if reference {
                    mul(mul(t.num_generations as u64, new as u64), mul(v, 4))
                } else {
                    0
                },
            ),
        ]);
    }

    // One pass of the loss: `micro_batch_size` completions (0: a node's K) of `seq` tokens.
    let rows = match t.micro_batch_size {
        0 => t.num_generations,
        m => m.min(t.num_generations),
    } as u64;
    let tokens = mul(rows, seq);
    // A layer's activations with their gradients in its backward, attention scores included;
    // of them the first forward keeps the normed inputs, q, k, v and the MLP's two halves
    // for layers that fit `activation_budget_mb` (the "at most N MB a pass" of the debug log).
    let layer = mul(tokens, mul(8 * h + 4 * i + 2 * q + 4 * kv, 4))
        .saturating_add(mul(mul(rows, heads), mul(mul(seq, seq), 8)));
    let kept = mul(layers, mul(tokens, mul(2 * h + q + 2 * kv + 2 * i, 4)));
    let activations = match t.gradient_checkpointing {
        true => mul(layers, mul(tokens, h * 4))
            .saturating_add(mul(t.activation_budget_mb as u64, 1 << 20).min(kept))
            .saturating_add(layer),
        false => mul(layers, layer),
    };
    // The recomputed loss takes the LM head in chunks of logits (`model::grad::head_backward`; with
    // bf16 products, beside the head's two packed bf16 layouts), the other path whole, with
    // its gradient and a softmax's worth beside it.
    let positions = rows.saturating_mul(new as u64);
    let head = match t.gradient_checkpointing {
        true => {
            let dt = crate::train::update::plan::compute_dtype(t);
            let packed = match dt {
                crate::model::ComputeDtype::Bf16 => mul(v, mul(h, 4)),
                crate::model::ComputeDtype::F32 => 0,
            };
            let chunk = crate::model::head_chunk_bytes(
                dt,
                usize::try_from(positions).unwrap_or(usize::MAX),
                c.vocab_size,
            );
            packed.saturating_add(chunk as u64)
        }
        // An entropy bonus on this path differentiates −Σ p·log p through the graph: the
        // log-softmax, its exp, their product and their gradients, four more f32 tensors.
        false => match t.entropy_coef != 0.0 || t.use_adaptive_entropy {
            true => mul(mul(positions, v), 28),
            false => mul(mul(positions, v), 12),
        },
    };
    let packed = match copied <= mul(t.packed_weights_mb as u64, 1 << 20) {
        true => copied,
        false => 0,
    };
    let update = vec![
        ("gradients", tw),
        ("packed weights", packed),
        ("activations", activations),
        ("LM-head logits", head),
    ];
    AgentMemory {
        index: a.index,
        model: a.model.spec.clone(),
        parameters: info.parameters(),
        trainable,
        shares_base_of: None,
        base_dtype: match base {
            Some(d) if d == crate::model::kernels::q8_weight::HELD => "q8_0",
            Some(_) => "bf16",
            None => "f32",
        },
        resident,
        sampling,
        update,
        critic_adapter: None,
    }
}

/// The parameters agent `a` trains: its adapter's (rank from `init`'s directory where it names
/// one; that directory is read in full, and checked, when the model loads), else the model's.
fn trainable_parameters(a: &AgentPlan, info: &ModelInfo) -> Result<u64> {
    let Some(ad) = &a.adapter else {
        return Ok(info.parameters());
    };
    adapter_parameters(ad, info).map_err(|e| e.for_agent(a.index, Some(a.model.spec.clone())))
}

/// The parameters of adapter `ad` on `info`'s model (an agent's or a critic's).
fn adapter_parameters(ad: &comlrl_scenario::AdapterPlan, info: &ModelInfo) -> Result<u64> {
    let spec = match &ad.init {
        Some(dir) => crate::model::io::peft::read_spec(dir)?.0,
        None => crate::model::decoder::lora::LoraSpec {
            rank: ad.rank,
            alpha: ad.alpha,
            rslora: ad.rslora,
            targets: ad.targets.clone(),
        },
    };
    Ok(spec.parameters(&info.config) as u64)
}

/// Estimates the memory of the agents `holds` selects (see [`estimate`]) and fails, naming the
/// numbers and the settings that would lower them, when the peak exceeds what the machine has
/// available; with [`OVERRIDE_ENV`] set it warns instead.
pub fn check(
    s: &Scenario,
    holds: impl Fn(usize) -> bool,
    samples: impl Fn(usize) -> bool,
    lookup: Lookup,
) -> Result<MemoryEstimate> {
    enforce(estimate(s, holds, samples, lookup)?)
}

/// `e` back, or the refusal when it exceeds what is available (a warning with
/// [`OVERRIDE_ENV`] set).
pub fn enforce(e: MemoryEstimate) -> Result<MemoryEstimate> {
    let overridden = std::env::var_os(OVERRIDE_ENV).is_some_and(|v| !v.is_empty() && v != "0");
    decide(e, overridden)
}

/// The estimate back, or the refusal when it exceeds what is available (a warning instead
/// when `overridden`).
fn decide(e: MemoryEstimate, overridden: bool) -> Result<MemoryEstimate> {
    if e.exceeds() {
        if !overridden {
            return Err(Error::Config(e.refusal()));
        }
        log::warn!("{} ({OVERRIDE_ENV} is set: going on)", e.refusal());
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn scenario(dir: &Path, lines: &str) -> Scenario {
        std::fs::write(dir.join("r.rhai"), "fn reward(c, ctx) { 1.0 }").unwrap();
        let text = format!(
            "dataset: {{prompts: [\"Tell a joke\", \"Hi\"]}}\n{lines}reward: {{rhai: r.rhai}}\n"
        );
        comlrl_scenario::load_str(&text, &dir.join("s.yaml"), &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    fn peak(dir: &Path, lines: &str) -> MemoryEstimate {
        estimate(&scenario(dir, lines), |_| true, |_| true, Lookup::Local).unwrap()
    }

    fn part(parts: &[(&str, u64)], name: &str) -> u64 {
        parts.iter().find(|(n, _)| *n == name).unwrap().1
    }

    #[test]
    fn marlhfs_reward_model_sits_beside_the_first_agent_held() {
        let dir = tempfile::tempdir().unwrap();
        let agents = "agents: {count: 2, model: builtin:small, max_new_tokens: 16}\n";
        let plain = peak(dir.path(), agents);
        let m = peak(
            dir.path(),
            &format!("{agents}trainer: {{algorithm: marlhf}}\npreference: {{num_candidates: 4}}\n"),
        );
        let w = 4 * m.agents[0].parameters;
        let a0 = &m.agents[0];
        assert_eq!(part(&a0.resident, "reward model weights"), w);
        assert_eq!(part(&a0.resident, "reward model AdamW state"), 2 * w);
        assert_eq!(part(&a0.update, "reward model gradients"), w);
        assert!(part(&a0.update, "reward model activations") > 0);
        assert!(!m.agents[1]
            .resident
            .iter()
            .any(|(n, _)| n.starts_with("reward model")));
        assert!(m.peak > plain.peak + 3 * w, "{} vs {}", m.peak, plain.peak);
        // A smaller reward model counts its own size.
        let tiny = peak(
            dir.path(),
            &format!("{agents}trainer: {{algorithm: marlhf}}\npreference: {{num_candidates: 4, reward_model: builtin:tiny}}\n"),
        );
        assert!(part(&tiny.agents[0].resident, "reward model weights") < w / 4);
        // On MPI ranks every rank holds a copy: a rank with agent 1 alone counts it there.
        let lines =
            format!("{agents}trainer: {{algorithm: marlhf}}\npreference: {{num_candidates: 4}}\n");
        let rank1 = estimate(
            &scenario(dir.path(), &lines),
            |i| i == 1,
            |i| i == 1,
            Lookup::Local,
        )
        .unwrap();
        assert_eq!(rank1.agents.len(), 1);
        assert_eq!(part(&rank1.agents[0].resident, "reward model weights"), w);
    }

    #[test]
    fn the_iterative_comparator_counts_the_copies_it_loads() {
        let dir = tempfile::tempdir().unwrap();
        let agents = "agents: {count: 2, model: builtin:small, max_new_tokens: 16}\n";
        let run = |pref: &str| {
            peak(
                dir.path(),
                &format!("{agents}trainer: {{algorithm: madpo_iter}}\npreference: {{num_candidates: 2{pref}}}\n"),
            )
        };
        let has = |e: &MemoryEstimate, i: usize| {
            e.agents[i]
                .resident
                .iter()
                .any(|(n, _)| *n == "comparator weights")
        };
        // `current` and `current_copy` sample the agents themselves: nothing more is held.
        let current = run("");
        let copy = run(", comparator_policy: current_copy");
        assert!(!has(&current, 0) && !has(&copy, 1));
        assert_eq!(current.peak, copy.peak);
        // `model`: one copy of the comparator model beside each agent, its own size.
        let model = run(", comparator_policy: model, comparator_model: builtin:tiny");
        let tiny =
            4 * peak(dir.path(), "agents: {count: 1, model: builtin:tiny}\n").agents[0].parameters;
        for i in 0..2 {
            assert_eq!(part(&model.agents[i].resident, "comparator weights"), tiny);
        }
        assert!(
            model.peak >= current.peak + 2 * tiny,
            "{} vs {}",
            model.peak,
            current.peak
        );
        // Under centralized generation one copy, beside the comparator's agent.
        let central = run(", comparator_policy: model, comparator_model: builtin:tiny, comparator_generation_mode: centralized, comparator_centralized_agent_index: 1");
        assert!(!has(&central, 0) && has(&central, 1));
        assert!(central.peak < model.peak);
        // `history`: every agent's own saved policy; under centralized generation its agent's.
        let history = run(", comparator_policy: history");
        let w = 4 * history.agents[0].parameters;
        assert_eq!(part(&history.agents[1].resident, "comparator weights"), w);
        assert!(history.peak >= current.peak + 2 * w);
        let central = run(", comparator_policy: history, comparator_generation_mode: centralized");
        assert!(has(&central, 0) && !has(&central, 1));
        assert_eq!(part(&central.agents[0].resident, "comparator weights"), w);
        // The one-shot trainers have no comparator.
        let madpo = peak(dir.path(), &format!("{agents}trainer: {{algorithm: madpo}}\npreference: {{num_candidates: 2, comparator_policy: history}}\n"));
        assert!(!has(&madpo, 0));
    }

    #[test]
    fn the_parts_follow_the_settings() {
        let dir = tempfile::tempdir().unwrap();
        let agents = "agents: {count: 2, model: builtin:small, max_new_tokens: 16}\n";
        let two = peak(dir.path(), agents);
        let a = &two.agents[0];
        let w = 4 * a.parameters;
        assert_eq!(part(&a.resident, "weights"), w);
        assert_eq!(part(&a.resident, "AdamW state"), 2 * w);
        assert_eq!(part(&a.update, "gradients"), w);
        // Agents update and sample together by default: the peak counts both agents' phases.
        let one = a.resident_bytes() + a.sampling_bytes().max(a.update_bytes());
        assert_eq!(two.peak, 2 * one);
        let four = peak(dir.path(), &agents.replace("count: 2", "count: 4"));
        assert_eq!(four.peak, 2 * two.peak);
        assert!(
            four.report().contains("agents 0–3 (builtin:small"),
            "{}",
            four.report()
        );
        // bf16 AdamW state: half the moments; agents taking turns: one agent's update.
        let bf16 = peak(
            dir.path(),
            &format!("{agents}trainer: {{optimizer_state_dtype: bf16, parallel_updates: false, parallel_sampling: false}}\n"),
        );
        let b = &bf16.agents[0];
        assert_eq!(part(&b.resident, "AdamW state"), w);
        assert_eq!(
            bf16.peak,
            2 * b.resident_bytes() + b.sampling_bytes().max(b.update_bytes())
        );
        // A KL penalty keeps a frozen copy; bf16 sampling adds half a copy while sampling.
        let kl = peak(
            dir.path(),
            &format!(
                "{}trainer: {{kl_coef: 0.1}}\n",
                agents.replace("}", ", sampling_dtype: bf16}")
            ),
        );
        assert_eq!(part(&kl.agents[0].resident, "KL reference"), w);
        // Scoring a node's K completions under policy and reference: one set of f32 logits,
        // counted only with a penalty.
        assert!(part(&kl.agents[0].sampling, "KL scoring logits") > 0);
        assert_eq!(part(&b.sampling, "KL scoring logits"), 0);
        assert_eq!(part(&kl.agents[0].sampling, "bf16 copies"), w / 2);
        // IAC: a separate critic per agent (by default the agent's model) holds its weights and
        // AdamW state and adds its gradients to the update; a head on the agent adds nothing.
        let iac = peak(
            dir.path(),
            &format!("{agents}trainer: {{algorithm: iac}}\n"),
        );
        let c = &iac.agents[0];
        assert_eq!(part(&c.resident, "critic weights"), w);
        assert_eq!(part(&c.resident, "critic AdamW state"), 2 * w);
        assert_eq!(part(&c.update, "critic gradients"), w);
        assert!(part(&c.update, "critic activations") > 0);
        assert!(iac
            .remedies
            .iter()
            .any(|r| r.contains("critic.separate: false")));
        let tiny = peak(
            dir.path(),
            &format!("{agents}trainer: {{algorithm: iac, critic: {{model: builtin:tiny}}}}\n"),
        );
        assert!(part(&tiny.agents[0].resident, "critic weights") < w / 4);
        let shared = peak(
            dir.path(),
            &format!("{agents}trainer: {{algorithm: iac, critic: {{separate: false}}}}\n"),
        );
        assert!(!shared.agents[0]
            .resident
            .iter()
            .any(|(n, _)| n.starts_with("critic")));
        // MAAC: one critic for all agents, counted beside agent 0 only.
        let maac = peak(
            dir.path(),
            &format!("{agents}trainer: {{algorithm: maac}}\n"),
        );
        assert_eq!(part(&maac.agents[0].resident, "critic weights"), w);
        assert!(!maac.agents[1]
            .resident
            .iter()
            .any(|(n, _)| n.starts_with("critic")));
        assert!(maac.peak < iac.peak, "one critic, not two");
        // A second replica of agent 0 (it trains agent 0, another rank samples it) holds no
        // critic: the one copy sits on the first replica.
        let replica = estimate(
            &scenario(
                dir.path(),
                &format!("{agents}trainer: {{algorithm: maac}}\n"),
            ),
            |i| i == 0,
            |_| false,
            Lookup::Local,
        )
        .unwrap();
        assert!(!replica.agents[0]
            .resident
            .iter()
            .any(|(n, _)| n.starts_with("critic")));
        assert!(maac
            .remedies
            .iter()
            .any(|r| r.contains("maac's one critic")));
    }

    /// A critic with adapters (`trainer.critic.adapter`) holds AdamW state and gradients for
    /// its adapters and head only; on an adapted agent's base it holds no weights of its own,
    /// and IAC's critics on one model share one base; the report names both.
    #[test]
    fn critics_with_adapters_count_their_adapters_and_a_shared_base_once() {
        let dir = tempfile::tempdir().unwrap();
        let agents = "agents: {count: 2, model: builtin:small, max_new_tokens: 16}\n";
        let full = peak(
            dir.path(),
            &format!("{agents}trainer: {{algorithm: iac}}\n"),
        );
        let w = 4 * full.agents[0].parameters;
        let critic = "trainer: {algorithm: iac, critic: {adapter: {rank: 4}}}\n";
        // Full fine-tuned agents: critic 0 loads a base, critic 1 shares it.
        let own = peak(dir.path(), &format!("{agents}{critic}"));
        let (c0, c1) = (&own.agents[0], &own.agents[1]);
        assert_eq!(part(&c0.resident, "critic weights"), w);
        assert_eq!(part(&c1.resident, "critic weights"), 0);
        let (q, on) = c0.critic_adapter.clone().unwrap();
        assert!(q > 0 && q < c0.parameters / 10, "{q}");
        assert_eq!(on, None);
        assert_eq!(part(&c0.resident, "critic AdamW state"), 8 * q);
        assert_eq!(part(&c0.update, "critic gradients"), 4 * q);
        assert_eq!(
            c1.critic_adapter.as_ref().unwrap().1.as_deref(),
            Some("agent 0's critic")
        );
        // Adapted agents: every critic sits on agent 0's base, which agent 1 shares too.
        let adapted = agents.replace("}", ", adapter: {rank: 4}}");
        let shared = peak(dir.path(), &format!("{adapted}{critic}"));
        for a in &shared.agents {
            assert_eq!(part(&a.resident, "critic weights"), 0);
            assert_eq!(
                a.critic_adapter.as_ref().unwrap().1.as_deref(),
                Some("agent 0")
            );
        }
        assert!(shared.peak < own.peak && own.peak < full.peak);
        let report = shared.report();
        assert!(
            report.contains("critic with adapters") && report.contains("on the base of agent 0"),
            "{report}"
        );
        // A critic base in bf16 is not the f32 agents' base: held once, in bf16.
        let bf16 = peak(
            dir.path(),
            &format!("{adapted}trainer: {{algorithm: iac, critic: {{adapter: {{rank: 4}}, base_dtype: bf16}}}}\n"),
        );
        let held = part(&bf16.agents[0].resident, "critic weights");
        assert!(held > 0 && held < w, "{held} vs {w}");
        assert_eq!(part(&bf16.agents[1].resident, "critic weights"), 0);
        // The way out is named where critics have no adapters.
        assert!(full
            .remedies
            .iter()
            .any(|r| r.contains("trainer.critic.adapter")));
        assert!(!own
            .remedies
            .iter()
            .any(|r| r.contains("trainer.critic.adapter")));
    }

    /// Agents with adapters on one base count its weights once (the first agent carries
    /// them); another model, or full fine-tuning, keeps its own.
    #[test]
    fn adapters_on_one_base_count_its_weights_once() {
        let dir = tempfile::tempdir().unwrap();
        let agents =
            "agents: {count: 3, model: builtin:small, max_new_tokens: 16, adapter: {rank: 4}}\n";
        let e = peak(dir.path(), agents);
        let w = 4 * e.agents[0].parameters;
        assert_eq!(part(&e.agents[0].resident, "weights"), w);
        for a in &e.agents[1..] {
            assert_eq!(part(&a.resident, "weights"), 0);
            assert_eq!(part(&a.resident, "transposed sampling copies"), 0);
            assert_eq!(part(&a.sampling, "MLP panels"), 0);
            assert_eq!(a.shares_base_of, Some(0));
            assert!(
                part(&a.sampling, "KV cache") > 0,
                "each agent its own cache"
            );
        }
        let report = e.report();
        assert!(
            report.contains("agents 1, 2 (builtin:small")
                && report.contains("base shared with agent 0"),
            "{report}"
        );
        // The KL reference of an adapted agent is its base with the initial adapter: the
        // adapter's bytes, not another copy of the model.
        let kl = peak(dir.path(), &format!("{agents}trainer: {{kl_coef: 0.1}}\n"));
        for a in &kl.agents {
            assert_eq!(part(&a.resident, "KL reference"), 4 * a.trainable);
            assert!(a.trainable > 0 && 4 * a.trainable < w / 10);
        }
        let full = peak(dir.path(), &agents.replace(", adapter: {rank: 4}", ""));
        assert!(full.agents.iter().all(|a| a.shares_base_of.is_none()));
        // Another base (another sampling dtype loads its own): no sharing.
        let two = "agents:\n  - {model: builtin:small, adapter: {rank: 4}}\n  - {model: builtin:small, adapter: {rank: 4}, sampling_dtype: bf16}\n";
        let e = peak(dir.path(), two);
        assert!(e.agents.iter().all(|a| a.shares_base_of.is_none()));
        assert_eq!(part(&e.agents[1].resident, "weights"), w);
    }

    /// A bf16 base (`agents.base_dtype`) holds the projections in 2 bytes a parameter, once for
    /// the agents on it, and makes no sampling or packed copies of them (only of the f32 LM
    /// head); `check`'s line says so. Another base dtype is another base.
    #[test]
    fn a_bf16_base_halves_the_projections_and_copies_only_the_head() {
        let dir = tempfile::tempdir().unwrap();
        let agents = "agents: {count: 2, model: builtin:small, max_new_tokens: 16, adapter: {rank: 4}, base_dtype: bf16}\n";
        let e = peak(dir.path(), agents);
        let f32e = peak(dir.path(), &agents.replace(", base_dtype: bf16", ""));
        let info = ModelInfo::builtin("small").unwrap();
        let (w, proj) = (info.weight_bytes(), info.projection_parameters());
        assert!(proj > 0 && 4 * proj < w);
        let a0 = &e.agents[0];
        assert_eq!(part(&a0.resident, "weights"), w - 2 * proj);
        assert_eq!(part(&f32e.agents[0].resident, "weights"), w);
        assert_eq!(part(&a0.sampling, "MLP panels"), 0);
        let copies = part(&a0.resident, "transposed sampling copies");
        assert!(copies == 0 || copies == info.head_bytes(), "{copies}");
        assert!(part(&a0.update, "packed weights") <= info.head_bytes());
        // bf16 sampling reads the bf16 projections in place: the head's copy alone.
        let bs = peak(
            dir.path(),
            &agents.replace("bf16}", "bf16, sampling_dtype: bf16}"),
        );
        assert_eq!(
            part(&bs.agents[0].sampling, "bf16 copies"),
            info.head_bytes() / 2
        );
        assert_eq!(e.agents[1].shares_base_of, Some(0));
        assert_eq!(part(&e.agents[1].resident, "weights"), 0);
        assert!(e.peak < f32e.peak, "{} vs {}", e.peak, f32e.peak);
        assert!(e.report().contains("bf16 base"), "{}", e.report());
        assert!(!f32e.report().contains("bf16 base"));
        let mixed = "agents:\n  - {model: builtin:small, adapter: {rank: 4}}\n  - {model: builtin:small, adapter: {rank: 4}, base_dtype: bf16}\n";
        let e = peak(dir.path(), mixed);
        assert!(e.agents.iter().all(|a| a.shares_base_of.is_none()));
    }

    /// A Q8_0 base holds the projections in 34 bytes per 32 weights, once for the agents on
    /// it, with no sampling or packed copies of them; `check`'s line says so.
    #[test]
    fn a_q8_0_base_holds_the_projections_in_34_bytes_per_32() {
        let dir = tempfile::tempdir().unwrap();
        let agents = "agents: {count: 2, model: builtin:small, max_new_tokens: 16, adapter: {rank: 4}, base_dtype: q8_0}\n";
        let e = peak(dir.path(), agents);
        let bf = peak(dir.path(), &agents.replace("q8_0", "bf16"));
        let info = ModelInfo::builtin("small").unwrap();
        let (w, proj) = (info.weight_bytes(), info.projection_parameters());
        let a0 = &e.agents[0];
        assert_eq!(part(&a0.resident, "weights"), w - 4 * proj + proj / 32 * 34);
        assert_eq!(part(&a0.sampling, "MLP panels"), 0);
        assert!(part(&a0.update, "packed weights") <= info.head_bytes());
        assert_eq!(e.agents[1].shares_base_of, Some(0));
        assert!(e.peak < bf.peak, "{} vs {}", e.peak, bf.peak);
        assert!(e.report().contains("q8_0 base"), "{}", e.report());
    }

    #[test]
    fn an_estimate_above_what_is_available_is_refused_unless_overridden() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = peak(dir.path(), "agents: {count: 3, model: builtin:tiny}\n");
        e.available = Some((e.peak - 1, "a test".into()));
        let msg = decide(e.clone(), false).unwrap_err().to_string();
        assert!(
            msg.contains("the 3 agent(s) need about")
                && msg.contains(&human(e.peak))
                && msg.contains("available (a test)")
                && msg.contains("fewer agents (`agents.count`)")
                && msg.contains("optimizer_state_dtype: bf16")
                && msg.contains(OVERRIDE_ENV),
            "{msg}"
        );
        assert!(decide(e.clone(), true).is_ok());
        e.available = Some((e.peak, "a test".into()));
        assert!(decide(e, false).is_ok());
    }
}
