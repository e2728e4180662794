//! MAGRPO (arXiv 2508.04652, CoMLRL's `MAGRPOTrainer`): each completion's return sums the
//! discounted returns of the joint actions it takes part in (`returns`), less the KL penalty
//! when it is on; its advantage is the return against its group's baseline, optionally
//! normalised (`advantage`, `trainer.advantage_mode`, `advantage_normalization`,
//! `advantage_scale`, `advantage_std`); the loss is the advantage-weighted sequence
//! log-probability (`loss`, aggregated as `trainer.loss_aggregation` says, truncated completions
//! left out with `mask_truncated_completions`), one AdamW step per mini-batch of
//! `train_batch_size` buffered nodes. With several reward terms, `trainer.reward_aggregation:
//! normalize_then_sum` trains on their z-scored weighted sum (`aggregate`). With
//! `trainer.ppo_epochs` it passes over a buffer several times, and with `importance_level` each
//! token's loss is the clipped surrogate of its probability ratio to the sampling policy
//! (`clip`). `trainer.entropy_coef` adds an entropy bonus (`entropy_bonus`), whose coefficient
//! `use_adaptive_entropy` changes step by step (`entropy_control`: the one state MAGRPO adds to
//! checkpoints). It keeps no network beside the agents.
pub mod advantage;
pub mod aggregate;
pub mod clip;
mod entropy_bonus;
pub mod entropy_control;
pub mod entropy_mask;
pub mod loss;
pub mod returns;
mod token_terms;

use crate::error::Result;
use crate::model::grad::recompute::PassPlan;
use crate::train::algorithms::algorithm::Algorithm;
use crate::train::algorithms::round::{AgentUpdate, Learner, Round};
use crate::train::rollout::joint::completion_returns;
use crate::train::rollout::{AgentRollout, Node, NodeSample};
use crate::train::run::checkpoint::CheckpointPart;
use crate::train::update::plan::pass_plan;
use crate::train::update::LossGrads;
use advantage::{advantages_with, batch_spread, rescale, Baseline, Normalization};
use clip::{clipped_loss_and_grads_terms, Clip, Old};
use comlrl_scenario::{
    AdvantageMode, ImportanceLevel, LogprobTemperature, RewardAggregation, Scenario,
};
use entropy_control::{ControlSettings, EntropyControl};
use loss::{loss_and_grads_terms, LossShape, TokenTerms};
use returns::joint_returns;
use std::path::Path;
use std::sync::Mutex;

/// MAGRPO with a scenario's settings.
pub struct Magrpo {
    /// Completions per agent per node.
    k: usize,
    /// γ for returns across turns.
    discount: f64,
    /// The KL penalty's coefficient (0: off).
    kl_coef: f64,
    /// With `reward_aggregation: normalize_then_sum`, the reward terms' weights (their
    /// z-scores' weighted sum is the training reward); `None`: the processed reward.
    term_weights: Option<Vec<f64>>,
    baseline: Baseline,
    norm: Normalization,
    /// Each agent's loss aggregation and truncation mask.
    shapes: Vec<LossShape>,
    /// Each agent's logit scale in the loss (`trainer.logprob_temperature`: 1, or 1 / its
    /// sampling temperature, which the scenario checks is above 0).
    logit_scales: Vec<f64>,
    /// Buffered nodes per mini-batch.
    batch: usize,
    /// Nodes per update round.
    buffer: usize,
    /// Sequences per forward/backward pass (0: a node's K at once).
    micro_batch: usize,
    /// Re-run layers in the backward (`gradient_checkpointing`).
    recompute: bool,
    plan: PassPlan,
    /// Passes over a buffer (`trainer.ppo_epochs`).
    epochs: usize,
    /// The clipped ratio (`trainer.importance_level` not `none`).
    clip: Option<Clip>,
    /// Per-token terms of the loss (`trainer.top_entropy_quantile`).
    terms: TokenTerms,
    /// Adaptive entropy control (`trainer.use_adaptive_entropy`): its settings and each
    /// agent's state.
    control: Option<(ControlSettings, Vec<Mutex<EntropyControl>>)>,
}

impl Magrpo {
    /// MAGRPO as `s.trainer` sets it up.
    pub fn new(s: &Scenario) -> Self {
        let t = &s.trainer;
        Magrpo {
            k: t.num_generations,
            discount: t.discount,
            kl_coef: t.kl_coef,
            term_weights: (t.reward_aggregation == RewardAggregation::NormalizeThenSum)
                .then(|| s.reward.terms.iter().map(|r| r.weight).collect()),
            baseline: match t.advantage_mode {
                AdvantageMode::Mean => Baseline::Mean,
                AdvantageMode::Raw => Baseline::Raw,
                AdvantageMode::Max => Baseline::Max,
                AdvantageMode::Rloo => Baseline::Rloo,
            },
            norm: Normalization {
                on: t.advantage_normalization,
                scale: t.advantage_scale,
                std: t.advantage_std,
            },
            shapes: s
                .agents
                .iter()
                .map(|a| LossShape {
                    aggregation: t.loss_aggregation,
                    max_new_tokens: a.sampling.max_new_tokens,
                    mask_truncated: t.mask_truncated_completions,
                })
                .collect(),
            logit_scales: s
                .agents
                .iter()
                .map(|a| match t.logprob_temperature {
                    LogprobTemperature::One => 1.0,
                    LogprobTemperature::Sampling => 1.0 / a.sampling.temperature,
                })
                .collect(),
            batch: t.train_batch_size.max(1),
            buffer: t.rollout_buffer_size.max(1),
            micro_batch: t.micro_batch_size,
            recompute: t.gradient_checkpointing,
            plan: pass_plan(t),
            epochs: t.ppo_epochs.max(1),
            clip: (t.importance_level != ImportanceLevel::None).then(|| Clip {
                level: t.importance_level,
                low: t.clip_eps,
                high: t.clip_eps_high.unwrap_or(t.clip_eps),
                delta: t.clip_delta,
            }),
            terms: TokenTerms {
                top_entropy_quantile: t.top_entropy_quantile,
                kl_in_loss: t.kl_in_loss,
                entropy_coef: t.entropy_coef,
                entropy_on: t.use_adaptive_entropy,
            },
            control: t.use_adaptive_entropy.then(|| {
                (
                    ControlSettings {
                        min: t.entropy_coef_min,
                        max: t.entropy_coef_max,
                        delta: t.entropy_coef_delta,
                        target: t.entropy_target,
                    },
                    s.agents
                        .iter()
                        .map(|_| Mutex::new(EntropyControl::new(t.entropy_coef)))
                        .collect(),
                )
            }),
        }
    }

    /// The per-token terms of agent `agent`'s next step: under adaptive control, the
    /// coefficient its controller applies now.
    fn terms_for(&self, agent: usize) -> Result<TokenTerms> {
        Ok(match &self.control {
            None => self.terms,
            Some((settings, states)) => TokenTerms {
                entropy_coef: lock(states, agent)?.applied(settings),
                ..self.terms
            },
        })
    }

    /// Logs a mini-batch's entropy and per-token KL (the whole mini-batch's: summed over the
    /// agent's replicas first) and, with the entropy bonus, its coefficient (TRL's
    /// `entropy_coef`: after the adaptive controller's update, as TRL logs it), then takes the
    /// optimizer step on its gradients.
    fn record_and_step(&self, learner: &mut Learner<'_>, mut lg: LossGrads) -> Result<()> {
        learner.reduce(&mut lg)?;
        let entropy = lg.entropy_mean();
        if let Some(h) = entropy {
            learner.record("entropy", h);
        }
        if let Some(kl) = lg.token_kl() {
            learner.record("kl_in_loss", kl);
        }
        match &self.control {
            Some((settings, states)) => {
                let measured = entropy_control::measured_entropy(&lg);
                let mut state = lock(states, learner.index())?;
                state.update(settings, measured);
                learner.record("entropy_coef", state.coef);
            }
            None if self.terms.entropy_coef != 0.0 => {
                learner.record("entropy_coef", self.terms.entropy_coef);
            }
            None => {}
        }
        learner.step(lg)
    }

    /// Returns and advantages of `node` and its subtree, appended to `out` in creation order.
    fn flatten(&self, node: Node, out: &mut Vec<NodeSample>) {
        let n = node.agents.len();
        let jr = joint_returns(&node, self.discount);
        let Node {
            turn,
            mut agents,
            joint,
            rewards,
            components,
            children,
        } = node;
        let returns = completion_returns(&joint, &jr, n, self.k);
        for (a, mut r) in agents.iter_mut().zip(returns) {
            // The KL penalty, when on, lowers each completion's return by coef · KL.
            for (ret, kl) in r.iter_mut().zip(&a.kl) {
                *ret -= (self.kl_coef * *kl as f64) as f32;
            }
            a.advantages = advantages_with(&r, self.baseline, self.norm);
            a.returns = r;
        }
        out.push(NodeSample {
            turn,
            agents,
            rewards,
            components,
        });
        for child in children {
            self.flatten(child, out);
        }
    }
}

impl Algorithm for Magrpo {
    fn name(&self) -> &'static str {
        "magrpo"
    }

    fn targets(&self, mut root: Node) -> Result<Vec<NodeSample>> {
        let logged = self
            .term_weights
            .as_ref()
            .map(|w| aggregate::renormalize_tree(&mut root, w));
        let mut out = Vec::new();
        self.flatten(root, &mut out);
        // The samples keep the rewards the run logs; the returns came from the z-scored sum.
        if let Some(logged) = logged {
            for (sample, rewards) in out.iter_mut().zip(logged) {
                sample.rewards = rewards;
            }
        }
        Ok(out)
    }

    fn steps_per_round(&self) -> usize {
        self.buffer.div_ceil(self.batch) * self.epochs
    }

    fn update(
        &mut self,
        round: Round<'_>,
        buffer: &[NodeSample],
    ) -> Result<Vec<(usize, AgentUpdate)>> {
        round.each_agent(|learner| {
            let i = learner.index();
            let (shape, logit_scale) = self
                .shapes
                .get(i)
                .copied()
                .zip(self.logit_scales.get(i).copied())
                .ok_or_else(|| crate::Error::Internal(format!("agent {i} has no loss settings")))?;
            let plan = PassPlan {
                logit_scale,
                ..self.plan
            };
            // `advantage_scale: batch`: the buffer's re-centred advantages divided by the
            // spread of all its returns (TRL's generation batch is the rollout buffer).
            let scaled: Option<Vec<AgentRollout>> = self.norm.per_batch().then(|| {
                let spread = batch_spread(
                    buffer.iter().map(|s| &s.agents[i].returns[..]),
                    self.norm.std,
                );
                buffer
                    .iter()
                    .map(|s| {
                        let mut a = s.agents[i].clone();
                        rescale(&mut a.advantages, spread);
                        a
                    })
                    .collect()
            });
            let mine: Vec<&AgentRollout> = match &scaled {
                Some(v) => v.iter().collect(),
                None => buffer.iter().map(|s| &s.agents[i]).collect(),
            };
            if let Some(clip) = self.clip {
                return clipped_round(self, learner, &mine, plan, shape, clip);
            }
            for samples in mine.chunks(self.batch) {
                let lg = loss_and_grads_terms(
                    learner.policy(),
                    learner.vars(),
                    samples,
                    self.micro_batch,
                    self.recompute,
                    learner.share(),
                    plan,
                    shape,
                    self.terms_for(i)?,
                )?;
                log::debug!(
                    "agent {i}: gradients accumulated ({} layer passes kept their \
                     activations, at most {:.1} MB a pass; {} sequences of advantage 0 \
                     skipped); {}",
                    lg.kept_layers,
                    lg.kept_bytes_max as f64 / 1e6,
                    lg.skipped,
                    crate::runtime::memory_line()
                );
                self.record_and_step(learner, lg)?;
            }
            Ok(())
        })
    }
}

/// One agent's update round under a clipped ratio: `ppo_epochs` passes over its buffer
/// `mine`, one optimizer step per mini-batch. Until the round's first step every completion is
/// on-policy (ratio 1) and the log-probs computed for it become its π_old; a completion first
/// computed after a step is compared with its sampling-time log-probs.
fn clipped_round(
    m: &Magrpo,
    learner: &mut crate::train::algorithms::round::Learner<'_>,
    mine: &[&AgentRollout],
    plan: PassPlan,
    shape: LossShape,
    clip: Clip,
) -> Result<()> {
    let i = learner.index();
    // π_old of each completion of the buffer: `None` until known.
    let mut old: Vec<Vec<Option<Vec<f32>>>> = mine
        .iter()
        .map(|s| vec![None; s.completions.len()])
        .collect();
    let mut stepped = false;
    for _ in 0..m.epochs {
        for (b, samples) in mine.chunks(m.batch).enumerate() {
            let first = b * m.batch;
            let batch_old: Vec<Vec<Old<'_>>> = samples
                .iter()
                .enumerate()
                .map(|(s, a)| {
                    (0..a.completions.len())
                        .map(|j| match (&old[first + s][j], a.sampling_logprobs.get(j)) {
                            _ if !stepped => Old::OnPolicy,
                            (Some(v), _) => Old::Known(v),
                            (None, Some(v)) if v.len() == a.completions[j].len() => Old::Known(v),
                            (None, _) => Old::Missing,
                        })
                        .collect()
                })
                .collect();
            let out = clipped_loss_and_grads_terms(
                learner.policy(),
                learner.vars(),
                samples,
                &batch_old,
                m.micro_batch,
                m.recompute,
                learner.share(),
                plan,
                shape,
                clip,
                i,
                m.terms_for(i)?,
            )?;
            for (s, row) in out.captured.into_iter().enumerate() {
                for (j, lp) in row.into_iter().enumerate() {
                    if lp.is_some() {
                        old[first + s][j] = lp;
                    }
                }
            }
            for (name, value) in out.stats.metrics() {
                learner.record(name, value);
            }
            m.record_and_step(learner, out.grads)?;
            stepped = true;
        }
    }
    Ok(())
}

/// The adaptive entropy controller's state, one file per agent (nothing without it).
impl CheckpointPart for Magrpo {
    fn files(&self, agent: usize) -> Vec<String> {
        match self.control {
            Some(_) => vec![EntropyControl::file(agent)],
            None => vec![],
        }
    }

    fn save(&self, dir: &Path, writes: &[bool]) -> Result<()> {
        let Some((_, states)) = &self.control else {
            return Ok(());
        };
        for (i, _) in writes.iter().enumerate().filter(|(_, &w)| w) {
            let state = *lock(states, i)?;
            state.save(&dir.join(EntropyControl::file(i)))?;
        }
        Ok(())
    }

    fn load(&mut self, dir: &Path, held: &[bool]) -> Result<()> {
        let Some((_, states)) = &self.control else {
            return Ok(());
        };
        for (i, _) in held.iter().enumerate().filter(|(_, &h)| h) {
            let loaded = EntropyControl::load(&dir.join(EntropyControl::file(i)))?;
            *lock(states, i)? = loaded;
        }
        Ok(())
    }
}

/// Agent `agent`'s controller state.
fn lock(
    states: &[Mutex<EntropyControl>],
    agent: usize,
) -> Result<std::sync::MutexGuard<'_, EntropyControl>> {
    let m = states.get(agent).ok_or_else(|| {
        crate::Error::Internal(format!("agent {agent} has no entropy controller"))
    })?;
    Ok(m.lock().unwrap_or_else(|e| e.into_inner()))
}
