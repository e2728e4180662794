//! Validates a scenario and prints the resolved YAML (or every error), e.g.
//! `cargo run -p comlrl-scenario --example check -- scenarios/story_len_ratio.yaml --set trainer.num_generations=4`.
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: check <scenario.yaml> [--set key.path=value ...]");
        return ExitCode::FAILURE;
    };
    let mut sets = Vec::new();
    while let Some(a) = args.next() {
        match (a.as_str(), a.strip_prefix("--set=")) {
            (_, Some(v)) => sets.push(v.to_string()),
            ("--set", _) => sets.extend(args.next()),
            _ => sets.push(a),
        }
    }
    match comlrl_scenario::load(std::path::Path::new(&path), &sets) {
        Ok(s) => {
            print!("{}", s.to_yaml());
            for w in &s.warnings {
                eprintln!("warning: {w}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
