//! Process isolation for native plugins (`isolate: true` on a reward term or on
//! `trainer.external_transition`): the plugin runs in a child process, `comlrl plugin-host
//! <path>`, in a process group of its own, that speaks a small framed protocol over its
//! stdin/stdout. Crashes, aborts, `exit()`, stack overflows and heap corruption inside the
//! plugin end the child, not the trainer; they come back as errors naming the plugin, the
//! signal or exit status and what it was doing. Endless loops end at the time budget. Whatever
//! the plugin forked dies with the child.
pub mod client;
pub mod protocol;
pub mod server;

pub use client::{HostCommand, IsolatedReward, IsolatedTransition, HOST_ENV};
pub use server::serve_plugin_host;
