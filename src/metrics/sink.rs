//! The metrics sinks: `metrics.jsonl` (the source of truth, one whole line per row, appended)
//! and its `metrics.csv` twin, whose header is every column seen so far (rewritten from the
//! JSONL when a row brings a new one). On resume both are cut back to the checkpoint's rows,
//! checked against its step; rows written after it (a torn last line included) are dropped.
//! Whole-file rewrites go through a temporary file renamed into place.
use super::Row;
use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Appends rows to `metrics.jsonl` and `metrics.csv`.
pub struct MetricsSink {
    jsonl: PathBuf,
    csv: PathBuf,
    columns: Vec<String>,
    /// Rows in the sinks so far (kept and written).
    pub rows: usize,
}

impl MetricsSink {
    /// Opens the sinks in `dir`, keeping the first `keep_rows` rows (0 for a fresh run), which
    /// must exist and end at or before `step`. Returns a note when rows after them are dropped.
    pub fn open(dir: &Path, keep_rows: usize, step: usize) -> Result<(Self, Option<String>)> {
        let jsonl = dir.join("metrics.jsonl");
        let csv = dir.join("metrics.csv");
        let mut sink = Self {
            jsonl: jsonl.clone(),
            csv,
            columns: vec![],
            rows: keep_rows,
        };
        if keep_rows == 0 && std::fs::symlink_metadata(&jsonl).is_err() {
            write_file(&jsonl, "")?;
            sink.rewrite_csv(&[])?;
            return Ok((sink, None));
        }
        let text =
            comlrl_scenario::files::read_text(&jsonl, super::JSONL_CAP, super::JSONL_TOO_BIG)
                .map_err(|e| Error::io(&jsonl, e))?;
        let torn = !text.is_empty() && !text.ends_with('\n');
        let lines: Vec<&str> = text.lines().collect();
        let complete = lines.len() - usize::from(torn);
        if complete < keep_rows {
            return Err(Error::metrics(
                &jsonl,
                format!(
                    "{complete} complete rows, but the checkpoint (step {step}) was written after row {keep_rows}: \
                     the file was cut or edited; start over with --overwrite"
                ),
            ));
        }
        let kept: Vec<Row> = lines[..keep_rows]
            .iter()
            .enumerate()
            .map(|(i, l)| {
                parse_row(l).map_err(|e| Error::metrics(&jsonl, format!("line {}: {e}", i + 1)))
            })
            .collect::<Result<_>>()?;
        if let Some(last) = kept.last() {
            let logged = value(last, "step");
            if logged.is_nan() || logged > step as f64 {
                return Err(Error::metrics(
                    &jsonl,
                    format!(
                        "line {keep_rows}: field `step` is {logged}, after the checkpoint's step {step}: \
                         the checkpoint and the metrics disagree; start over with --overwrite"
                    ),
                ));
            }
        }
        let dropped = lines.len() - keep_rows;
        let note =
            (dropped > 0).then(|| {
                format!(
                "note: {}: dropped {dropped} row(s) written after the checkpoint at step {step}{}",
                jsonl.display(),
                if torn { " (the last one incomplete)" } else { "" }
            )
            });
        let body: String = lines[..keep_rows]
            .iter()
            .map(|l| format!("{l}\n"))
            .collect();
        write_file(&jsonl, &body)?;
        sink.rewrite_csv(&kept)?;
        Ok((sink, note))
    }

    /// Appends `row` to both files.
    pub fn write(&mut self, row: &Row) -> Result<()> {
        let mut obj = String::from("{");
        for (i, (k, v)) in row.iter().enumerate() {
            if i > 0 {
                obj.push_str(", ");
            }
            let val = if !v.is_finite() {
                serde_json::Value::Null
            } else if v.fract() == 0.0 && v.abs() < 1e15 {
                serde_json::json!(*v as i64)
            } else {
                serde_json::json!(v)
            };
            obj.push_str(&format!("{}: {}", serde_json::json!(k), val));
        }
        obj.push_str("}\n");
        // One write of the whole line: a crash can only tear the last line (dropped on resume).
        append(&self.jsonl, obj.as_bytes())?;
        self.rows += 1;
        if merge_columns(&mut self.columns, row) {
            let rows = self.read_rows()?;
            self.rewrite_csv(&rows)
        } else {
            let mut w = csv::WriterBuilder::new().from_writer(vec![]);
            w.write_record(self.columns.iter().map(|c| cell(row, c)))
                .map_err(|e| self.csv_err(e))?;
            let bytes = w.into_inner().map_err(|e| self.csv_err(e.into_error()))?;
            append(&self.csv, &bytes)
        }
    }

    fn read_rows(&self) -> Result<Vec<Row>> {
        let text =
            comlrl_scenario::files::read_text(&self.jsonl, super::JSONL_CAP, super::JSONL_TOO_BIG)
                .map_err(|e| Error::io(&self.jsonl, e))?;
        text.lines()
            .enumerate()
            .map(|(i, l)| {
                parse_row(l)
                    .map_err(|e| Error::metrics(&self.jsonl, format!("line {}: {e}", i + 1)))
            })
            .collect()
    }

    /// Writes the whole CSV (header of every column in `rows`, in first-seen order) to a
    /// temporary file and renames it into place.
    fn rewrite_csv(&mut self, rows: &[Row]) -> Result<()> {
        self.columns.clear();
        for r in rows {
            merge_columns(&mut self.columns, r);
        }
        let mut w = csv::WriterBuilder::new().from_writer(vec![]);
        if !self.columns.is_empty() {
            w.write_record(&self.columns).map_err(|e| self.csv_err(e))?;
        }
        for r in rows {
            w.write_record(self.columns.iter().map(|c| cell(r, c)))
                .map_err(|e| self.csv_err(e))?;
        }
        let bytes = w.into_inner().map_err(|e| self.csv_err(e.into_error()))?;
        write_file(&self.csv, bytes)
    }

    fn csv_err(&self, e: impl Into<crate::error::Cause>) -> Error {
        Error::metrics_by(&self.csv, "cannot write CSV", e)
    }
}

/// Adds the columns of `row` that `columns` lacks, each after its predecessor in the row;
/// returns whether any was added.
fn merge_columns(columns: &mut Vec<String>, row: &Row) -> bool {
    let mut added = false;
    let mut at = 0;
    for (k, _) in row {
        match columns.iter().position(|c| c == k) {
            Some(p) => at = p + 1,
            None => {
                columns.insert(at, k.clone());
                at += 1;
                added = true;
            }
        }
    }
    added
}

fn value(row: &Row, key: &str) -> f64 {
    row.iter()
        .find(|(k, _)| k == key)
        .map_or(f64::NAN, |(_, v)| *v)
}

/// A CSV cell: the value, or empty when the row lacks the column or the value is not finite.
fn cell(row: &Row, col: &str) -> String {
    let v = value(row, col);
    if v.is_finite() {
        format!("{v}")
    } else {
        String::new()
    }
}

/// One JSONL line as a row, keys in the line's order (`null` read as NaN).
fn parse_row(line: &str) -> std::result::Result<Row, String> {
    struct Ordered(Row);
    impl<'de> serde::Deserialize<'de> for Ordered {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Ordered;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object of numbers")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut m: A,
                ) -> std::result::Result<Ordered, A::Error> {
                    let mut row = Row::new();
                    while let Some((k, v)) = m.next_entry::<String, Option<f64>>()? {
                        row.push((k, v.unwrap_or(f64::NAN)));
                    }
                    Ok(Ordered(row))
                }
            }
            d.deserialize_map(V)
        }
    }
    serde_json::from_str::<Ordered>(line)
        .map(|o| o.0)
        .map_err(|e| format!("not a metrics row: {e}"))
}

/// Replaces `path`'s contents with `bytes` through a temporary file renamed into place: a
/// process killed meanwhile leaves the old file or the new one, never a cut one (a resume
/// that cut `metrics.jsonl` back in place and was killed with `kill -9` left it empty,
/// orphaning its checkpoint).
pub(super) fn write_file(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

pub(super) fn append(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    f.write_all(bytes).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pairs: &[(&str, f64)]) -> Row {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn late_columns_reach_the_csv_header() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut s, _) = MetricsSink::open(tmp.path(), 0, 0).unwrap();
        s.write(&row(&[("step", 1.0), ("lr", 0.5)])).unwrap();
        s.write(&row(&[("step", 2.0), ("agent_0/loss", 0.25), ("lr", 0.5)]))
            .unwrap();
        s.write(&row(&[("step", 3.0), ("lr", f64::NAN)])).unwrap();
        let csv = std::fs::read_to_string(tmp.path().join("metrics.csv")).unwrap();
        assert_eq!(csv, "step,agent_0/loss,lr\n1,,0.5\n2,0.25,0.5\n3,,\n");
    }

    #[test]
    fn resume_drops_a_torn_line_and_checks_the_step() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut s, _) = MetricsSink::open(tmp.path(), 0, 0).unwrap();
        s.write(&row(&[("step", 1.0)])).unwrap();
        s.write(&row(&[("step", 2.0)])).unwrap();
        let p = tmp.path().join("metrics.jsonl");
        let mut text = std::fs::read_to_string(&p).unwrap();
        text.push_str("{\"step\": 3, \"rew");
        std::fs::write(&p, text).unwrap();
        let err = MetricsSink::open(tmp.path(), 2, 1)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("line 2") && err.contains("`step` is 2"),
            "{err}"
        );
        let err = MetricsSink::open(tmp.path(), 5, 9)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("2 complete rows"), "{err}");
        let (_, note) = MetricsSink::open(tmp.path(), 2, 2).unwrap();
        assert!(note.unwrap().contains("the last one incomplete"));
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"step\": 1}\n{\"step\": 2}\n"
        );
    }
}
