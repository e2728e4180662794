//! MARLHF's joint reward model (CoMLRL 1.4.3 `JointRewardModel`): a causal-LM backbone and a
//! Linear(H→1) head read at the last real token of a fixed joint text
//! (`MARLHFTrainer._format_joint_text`), trained on preference pairs with the Bradley–Terry loss
//! mean_b −log σ(s_w,b − s_l,b). No new backward: after the scoring pass the gradient is the
//! value head's (`model::grad` `ValuePass::backward`) with d loss / d s = ∓σ(−(s_w − s_l))/B.
//!
//! Differences from CoMLRL: its head starts from torch's `nn.Linear` init, comlrl's from
//! `ValueHead::init` (N(0, 0.02²) weights, zero bias); the texts are scored one padded batch as
//! there (right padding, positions counting real tokens, so padding changes nothing).
use crate::error::{Error, Result};
use crate::model::grad::recompute::{value_forward, PassPlan};
use crate::model::grad::value::{value_columns, ValueAt};
use crate::model::{Policy, ScoreLayout, ValueHead};
use candle_core::{DType, Tensor, Var};

/// The joint text the reward model reads: CoMLRL's layout, agents numbered from 1.
pub fn joint_text(prompts: &[&str], completions: &[&str]) -> String {
    let n = prompts.len().max(completions.len());
    let mut parts = vec!["Joint multi-agent response".to_string()];
    for i in 0..n {
        let p = prompts.get(i).copied().unwrap_or("");
        let c = completions.get(i).copied().unwrap_or("");
        parts.push(format!("Agent {} prompt:\n{p}", i + 1));
        parts.push(format!("Agent {} response:\n{c}", i + 1));
    }
    parts.join("\n\n")
}

/// A joint reward model: its backbone and its head.
pub struct JointRewardModel {
    /// The backbone (a loaded causal LM; its LM head is never used).
    pub policy: Policy,
    /// The scalar head on the final hidden state of the last real token.
    pub head: ValueHead,
}

/// What one Bradley–Terry mini-batch gives.
pub struct BtGrads {
    /// mean_b −log σ(s_w − s_l).
    pub loss: f64,
    /// s_w of each pair, before the step.
    pub winner_scores: Vec<f32>,
    /// s_l of each pair, before the step.
    pub loser_scores: Vec<f32>,
    /// The share of pairs scored the right way (s_w > s_l).
    pub accuracy: f64,
    /// The gradient of each of [`JointRewardModel::vars`].
    pub grads: Vec<Option<Tensor>>,
}

impl JointRewardModel {
    /// The trainable tensors: the backbone's, then the head's (`reward_head.weight`, `.bias`:
    /// CoMLRL's names).
    pub fn vars(&self) -> Vec<(String, Var)> {
        let mut v = self.policy.vars();
        v.push(("reward_head.weight".into(), self.head.weight.clone()));
        v.push(("reward_head.bias".into(), self.head.bias.clone()));
        v
    }

    /// Token ids of `text` as the reward model reads it (no special tokens added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.policy.tokenizer.encode(text)?)
    }

    fn layout(&self, rows: &[&[u32]]) -> Result<ScoreLayout> {
        if rows.iter().any(|r| r.is_empty()) {
            return Err(Error::Internal(
                "an empty joint text cannot be scored".into(),
            ));
        }
        let empty: Vec<&[u32]> = vec![&[]; rows.len()];
        let m = &self.policy;
        Ok(ScoreLayout::new(&m.model, rows, &empty, m.pad_id)?)
    }

    /// The Bradley–Terry loss over (winner, loser) token rows and its gradients (one pass over
    /// all 2B rows, as `plan` says). A non-finite score or loss is an error.
    pub fn bt_loss_and_grads(
        &self,
        winners: &[&[u32]],
        losers: &[&[u32]],
        vars: &[Var],
        plan: PassPlan,
    ) -> Result<BtGrads> {
        if winners.len() != losers.len() || winners.is_empty() {
            return Err(Error::Internal(format!(
                "{} winners for {} losers",
                winners.len(),
                losers.len()
            )));
        }
        let rows: Vec<&[u32]> = winners.iter().chain(losers).copied().collect();
        let layout = self.layout(&rows)?;
        let cols = value_columns(&layout, ValueAt::PromptEnd)?;
        let pass = value_forward(&self.policy.model, &self.head, &layout, &cols, plan, None)?;
        let s: Vec<f32> = pass.values().to_dtype(DType::F32)?.to_vec1()?;
        let b = winners.len();
        let (sw, sl) = s.split_at(b);
        let n = b as f64;
        let (mut loss, mut accuracy) = (0.0, 0.0);
        let mut dv = vec![0f32; 2 * b];
        for i in 0..b {
            let m = sw[i] as f64 - sl[i] as f64;
            // −log σ(m), stable.
            loss += if m >= 0.0 {
                (-m).exp().ln_1p()
            } else {
                m.exp().ln_1p() - m
            } / n;
            accuracy += f64::from(u8::from(m > 0.0)) / n;
            let w = (1.0 / (1.0 + m.exp())) / n; // σ(−m)/B
            dv[i] = -w as f32;
            dv[b + i] = w as f32;
        }
        if !loss.is_finite() {
            return Err(Error::Diverged(format!(
                "the reward model's loss is {loss} (scores {s:?}): lower reward_learning_rate"
            )));
        }
        let dv = Tensor::new(dv, self.policy.model.device())?;
        let mut grads = vec![None; vars.len()];
        pass.backward(&self.policy.model, &self.head, &dv, vars, &mut grads)?;
        Ok(BtGrads {
            loss,
            winner_scores: sw.to_vec(),
            loser_scores: sl.to_vec(),
            accuracy,
            grads,
        })
    }
}
