//! Training: the loop every algorithm shares, the algorithms behind one seam, and the machinery
//! they use, in folders by role. Lowest first; a folder imports only folders above it in this
//! list (`tests/cli/layers.rs` checks it, and that no two files import each other in a loop):
//!
//! | folder | role |
//! | --- | --- |
//! | `report` | what a run measures and reports: phase timings, the logging window, the plot |
//! | `optim` | AdamW (f32 or bf16 moments), its checkpoint form, the learning-rate schedule |
//! | `rollout` | prompts, sampling, joint actions, the scored rollout tree of a prompt, reference KL |
//! | `update` | a mini-batch's gradients of a sequence-weighted log-prob loss, pass plans, memory housekeeping around a round |
//! | `run` | run state, the run directory, checkpoints (manifest, verification), the final models |
//! | `world` | this process's part in the run: alone, or one of several MPI ranks, as a strategy |
//! | `setup` | from the scenario to loaded agents, rewards and the memory estimate |
//! | `algorithms` | the algorithm seam, the update round it is handed, one folder per algorithm (`magrpo`) |
//! | `trainer` | the loop: start or resume, steps, update rounds, evaluation, logging, checkpoints, the end |
pub mod algorithms;
pub mod optim;
pub mod report;
pub mod rollout;
pub mod run;
pub mod setup;
pub mod trainer;
pub mod update;
pub mod world;

pub use trainer::{Observer, RunSummary, Trainer};
