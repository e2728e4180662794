//! The crate's error type: every variant says which file, tensor or field is at fault and what to do.
use std::path::PathBuf;

/// Result alias used throughout the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the library can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A model directory or checkpoint file is unusable.
    #[error("{}: {msg}", path.display())]
    Model {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// A model reference could not be resolved to files.
    #[error("cannot resolve model `{model}`: {msg}")]
    Resolve {
        /// The model as written.
        model: String,
        /// Why it could not be resolved.
        msg: String,
    },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Tokenizer loading, encoding or decoding failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// Invalid argument given by the user (CLI flag or API call).
    #[error("{0}")]
    Invalid(String),
    /// A reward backend failed.
    #[error(transparent)]
    Reward(#[from] comlrl_reward::RewardError),
    /// The scenario file is invalid.
    #[error(transparent)]
    Scenario(#[from] comlrl_scenario::ScenarioError),
    /// A training run failed.
    #[error("{0}")]
    Train(String),
    /// A tensor operation failed (shape mismatch inside the model, out of memory, ...).
    #[error("tensor error: {0}")]
    Candle(#[from] candle_core::Error),
}

impl Error {
    /// [`Error::Model`] for `path`.
    pub fn model(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Model {
            path: path.into(),
            msg: msg.into(),
        }
    }

    /// [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
