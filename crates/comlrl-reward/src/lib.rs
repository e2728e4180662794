//! Joint rewards for comlrl: one interface over Rhai scripts and native plugins, weights and
//! processors.
pub mod spec;
