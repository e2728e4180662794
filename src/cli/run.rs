//! `comlrl run`: train the agents of a scenario, with a progress bar, checkpointing on Ctrl-C,
//! SIGTERM and SIGHUP, and the experiment trackers (W&B, TensorBoard) fed from the metrics rows.
//! Under `mpirun` (a build with the `mpi` feature) every rank runs this; rank 0 alone draws the
//! bar, tracks and writes, and an error on any rank ends the whole job naming that rank.
use super::scenario_args::ScenarioArgs;
use super::signals;
use super::wandb_sync::WandbArgs;
use comlrl::metrics::Row;
use comlrl::track::{TrackPlan, Tracking, Warn};
use comlrl::train::rundir::{self, StartMode};
use comlrl::train::{Observer, Trainer};
use indicatif::{ProgressBar, ProgressStyle};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Continue from the last checkpoint in the output directory.
    #[arg(long)]
    pub resume: bool,
    /// Start a new run in an output directory that holds a previous one, deleting its
    /// checkpoints, metrics, models and tracker state first.
    #[arg(long, conflicts_with = "resume")]
    pub overwrite: bool,
    /// No progress bar (log lines only).
    #[arg(long)]
    pub quiet: bool,
    /// Log to Weights & Biases (also on when the scenario has `logging.wandb` or a --wandb-*
    /// flag is given). Needs WANDB_API_KEY or `wandb login`; WANDB_BASE_URL for a
    /// self-hosted server.
    #[arg(long)]
    pub wandb: bool,
    /// Do not log to W&B, even when the scenario has `logging.wandb`.
    #[arg(long, conflicts_with_all = ["wandb", "wandb_project", "wandb_entity", "wandb_name"])]
    pub no_wandb: bool,
    #[command(flatten)]
    pub wandb_args: WandbArgs,
}

/// The progress bar, plus the trackers fed with every metrics row.
struct Bar {
    bar: Option<ProgressBar>,
    tracking: Option<Tracking>,
}

impl Observer for Bar {
    fn start(&mut self, total: usize, done: usize) {
        if let Some(b) = &self.bar {
            b.set_length(total as u64);
            b.set_position(done as u64);
        }
        if let Some(t) = &mut self.tracking {
            t.begin();
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
            // A hidden bar (output not a terminal) drops what it is asked to print.
            Some(b) if !b.is_hidden() => b.println(msg),
            _ => eprintln!("{msg}"),
        }
    }
    fn metrics(&mut self, row: &Row) {
        if let Some(t) = &mut self.tracking {
            t.log(row);
        }
    }
}

/// The trackers this run asks for: flags win over the scenario's `logging` section.
fn track_plan(a: &Args, s: &comlrl_scenario::Scenario) -> TrackPlan {
    let wandb_on = !a.no_wandb && (a.wandb || a.wandb_args.any() || s.logging.wandb.is_some());
    TrackPlan {
        output_dir: s.output_dir.clone(),
        scenario_yaml: s.to_yaml(),
        num_turns: s.trainer.num_turns,
        wandb: wandb_on.then(|| a.wandb_args.settings(s.logging.wandb.as_ref(), &s.name)),
        tensorboard: s.logging.tensorboard,
        resume: a.resume,
    }
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    // Kept until the run ends: dropping it finalizes MPI.
    let (world, _session) = comlrl::dist::init();
    if world.size() == 1 {
        return run_rank(a, world);
    }
    match run_rank(a, world.clone()) {
        Ok(code) => Ok(code),
        // The other ranks may be waiting in a collective: end them all, naming this rank.
        Err(e) => world.abort(&format!("{e:#}")),
    }
}

fn run_rank(a: Args, world: Arc<dyn comlrl::dist::World>) -> anyhow::Result<ExitCode> {
    if !world.is_root() {
        return follow(a, world);
    }
    let scenario = a.scenario.load_downloading()?;
    let name = scenario.name.clone();
    let plan = track_plan(&a, &scenario);
    let mode = match (a.resume, a.overwrite) {
        (true, _) => StartMode::Resume,
        (false, true) => StartMode::Overwrite,
        (false, false) => StartMode::Fresh,
    };
    // Claimed before the models load: a busy or reused directory is refused at once.
    let lock = rundir::claim(&scenario.output_dir, mode)?;
    let mut trainer = Trainer::in_world(scenario, world)?;
    trainer.hold(lock)?;
    let stop = signals::install(trainer.interrupt_flag())?;
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
    // Tracker notes and warnings come from other threads: print them above the bar (or plain
    // when there is none or it is hidden).
    let warn_bar = bar.clone();
    let warn: Warn = Arc::new(move |msg: &str| match &warn_bar {
        Some(b) => b.suspend(|| eprintln!("{msg}")),
        None => eprintln!("{msg}"),
    });
    // Tracking never stops a run: if it cannot even start, say so and train without it.
    let tracking = Tracking::start(&plan, warn.clone()).unwrap_or_else(|e| {
        warn(&format!(
            "warning: tracking is off for this run: {}",
            e.chain()
        ));
        None
    });
    let mut obs = Bar { bar, tracking };
    let result = trainer.run(a.resume, &mut obs);
    let exit_code = match &result {
        Ok(s) if s.interrupted => i32::from(stop.exit_code()),
        Ok(_) => 0,
        Err(_) => 1,
    };
    if let Some(t) = obs.tracking.take() {
        t.finish(exit_code);
    }
    let summary = result?;
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
        return Ok(ExitCode::from(stop.exit_code()));
    }
    eprintln!("done: {} steps. Models in {out}/models, metrics in {out}/metrics.jsonl, plot {out}/training.svg", summary.steps_done);
    Ok(ExitCode::SUCCESS)
}

/// A rank other than 0: trains its agents in step with rank 0, without bar or trackers.
fn follow(a: Args, world: Arc<dyn comlrl::dist::World>) -> anyhow::Result<ExitCode> {
    let scenario = a.scenario.load_downloading()?;
    let mut trainer = Trainer::in_world(scenario, world)?;
    let stop = signals::install(trainer.interrupt_flag())?;
    let summary = trainer.run(a.resume, &mut ())?;
    if summary.interrupted {
        return Ok(ExitCode::from(stop.exit_code()));
    }
    Ok(ExitCode::SUCCESS)
}
