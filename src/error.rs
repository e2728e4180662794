//! The crate's error type: every variant says which file, tensor, step or agent is at fault and
//! what to do, and keeps the error that caused it as its `source()` (never also in its message,
//! so that printing the chain shows each cause once).
use std::path::PathBuf;

/// Result alias used throughout the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Any underlying error kept as a cause (safetensors, serde, plotters, the OS, ...).
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything the library can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading, running or saving a model failed (`comlrl::model::Error`).
    #[error(transparent)]
    Model(#[from] crate::model::Error),
    /// Reading or writing a file failed.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Invalid input given by the user (CLI flag, API call, dataset row).
    #[error("{0}")]
    Invalid(String),
    /// The scenario's settings cannot be run as they are (the message names the field to change).
    #[error("{0}")]
    Config(String),
    /// Training diverged (non-finite gradients or loss); the message says what to change.
    #[error("{0}")]
    Diverged(String),
    /// A reward backend failed.
    #[error(transparent)]
    Reward(#[from] comlrl_reward::RewardError),
    /// The scenario file is invalid.
    #[error(transparent)]
    Scenario(#[from] comlrl_scenario::ScenarioError),
    /// A chat template could not be loaded or rendered.
    #[error(transparent)]
    ChatTemplate(#[from] comlrl_scenario::ChatTemplateError),
    /// A checkpoint (or its manifest) is unusable, or could not be written.
    #[error("{}: {msg}", path.display())]
    Checkpoint {
        /// The checkpoint file or directory.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Cause>,
    },
    /// A run's output directory cannot be claimed, read or written.
    #[error("{msg}")]
    RunDir {
        /// The directory or file in it.
        path: PathBuf,
        /// What is wrong and what to do (names the path).
        msg: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Cause>,
    },
    /// A metrics file (`metrics.jsonl` / `metrics.csv`) is unreadable or cannot be written.
    #[error("{}: {msg}", path.display())]
    Metrics {
        /// The metrics file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Cause>,
    },
    /// The run's plot could not be drawn.
    #[error("{}: cannot draw the plot", path.display())]
    Plot {
        /// The SVG file.
        path: PathBuf,
        /// The drawing error.
        #[source]
        source: Cause,
    },
    /// Preparing agent `agent` (its model, tokenizer or chat template) failed.
    #[error("agent {agent}{}", model.as_ref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Agent {
        /// The agent's index.
        agent: usize,
        /// The agent's model as written in the scenario, when known.
        model: Option<String>,
        /// What failed.
        #[source]
        source: Box<Error>,
    },
    /// A network of the algorithm's own (MARLHF's reward model) failed.
    #[error("{what}")]
    Within {
        /// Which network, as the scenario names it.
        what: String,
        /// What failed.
        #[source]
        source: Box<Error>,
    },
    /// A training or evaluation step failed.
    #[error("{what}")]
    Step {
        /// The 1-based step the failure happened at.
        step: usize,
        /// Where in the step, e.g. `step 3 (epoch 1, prompt 2)` or `evaluation at step 3`.
        what: String,
        /// What failed.
        #[source]
        source: Box<Error>,
    },
    /// A tracker (TensorBoard, W&B) failed; the message says what happens next.
    #[error("{msg}")]
    Tracker {
        /// What failed.
        msg: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Cause>,
    },
    /// Something could not be serialised (state, manifest, config).
    #[error("cannot serialise {what}")]
    Serialize {
        /// What was being serialised.
        what: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A distributed run's ranks disagree: a malformed message between ranks, or a failure on
    /// another rank (rank 0's reward or transition) reported to this one.
    #[error("{0}")]
    Distributed(String),
    /// A broken invariant inside the library (a poisoned lock, a state that cannot happen): a bug.
    #[error("internal error: {0}")]
    Internal(String),
    /// A tensor operation failed (shape mismatch inside the model, out of memory, ...).
    #[error("tensor error")]
    Candle(#[from] candle_core::Error),
}

impl Error {
    /// [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// [`Error::Checkpoint`] for `path`, without an underlying error.
    pub fn checkpoint(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Checkpoint {
            path: path.into(),
            msg: msg.into(),
            source: None,
        }
    }

    /// [`Error::Checkpoint`] for `path`, caused by `source`.
    pub fn checkpoint_by(
        path: impl Into<PathBuf>,
        msg: impl Into<String>,
        source: impl Into<Cause>,
    ) -> Self {
        Error::Checkpoint {
            path: path.into(),
            msg: msg.into(),
            source: Some(source.into()),
        }
    }

    /// [`Error::Metrics`] for `path`, without an underlying error.
    pub fn metrics(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Metrics {
            path: path.into(),
            msg: msg.into(),
            source: None,
        }
    }

    /// [`Error::Metrics`] for `path`, caused by `source`.
    pub fn metrics_by(
        path: impl Into<PathBuf>,
        msg: impl Into<String>,
        source: impl Into<Cause>,
    ) -> Self {
        Error::Metrics {
            path: path.into(),
            msg: msg.into(),
            source: Some(source.into()),
        }
    }

    /// [`Error::RunDir`] for `path`; `msg` names the path and what to do.
    pub fn run_dir(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::RunDir {
            path: path.into(),
            msg: msg.into(),
            source: None,
        }
    }

    /// [`Error::RunDir`] for `path`, caused by `source`; `msg` names the path and what to do.
    pub fn run_dir_by(
        path: impl Into<PathBuf>,
        msg: impl Into<String>,
        source: impl Into<Cause>,
    ) -> Self {
        Error::RunDir {
            path: path.into(),
            msg: msg.into(),
            source: Some(source.into()),
        }
    }

    /// [`Error::Tracker`] without an underlying error.
    pub fn tracker(msg: impl Into<String>) -> Self {
        Error::Tracker {
            msg: msg.into(),
            source: None,
        }
    }

    /// [`Error::Tracker`] caused by `source`.
    pub fn tracker_by(msg: impl Into<String>, source: impl Into<Cause>) -> Self {
        Error::Tracker {
            msg: msg.into(),
            source: Some(source.into()),
        }
    }

    /// [`Error::Serialize`] of `what`.
    pub fn serialize(what: impl Into<String>, source: serde_json::Error) -> Self {
        Error::Serialize {
            what: what.into(),
            source,
        }
    }

    /// This error wrapped as a failure of agent `agent` (its model as written, when known).
    pub fn for_agent(self, agent: usize, model: Option<String>) -> Self {
        Error::Agent {
            agent,
            model,
            source: Box::new(self),
        }
    }

    /// This error wrapped as a failure of `what` (a network of the algorithm's own).
    pub fn within(self, what: impl Into<String>) -> Self {
        Error::Within {
            what: what.into(),
            source: Box::new(self),
        }
    }

    /// This error wrapped as a failure at (1-based) `step`, `what` saying where in the step.
    pub fn at_step(self, step: usize, what: impl Into<String>) -> Self {
        Error::Step {
            step,
            what: what.into(),
            source: Box::new(self),
        }
    }

    /// The message and every cause below it, joined by `: ` (for logs and tests that want the
    /// whole story in one line); see [`chain`].
    pub fn chain(&self) -> String {
        chain(self).join(": ")
    }
}

/// The messages of `err` and of every cause below it, outermost first. A cause whose message
/// the one above it already shows (an error that prints its source itself) is left out, so
/// no cause appears twice.
pub fn chain(err: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut out: Vec<String> = vec![err.to_string()];
    let mut cur = err.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !out.last().is_some_and(|above| above.contains(&text)) {
            out.push(text);
        }
        cur = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_failure_keeps_its_cause_and_the_chain_shows_each_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = Error::checkpoint_by("/c/state.json", "unreadable checkpoint state", io)
            .for_agent(1, Some("builtin:tiny".into()))
            .at_step(3, "step 3 (epoch 1, prompt 2)");
        assert_eq!(e.to_string(), "step 3 (epoch 1, prompt 2)");
        assert_eq!(
            chain(&e),
            [
                "step 3 (epoch 1, prompt 2)",
                "agent 1 (builtin:tiny)",
                "/c/state.json: unreadable checkpoint state",
                "gone"
            ]
        );
        assert!(matches!(e, Error::Step { step: 3, .. }));
    }

    #[test]
    fn a_cause_its_parent_already_prints_is_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("reading x: {source}")]
        struct Loud {
            #[source]
            source: std::io::Error,
        }
        let e = Loud {
            source: std::io::Error::other("denied"),
        };
        assert_eq!(chain(&e), ["reading x: denied"]);
    }
}
