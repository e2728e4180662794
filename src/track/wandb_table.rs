//! The `logging.completions` samples as a W&B table, in the format the Python SDK (wandb 0.31.0,
//! `wandb.Table`) gives a logged table: the file `media/table/<key>_<step>_<sha256[:20]>.table.json`
//! holds `{"columns": [...], "data": [[...], ...]}`, and the history row names it with
//! `{"_type": "table-file", "path", "sha256", "size", "ncols", "nrows", "log_mode"}`. The SDK
//! also logs the table as a run artifact (`artifact_path`); comlrl sends the run file only,
//! which is what the run page's table panel reads.
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// A table file ready to upload, and the history value that points at it.
#[derive(Debug, Clone, PartialEq)]
pub struct TableFile {
    /// Its path among the run's files.
    pub name: String,
    /// Its contents (compact JSON, as the SDK writes it).
    pub bytes: Vec<u8>,
    /// The history (and summary) value.
    pub value: Value,
}

/// The table of `samples` (`completions.jsonl` lines): `step`, `turn`, `prompt`, `agent_<i>`
/// (each agent's completion), `reward`, `reward/<term>` (each term's raw value), then
/// `agent_<i>/return` and `agent_<i>/advantage`. Columns come from all samples, so a sample
/// missing a field has null there.
pub fn completions_table(samples: &[Value]) -> Value {
    let agents = samples
        .iter()
        .map(|s| s["completions"].as_array().map_or(0, Vec::len))
        .max()
        .unwrap_or(0);
    let mut terms: Vec<String> = vec![];
    for s in samples {
        for k in s["terms"].as_object().into_iter().flat_map(Map::keys) {
            if !terms.contains(k) {
                terms.push(k.clone());
            }
        }
    }
    let mut columns: Vec<String> = vec!["step".into(), "turn".into(), "prompt".into()];
    columns.extend((0..agents).map(|i| format!("agent_{i}")));
    columns.push("reward".into());
    columns.extend(terms.iter().map(|t| format!("reward/{t}")));
    for i in 0..agents {
        columns.push(format!("agent_{i}/return"));
        columns.push(format!("agent_{i}/advantage"));
    }
    let data: Vec<Value> = samples
        .iter()
        .map(|s| {
            let mut row = vec![s["step"].clone(), s["turn"].clone(), s["prompt"].clone()];
            row.extend((0..agents).map(|i| s["completions"][i].clone()));
            row.push(s["reward"].clone());
            row.extend(terms.iter().map(|t| s["terms"][t].clone()));
            for i in 0..agents {
                row.push(s["returns"][i].clone());
                row.push(s["advantages"][i].clone());
            }
            Value::Array(row)
        })
        .collect();
    json!({"columns": columns, "data": data})
}

/// `table` as the file the SDK uploads for history key `key` at `step`.
pub fn table_file(key: &str, step: u64, table: &Value) -> TableFile {
    let bytes = table.to_string().into_bytes();
    let sha = format!("{:x}", Sha256::digest(&bytes));
    let name = format!("media/table/{key}_{step}_{}.table.json", &sha[..20]);
    let ncols = table["columns"].as_array().map_or(0, Vec::len);
    let nrows = table["data"].as_array().map_or(0, Vec::len);
    let value = json!({
        "_type": "table-file",
        "sha256": sha,
        "size": bytes.len(),
        "path": name,
        "ncols": ncols,
        "nrows": nrows,
        "log_mode": "IMMUTABLE",
    });
    TableFile { name, bytes, value }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_columns_follow_the_samples_and_the_file_names_its_hash() {
        let s = json!({"step": 3, "turn": 1, "prompt": "p", "completions": ["a", "b"],
            "reward": 0.5, "terms": {"len": 2.0}, "returns": [0.5, 0.5], "advantages": [1.0, -1.0]});
        let t = completions_table(&[s]);
        assert_eq!(t["columns"][3], "agent_0");
        assert_eq!(t["columns"][6], "reward/len");
        assert_eq!(t["data"][0][4], "b");
        assert_eq!(t["data"][0][10], -1.0);
        let f = table_file("completions", 4, &t);
        let sha = format!("{:x}", Sha256::digest(&f.bytes));
        assert_eq!(f.value["sha256"], sha.as_str());
        assert_eq!(f.value["size"], f.bytes.len());
        assert_eq!(f.value["ncols"], 11);
        assert_eq!(f.value["nrows"], 1);
        assert_eq!(
            f.name,
            format!("media/table/completions_4_{}.table.json", &sha[..20])
        );
    }
}
