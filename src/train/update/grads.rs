//! What a mini-batch's forward and backward yield (its loss, each variable's gradient, where
//! the time went), and which of its passes a replica of the agent computes.
use candle_core::Tensor;

/// Loss value and accumulated gradients (in `vars` order) of one mini-batch.
#[derive(Default)]
pub struct LossGrads {
    /// The loss value.
    pub loss: f64,
    /// Gradient of each variable; `None` where it got none.
    pub grads: Vec<Option<Tensor>>,
    /// Seconds in the scoring forward (log-probs and loss) and in backward + accumulation.
    pub forward_s: f64,
    /// See `forward_s`.
    pub backward_s: f64,
    /// Model FLOPs of the forward and backward (3 × the forward's matmul FLOPs, padding
    /// included, recomputation not counted, a shared prompt counted once).
    pub flops: f64,
    /// Layers of the recomputed passes that kept their activations instead of re-running
    /// (summed over passes), and the most bytes one pass kept.
    pub kept_layers: usize,
    /// See `kept_layers`.
    pub kept_bytes_max: usize,
    /// The loss of each pass computed here, by its number in the mini-batch (so replicas can
    /// add them up in the one-process order).
    pub passes: Vec<(usize, f64)>,
    /// Sequences of the mini-batch the loss left out because they add nothing to it (all
    /// replicas count the whole mini-batch's).
    pub skipped: usize,
    /// Σ of the next-token entropy over the completion tokens of the passes computed here
    /// (the recomputed passes; the autograd path leaves it 0), and their count.
    pub entropy_sum: f64,
    /// See `entropy_sum`.
    pub entropy_tokens: f64,
    /// Each pass's entropy sum and token count, by its number in the mini-batch (so replicas
    /// can add them up in the one-process order, as `passes`).
    pub pass_entropy: Vec<(usize, f64, f64)>,
    /// Already summed over the agent's replicas (`Learner::reduce`).
    pub reduced: bool,
    /// With `kl_in_loss`: each pass's Σ k3 over the tokens the KL term computed and their
    /// count, by the pass's first completion (sample, row) (so the mean is summed in one order
    /// whichever replica computed which pass; see [`LossGrads::token_kl`]).
    pub pass_kl: Vec<(usize, usize, f64, f64)>,
    /// The values a value head read in the passes computed here (`SequenceLoss::value`), as
    /// (group, row, value).
    pub values: Vec<(usize, usize, f32)>,
    /// With an entropy bonus restricted to some tokens (the high-entropy mask): the mean
    /// entropy over the whole mini-batch's tokens it acts on, the same on every replica (the
    /// passes' own entropy covers all their tokens).
    pub bonus_entropy: Option<f64>,
}

impl LossGrads {
    /// With `kl_in_loss`: the mean k3 over the tokens of `pass_kl` (TRL's `kl`), summed in
    /// the order of the passes' first completions.
    pub fn token_kl(&self) -> Option<f64> {
        let mut passes = self.pass_kl.clone();
        passes.sort_by_key(|&(group, row, _, _)| (group, row));
        let (sum, n) = passes
            .iter()
            .fold((0f64, 0f64), |(s, c), &(_, _, k, m)| (s + k, c + m));
        (n > 0.0).then(|| sum / n)
    }

    /// The mean entropy of the tokens this process computed, when it computed any.
    pub fn entropy_mean(&self) -> Option<f64> {
        (self.entropy_tokens > 0.0).then(|| self.entropy_sum / self.entropy_tokens)
    }
}

/// Which of a mini-batch's passes this process computes: replica `index` of `of`.
#[derive(Debug, Clone, Copy)]
pub struct Share {
    /// This replica's position, `0..of`.
    pub index: usize,
    /// The agent's replicas.
    pub of: usize,
}

impl Share {
    /// The whole mini-batch (one copy of the agent).
    pub const ALL: Share = Share { index: 0, of: 1 };
}
