//! Rollouts and joint actions.
pub(crate) mod generate;
pub(crate) mod joint;
pub mod prompt;
pub mod tree;
