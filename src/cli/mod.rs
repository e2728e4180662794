//! Command-line interface: the clap definitions and dispatch to one module per command.
mod bench;
mod generate;
mod inputs;
mod score;

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
    /// Sample completions from a model (to look at what a policy writes).
    Generate(generate::Args),
    /// Per-token log-probabilities of a completion given a prompt.
    Score(score::Args),
    /// Measure sampling and training throughput; writes a JSON report.
    Bench(bench::Args),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Generate(a) => generate::run(a),
        Command::Score(a) => score::run(a),
        Command::Bench(a) => bench::run(a),
    }
}
