//! Gradients for training: log-prob scoring, the hand-written layer backward, recomputation.
pub mod accumulators;
pub(crate) mod attention_backward;
pub mod head_backward;
pub(crate) mod layer_backward;
pub mod logprob;
pub(crate) mod op_backward;
pub mod packed_weights;
pub mod pass_order;
pub mod recompute;
pub(crate) mod shared_prompt;
#[cfg(test)]
mod trace_check;
