//! Gradients for training: completion log-probs and their layout, the hand-written backward of
//! the decoder layer and of the LM head, recomputation (gradient checkpointing) with kept
//! activations and shared prompts, the order of a mini-batch's passes, weights packed once per
//! mini-batch, and the accumulators gradients go into; a critic's forward at chosen rows
//! (`value`, and `value::ValueTop`: a value head read in a log-prob pass) and its value head's
//! backward (`value_backward`).
pub(crate) mod accumulators;
pub(crate) mod attention_backward;
pub(crate) mod head_backward;
pub(crate) mod layer_backward;
pub(crate) mod logprob;
pub(crate) mod op_backward;
pub mod packed_weights;
pub mod pass_order;
pub mod recompute;
pub(crate) mod shared_prompt;
pub mod token_weights;
#[cfg(test)]
mod trace_check;
pub mod value;
pub(crate) mod value_backward;
