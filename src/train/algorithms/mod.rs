//! Training algorithms behind one seam ([`Algorithm`], in `algorithm`): the shared loop hands an
//! algorithm each scored rollout tree and, when the buffer is full, an update round ([`Round`]
//! of [`Learner`]s, in `round`); `registry` maps `trainer.algorithm` to one. Each algorithm is a
//! folder of its own (`magrpo/`; `iac/`, independent actor-critic; `maac/`, multi-agent
//! actor-critic with one critic; `madpo/`, offline multi-agent DPO; `marlhf/`, a joint reward
//! model, then an online algorithm the registry gives it) that imports the seam and the shared
//! machinery, never another algorithm; `actor_critic/` is what IAC and MAAC share (advantages,
//! the actor's loss, a critic's value and loss), not an algorithm, and `preference/` what the
//! iterative preference trainers share (the comparator, the replay of earlier rounds).
//!
//! Files, lowest first: `algorithm` and `round` (the seam), the algorithm folders, `registry`.
//! Imports every other folder of `train` but `trainer`.
pub mod actor_critic;
pub mod algorithm;
pub mod iac;
pub mod maac;
pub mod madpo;
pub mod magrpo;
pub mod marlhf;
pub mod preference;
pub mod registry;
pub mod round;

pub use algorithm::{Algorithm, ComparatorSource, Comparison, TextComparator};
pub use round::{AgentUpdate, Learner, Round, StepRule};
