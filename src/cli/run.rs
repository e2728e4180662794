//! `comlrl run`: train the agents of a scenario, with a progress bar and Ctrl-C checkpointing.
use super::scenario_args::ScenarioArgs;
use comlrl::train::{Observer, Trainer};
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::atomic::Ordering;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Continue from the last checkpoint in the output directory.
    #[arg(long)]
    pub resume: bool,
    /// No progress bar (log lines only).
    #[arg(long)]
    pub quiet: bool,
}

struct Bar {
    bar: Option<ProgressBar>,
}

impl Observer for Bar {
    fn start(&mut self, total: usize, done: usize) {
        if let Some(b) = &self.bar {
            b.set_length(total as u64);
            b.set_position(done as u64);
        }
    }
    fn step(&mut self, step: usize, reward_mean: f64, secs: f64) {
        if let Some(b) = &self.bar {
            b.set_position(step as u64);
            b.set_message(format!("reward {reward_mean:.2} | {secs:.2} s/step"));
        }
    }
    fn message(&mut self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let scenario = a.scenario.load()?;
    let name = scenario.name.clone();
    let mut trainer = Trainer::new(scenario)?;
    let flag = trainer.interrupt_flag();
    let first = flag.clone();
    // First Ctrl-C: checkpoint after the current step; a second one exits at once.
    let _ = ctrlc::set_handler(move || {
        if first.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("\nCtrl-C: writing a checkpoint after this step (press again to abort)");
    });
    let bar = (!a.quiet).then(|| {
        let b = ProgressBar::new(0);
        b.set_style(
            ProgressStyle::with_template(
                "{prefix} [{bar:30}] {pos}/{len} steps | {msg} | ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        b.set_prefix(name);
        b
    });
    let mut obs = Bar { bar };
    let summary = trainer.run(a.resume, &mut obs)?;
    if let Some(b) = &obs.bar {
        b.finish_and_clear();
    }
    let out = summary.output_dir.display();
    for (e, r) in summary.epoch_reward_means.iter().enumerate() {
        eprintln!("epoch {}: mean reward {r:.3}", e + 1);
    }
    if summary.interrupted {
        eprintln!(
            "stopped at step {}/{}; resume with --resume. Outputs in {out}",
            summary.steps_done, summary.total_steps
        );
        std::process::exit(130);
    }
    eprintln!("done: {} steps. Models in {out}/models, metrics in {out}/metrics.jsonl, plot {out}/training.svg", summary.steps_done);
    Ok(())
}
