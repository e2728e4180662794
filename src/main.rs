//! The `comlrl` binary: parses the command line, runs the command, prints the error chain and
//! maps failures to exit codes (1 = the command failed, 2 = bad usage, reported by clap).
mod cli;

use clap::Parser;

fn main() {
    comlrl::runtime::tune();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = cli::Cli::parse();
    if let Err(err) = cli::run(args) {
        eprintln!("error: {err}");
        for cause in err.chain().skip(1) {
            eprintln!("  caused by: {cause}");
        }
        std::process::exit(1);
    }
}
