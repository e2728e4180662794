//! comlrl-scenario's integration tests in one binary: a module per concern, the shared helpers (a
//! scenario folder, diagnostic lookups) in `common`.
mod common;

mod agent_keys;
mod algorithms;
mod chat_templates;
mod compute_dtype;
mod critic_keys;
mod datasets;
mod errors;
mod errors_keys;
mod grpo_variants;
mod hub_datasets;
mod key_tables;
mod overrides;
mod preference;
mod shipped;
