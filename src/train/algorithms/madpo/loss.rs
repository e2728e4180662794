//! MADPO's loss and gradients over a mini-batch of preference pairs (CoMLRL 1.4.3
//! `MADPOTrainer._update_from_preference_batch`): with Δ_a = log π_a(y_w) − log π_a(y_l) (the
//! sequence log-probabilities of agent a's parts of the winning and losing joint candidates,
//! summed over tokens, temperature 1, no reference model), agent i's loss is
//! mean_b −log σ(β·(Δ_i,b + Σ_{j≠i} sg(Δ_j,b))): every agent sees the joint margin but is
//! differentiated through its own Δ only.
//!
//! No new backward: a scoring pass (no graph) gives every agent's Δ for the mini-batch first,
//! as CoMLRL's `_detached_agent_deltas` does before any agent steps; then d loss_i / d log π_i(y)
//! is −β·σ(−β·z_b)/B for a winner and +β·σ(−β·z_b)/B for a loser (z_b the joint margin), summed
//! over the pairs a candidate is part of, and `train::update::passes` runs the weighted
//! sequence-log-prob backward with those weights.
//!
//! CoMLRL's sequence log-prob cuts a completion at its first pad token and then leaves out its
//! last token (it feeds prompt + y[:-1] and reads one logit too few). Fixed here by default:
//! every sampled token counts, EOS included, as in the MAGRPO loss; [`LastToken::Dropped`]
//! (`preference.compat_last_token`) reproduces CoMLRL.
use super::set::{Pair, PreferenceSet};
use crate::error::{Error, Result};
use crate::model::grad::recompute::PassPlan;
use crate::model::{completion_logprobs, Mode, Policy, ScoreLayout};
use crate::train::update::passes::{sequence_grads, Group, SequenceLoss};
use crate::train::update::{LossGrads, Share};
use candle_core::{DType, Tensor, Var};
use std::collections::BTreeMap;

/// Which tokens of a candidate its sequence log-prob sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastToken {
    /// Every token as sampled (EOS included): the fix, the default.
    Counted,
    /// CoMLRL 1.4.3: cut at the first pad token, then the last token left out.
    Dropped,
}

/// The tokens of `completion` whose log-probs count (see [`LastToken`]).
pub fn scored(completion: &[u32], pad_id: u32, last: LastToken) -> &[u32] {
    match last {
        LastToken::Counted => completion,
        LastToken::Dropped => {
            let cut = completion
                .iter()
                .position(|&t| t == pad_id)
                .unwrap_or(completion.len());
            &completion[..cut.saturating_sub(1)]
        }
    }
}

/// The candidates of one agent that a mini-batch uses, entry by entry (in first-use order):
/// their scored tokens and which of them have any.
struct Used {
    /// (entry, every candidate of the entry as scored, the used candidates with tokens).
    groups: Vec<(usize, Vec<Vec<u32>>, Vec<usize>)>,
}

impl Used {
    fn new(
        set: &PreferenceSet,
        batch: &[Pair],
        agent: usize,
        pad: u32,
        last: LastToken,
    ) -> Result<Self> {
        let mut groups: Vec<(usize, Vec<Vec<u32>>, Vec<usize>)> = Vec::new();
        for p in batch {
            let entry = set.entries.get(p.entry).ok_or_else(|| {
                Error::Internal(format!(
                    "a preference pair names prompt {} of {}",
                    p.entry,
                    set.entries.len()
                ))
            })?;
            let a = entry.agents.get(agent).ok_or_else(|| {
                Error::Internal(format!(
                    "preference prompt {} has no agent {agent}",
                    p.entry
                ))
            })?;
            let g = match groups.iter().position(|g| g.0 == p.entry) {
                Some(g) => g,
                None => {
                    let comps = a
                        .candidates
                        .iter()
                        .map(|c| scored(c, pad, last).to_vec())
                        .collect();
                    groups.push((p.entry, comps, Vec::new()));
                    groups.len() - 1
                }
            };
            let (_, comps, rows) = &mut groups[g];
            for c in [p.winner, p.loser] {
                let toks = comps.get(c).ok_or_else(|| {
                    Error::Internal(format!(
                        "preference prompt {} has no candidate {c}",
                        p.entry
                    ))
                })?;
                if !toks.is_empty() && !rows.contains(&c) {
                    rows.push(c);
                }
            }
        }
        Ok(Used { groups })
    }
}

/// Σ_t log π of every candidate agent `agent` uses in `batch`, by (entry, candidate), from a
/// scoring pass without a graph (`chunk` candidates per pass, 0: an entry's at once). A
/// candidate with no scored token has log-prob 0.
pub fn sequence_logprobs(
    policy: &Policy,
    set: &PreferenceSet,
    batch: &[Pair],
    agent: usize,
    last: LastToken,
    chunk: usize,
) -> Result<BTreeMap<(usize, usize), f32>> {
    let used = Used::new(set, batch, agent, policy.pad_id, last)?;
    let mut out = BTreeMap::new();
    for (entry, comps, rows) in &used.groups {
        let prompt = set.entries[*entry].agents[agent].prompt.as_slice();
        let per = if chunk == 0 { rows.len().max(1) } else { chunk };
        for part in rows.chunks(per) {
            let prompts = vec![prompt; part.len()];
            let cs: Vec<&[u32]> = part.iter().map(|&c| comps[c].as_slice()).collect();
            let layout = ScoreLayout::new(&policy.model, &prompts, &cs, policy.pad_id)?;
            let lp = completion_logprobs(&policy.model, &layout, Mode::Infer)?;
            let sums: Vec<f32> = lp.to_dtype(DType::F32)?.sum(1)?.to_vec1()?;
            for (&c, s) in part.iter().zip(sums) {
                out.insert((*entry, c), s);
            }
        }
    }
    Ok(out)
}

/// Δ of each pair of `batch` for one agent: log π(y_w) − log π(y_l), from
/// [`sequence_logprobs`].
pub fn deltas(lps: &BTreeMap<(usize, usize), f32>, batch: &[Pair]) -> Vec<f32> {
    let at = |e: usize, c: usize| lps.get(&(e, c)).copied().unwrap_or(0.0);
    batch
        .iter()
        .map(|p| at(p.entry, p.winner) - at(p.entry, p.loser))
        .collect()
}

/// What one agent's MADPO mini-batch reports besides its gradients.
#[derive(Debug, Clone, Default)]
pub struct DpoStats {
    /// mean_b −log σ(β·z_b).
    pub loss: f64,
    /// mean_b β·z_b, the implicit reward margin of the joint policy.
    pub margin: f64,
    /// The share of pairs the joint policy already prefers the right way (z_b > 0).
    pub accuracy: f64,
}

/// The joint margins z_b for agent `agent` as CoMLRL forms them: its own Δ (f32) plus the sum of
/// the others' (in f64, then f32). `deltas[b][a]`: pair b, agent a.
pub fn joint_margins(deltas: &[Vec<f32>], agent: usize) -> Vec<f32> {
    deltas
        .iter()
        .map(|row| {
            let own = row[agent];
            let others = row.iter().map(|&d| d as f64).sum::<f64>() - own as f64;
            own + others as f32
        })
        .collect()
}

/// ln σ(x), stable.
fn log_sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        -(-x).exp().ln_1p()
    } else {
        x - x.exp().ln_1p()
    }
}

/// σ(x).
fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// Agent `agent`'s MADPO loss over `batch` and its gradients (of `vars`, in order), given every
/// agent's Δ of the batch from the scoring pass (`deltas[b][a]`). A non-finite margin or loss is
/// an error (CoMLRL silently replaces the loss by a constant 0.1, which steps on zero gradients).
#[allow(clippy::too_many_arguments)]
pub fn agent_grads(
    policy: &Policy,
    vars: &[Var],
    set: &PreferenceSet,
    batch: &[Pair],
    deltas: &[Vec<f32>],
    agent: usize,
    beta: f64,
    last: LastToken,
    chunk: usize,
    recompute: bool,
    share: Share,
    plan: PassPlan,
) -> Result<(LossGrads, DpoStats)> {
    let z = joint_margins(deltas, agent);
    let n = batch.len().max(1) as f64;
    let mut stats = DpoStats::default();
    let mut coef: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    for (p, &z) in batch.iter().zip(&z) {
        let bz = beta * z as f64;
        if !bz.is_finite() {
            return Err(Error::Diverged(format!(
                "agent {agent}: a MADPO joint log-prob margin is {z}: lower the learning rate or dpo_beta"
            )));
        }
        stats.loss -= log_sigmoid(bz) / n;
        stats.margin += bz / n;
        stats.accuracy += f64::from(u8::from(z > 0.0)) / n;
        let w = beta * sigmoid(-bz) / n;
        *coef.entry((p.entry, p.winner)).or_default() -= w;
        *coef.entry((p.entry, p.loser)).or_default() += w;
    }
    if !stats.loss.is_finite() {
        return Err(Error::Diverged(format!(
            "agent {agent}: the MADPO loss is {}",
            stats.loss
        )));
    }
    let used = Used::new(set, batch, agent, policy.pad_id, last)?;
    let groups: Vec<Group> = used
        .groups
        .iter()
        .map(|(entry, comps, rows)| Group {
            prompt: &set.entries[*entry].agents[agent].prompt,
            completions: comps,
            rows: rows.clone(),
        })
        .collect();
    let entries: Vec<usize> = used.groups.iter().map(|g| g.0).collect();
    let weights = Weights {
        entries: &entries,
        coef: &coef,
    };
    let mut lg = sequence_grads(
        policy, vars, &groups, &weights, chunk, recompute, share, plan,
    )?;
    // The passes report the weighted sum's value; the loss is the DPO loss.
    lg.loss = stats.loss;
    Ok((lg, stats))
}

/// Each candidate weighs its summed coefficient.
struct Weights<'a> {
    /// Group g's entry.
    entries: &'a [usize],
    coef: &'a BTreeMap<(usize, usize), f64>,
}

impl Weights<'_> {
    fn of(&self, group: usize, row: usize) -> f64 {
        self.coef
            .get(&(self.entries[group], row))
            .copied()
            .unwrap_or(0.0)
    }
}

impl SequenceLoss for Weights<'_> {
    fn coefs(&self, group: usize, rows: &[usize]) -> Vec<f32> {
        rows.iter().map(|&r| self.of(group, r) as f32).collect()
    }

    fn loss(&self, group: usize, rows: &[usize], lp: &Tensor) -> Result<Tensor> {
        let c: Vec<f32> = self.coefs(group, rows);
        let c = Tensor::new(c, lp.device())?.to_dtype(lp.dtype())?;
        Ok((lp.sum(1)? * c)?.sum_all()?)
    }
}
