//! The `logging` section's key table (`keys.rs` has the macro and the row syntax): cadence and
//! tracking back-ends. [`RawLogging`], [`LoggingPlan`] and the docs table derive from it.
use crate::keys::{section, Bad, SectionContext};
use crate::plan::WandbPlan;
use crate::raw::RawWandb;

/// The W&B project of a run whose `logging.wandb` names none (CoMLRL's default project).
pub const WANDB_PROJECT: &str = "comlrl";

/// What the `logging` resolver needs from the rest of the scenario.
pub(crate) struct LoggingContext<'a> {
    /// The scenario name: the default W&B run name.
    pub name: &'a str,
}

impl SectionContext for LoggingContext<'_> {}

section! {
    raw /// `logging:` — cadence and tracking back-ends.
        RawLogging;
    plan /// Logging cadence and the tracking back-ends.
        LoggingPlan, context cx: LoggingContext<'_>;
    keys {
        /// Write a metrics row every N training steps (one step = one training prompt). The
        /// row aggregates the steps since the previous row. It lives here, not in `trainer`,
        /// with the rest of what is logged where.
        steps: usize = 50, kind "integer ≥ 1", why "CoMLRL `logging_steps`",
            check cadence;
        /// Write TensorBoard event files (scalars) under `<output_dir>/tb/`; see "Experiment
        /// tracking".
        tensorboard: bool = false, kind "bool", why "off unless asked";
        /// With every metrics row, write the last N sampled joint actions of its window (the
        /// prompt, each agent's completion, the joint reward, each term's value, each agent's
        /// return and advantage) to `<output_dir>/completions.jsonl`, and to TensorBoard as
        /// text when it is on. 0: none. At most 1024 (they are held in memory until the row).
        completions: usize = 0, kind "integer 0–1024", why "TRL's `log_completions` (off unless asked)",
            check completions_cap;
    }
    resolved {
        /// Weights & Biases run: `project` (default `comlrl`, CoMLRL's), `entity` (default:
        /// your W&B default), `name` (default: the scenario name), `tags` (list). The resolved
        /// scenario is the run config. `--wandb*` flags of `comlrl run` win over these keys;
        /// see "Experiment tracking". Absent: W&B off.
        wandb: RawWandb => Option<WandbPlan>, kind "mapping", shown "none (off)", why "",
            via |_, _, raw| wandb(raw, cx.name), emit wandb_raw;
    }
}

/// The most sampled joint actions `logging.completions` may keep per row.
pub const MAX_LOGGED_COMPLETIONS: usize = 1024;

fn completions_cap(_key: &str, n: &usize) -> Option<Bad> {
    (*n > MAX_LOGGED_COMPLETIONS).then(|| Bad {
        message: format!(
            "logging.completions is {n}, more than {MAX_LOGGED_COMPLETIONS} samples per metrics row"
        ),
        hint: "log fewer samples per row (e.g. `completions: 8`), or log rows more often with \
               `logging.steps`"
            .into(),
    })
}

fn cadence(_key: &str, steps: &usize) -> Option<Bad> {
    (*steps < 1).then(|| Bad {
        message: "logging.steps must be at least 1".into(),
        hint: "log every N training steps (one step = one training prompt), e.g. `steps: 10`"
            .into(),
    })
}

/// `logging.wandb`: the project and run name defaulted.
fn wandb(raw: Option<&RawWandb>, scenario_name: &str) -> Option<WandbPlan> {
    raw.map(|w| WandbPlan {
        project: w
            .project
            .clone()
            .unwrap_or_else(|| WANDB_PROJECT.to_string()),
        entity: w.entity.clone(),
        name: w.name.clone().unwrap_or_else(|| scenario_name.to_string()),
        tags: w.tags.clone().unwrap_or_default(),
    })
}

fn wandb_raw(w: &Option<WandbPlan>) -> Option<RawWandb> {
    w.as_ref().map(|w| RawWandb {
        project: Some(w.project.clone()),
        entity: w.entity.clone(),
        name: Some(w.name.clone()),
        tags: Some(w.tags.clone()),
    })
}
