//! comlrl-reward's integration tests in one binary: a module per concern, the shared helpers in
//! `common`. Some load the testkit plugins, which `comlrl_testutil` builds on first use.
mod common;

mod agreement;
mod guide_examples;
mod plugin_errors;
mod plugin_hardening;
mod plugin_isolation;
mod script_api;
mod script_budget;
mod script_errors;
mod stack;
