//! The command line and the repository as a whole: the real binary's `generate`, `score`,
//! `check` and `plugin-host` on fixtures and Hub datasets, the repository standing on its own,
//! which way imports point, that every scenario key is read, and the test suite's own shape. Run one part with
//! `cargo test --release --test cli layers::`.
#[path = "../common/mod.rs"]
mod common;

mod arch;
mod bench_rewards;
mod data;
mod export_merge;
mod layers;
mod model;
mod plugin_host;
mod scenario_keys_read;
mod standalone;
mod suite;
