//! From the resolved scenario to loaded parts.
pub mod agents;
pub mod memory;
