//! Run state and persistence: where a run stands ([`TrainState`], in `state`), the run
//! directory and its lock (`dir`), checkpoints (`checkpoint`: written atomically with a
//! `manifest` of hashes, verified against the scenario on resume by `verify`), and the final
//! models (`models`).
//!
//! Files, lowest first: `state`, `verify`, `manifest`, `dir`, `models`, `checkpoint`. Imports
//! `train::report`, `train::optim` and `train::rollout`.
pub mod checkpoint;
pub mod dir;
pub mod manifest;
pub mod models;
pub mod state;
pub mod verify;

pub use state::{Stop, TrainState};
