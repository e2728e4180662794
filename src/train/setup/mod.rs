//! From the resolved scenario to the loaded parts of a run, each checked before training
//! starts: the agents' models (`models`), the memory they will take (`memory`, also for
//! `comlrl check`), the agents as this process holds them (`agents`) and the reward side
//! (`rewards`), and the single-agent run of a centralized actor (`centralized`).
//!
//! Files, lowest first: `centralized`, `models`, `critics` (a separate critic's backbone, with
//! its adapters on a shared base), `memory`, `rewards`, `agents`. Imports `train::optim` and
//! `train::rollout` (prompt formatting) and `train::update` (the update's operand type).
pub mod agents;
pub mod centralized;
pub mod critics;
pub mod memory;
pub mod models;
pub mod rewards;

pub use agents::Agents;
pub use rewards::Rewards;
