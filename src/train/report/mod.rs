//! What a run measures and reports.
pub(crate) mod plot;
pub(crate) mod timing;
pub(crate) mod window;
