//! A critic's value and loss. A separate critic (CoMLRL `use_separate_critic: true`) is a causal
//! LM of its own with a value head, trained by its own AdamW ([`Critic`]); a shared one
//! (`false`) is a value head on the actor's backbone ([`ValueOn`] borrows either). It reads V(h)
//! at the last prompt token (`critic_type: v`, from the prompt alone) or Q(h, a) at the last
//! response token (`q`), and learns `value_loss_coef` · mean_b((target_b − V_b)²); a shared head
//! clips its value to V_old ± `value_clip_range` in the loss, PPO's
//! max((t − V)², (t − V_clip)²), as CoMLRL does (a separate critic never clips).
use crate::error::{Error, Result};
use crate::model::grad::recompute::{value_forward, PassPlan};
use crate::model::grad::value::{value_columns, values, ValueAt};
use crate::model::{Mode, Policy, ScoreLayout, ValueHead};
use candle_core::{Tensor, Var};

/// A critic: its backbone, its value head and where it reads.
pub struct Critic {
    /// The backbone (a loaded causal LM; its LM head is never used).
    pub policy: Policy,
    /// The value head on its final hidden state.
    pub head: ValueHead,
    /// V (the last prompt token) or Q (the last response token).
    pub at: ValueAt,
}

/// One (prompt, response) a critic reads.
pub type Row<'a> = (&'a [u32], &'a [u32]);

/// What one critic mini-batch gives.
pub struct CriticGrads {
    /// value_loss_coef · mean((target − V)²).
    pub loss: f64,
    /// V of each row before the step.
    pub values: Vec<f32>,
    /// The gradient of each of the critic's variables ([`Critic::vars`] order).
    pub grads: Vec<Option<Tensor>>,
}

impl Critic {
    /// The trainable tensors: the backbone's, then the head's (`value_head.<CoMLRL name>`).
    pub fn vars(&self) -> Vec<(String, Var)> {
        let mut v = self.policy.vars();
        v.extend(head_vars(&self.head));
        v
    }

    /// This critic as a [`ValueOn`].
    pub fn view(&self) -> ValueOn<'_> {
        ValueOn {
            policy: &self.policy,
            head: &self.head,
            at: self.at,
        }
    }

    /// The values of `rows`, without a graph (V_old at rollout time).
    pub fn values(&self, rows: &[Row]) -> Result<Vec<f32>> {
        self.view().values(rows)
    }

    /// The critic loss `coef` · mean((target − V)²) over `rows` and its gradients (one pass
    /// over all rows, as `plan` says). A non-finite value or loss is an error, as in CoMLRL.
    pub fn loss_and_grads(
        &self,
        rows: &[Row],
        targets: &[f32],
        coef: f64,
        vars: &[Var],
        plan: PassPlan,
    ) -> Result<CriticGrads> {
        self.view()
            .loss_and_grads(rows, targets, coef, None, vars, plan)
    }
}

/// A value head's tensors named as in a critic's checkpoint (`value_head.<CoMLRL name>`).
pub fn head_vars(head: &ValueHead) -> Vec<(String, Var)> {
    head.vars()
        .into_iter()
        .map(|(n, var)| (format!("value_head.{n}"), var))
        .collect()
}

/// Value clipping of a shared head: each row's V_old and the range c (V_clip = V_old +
/// clamp(V − V_old, −c, c)).
#[derive(Clone, Copy)]
pub struct Clip<'a> {
    /// V_old of each row.
    pub old: &'a [f32],
    /// c.
    pub range: f64,
}

/// A critic mini-batch's loss `coef` · mean_b(e_b) over its rows, e = (target − V)², or with
/// `clip` max((t − V)², (t − V_clip)²).
#[derive(Clone, Copy)]
pub struct ValueLoss<'a> {
    /// Each row's target.
    pub targets: &'a [f32],
    /// `value_loss_coef`.
    pub coef: f64,
    /// A shared head's value clipping.
    pub clip: Option<Clip<'a>>,
}

impl ValueLoss<'_> {
    /// Row `j`'s error at value `v`, and d (coef · mean e) / d v over `n` rows, in f32 as
    /// torch computes them.
    pub fn row(&self, j: usize, v: f32, n: f32) -> (f32, f32) {
        let t = self.targets[j];
        let (e, d) = match self.clip {
            None => ((t - v) * (t - v), -2.0 * (t - v)),
            Some(c) => clipped(v, t, c.old[j], c.range as f32),
        };
        (e, self.coef as f32 * d / n)
    }

    /// coef · mean(e) at `values` (one per row); a non-finite loss is an error, as in CoMLRL.
    pub fn loss(&self, values: &[f32]) -> Result<f64> {
        let n = values.len() as f32;
        let sum: f64 = values
            .iter()
            .enumerate()
            .map(|(j, &v)| self.row(j, v, n).0 as f64)
            .sum();
        let loss = self.coef * sum / values.len().max(1) as f64;
        if !loss.is_finite() {
            return Err(Error::Diverged(format!(
                "the critic's loss is {loss} (values {values:?}): lower critic_learning_rate"
            )));
        }
        Ok(loss)
    }

    /// Checks that every row has a target (and a V_old with `clip`).
    pub(super) fn check(&self, rows: usize) -> Result<()> {
        if self.targets.len() != rows || self.clip.is_some_and(|c| c.old.len() != rows) {
            return Err(Error::Internal(format!(
                "{} critic targets for {rows} rows",
                self.targets.len()
            )));
        }
        Ok(())
    }
}

/// A value head on a backbone: a separate critic's, or the actor's own.
#[derive(Clone, Copy)]
pub struct ValueOn<'a> {
    /// The backbone (its LM head is never used).
    pub policy: &'a Policy,
    /// The value head on its final hidden state.
    pub head: &'a ValueHead,
    /// V (the last prompt token) or Q (the last response token).
    pub at: ValueAt,
}

impl ValueOn<'_> {
    /// The rows as the critic reads them: V from the prompts alone, Q from prompt + response.
    fn layout(&self, rows: &[Row]) -> Result<ScoreLayout> {
        let prompts: Vec<&[u32]> = rows.iter().map(|r| r.0).collect();
        let responses: Vec<&[u32]> = rows
            .iter()
            .map(|r| match self.at {
                ValueAt::PromptEnd => &[][..],
                ValueAt::SequenceEnd => r.1,
            })
            .collect();
        let m = self.policy;
        Ok(ScoreLayout::new(&m.model, &prompts, &responses, m.pad_id)?)
    }

    /// The values of `rows`, without a graph.
    pub fn values(&self, rows: &[Row]) -> Result<Vec<f32>> {
        let layout = self.layout(rows)?;
        let cols = value_columns(&layout, self.at)?;
        let v = values(&self.policy.model, self.head, &layout, &cols, Mode::Infer)?;
        Ok(v.to_dtype(candle_core::DType::F32)?.to_vec1()?)
    }

    /// The critic loss `coef` · mean(e) over `rows`, e = (target − V)², or with `clip`
    /// max((t − V)², (t − V_clip)²), and the gradients of `vars` (the backbone's, then the
    /// head's: [`Critic::vars`] order) in one pass over all rows, as `plan` says. A non-finite
    /// value or loss is an error, as in CoMLRL.
    pub fn loss_and_grads(
        &self,
        rows: &[Row],
        targets: &[f32],
        coef: f64,
        clip: Option<Clip>,
        vars: &[Var],
        plan: PassPlan,
    ) -> Result<CriticGrads> {
        let value_loss = ValueLoss {
            targets,
            coef,
            clip,
        };
        value_loss.check(rows.len())?;
        let mut layout = self.layout(rows)?;
        // An adapter's dropout (PEFT's train mode), row j's masks drawn as sequence (j, 0) of
        // the mini-batch: the ids the actor's passes give sample j's one completion, so a head
        // on an adapted agent reads the masks its joined passes would.
        let seqs = (0..rows.len() as u64).map(|j| j << 32).collect();
        layout.dropout = self.policy.lora_dropout(seqs, layout.ids.dim(1)?);
        let cols = value_columns(&layout, self.at)?;
        let pass = value_forward(&self.policy.model, self.head, &layout, &cols, plan, None)?;
        let v: Vec<f32> = pass.values().to_dtype(candle_core::DType::F32)?.to_vec1()?;
        let loss = value_loss.loss(&v)?;
        // d/dV of coef · mean(e).
        let n = v.len() as f32;
        let dv: Vec<f32> = (v.iter().enumerate())
            .map(|(j, &v)| value_loss.row(j, v, n).1)
            .collect();
        let dv = Tensor::new(dv, self.policy.model.device())?;
        let mut grads = vec![None; vars.len()];
        pass.backward(&self.policy.model, self.head, &dv, vars, &mut grads)?;
        Ok(CriticGrads {
            loss,
            values: v,
            grads,
        })
    }
}

/// PPO's clipped value error max((t − v)², (t − v_c)²), v_c = old + clamp(v − old, −c, c), and
/// its derivative in v as torch's autograd gives it: `maximum` splits a tie evenly, `clamp`
/// passes the gradient inside its closed range.
fn clipped(v: f32, t: f32, old: f32, c: f32) -> (f32, f32) {
    let d = v - old;
    let vc = old + d.clamp(-c, c);
    let (a, b) = ((t - v) * (t - v), (t - vc) * (t - vc));
    let da = -2.0 * (t - v);
    let db = match (-c..=c).contains(&d) {
        true => -2.0 * (t - vc),
        false => 0.0,
    };
    let g = if a > b {
        da
    } else if b > a {
        db
    } else {
        da / 2.0 + db / 2.0
    };
    (a.max(b), g)
}

/// The critic reads the actor's token ids (as CoMLRL's does): each must be in its vocabulary.
pub fn check_ids(critic: &ValueOn, rows: &[Row], agent: usize) -> Result<()> {
    let vocab = critic.policy.config.vocab_size;
    let bad = rows
        .iter()
        .flat_map(|(p, c)| p.iter().chain(c.iter()))
        .find(|&&id| id as usize >= vocab);
    match bad {
        Some(id) => Err(Error::Config(format!(
            "agent {agent}: token id {id} is outside the critic's vocabulary ({vocab} tokens); \
             the critic reads the agent's tokens, so `trainer.critic.model` needs the agent's \
             tokenizer (remove it to start the critic from the agent's model)"
        ))),
        None => Ok(()),
    }
}
