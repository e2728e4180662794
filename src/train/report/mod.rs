//! What a run measures and reports: where each step's time goes (`timing`), the sums of a
//! logging window turned into a metrics row (`window`), the sampled texts shown with it
//! (`samples`), and the plot of a run's metrics (`plot`).
//!
//! Files, lowest first: `timing`, `samples`, `window`, `plot`. Imports no other folder of
//! `train`.
pub mod plot;
pub mod samples;
pub mod timing;
pub mod window;
