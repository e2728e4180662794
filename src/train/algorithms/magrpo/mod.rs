//! MAGRPO.
pub mod advantage;
pub mod loss;
