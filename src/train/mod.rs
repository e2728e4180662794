//! MAGRPO training: advantages, the policy-gradient loss, the optimizer and the training loop.
pub mod advantage;
pub mod optim;
