//! The exchanges between the ranks of a run.
pub(crate) mod replicas;
pub mod rollouts;
pub(crate) mod run;
