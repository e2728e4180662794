//! Rows of a `.parquet` file (the format of Hugging Face datasets), through the parquet crate's
//! row API: each row becomes a JSON object (nested structs as objects, lists as arrays, binary
//! as base64), then maps to a [`Row`] as JSON rows do (`prompt_field` may be a dotted path).
use crate::data::{row_from_json, Row};
use parquet::file::reader::FileReader;
use parquet::file::serialized_reader::SerializedFileReader;
use std::path::Path;

/// Reads every row of `path`. Errors name the file and the 0-based row.
pub(crate) fn load(path: &Path, prompt_field: &str) -> Result<Vec<Row>, String> {
    let shown = path.display();
    let reader = SerializedFileReader::try_from(path)
        .map_err(|e| format!("{shown}: not a readable parquet file: {e}"))?;
    // The row count is a number in the file: a hint for the first allocation, never trusted
    // beyond what a real row group holds.
    let n = reader
        .metadata()
        .file_metadata()
        .num_rows()
        .clamp(0, 1 << 16) as usize;
    let mut rows = Vec::with_capacity(n);
    for (i, row) in reader.into_iter().enumerate() {
        let row = row.map_err(|e| format!("{shown}: row {i}: cannot decode: {e}"))?;
        rows.push(row_from_json(
            row.to_json_value(),
            prompt_field,
            &format!("{shown}: row {i}"),
        )?);
    }
    Ok(rows)
}
