//! MAAC's one critic (CoMLRL's `MAACTrainer.critics[0]`): a causal LM of its own with a value
//! head, loaded from `trainer.critic.model` or agent 0's model, trained by its own AdamW at
//! `trainer.critic.learning_rate`; its update round ([`critic_round`]); what it adds to
//! checkpoints (beside agent 0's files: weights with the head as `value_head.*`, AdamW moments,
//! the optimizer's step count) and to the final models (`models/critic/` in Hugging Face
//! layout with the head as `value_head.safetensors`).
use crate::error::{Error, Result};
use crate::model::grad::recompute::PassPlan;
use crate::model::grad::value::ValueAt;
use crate::model::{Policy, ValueHead};
use crate::train::algorithms::actor_critic::critic::{Critic, Row};
use crate::train::optim::adamw::{AdamW, AdamWConfig};
use crate::train::optim::moments::StateDtype;
use crate::train::run::checkpoint::{read_moments, read_weights, write_moments, write_weights};
use crate::train::setup::critics::{load_critic, CriticId};
use comlrl_scenario::{CriticPlan, Dtype, Scenario};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The critic and its optimizer.
pub struct Central {
    /// The backbone and value head; it reads the joint text at its last token.
    pub critic: Critic,
    /// Its AdamW over [`Critic::vars`].
    pub opt: AdamW,
    /// The model it was loaded from, as written (for messages).
    pub spec: String,
}

/// What a checkpoint keeps of the critic beside its tensors.
#[derive(Serialize, Deserialize)]
struct Progress {
    /// Optimizer steps the critic has taken.
    step: u64,
}

/// The most the critic's progress file may hold.
const PROGRESS_CAP: u64 = 4096;
const WEIGHTS: &str = "critic.safetensors";
const MOMENTS: &str = "critic_optimizer.safetensors";
const PROGRESS: &str = "critic.json";

impl Central {
    /// The critic as `c` sets it up: its own model (`c.model`, or agent 0's), a value head
    /// seeded by the run's seed, the AdamW with the trainer's settings at the critic's rate.
    pub fn load(s: &Scenario, c: &CriticPlan, agents: &[Option<Policy>]) -> Result<Self> {
        let agent0 = s
            .agents
            .first()
            .ok_or_else(|| Error::Internal("maac with no agents".into()))?;
        let model = c.model.as_ref().unwrap_or(&agent0.model);
        // With `trainer.critic.adapter`, on an adapted agent's base where one matches.
        let policy = load_critic(s, c, CriticId::Central, model, agents, &[])
            .map_err(|e| e.for_agent(0, Some(format!("critic {}", model.spec))))?;
        let seed = s.seed ^ 0x5ca1_ab1e ^ 0xc3a7_c3a7;
        let head = ValueHead::init(
            policy.config.hidden_size,
            c.value_head_hidden_dim,
            seed,
            candle_core::DType::F32,
            policy.model.device(),
        )?;
        let t = &s.trainer;
        let cfg = AdamWConfig {
            lr: c.learning_rate,
            beta1: t.adam_beta1,
            beta2: t.adam_beta2,
            eps: t.adam_epsilon,
            weight_decay: t.weight_decay,
        };
        let state = match t.optimizer_state_dtype {
            Dtype::Bf16 => StateDtype::Bf16,
            _ => StateDtype::F32,
        };
        let critic = Critic {
            policy,
            head,
            at: ValueAt::PromptEnd,
        };
        let opt = AdamW::with_state(critic.vars(), cfg, state, seed);
        Ok(Central {
            critic,
            opt,
            spec: model.spec.clone(),
        })
    }

    /// The checkpoint's files of the critic (written beside agent 0's).
    pub fn files() -> Vec<String> {
        vec![WEIGHTS.into(), MOMENTS.into(), PROGRESS.into()]
    }

    /// Writes the critic into the checkpoint directory `dir`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        write_weights(&self.critic.vars(), &dir.join(WEIGHTS))?;
        write_moments(&self.opt, &dir.join(MOMENTS))?;
        let progress = serde_json::to_string(&Progress {
            step: self.opt.step,
        })
        .map_err(|e| Error::serialize("the critic's progress", e))?;
        let path = dir.join(PROGRESS);
        std::fs::write(&path, progress).map_err(|e| Error::io(&path, e))
    }

    /// Restores the critic from the verified checkpoint in `dir`.
    pub fn load_checkpoint(&mut self, dir: &Path) -> Result<()> {
        read_weights(&self.critic.vars(), &dir.join(WEIGHTS))?;
        let mpath = dir.join(MOMENTS);
        if let Some(was) = read_moments(&mut self.opt, &mpath)? {
            log::warn!(
                "{} holds the critic's AdamW moments in {was:?}: converted to {:?}",
                mpath.display(),
                self.opt.state_dtype
            );
        }
        let path = dir.join(PROGRESS);
        let text = comlrl_scenario::files::read_text(
            &path,
            PROGRESS_CAP,
            "it is not a file comlrl wrote, or it is damaged",
        )
        .map_err(|e| Error::io(&path, e))?;
        let p: Progress = serde_json::from_str(&text)
            .map_err(|e| Error::checkpoint_by(&path, "unreadable critic progress", e))?;
        self.opt.step = p.step;
        Ok(())
    }

    /// Writes the critic beside the final models: `models/critic/` (Hugging Face layout) with
    /// its head as `value_head.safetensors` (CoMLRL saves `critic/` and `value_head.pt`).
    pub fn save_models(&self, models: &Path) -> Result<()> {
        let dir = models.join("critic");
        self.critic
            .policy
            .save(&dir)
            .map_err(|e| Error::from(e).for_agent(0, Some(format!("critic {}", self.spec))))?;
        write_weights(
            &self.critic.head.vars(),
            &dir.join("value_head.safetensors"),
        )
    }
}

/// One critic step of a round.
#[derive(Debug, Clone)]
pub struct CriticStep {
    /// The mini-batch (its index in the round).
    pub batch: usize,
    /// The agent whose targets it learned (`compat_critic_steps`), or `None`: every agent's.
    pub agent: Option<usize>,
    /// `coef` · the mean squared error over its rows and agents, before the step.
    pub loss: f64,
    /// Per agent: `coef` · the mean squared error of its targets (0 for an agent not in it).
    pub agent_loss: Vec<f64>,
    /// V of each row of the mini-batch, before the step.
    pub values: Vec<f32>,
    /// The gradient's global norm (before clipping).
    pub grad_norm: f64,
}

/// How a round's critic steps are taken.
pub struct CriticRound<'a> {
    /// `value_loss_coef`.
    pub coef: f64,
    /// CoMLRL's N steps per mini-batch (one per agent, agent after agent).
    pub compat: bool,
    /// The passes' plan.
    pub plan: PassPlan,
    /// Clip each step's gradients to this global L2 norm.
    pub max_grad_norm: Option<f64>,
    /// The learning rate of mini-batch b's steps (the agents' schedule at the same step).
    pub lr: &'a dyn Fn(usize) -> f64,
}

/// The critic's part of an update round over `rows` (one per buffered joint action), agent
/// a's target of row j in `targets[a][j]`, the mini-batches' rows in `batches`. Fixed: per
/// mini-batch one step on coef · mean_(a,j)((t_a,j − V_j)²) — its gradient is that of
/// (t̄_j − V_j)², t̄ the agents' mean target, so each row is read once. `compat`: CoMLRL's
/// order, agent after agent, each agent's mini-batches in turn, one step each on that agent's
/// targets (N steps per mini-batch, the later ones reading the critic the earlier ones moved).
pub fn critic_round(
    central: &mut Central,
    rows: &[Row],
    targets: &[Vec<f32>],
    batches: &[Vec<usize>],
    how: &CriticRound,
) -> Result<Vec<CriticStep>> {
    let n = targets.len();
    let vars: Vec<candle_core::Var> = central.opt.params.iter().map(|p| p.var.clone()).collect();
    let mut steps = Vec::new();
    let mut step = |b: usize, agent: Option<usize>| -> Result<CriticStep> {
        let idx = &batches[b];
        let batch_rows: Vec<Row> = idx.iter().map(|&j| rows[j]).collect();
        let agents: Vec<usize> = match agent {
            Some(a) => vec![a],
            None => (0..n).collect(),
        };
        let mean_t: Vec<f32> = idx
            .iter()
            .map(|&j| agents.iter().map(|&a| targets[a][j]).sum::<f32>() / agents.len() as f32)
            .collect();
        // An adapter's dropout draws the masks of the critic's own optimizer step.
        central.critic.policy.set_update_step(central.opt.step);
        let cg = central
            .critic
            .loss_and_grads(&batch_rows, &mean_t, how.coef, &vars, how.plan)
            .map_err(|e| match e {
                Error::Diverged(m) => Error::Diverged(format!(
                    "the maac critic, mini-batch {} of the round: {m}",
                    b + 1
                )),
                e => e,
            })?;
        // Each agent's part, from the values the pass read (the step's loss is their mean).
        let mut agent_loss = vec![0.0; n];
        for &a in &agents {
            let se: f64 = idx
                .iter()
                .zip(&cg.values)
                .map(|(&j, &v)| ((targets[a][j] - v) as f64).powi(2))
                .sum();
            agent_loss[a] = how.coef * se / idx.len().max(1) as f64;
        }
        let loss = agent_loss.iter().sum::<f64>() / agents.len() as f64;
        let norm = central
            .opt
            .step_grads(&cg.grads, (how.lr)(b), how.max_grad_norm)?;
        Ok(CriticStep {
            batch: b,
            agent,
            loss,
            agent_loss,
            values: cg.values,
            grad_norm: norm,
        })
    };
    match how.compat {
        true => {
            for a in 0..n {
                for b in 0..batches.len() {
                    steps.push(step(b, Some(a))?);
                }
            }
        }
        false => {
            for b in 0..batches.len() {
                steps.push(step(b, None)?);
            }
        }
    }
    Ok(steps)
}
