//! `completions.jsonl`: the sampled joint actions logged with each metrics row
//! (`logging.completions`), one JSON object per line, each with the `step` that sampled it. On
//! resume the lines of steps after the checkpoint (and a torn last line) are dropped, as
//! `metrics.jsonl`'s rows are.
use super::sink::{append, write_file};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The file's name in the output directory.
pub const COMPLETIONS_FILE: &str = "completions.jsonl";

/// Appends logged samples to `completions.jsonl`.
pub struct CompletionsSink {
    path: PathBuf,
}

impl CompletionsSink {
    /// Opens the file in `dir` for a run at `step` (0: a fresh run, which starts it empty).
    /// On resume it keeps the lines of steps up to `step`; returns a note when it drops others.
    pub fn open(dir: &Path, step: usize) -> Result<(Self, Option<String>)> {
        let path = dir.join(COMPLETIONS_FILE);
        let sink = Self { path: path.clone() };
        if step == 0 || std::fs::symlink_metadata(&path).is_err() {
            write_file(&path, "")?;
            return Ok((sink, None));
        }
        let text = comlrl_scenario::files::read_text(
            &path,
            super::JSONL_CAP,
            "it is not a completions file a run wrote",
        )
        .map_err(|e| Error::io(&path, e))?;
        let torn = !text.is_empty() && !text.ends_with('\n');
        let lines: Vec<&str> = text.lines().collect();
        let complete = &lines[..lines.len() - usize::from(torn)];
        let mut kept = String::new();
        for (i, line) in complete.iter().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| Error::metrics_by(&path, format!("line {}: not JSON", i + 1), e))?;
            let Some(at) = v.get("step").and_then(|s| s.as_u64()) else {
                return Err(Error::metrics(
                    &path,
                    format!(
                        "line {}: no integer field `step`; the file was edited; move it away or \
                         start over with --overwrite",
                        i + 1
                    ),
                ));
            };
            if at <= step as u64 {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        let dropped = lines.len() - kept.lines().count();
        write_file(&path, &kept)?;
        let note = (dropped > 0).then(|| {
            format!(
                "note: {}: dropped {dropped} line(s) written after the checkpoint at step {step}",
                path.display()
            )
        });
        Ok((sink, note))
    }

    /// Appends `samples`, one line each, in one write (a crash can only tear the last line).
    pub fn write(&mut self, samples: &[serde_json::Value]) -> Result<()> {
        if samples.is_empty() {
            return Ok(());
        }
        let mut body = String::new();
        for s in samples {
            body.push_str(&s.to_string());
            body.push('\n');
        }
        append(&self.path, body.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_resume_keeps_the_lines_up_to_its_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sink, note) = CompletionsSink::open(dir.path(), 0).unwrap();
        assert!(note.is_none());
        sink.write(&[json!({"step": 2, "reward": 1.0}), json!({"step": 4})])
            .unwrap();
        sink.write(&[json!({"step": 6})]).unwrap();
        let path = dir.path().join(COMPLETIONS_FILE);
        // A crash tore a last line.
        append(&path, b"{\"step\": 8, \"rew").unwrap();
        let (mut sink, note) = CompletionsSink::open(dir.path(), 4).unwrap();
        assert!(note.unwrap().contains("dropped 2 line(s)"));
        sink.write(&[json!({"step": 5})]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let steps: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(steps, [2, 4, 5]);
        // An edited line is an error naming the line, not a silent drop.
        std::fs::write(&path, "{\"step\": 1}\nnot json\n").unwrap();
        let err = CompletionsSink::open(dir.path(), 4)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("line 2"), "{err}");
    }
}
