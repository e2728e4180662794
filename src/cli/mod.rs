//! Command-line interface: the clap definitions and dispatch to one module per command.
mod bench;
mod check;
mod export;
mod generate;
mod inputs;
mod reward;
mod run;
mod scenario_args;
mod score;
mod signals;
mod wandb_sync;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "comlrl",
    version,
    about = "Train cooperating LLM agents with multi-agent RL (MAGRPO)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train the agents of a scenario with MAGRPO.
    Run(run::Args),
    /// Validate a scenario without training.
    Check(check::Args),
    /// Score completions with a scenario's reward stack.
    Reward(reward::Args),
    /// Sample completions from a model (to look at what a policy writes).
    Generate(generate::Args),
    /// Per-token log-probabilities of a completion given a prompt.
    Score(score::Args),
    /// Measure sampling and training throughput; writes a JSON report.
    Bench(bench::Args),
    /// Export a model as a llama.cpp GGUF file (`--gguf`), or merge a LoRA adapter into its base
    /// (`--merge --adapter DIR`: an HF directory; `--gguf --adapter DIR`: a GGUF).
    Export(export::Args),
    /// Upload a run to Weights & Biases from its metrics.jsonl (after training offline).
    WandbSync(wandb_sync::Args),
    /// Serve one reward plugin to an isolated reward term (started by the trainer, which
    /// speaks to it over stdin/stdout; see docs/rewards.md).
    #[command(hide = true)]
    PluginHost {
        /// The plugin library.
        path: std::path::PathBuf,
    },
}

/// Runs the command; its exit status on success (a stopped `run` is not a success).
pub fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    let ok = |r: anyhow::Result<()>| r.map(|()| std::process::ExitCode::SUCCESS);
    match cli.command {
        Command::Run(a) => run::run(a),
        Command::Check(a) => ok(check::run(a)),
        Command::Reward(a) => ok(reward::run(a)),
        Command::Generate(a) => ok(generate::run(a)),
        Command::Score(a) => ok(score::run(a)),
        Command::Bench(a) => ok(bench::run(a)),
        Command::WandbSync(a) => ok(wandb_sync::run(a)),
        Command::Export(a) => ok(export::run(a)),
        Command::PluginHost { path } => Ok(std::process::ExitCode::from(
            u8::try_from(comlrl_reward::serve_plugin_host(&path)).unwrap_or(1),
        )),
    }
}
