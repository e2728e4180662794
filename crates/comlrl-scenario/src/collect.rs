//! The collector every loading stage reports into: it turns (key path, message, hint) into
//! located, de-duplicated diagnostics, and gathers warnings.
use crate::error::{Diagnostic, ErrorKind, Location};
use crate::positions::{KeyPath, PositionIndex};

pub(crate) struct Diags {
    pub index: PositionIndex,
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<String>,
}

impl Diags {
    pub fn new(index: PositionIndex) -> Self {
        Diags {
            index,
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Records an error at `path` (located through the index).
    pub fn error(
        &mut self,
        kind: ErrorKind,
        path: &KeyPath,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        let d = Diagnostic {
            kind,
            key: path.to_string(),
            location: self.index.lookup(path),
            message: message.into(),
            hint,
        };
        // Shared settings (`agents: {count: 2, ...}`) are checked once per agent: report once.
        if !self.errors.contains(&d) {
            self.errors.push(d);
        }
    }

    /// Records an error about a `--set` argument itself (located at that argument).
    pub fn override_error(&mut self, arg: &str, key: &str, message: String, hint: String) {
        self.errors.push(Diagnostic {
            kind: ErrorKind::Override,
            key: key.to_string(),
            location: Location::Override(arg.to_string()),
            message,
            hint: Some(hint),
        });
    }

    /// Shorthand for an out-of-range value with a fix.
    pub fn invalid(&mut self, path: &KeyPath, message: impl Into<String>, hint: impl Into<String>) {
        self.error(ErrorKind::InvalidValue, path, message, Some(hint.into()));
    }

    /// Records a warning about `path` (a setting that has no effect, or a surprising combination).
    pub fn warn(&mut self, path: &KeyPath, message: impl AsRef<str>) {
        let w = format!("`{path}`: {}", message.as_ref());
        if !self.warnings.contains(&w) {
            self.warnings.push(w);
        }
    }
}
