//! Diagnostics: what is wrong in a scenario, where (file:line:column, or the `--set` override
//! that introduced the value), under which key path, and how to fix it.
use std::fmt;
use std::path::{Path, PathBuf};

/// The class of a [`Diagnostic`], for callers (and tests) that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The text is not valid YAML (or has a YAML feature we do not accept).
    Syntax,
    /// A key the schema does not have (a typo, or a CoMLRL key that lives elsewhere here).
    UnknownKey,
    /// A value of the wrong type (a string where a number is expected, ...).
    WrongType,
    /// A value of the right type outside its valid range, or an unknown enum spelling.
    InvalidValue,
    /// A required key is absent.
    MissingKey,
    /// A file or directory the scenario names does not exist.
    MissingFile,
    /// A dataset file cannot be read or has a bad row, or the dataset is empty.
    Dataset,
    /// A prompt template is malformed or names a field the rows do not have.
    Template,
    /// A `--set key.path=value` override is malformed or cannot be applied.
    Override,
}

/// Where a diagnostic points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// 1-based line and column in the scenario file (of the offending key, or of the list item).
    File {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// The value came from this `--set` argument, not from the file.
    Override(String),
}

/// One problem found in a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    /// What sort of problem.
    pub kind: ErrorKind,
    /// Key path of the offending setting, e.g. `trainer.num_generations` or `agents[1].model`.
    pub key: String,
    /// Where it is written.
    pub location: Location,
    /// What is wrong.
    pub message: String,
    /// How to fix it, when we can tell.
    pub hint: Option<String>,
}

impl Diagnostic {
    /// `file:line:col: error at `key`: message` plus an indented `help:` line.
    pub fn render(&self, file: &Path) -> String {
        let at = match &self.location {
            Location::File { line, column } => format!("{}:{line}:{column}", file.display()),
            Location::Override(arg) => format!("{} (from --set {arg})", file.display()),
        };
        let mut out = format!("{at}: error at `{}`: {}", self.key, self.message);
        if let Some(hint) = &self.hint {
            out.push_str("\n    help: ");
            out.push_str(hint);
        }
        out
    }
}

/// Why a scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The scenario file itself could not be read.
    #[error("cannot read scenario file {}: {source}", path.display())]
    Read {
        /// The scenario file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The scenario was read but has one or more problems (all that could be found).
    #[error("{}", Rendered(file, diagnostics))]
    Invalid {
        /// The scenario file.
        file: PathBuf,
        /// Every problem found, in file order.
        diagnostics: Vec<Diagnostic>,
    },
}

impl ScenarioError {
    /// The diagnostics of an [`ScenarioError::Invalid`] error (empty for a read error).
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            ScenarioError::Invalid { diagnostics, .. } => diagnostics,
            ScenarioError::Read { .. } => &[],
        }
    }
}

struct Rendered<'a>(&'a Path, &'a [Diagnostic]);

impl fmt::Display for Rendered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.1.len();
        let plural = if n == 1 { "" } else { "s" };
        write!(f, "scenario {} has {n} error{plural}:", self.0.display())?;
        for d in self.1 {
            write!(f, "\n{}", d.render(self.0))?;
        }
        Ok(())
    }
}
