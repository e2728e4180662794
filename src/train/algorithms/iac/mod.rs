//! IAC, independent actor-critic (CoMLRL 1.4.3's `IACTrainer`, CoLLM-DC of arXiv 2601.21972):
//! each agent an actor with a critic of its own. This is the update's core for the default
//! configuration — a separate critic (its own causal LM and value head, its own AdamW), single
//! turn, one generation per agent — checked step for step against CoMLRL's trainer
//! (`tests/train/iac_step.rs`):
//!
//! - `advantage`: target r − V_old per buffered sample, z-scored over the agent's whole buffer
//!   (population standard deviation), as `ActorCriticTrainerBase._prepare_advantages`;
//! - `actor`: the actor's loss mean_b(−(Σ_t log π)·Â) through the shared sequence-loss passes;
//! - `critic`: V or Q read by the value head at the last prompt or response token, and the
//!   critic's loss `value_loss_coef` · mean_b((r − V)²) through the critic's recomputed pass.
//!
//! Not yet selectable as `trainer.algorithm` (its keys, the registry arm, checkpoints and
//! metrics come next).
pub mod actor;
pub mod advantage;
pub mod critic;
