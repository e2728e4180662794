//! Dataset rows: inline prompts, JSONL / JSON / CSV / parquet files or a Hugging Face Hub dataset,
//! with a prompt-field mapping (a column name, or a dotted path into nested fields). Every other
//! column of a row is kept (as JSON) and handed to rewards and templates.
use crate::files;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// One training or evaluation example.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The prompt (the `prompt_field` column).
    pub prompt: String,
    /// Every other column of the row, by name (CSV values are strings).
    pub fields: Map<String, Json>,
}

impl Row {
    /// The field `name`: a column of that name, else a dotted path into nested objects
    /// (`meta.question`).
    pub fn field(&self, name: &str) -> Option<&Json> {
        lookup(&self.fields, name)
    }
}

/// `name` in `fields`: the key itself, else the dotted path `a.b.c` through nested objects.
pub(crate) fn lookup<'a>(fields: &'a Map<String, Json>, name: &str) -> Option<&'a Json> {
    if let Some(v) = fields.get(name) {
        return Some(v);
    }
    let (head, rest) = name.split_once('.')?;
    match fields.get(head)? {
        Json::Object(inner) => lookup(inner, rest),
        _ => None,
    }
}

/// File format of a dataset file; by default taken from the extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataFormat {
    /// One JSON object per line (`.jsonl`, `.ndjson`); blank lines are skipped.
    Jsonl,
    /// A JSON array of objects (`.json`).
    Json,
    /// Comma-separated values with a header row (`.csv`).
    Csv,
    /// Apache Parquet (`.parquet`), the format of Hugging Face datasets.
    Parquet,
}

impl DataFormat {
    /// The format implied by a file extension.
    pub fn from_extension(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "jsonl" | "ndjson" => Some(DataFormat::Jsonl),
            "json" => Some(DataFormat::Json),
            "csv" => Some(DataFormat::Csv),
            "parquet" => Some(DataFormat::Parquet),
            _ => None,
        }
    }
}

/// Where rows came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    /// `prompts:` written in the scenario.
    Inline,
    /// A file (absolute path) in the given format.
    File {
        /// Absolute path of the file.
        path: PathBuf,
        /// Its format.
        format: DataFormat,
    },
    /// A Hugging Face Hub dataset, read from the parquet `files` of the local Hub cache.
    Hub {
        /// `org/name`.
        repo: String,
        /// The dataset config (`default` unless set).
        config: String,
        /// The split as written, slice included (`train[:1100]`).
        split: String,
        /// The cached parquet files the rows were read from, in order (before slicing).
        files: Vec<PathBuf>,
    },
}

/// A loaded dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// Where the rows came from.
    pub source: DataSource,
    /// Column that holds the prompt (`prompt` unless `prompt_field` says otherwise).
    pub prompt_field: String,
    /// The rows, in source order.
    pub rows: Vec<Row>,
}

/// Rows from inline prompts.
pub(crate) fn inline_rows(prompts: &[String]) -> Vec<Row> {
    prompts
        .iter()
        .map(|p| Row {
            prompt: p.clone(),
            fields: Map::new(),
        })
        .collect()
}

/// Reads a dataset file. Errors name the file and the line (JSONL, CSV) or item (JSON) at fault.
/// The file must be a regular file (see [`crate::files`]); JSONL, JSON and CSV files may hold
/// [`files::MAX_DATA_FILE_BYTES`], one JSONL line or CSV record [`files::MAX_ROW_BYTES`].
pub(crate) fn load_file(
    path: &Path,
    format: DataFormat,
    prompt_field: &str,
) -> Result<Vec<Row>, String> {
    let shown = path.display();
    let too_big = "split the data set, or convert it to parquet";
    let open = || {
        files::open_regular(path, files::MAX_DATA_FILE_BYTES, too_big)
            .map(|(f, _)| f)
            .map_err(|e| format!("cannot read {shown}: {e}"))
    };
    match format {
        DataFormat::Parquet => {
            // Opened by the parquet reader; checked here so that a FIFO is never opened.
            if let Some(why) = files::not_regular(path) {
                return Err(format!("cannot read {shown}: it {why}"));
            }
            crate::parquet_rows::load(path, prompt_field)
        }
        DataFormat::Jsonl => jsonl_rows(open()?, prompt_field, &shown.to_string()),
        DataFormat::Json => {
            let text = files::read_text(path, files::MAX_DATA_FILE_BYTES, too_big)
                .map_err(|e| format!("cannot read {shown}: {e}"))?;
            let v: Json =
                serde_json::from_str(&text).map_err(|e| format!("{shown}: invalid JSON: {e}"))?;
            let Json::Array(items) = v else {
                return Err(format!("{shown}: expected a JSON array of objects"));
            };
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| row_from_json(v, prompt_field, &format!("{shown}: item {i}")))
                .collect()
        }
        DataFormat::Csv => csv_rows(open()?, prompt_field, &shown.to_string()),
    }
}

/// `where_: the line is longer than the cap ...`.
fn row_too_long(where_: &str, what: &str) -> String {
    format!(
        "{where_}: the {what} is longer than the {} a row may hold; a row that long is not a \
         prompt a model can take (remove it or shorten it)",
        files::bytes(files::MAX_ROW_BYTES)
    )
}

/// JSONL rows, read line by line; no line is read past [`files::MAX_ROW_BYTES`].
fn jsonl_rows(file: std::fs::File, prompt_field: &str, shown: &str) -> Result<Vec<Row>, String> {
    let mut reader = BufReader::new(file);
    let mut rows = Vec::new();
    let mut buf = Vec::new();
    for number in 1.. {
        buf.clear();
        let n = (&mut reader)
            .take(files::MAX_ROW_BYTES + 2)
            .read_until(b'\n', &mut buf)
            .map_err(|e| format!("cannot read {shown}: {e}"))?;
        if n == 0 {
            break;
        }
        let where_ = format!("{shown}:{number}");
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() as u64 > files::MAX_ROW_BYTES {
            return Err(row_too_long(&where_, "line"));
        }
        let line =
            std::str::from_utf8(line).map_err(|e| format!("{where_}: not UTF-8 text: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Json =
            serde_json::from_str(line).map_err(|e| format!("{where_}: not a JSON object: {e}"))?;
        rows.push(row_from_json(v, prompt_field, &where_)?);
    }
    Ok(rows)
}

/// A row from a JSON object; a dotted `prompt_field` that is not a key is a path into nested
/// objects (which stay in `fields` whole).
pub(crate) fn row_from_json(v: Json, prompt_field: &str, where_: &str) -> Result<Row, String> {
    let Json::Object(mut fields) = v else {
        return Err(format!("{where_}: expected a JSON object"));
    };
    let value = match fields.remove(prompt_field) {
        Some(v) => Some(v),
        None => lookup(&fields, prompt_field).cloned(),
    };
    let prompt = match value {
        Some(Json::String(s)) => s,
        Some(other) => {
            return Err(format!(
                "{where_}: field `{prompt_field}` must be a string, found {other}"
            ))
        }
        None => {
            let names: Vec<&str> = fields.keys().map(String::as_str).collect();
            return Err(missing_prompt(where_, prompt_field, &names));
        }
    };
    Ok(Row { prompt, fields })
}

fn missing_prompt(where_: &str, prompt_field: &str, names: &[&str]) -> String {
    let mut msg = format!(
        "{where_}: no `{prompt_field}` field (fields: {})",
        names.join(", ")
    );
    if let Some(g) = crate::suggest::closest(prompt_field, names) {
        msg.push_str(&format!(
            "; set `prompt_field: {g}` if that column holds the prompt"
        ));
    } else {
        msg.push_str("; set `prompt_field` to the column that holds the prompt");
    }
    msg
}

/// CSV rows; a record longer than [`files::MAX_ROW_BYTES`] is refused (the file's size, checked
/// before, bounds what the reader buffers).
fn csv_rows(file: std::fs::File, prompt_field: &str, shown: &str) -> Result<Vec<Row>, String> {
    let mut reader = csv::Reader::from_reader(BufReader::new(file));
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| format!("{shown}: cannot read the header row: {e}"))?
        .iter()
        .map(str::to_string)
        .collect();
    let Some(prompt_col) = headers.iter().position(|h| h == prompt_field) else {
        let names: Vec<&str> = headers.iter().map(String::as_str).collect();
        return Err(missing_prompt(&format!("{shown}:1"), prompt_field, &names));
    };
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| format!("{shown}: {e}"))?;
        let line = record.position().map_or(0, |p| p.line());
        let len = record.as_byte_record().as_slice().len() as u64;
        if len > files::MAX_ROW_BYTES {
            return Err(row_too_long(&format!("{shown}:{line}"), "record"));
        }
        let mut fields = Map::new();
        let mut prompt = String::new();
        for (i, value) in record.iter().enumerate() {
            if i == prompt_col {
                prompt = value.to_string();
            } else if let Some(name) = headers.get(i) {
                fields.insert(name.clone(), Json::String(value.to_string()));
            }
        }
        if record.len() <= prompt_col {
            return Err(format!(
                "{shown}:{line}: the row has no `{prompt_field}` column"
            ));
        }
        rows.push(Row { prompt, fields });
    }
    Ok(rows)
}
