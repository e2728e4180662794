//! The `comlrl` binary: parses the command line, runs the command, prints the error chain and
//! maps failures to exit codes (1 = the command failed, 2 = bad usage, reported by clap;
//! 128 + signal for a run stopped by SIGINT, SIGTERM or SIGHUP).
mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    comlrl::runtime::tune();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            let lines = comlrl::error::chain(err.as_ref());
            eprintln!("error: {}", lines[0]);
            for cause in &lines[1..] {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}
