//! The `logging` section's key table (see `trainer_keys.rs` for how to add a key): cadence and
//! tracking back-ends. [`RawLogging`], [`LoggingPlan`] and the docs table derive from it.
use crate::collect::Diags;
use crate::defaults as def;
use crate::keys::{settings_section, Bad, SectionContext};
use crate::plan::WandbPlan;
use crate::positions::KeyPath;
use crate::raw::RawWandb;

/// What the `logging` resolver needs from the rest of the scenario.
pub(crate) struct LoggingContext<'a> {
    /// The scenario name: the default W&B run name.
    pub name: &'a str,
}

impl SectionContext for LoggingContext<'_> {}

settings_section! {
    /// `logging:` — cadence and tracking back-ends.
    raw RawLogging;
    /// Logging cadence and the tracking back-ends.
    plan LoggingPlan;
    section "logging";
    context LoggingContext<'_>;
    keys {
        /// Write a metrics row every N training steps (one step = one training prompt). The
        /// row aggregates the steps since the previous row. It lives here, not in `trainer`,
        /// with the rest of what is logged where.
        steps: usize = def::LOGGING_STEPS, kind "integer ≥ 1", why "CoMLRL `logging_steps`",
            check cadence;
        /// Write TensorBoard event files (scalars) under `<output_dir>/tb/`; see "Experiment
        /// tracking".
        tensorboard: bool = false, kind "bool", why "off unless asked";
    }
    nested {
        /// Weights & Biases run: `project` (default `comlrl`, CoMLRL's), `entity` (default:
        /// your W&B default), `name` (default: the scenario name), `tags` (list). The resolved
        /// scenario is the run config. `--wandb*` flags of `comlrl run` win over these keys;
        /// see "Experiment tracking". Absent: W&B off.
        wandb: RawWandb => Option<WandbPlan>, kind "mapping", shown "none (off)",
            via wandb, emit wandb_raw;
    }
}

fn cadence(_key: &str, steps: &usize) -> Option<Bad> {
    (*steps < 1).then(|| Bad {
        message: "logging.steps must be at least 1".into(),
        hint: "log every N training steps (one step = one training prompt), e.g. `steps: 10`"
            .into(),
    })
}

fn wandb(
    _d: &mut Diags,
    _path: &KeyPath,
    raw: Option<&RawWandb>,
    _plan: &LoggingPlan,
    cx: &LoggingContext,
) -> Option<WandbPlan> {
    raw.map(|w| WandbPlan {
        project: w
            .project
            .clone()
            .unwrap_or_else(|| def::WANDB_PROJECT.to_string()),
        entity: w.entity.clone(),
        name: w.name.clone().unwrap_or_else(|| cx.name.to_string()),
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
