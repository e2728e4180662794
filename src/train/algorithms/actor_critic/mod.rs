//! What CoMLRL 1.4.3's actor-critic trainers (IAC and MAAC, `ActorCriticTrainerBase`) share,
//! used by the `iac/` and `maac/` folders; not an algorithm itself (it imports none):
//!
//! - `advantage`: target − V_old per buffered sample, z-scored over the agent's whole buffer
//!   (population standard deviation), as `ActorCriticTrainerBase._prepare_advantages`;
//! - `actor`: the actor's loss mean_b(−(Σ_t log π)·Â) through the shared sequence-loss passes;
//! - `critic`: V or Q read by a value head at the last prompt or response token, and the
//!   critic's loss `value_loss_coef` · mean_b((target − V)²) through the critic's recomputed
//!   pass (with PPO's value clipping for a head on the actor);
//! - `shared`: a value head on the actor's own backbone, its loss's gradient joined with the
//!   actor's in one backbone pass per sequence (two passes where one cannot serve);
//! - `targets`: a single-turn rollout's buffered samples, each completion's target its reward
//!   (less the KL penalty).
pub mod actor;
pub mod advantage;
pub mod critic;
pub mod shared;
pub mod targets;
