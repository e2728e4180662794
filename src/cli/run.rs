//! `comlrl run`: train the agents of a scenario, with a progress bar, checkpointing on Ctrl-C,
//! SIGTERM and SIGHUP, and the experiment trackers (W&B, TensorBoard) fed from the metrics rows.
//! Under `mpirun` (a build with the `mpi` feature) every rank runs this; rank 0 alone draws the
//! bar, tracks and writes, and an error on any rank ends the whole job naming that rank.
use super::scenario_args::ScenarioArgs;
use super::signals;
use super::wandb_sync::WandbArgs;
use comlrl::metrics::Row;
use comlrl::track::{TrackPlan, Tracking, Warn};
use comlrl::train::run::dir::{self, StartMode};
use comlrl::train::{Observer, Trainer};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

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
    /// No progress bar: a log line per logging window instead (step, epoch, reward, s/step,
    /// ETA, memory), as when stderr is not a terminal.
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

/// What the user sees while a run trains, plus the trackers fed with every metrics row: a
/// progress bar on a terminal, else (`--quiet`, or stderr redirected: nohup, Slurm, CI, a pipe)
/// a log line per logging window; each epoch's line as the epoch ends, either way.
struct Progress {
    bar: Option<ProgressBar>,
    tracking: Option<Tracking>,
    /// Total steps of the run, and the step this process started at (for the ETA).
    total: usize,
    first: usize,
    started: Instant,
    /// Epochs whose line was printed.
    epochs_shown: usize,
}

impl Progress {
    fn new(bar: Option<ProgressBar>, tracking: Option<Tracking>) -> Self {
        Progress {
            bar,
            tracking,
            total: 0,
            first: 0,
            started: Instant::now(),
            epochs_shown: 0,
        }
    }

    fn print(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
    }

    /// The log line of a metrics row: where the run is, its reward and speed, and its memory.
    fn log_line(&self, row: &Row) -> String {
        let get = |k: &str| row.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        let step = get("step").unwrap_or(0.0) as usize;
        let mut line = format!("step {step}/{}", self.total);
        if let Some(e) = get("epoch") {
            line += &format!(" | epoch {e:.0}");
        }
        if let Some(r) = get("reward_mean") {
            line += &format!(" | reward {r:.3}");
        }
        if let Some(s) = get("step_seconds") {
            line += &format!(" | {s:.2} s/step");
        }
        if let Some(r) = get("eval/reward_mean").filter(|r| r.is_finite()) {
            line += &format!(" | eval reward {r:.3}");
        }
        let done = step.saturating_sub(self.first);
        if done > 0 && step < self.total {
            let per = self.started.elapsed().as_secs_f64() / done as f64;
            line += &format!(" | ETA {}", clock((self.total - step) as f64 * per));
        }
        if let Some(rss) = comlrl::runtime::rss_bytes() {
            line += &format!(" | {:.2} GB", rss as f64 / 1e9);
        }
        line
    }
}

/// `h:mm:ss` (or `m:ss` under an hour).
fn clock(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s / 3600 {
        0 => format!("{}:{:02}", s / 60, s % 60),
        h => format!("{h}:{:02}:{:02}", s / 60 % 60, s % 60),
    }
}

impl Observer for Progress {
    fn start(&mut self, total: usize, done: usize) {
        (self.total, self.first, self.started) = (total, done, Instant::now());
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
            b.set_message(match reward_mean.is_nan() {
                // An offline algorithm's epochs after the first train on their set alone.
                true => format!("training on the collected set | {secs:.2} s/step"),
                false => format!("reward {reward_mean:.2} | {secs:.2} s/step"),
            });
        }
    }
    fn epoch(&mut self, epoch: usize, reward_mean: f64) {
        self.print(&format!("epoch {epoch}: mean reward {reward_mean:.3}"));
        self.epochs_shown = self.epochs_shown.max(epoch);
    }
    fn message(&mut self, msg: &str) {
        self.print(msg);
    }
    fn metrics(&mut self, row: &Row, texts: &[(String, String)], samples: &[serde_json::Value]) {
        if self.bar.is_none() {
            let line = self.log_line(row);
            self.print(&line);
        }
        if let Some(t) = &mut self.tracking {
            t.log(row, texts, samples);
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
    dir::guard_output_dir(&scenario)?;
    let lock = dir::claim(&scenario.output_dir, mode)?;
    let mut trainer = Trainer::in_world(scenario, world)?;
    trainer.hold(lock)?;
    let stop = signals::install(trainer.interrupt_flag())?;
    // A bar only where someone watches it: redirected, it would drop every line it hides.
    let bar = (!a.quiet && std::io::stderr().is_terminal()).then(|| {
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
    let mut obs = Progress::new(bar, tracking);
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
    // Epochs not reported as they ended: the one a stopped run was in.
    for (e, r) in summary
        .epoch_reward_means
        .iter()
        .enumerate()
        .skip(obs.epochs_shown)
    {
        eprintln!(
            "epoch {} (until step {}): mean reward {r:.3}",
            e + 1,
            summary.steps_done
        );
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
