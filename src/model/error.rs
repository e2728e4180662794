//! The model's error type: loading, tokenizing, exporting and the tensor work of the model.
//! Each variant names the file, tensor or model at fault and keeps the error that caused it as
//! its `source()`; the trainer wraps it in `comlrl::Error::Model`.
use std::path::PathBuf;

/// Result alias of the model's functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An underlying error kept as a cause (safetensors, candle's quantizer, ...).
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything loading, running or saving a model can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A model directory or model file is unusable.
    #[error("{}: {msg}", path.display())]
    File {
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
    #[error("{}", path.display())]
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
    /// An invalid setting or argument (a dtype name, a model config, a quantization).
    #[error("{0}")]
    Invalid(String),
    /// A model cannot be exported (to GGUF).
    #[error("cannot export {model}: {msg}")]
    Export {
        /// The model, as its source describes it.
        model: String,
        /// What cannot be exported.
        msg: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Cause>,
    },
    /// Something could not be serialised (a config, a JSON file).
    #[error("cannot serialise {what}")]
    Serialize {
        /// What was being serialised.
        what: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A broken invariant inside the model (a poisoned lock, a tensor that must exist): a bug.
    #[error("internal error: {0}")]
    Internal(String),
    /// A tensor operation failed (shape mismatch inside the model, out of memory, ...).
    #[error("tensor error")]
    Tensor(#[from] candle_core::Error),
}

impl Error {
    /// [`Error::File`] for `path`.
    pub fn file(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::File {
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

    /// [`Error::Serialize`] of `what`.
    pub fn serialize(what: impl Into<String>, source: serde_json::Error) -> Self {
        Error::Serialize {
            what: what.into(),
            source,
        }
    }
}
