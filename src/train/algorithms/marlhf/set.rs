//! MARLHF's preference set and the reward model's training on it. A pair is two joint texts
//! (CoMLRL's `PreferencePair` as `_format_joint_reward_text` renders it): the pairs of a prompt
//! are MADPO's (`rollout::pairs`), so the same seed selects the same candidates; the model then
//! takes `reward_num_train_epochs` passes over the set, each in a fresh shuffled order (a
//! `DataLoader(shuffle=True)`), one AdamW step per `reward_train_batch_size` pairs.
use super::reward_model::{joint_text, JointRewardModel};
use crate::error::{Error, Result};
use crate::model::grad::recompute::PassPlan;
use crate::model::grad::value::{value_columns, values, ValueAt};
use crate::model::{Mode, ScoreLayout};
use crate::train::optim::adamw::{AdamW, AdamWConfig};
use crate::train::rollout::pairs::{select_compared_pairs, select_pairs, PairSelection};
use crate::train::rollout::NodeSample;
use candle_core::DType;
use candle_core::Var;
use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// The reward model's training settings (the `preference` section's).
pub struct TrainConfig {
    /// Which of a prompt's pairs are kept.
    pub selection: PairSelection,
    /// At most this many pairs per prompt.
    pub limit: Option<usize>,
    /// The AdamW learning rate (constant).
    pub lr: f64,
    /// Passes over the set.
    pub epochs: usize,
    /// Pairs per step.
    pub batch: usize,
    /// Joint texts are cut to this many tokens.
    pub max_length: Option<usize>,
    /// Train the head alone.
    pub freeze_backbone: bool,
}

/// One preference pair as the reward model reads it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TextPair {
    /// The preferred joint text.
    pub winner: String,
    /// The other one.
    pub loser: String,
    /// The task reward of the winner.
    pub winner_reward: f32,
    /// The task reward of the loser.
    pub loser_reward: f32,
}

/// The pairs collected in the first epoch.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TextSet {
    /// Every kept pair, in collection order.
    pub pairs: Vec<TextPair>,
    /// Prompts whose candidates all tied (no pair).
    pub tied_prompts: usize,
}

/// What the reward model's training gave (the last pass's means, as a run reports them).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RewardTraining {
    /// Optimizer steps taken.
    pub steps: usize,
    /// Mean Bradley–Terry loss over the last pass's steps.
    pub loss: f64,
    /// Share of the last pass's pairs the model ranked right before its step.
    pub accuracy: f64,
}

impl TextSet {
    /// Adds the pairs of one first-turn node: its aligned joint candidates (candidate i is every
    /// agent's i-th answer) with their task rewards, each agent's rendered prompt beside.
    pub fn add(
        &mut self,
        prompts: &[String],
        node: &NodeSample,
        cfg: &TrainConfig,
        rng: &mut impl Rng,
    ) -> Result<()> {
        check(node)?;
        let chosen: Vec<(usize, usize)> =
            select_pairs(&node.rewards, cfg.selection, cfg.limit, rng)
                .iter()
                .map(|p| (p.winner, p.loser))
                .collect();
        self.push(prompts, node, &chosen);
        Ok(())
    }

    /// Adds the pairs of one prompt of an iterative round (`marlhf_iter`): `node`'s first
    /// `current` candidates are the current policy's, the rest the comparator's; candidate i of
    /// each side pair up (`select_compared_pairs`, CoMLRL's `_select_policy_comparison_pairs`).
    /// Returns the pairs added.
    pub fn add_compared(
        &mut self,
        prompts: &[String],
        node: &NodeSample,
        current: usize,
        cfg: &TrainConfig,
        rng: &mut impl Rng,
    ) -> Result<usize> {
        check(node)?;
        if current > node.rewards.len() {
            return Err(Error::Internal(format!(
                "{current} current candidates of {} in all",
                node.rewards.len()
            )));
        }
        let (mine, theirs) = node.rewards.split_at(current);
        let chosen: Vec<(usize, usize)> =
            select_compared_pairs(mine, theirs, cfg.selection, cfg.limit, rng)
                .iter()
                .map(|p| match p.current_wins {
                    true => (p.index, current + p.index),
                    false => (current + p.index, p.index),
                })
                .collect();
        self.push(prompts, node, &chosen);
        Ok(chosen.len())
    }

    /// The `chosen` (winner, loser) candidates of `node` as joint texts (a tied prompt when
    /// there are none).
    fn push(&mut self, prompts: &[String], node: &NodeSample, chosen: &[(usize, usize)]) {
        if chosen.is_empty() {
            self.tied_prompts += 1;
            return;
        }
        let prompts: Vec<&str> = prompts.iter().map(String::as_str).collect();
        let text = |c: usize| {
            let completions: Vec<&str> = node.agents.iter().map(|a| a.texts[c].as_str()).collect();
            joint_text(&prompts, &completions)
        };
        for &(w, l) in chosen {
            self.pairs.push(TextPair {
                winner: text(w),
                loser: text(l),
                winner_reward: node.rewards[w],
                loser_reward: node.rewards[l],
            });
        }
    }
}

/// The aligned candidates (texts) and finite rewards a set needs.
fn check(node: &NodeSample) -> Result<()> {
    let k = node.rewards.len();
    if let Some(a) = node.agents.iter().find(|a| a.texts.len() != k) {
        return Err(Error::Internal(format!(
            "MARLHF needs aligned joint candidates: {} rewards but {} completions",
            k,
            a.texts.len()
        )));
    }
    if let Some(r) = node.rewards.iter().find(|r| !r.is_finite()) {
        return Err(Error::Diverged(format!(
            "a joint reward is {r}: MARLHF cannot rank candidates by it"
        )));
    }
    Ok(())
}

/// The token ids the reward model reads for `text`: cut to `max_length` (CoMLRL's tokenizer
/// truncates at the end); without a limit, a text beyond the model's context is an error.
pub fn tokens(rm: &JointRewardModel, text: &str, max_length: Option<usize>) -> Result<Vec<u32>> {
    let mut ids = rm.encode(text)?;
    let context = rm.policy.config.max_position_embeddings;
    match max_length {
        Some(n) => ids.truncate(n),
        None if ids.len() > context => {
            return Err(Error::Config(format!(
                "a joint text is {} tokens, beyond the reward model's context of {context}; set \
                 preference.reward_max_length to cut it",
                ids.len()
            )))
        }
        None => {}
    }
    if ids.is_empty() {
        return Err(Error::Config(
            "a joint text has no tokens after preference.reward_max_length's cut".into(),
        ));
    }
    Ok(ids)
}

/// `rm`'s score of each joint text, cut to `max_length` as [`tokens`] (no gradient; a handful
/// of texts per padded pass, as CoMLRL's `_score_reward_texts` scores a batch).
pub fn score(
    rm: &JointRewardModel,
    texts: &[String],
    max_length: Option<usize>,
) -> Result<Vec<f32>> {
    let rows = texts
        .iter()
        .map(|t| tokens(rm, t, max_length))
        .collect::<Result<Vec<_>>>()?;
    let mut out = Vec::with_capacity(rows.len());
    // A handful of texts per pass bounds the pass's activations.
    for chunk in rows.chunks(8) {
        let refs: Vec<&[u32]> = chunk.iter().map(Vec::as_slice).collect();
        let empty: Vec<&[u32]> = vec![&[]; refs.len()];
        let m = &rm.policy;
        let layout = ScoreLayout::new(&m.model, &refs, &empty, m.pad_id)?;
        let cols = value_columns(&layout, ValueAt::PromptEnd)?;
        // Scoring needs no graph: the inference forward, as a critic reads V_old.
        let v = values(&m.model, &rm.head, &layout, &cols, Mode::Infer)?;
        let v: Vec<f32> = v.to_dtype(DType::F32)?.to_vec1()?;
        out.extend(v);
    }
    Ok(out)
}

/// The reward model's optimizer over `vars`: `torch.optim.AdamW(params, lr=lr)`, torch's
/// defaults for the rest (betas 0.9 / 0.999, epsilon 1e-8, weight decay 0.01), as CoMLRL's
/// `_init_reward_model` builds it (checked by `tests/train/marlhf_reward.rs`).
pub fn reward_adamw(vars: Vec<(String, Var)>, lr: f64) -> AdamW {
    let cfg = AdamWConfig {
        lr,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.01,
    };
    AdamW::new(vars, cfg)
}

/// Trains `rm` on `pairs` with `opt` (over the tensors it trains): `cfg.epochs` shuffled
/// passes, one step per `cfg.batch` pairs on the mean Bradley–Terry loss.
pub fn train(
    rm: &JointRewardModel,
    opt: &mut AdamW,
    pairs: &[TextPair],
    cfg: &TrainConfig,
    rng: &mut impl Rng,
    plan: PassPlan,
) -> Result<RewardTraining> {
    let vars: Vec<Var> = opt.params.iter().map(|p| p.var.clone()).collect();
    let rows = |text: &str| tokens(rm, text, cfg.max_length);
    let mut report = RewardTraining {
        steps: 0,
        loss: f64::NAN,
        accuracy: f64::NAN,
    };
    for _ in 0..cfg.epochs {
        let mut order: Vec<usize> = (0..pairs.len()).collect();
        order.shuffle(rng);
        let (mut loss, mut right, mut steps) = (0.0, 0.0, 0usize);
        for chunk in order.chunks(cfg.batch.max(1)) {
            let winners = chunk
                .iter()
                .map(|&i| rows(&pairs[i].winner))
                .collect::<Result<Vec<_>>>()?;
            let losers = chunk
                .iter()
                .map(|&i| rows(&pairs[i].loser))
                .collect::<Result<Vec<_>>>()?;
            let w: Vec<&[u32]> = winners.iter().map(Vec::as_slice).collect();
            let l: Vec<&[u32]> = losers.iter().map(Vec::as_slice).collect();
            let bt = rm.bt_loss_and_grads(&w, &l, &vars, plan)?;
            // Constant learning rate, no clipping: CoMLRL's reward optimizer has neither.
            opt.step_grads(&bt.grads, cfg.lr, None)?;
            loss += bt.loss;
            right += bt.accuracy * chunk.len() as f64;
            steps += 1;
        }
        report.steps += steps;
        if steps > 0 {
            report.loss = loss / steps as f64;
            report.accuracy = right / pairs.len() as f64;
        }
    }
    Ok(report)
}
