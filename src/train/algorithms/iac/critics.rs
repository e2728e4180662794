//! The critics of a run as a rank holds them: one per agent this rank holds (a replica
//! included) — separate: loaded from `trainer.critic.model` or the agent's own model, with a
//! fresh value head; shared: a fresh value head on the agent's backbone — each with an AdamW of
//! its own; what they add to checkpoints (weights with the head as `value_head.*`, AdamW
//! moments, the optimizer's step count) and to the final models (`models/critic_<i>/` in
//! Hugging Face layout with the head as `value_head.safetensors`; a shared head as
//! `models/agent_<i>/value_head.safetensors`).
use crate::error::{Error, Result};
use crate::model::grad::value::ValueAt;
use crate::model::{Policy, ValueHead};
use crate::train::algorithms::actor_critic::critic::{head_vars, ValueOn};
use crate::train::optim::adamw::{AdamW, AdamWConfig};
use crate::train::optim::moments::StateDtype;
use crate::train::run::checkpoint::{
    read_moments, read_weights, write_moments, write_weights, CheckpointPart,
};
use crate::train::setup::critics::{load_critic, CriticId};
use comlrl_scenario::{CriticPlan, CriticType, Dtype, Scenario};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Mutex;

/// One agent's critic and its optimizer.
pub struct CriticSlot {
    /// The critic's own backbone; `None`: the head sits on the agent's (`separate: false`).
    pub own: Option<Policy>,
    /// The value head.
    pub head: ValueHead,
    /// V (the last prompt token) or Q (the last response token).
    pub at: ValueAt,
    /// Its AdamW over [`CriticSlot::vars`].
    pub opt: AdamW,
    /// The model it was loaded from, as written (for messages).
    pub spec: String,
}

impl CriticSlot {
    /// The critic's trainable tensors: its own backbone's (if any), then the head's.
    pub fn vars(&self) -> Vec<(String, candle_core::Var)> {
        let mut v = self.own.as_ref().map(Policy::vars).unwrap_or_default();
        v.extend(head_vars(&self.head));
        v
    }

    /// The critic reading through its own backbone, or through `actor`'s when shared.
    pub fn on<'a>(&'a self, actor: &'a Policy) -> ValueOn<'a> {
        ValueOn {
            policy: self.own.as_ref().unwrap_or(actor),
            head: &self.head,
            at: self.at,
        }
    }
}

/// Each agent's critic where this rank holds the agent.
pub struct Critics {
    slots: Vec<Option<Mutex<CriticSlot>>>,
}

/// What a checkpoint keeps of a critic beside its tensors.
#[derive(Serialize, Deserialize)]
struct Progress {
    /// Optimizer steps the critic has taken.
    step: u64,
}

/// The most a critic's progress file may hold.
const PROGRESS_CAP: u64 = 4096;

fn weights_file(i: usize) -> String {
    format!("critic_{i}.safetensors")
}

fn moments_file(i: usize) -> String {
    format!("critic_optimizer_{i}.safetensors")
}

fn progress_file(i: usize) -> String {
    format!("critic_{i}.json")
}

impl Critics {
    /// The critics of the agents this rank holds (`Some` in `agents`), as `c` sets them up.
    pub fn load(s: &Scenario, c: &CriticPlan, agents: &[Option<Policy>]) -> Result<Self> {
        let mut built: Vec<Option<CriticSlot>> = Vec::with_capacity(s.agents.len());
        for a in &s.agents {
            let i = a.index;
            let Some(agent) = agents.get(i).and_then(Option::as_ref) else {
                built.push(None);
                continue;
            };
            let model = c.model.as_ref().unwrap_or(&a.model);
            if !c.separate && a.replicas > 1 {
                return Err(Error::Config(format!(
                    "agent {i}: a value head on the agent's backbone (`trainer.critic.separate: \
                     false`) trains on one copy of the agent; remove `replicas` or use a \
                     separate critic"
                )));
            }
            // Critics with adapters on one model share one base (`setup::critics`).
            let earlier: Vec<&Policy> = built
                .iter()
                .flatten()
                .filter_map(|slot| slot.own.as_ref())
                .collect();
            let slot = load_one(s, c, i, model, agent, agents, &earlier)
                .map_err(|e| e.for_agent(i, Some(format!("critic {}", model.spec))))?;
            built.push(Some(slot));
        }
        Ok(Critics {
            slots: built.into_iter().map(|b| b.map(Mutex::new)).collect(),
        })
    }

    /// Agent `i`'s critic (an error where this rank does not hold it).
    pub fn slot(&self, i: usize) -> Result<&Mutex<CriticSlot>> {
        self.slots
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::Internal(format!("agent {i}'s critic is not held here")))
    }

    /// The held critics selected by `which`, with their agent's index.
    fn each<'a>(
        &'a self,
        which: &'a [bool],
    ) -> impl Iterator<Item = (usize, &'a Mutex<CriticSlot>)> + 'a {
        self.slots
            .iter()
            .enumerate()
            .filter(move |(i, _)| which.get(*i).copied().unwrap_or(false))
            .filter_map(|(i, s)| Some((i, s.as_ref()?)))
    }
}

/// Agent `i`'s critic: its own model (separate) or none (shared: the head reads `agent`'s
/// backbone), a value head seeded by the run's seed and the agent, and the AdamW with the
/// trainer's settings at the critic's learning rate (shared: the agent's, as CoMLRL's one
/// optimizer over both).
fn load_one(
    s: &Scenario,
    c: &CriticPlan,
    i: usize,
    model: &comlrl_scenario::ModelRef,
    agent: &Policy,
    agents: &[Option<Policy>],
    earlier: &[&Policy],
) -> Result<CriticSlot> {
    let own = match c.separate {
        true => Some(load_critic(
            s,
            c,
            CriticId::Agent(i),
            model,
            agents,
            earlier,
        )?),
        false => None,
    };
    let backbone = own.as_ref().unwrap_or(agent);
    let seed = s.seed ^ 0x5ca1_ab1e ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let head = ValueHead::init(
        backbone.config.hidden_size,
        c.value_head_hidden_dim,
        seed,
        candle_core::DType::F32,
        backbone.model.device(),
    )?;
    let t = &s.trainer;
    let cfg = AdamWConfig {
        lr: match c.separate {
            true => c.learning_rate,
            false => s.agents[i].learning_rate,
        },
        beta1: t.adam_beta1,
        beta2: t.adam_beta2,
        eps: t.adam_epsilon,
        weight_decay: t.weight_decay,
    };
    let state = match t.optimizer_state_dtype {
        Dtype::Bf16 => StateDtype::Bf16,
        _ => StateDtype::F32,
    };
    let mut slot = CriticSlot {
        own,
        head,
        at: match c.r#type {
            CriticType::V => ValueAt::PromptEnd,
            CriticType::Q => ValueAt::SequenceEnd,
        },
        opt: AdamW::new(vec![], cfg),
        spec: model.spec.clone(),
    };
    // The same seed on every replica of the agent: they round identically.
    slot.opt = AdamW::with_state(slot.vars(), cfg, state, seed);
    Ok(slot)
}

fn lock(m: &Mutex<CriticSlot>) -> Result<std::sync::MutexGuard<'_, CriticSlot>> {
    m.lock()
        .map_err(|_| Error::Internal("a critic's lock is poisoned".into()))
}

impl CheckpointPart for Critics {
    fn files(&self, agent: usize) -> Vec<String> {
        vec![
            weights_file(agent),
            moments_file(agent),
            progress_file(agent),
        ]
    }

    fn save(&self, dir: &Path, writes: &[bool]) -> Result<()> {
        for (i, slot) in self.each(writes) {
            let slot = lock(slot)?;
            write_weights(&slot.vars(), &dir.join(weights_file(i)))?;
            write_moments(&slot.opt, &dir.join(moments_file(i)))?;
            let progress = serde_json::to_string(&Progress {
                step: slot.opt.step,
            })
            .map_err(|e| Error::serialize("a critic's progress", e))?;
            let path = dir.join(progress_file(i));
            std::fs::write(&path, progress).map_err(|e| Error::io(&path, e))?;
        }
        Ok(())
    }

    fn load(&mut self, dir: &Path, held: &[bool]) -> Result<()> {
        for (i, slot) in self.each(held) {
            let mut slot = lock(slot)?;
            read_weights(&slot.vars(), &dir.join(weights_file(i)))?;
            let mpath = dir.join(moments_file(i));
            if let Some(was) = read_moments(&mut slot.opt, &mpath)? {
                log::warn!(
                    "{} holds the critic's AdamW moments in {was:?}: converted to {:?}",
                    mpath.display(),
                    slot.opt.state_dtype
                );
            }
            let path = dir.join(progress_file(i));
            let text = comlrl_scenario::files::read_text(
                &path,
                PROGRESS_CAP,
                "it is not a file comlrl wrote, or it is damaged",
            )
            .map_err(|e| Error::io(&path, e))?;
            let p: Progress = serde_json::from_str(&text)
                .map_err(|e| Error::checkpoint_by(&path, "unreadable critic progress", e))?;
            slot.opt.step = p.step;
        }
        Ok(())
    }

    fn save_models(&self, models: &Path, writes: &[bool]) -> Result<()> {
        for (i, slot) in self.each(writes) {
            let slot = lock(slot)?;
            // A shared head goes beside its agent's weights (as CoMLRL saves it).
            let dir = match &slot.own {
                Some(policy) => {
                    let dir = models.join(format!("critic_{i}"));
                    policy.save(&dir).map_err(|e| {
                        Error::from(e).for_agent(i, Some(format!("critic {}", slot.spec)))
                    })?;
                    dir
                }
                None => models.join(format!("agent_{i}")),
            };
            write_weights(&slot.head.vars(), &dir.join("value_head.safetensors"))?;
        }
        Ok(())
    }
}
