//! A value head on the actor's own backbone (IAC's `trainer.critic.separate: false`, CoMLRL's
//! `use_separate_critic: False`): one mini-batch's gradient of the actor's loss plus the value
//! loss, the sum CoMLRL's one backward of `actor_loss + value_loss` computes. The backbone's
//! gradient is the sum of both losses'; the head's is the value loss's alone (it has an
//! optimizer of its own).
//!
//! Two ways to compute it, the same numbers up to f32 rounding ([`passes`] picks one per
//! mini-batch):
//! - [`Passes::Joined`]: one backbone pass per sequence serves both losses. The actor's pass
//!   (prompt + response) computes the final hidden state once; the LM head's log-prob gradient
//!   and the value head's (at the value row: the last prompt token for V, the last response
//!   token for Q) are added at the final hidden state, before the final norm's backward, then
//!   one backward runs through the layers (`value::ValueTop`). V is read by the same forward
//!   from the same weights, so the value clipping sees the value a second pass would read.
//! - [`Passes::Two`]: the actor's passes, then a value pass over the mini-batch (a critic's
//!   forward and backward), the backbone's two gradients summed. Kept where one pass cannot
//!   serve; [`Two`] says why.
use super::actor::{groups, ActorSample, Weights};
use super::critic::{CriticGrads, Row, ValueLoss, ValueOn};
use crate::error::{Error, Result};
use crate::model::grad::recompute::PassPlan;
use crate::model::grad::value::{ValueAt, ValueSeeds, ValueTop};
use crate::model::ValueHead;
use crate::train::update::passes::{sequence_grads, SequenceLoss};
use crate::train::update::{LossGrads, Share};
use candle_core::{Tensor, Var};

/// How a shared head's mini-batch is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passes {
    /// One backbone pass per sequence for both losses.
    Joined,
    /// The actor's passes and a value pass, their backbone gradients summed.
    Two(Two),
}

/// Why a mini-batch takes two passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Two {
    /// `gradient_checkpointing: false`: the actor's loss runs through candle's autograd over a
    /// whole graph, which has no seam to join the value head's gradient at (the value pass is
    /// the hand-written one either way).
    Autograd,
    /// The agent has replicas: each computes a share of the actor's passes, while the value
    /// loss is one replica's (a shared head with replicas is refused when the critics load).
    Replicas,
    /// A response is empty (CoMLRL's pad cut of an answer that is only its EOS): the actor has
    /// no pass for it, and its value must still be read.
    EmptyResponse,
    /// A Q value reads the last token of the whole response, which the pad cut
    /// (`compat_pad_cut`) left out of the actor's sequence.
    ValueRowCut,
}

/// How the mini-batch `samples` (the actor's) with `rows` (the value's, in the same order)
/// can be computed: joined where every value row lies inside its actor sequence and the passes
/// are the hand-written, recomputed ones of one copy of the agent.
pub fn passes(
    samples: &[ActorSample],
    rows: &[Row],
    at: ValueAt,
    recompute: bool,
    share: Share,
) -> Passes {
    if !recompute {
        return Passes::Two(Two::Autograd);
    }
    if share.of > 1 {
        return Passes::Two(Two::Replicas);
    }
    for (s, &(prompt, response)) in samples.iter().zip(rows) {
        let trained = s.response.first().map_or(&[][..], |r| &r[..]);
        if trained.is_empty() {
            return Passes::Two(Two::EmptyResponse);
        }
        let inside = s.prompt == prompt
            && match at {
                ValueAt::PromptEnd => true,
                ValueAt::SequenceEnd => trained == response,
            };
        if !inside {
            return Passes::Two(Two::ValueRowCut);
        }
    }
    Passes::Joined
}

/// A shared head's mini-batch: `samples` for the actor's loss, `rows` and `loss` for the value
/// loss (one row per sample, in order), `head` reading at `view.at` on `view.policy`'s backbone.
pub struct SharedBatch<'a> {
    /// The actor's backbone with the head on it.
    pub view: ValueOn<'a>,
    /// The actor's samples (one response each).
    pub samples: &'a [ActorSample<'a>],
    /// The value's rows: each sample's prompt and whole response.
    pub rows: &'a [Row<'a>],
    /// The value loss over `rows`.
    pub loss: ValueLoss<'a>,
}

/// The gradients of a shared head's mini-batch: the actor's loss and gradients in the actor's
/// `backbone` order (the value loss's backbone part included), and the value loss, V of each
/// row and the gradients of `head` alone, computed as `how` says ([`passes`]).
pub fn shared_grads(
    batch: &SharedBatch,
    backbone: &[Var],
    head: &[Var],
    recompute: bool,
    share: Share,
    plan: PassPlan,
    how: Passes,
) -> Result<(LossGrads, CriticGrads)> {
    batch.loss.check(batch.rows.len())?;
    if batch.samples.len() != batch.rows.len() {
        return Err(Error::Internal(format!(
            "{} actor samples for {} value rows",
            batch.samples.len(),
            batch.rows.len()
        )));
    }
    match how {
        Passes::Joined => joined(batch, backbone, head, share, plan),
        Passes::Two(_) => two_passes(batch, backbone, head, recompute, share, plan),
    }
}

/// [`Passes::Joined`].
fn joined(
    batch: &SharedBatch,
    backbone: &[Var],
    head: &[Var],
    share: Share,
    plan: PassPlan,
) -> Result<(LossGrads, CriticGrads)> {
    let vars: Vec<Var> = backbone.iter().chain(head).cloned().collect();
    let loss = Joined {
        actor: Weights::of(batch.samples),
        head: batch.view.head,
        at: batch.view.at,
        value: batch.loss,
        n: batch.rows.len() as f32,
    };
    let groups = groups(batch.samples);
    let mut lg = sequence_grads(
        batch.view.policy,
        &vars,
        &groups,
        &loss,
        0,
        true,
        share,
        plan,
    )?;
    // One value per sample: group g is sample g, its one row row 0.
    let mut values = vec![f32::NAN; batch.rows.len()];
    let mut read = 0;
    for &(g, _, v) in &lg.values {
        if let Some(slot) = values.get_mut(g) {
            *slot = v;
            read += 1;
        }
    }
    if read != values.len() {
        return Err(Error::Internal(format!(
            "the joined passes read {read} values for {} rows",
            values.len()
        )));
    }
    let value_loss = batch.loss.loss(&values)?;
    let head_grads = lg.grads.split_off(backbone.len());
    Ok((
        lg,
        CriticGrads {
            loss: value_loss,
            values,
            grads: head_grads,
        },
    ))
}

/// [`Passes::Two`]: the actor's passes, then the value pass; the backbone's value gradient
/// joins the actor's on the agent's first replica only (the replicas' sum counts it once).
fn two_passes(
    batch: &SharedBatch,
    backbone: &[Var],
    head: &[Var],
    recompute: bool,
    share: Share,
    plan: PassPlan,
) -> Result<(LossGrads, CriticGrads)> {
    let policy = batch.view.policy;
    let mut lg =
        super::actor::actor_grads(policy, backbone, batch.samples, recompute, share, plan)?;
    let vars: Vec<Var> = backbone.iter().chain(head).cloned().collect();
    let l = batch.loss;
    let mut cg = batch
        .view
        .loss_and_grads(batch.rows, l.targets, l.coef, l.clip, &vars, plan)?;
    let head_grads = cg.grads.split_off(backbone.len());
    if share.index == 0 {
        for (g, v) in lg.grads.iter_mut().zip(cg.grads) {
            *g = match (g.take(), v) {
                (Some(a), Some(b)) => Some((a + b)?),
                (a, b) => a.or(b),
            };
        }
    }
    cg.grads = head_grads;
    Ok((lg, cg))
}

/// The actor's loss with the value head read in the same passes.
struct Joined<'a> {
    actor: Weights<'a>,
    head: &'a ValueHead,
    at: ValueAt,
    value: ValueLoss<'a>,
    /// Rows in the value loss's mean.
    n: f32,
}

impl SequenceLoss for Joined<'_> {
    fn coefs(&self, group: usize, rows: &[usize]) -> Vec<f32> {
        self.actor.coefs(group, rows)
    }

    fn loss(&self, group: usize, rows: &[usize], lp: &Tensor) -> Result<Tensor> {
        self.actor.loss(group, rows, lp)
    }

    fn value(&self, group: usize, _rows: &[usize]) -> Option<ValueTop<'_>> {
        Some(ValueTop {
            head: self.head,
            at: self.at,
            seeds: Box::new(Seeds {
                loss: self.value,
                row: group,
                n: self.n,
            }),
        })
    }
}

/// The value loss's seed of one sample's row (each group is one sample).
struct Seeds<'a> {
    loss: ValueLoss<'a>,
    row: usize,
    n: f32,
}

impl ValueSeeds for Seeds<'_> {
    fn seeds(&self, values: &[f32]) -> Vec<f32> {
        values
            .iter()
            .map(|&v| self.loss.row(self.row, v, self.n).1)
            .collect()
    }
}
