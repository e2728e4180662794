//! Training algorithms.
pub mod magrpo;
