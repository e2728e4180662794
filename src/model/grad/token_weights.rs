//! Loss weights per token that depend on the tokens' own log-probs. The default loss weighs
//! each sequence's Σ_t log π by a constant, so its gradient seeds every token of a row with the
//! row's coefficient. A clipped probability ratio (PPO, GRPO's re-used samples, GSPO) instead
//! makes d loss / d log π_t a function of log π itself: the recomputed pass first scores the
//! rows' log-probs at the LM head (no gradient), asks [`TokenWeights`] for the weight of each
//! token at those values, then runs the same fused head backward seeded with them. The
//! gradient of Σ_t w_t · log π_t with w_t held fixed is the surrogate's gradient at this
//! point, which is all one optimizer step needs.

/// d loss / d log π of every token of a pass, from the tokens' current log-probs.
pub trait TokenWeights {
    /// `lp`: log π of each (row, position) of the pass, row-major, `width` positions a row;
    /// `mask`: 1 at completion tokens, 0 at padding (where `lp` means nothing). Returns the
    /// weight of each (0 at padding) and the value of the loss these rows add.
    fn weights(&self, lp: &[f32], mask: &[f32], width: usize) -> (Vec<f32>, f64);

    /// [`TokenWeights::weights`] for a loss that also reads each token's entropy `entropy`
    /// (laid out as `lp`; the high-entropy mask); the default ignores it.
    fn weights_with_entropy(
        &self,
        lp: &[f32],
        _entropy: &[f32],
        mask: &[f32],
        width: usize,
    ) -> (Vec<f32>, f64) {
        self.weights(lp, mask, width)
    }
}
