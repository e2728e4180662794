//! Training: the loss path and the optimizer against the PyTorch MAGRPO fixtures, the GRPO
//! variants against TRL's loss code, bf16 updates, whole runs of the real binary on the tiny
//! scenario (learning, resume, failures), the run directory and its checks, and the trackers
//! (TensorBoard, W&B). Run one part with
//! `cargo test --release --test train run_dir::`.
#[path = "../common/mod.rs"]
mod common;

mod ac_turns_step;
mod adapters;
mod algorithm_aliases;
mod centralized_comparator;
mod centralized_marlhf;
mod centralized_protocol;
mod centralized_step;
mod code_exec_run;
mod critic_adapters;
mod e2e;
mod failures;
mod grpo_variants;
mod iac_run;
mod iac_step;
mod logged_completions;
mod loss;
mod maac_run;
mod maac_step;
mod madpo_iter;
mod madpo_iter_api;
mod madpo_run;
mod madpo_step;
mod marlhf_iter_run;
mod marlhf_iter_step;
mod marlhf_reward;
mod marlhf_run;
mod math;
mod optim_state;
mod run_checks;
mod run_dir;
mod shared_prompt;
mod track_tensorboard;
mod track_wandb;
mod update_bf16_grads;
mod update_bf16_run;
mod zero_advantage;
