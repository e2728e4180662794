//! Run state and persistence.
pub mod checkpoint;
pub mod dir;
pub mod manifest;
pub(crate) mod verify;
