//! comlrl: multi-agent reinforcement learning (MAGRPO) for cooperating LLM agents on candle.
pub mod bench;
pub mod dist;
pub mod error;
pub mod hub_dataset;
pub mod metrics;
pub mod model;
pub mod runtime;
pub mod track;
pub mod train;

pub use error::{Error, Result};
