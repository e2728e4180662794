//! The `dataset` section's key table (`keys.rs` has the macro and the row syntax): the keys of a
//! set of rows, shared by the training set and `dataset.eval`, and `eval` itself.
//! [`RawDataSource`] (a set), [`RawDataset`] (the training set and its `eval`), the resolved-YAML
//! form and the docs table derive from it; which keys apply to which source, and the defaults
//! that depend on it, are code (`dataset.rs`).
use crate::data::DataFormat;
use crate::keys::section;
use std::path::PathBuf;

section! {
    raw /// `dataset.eval:` — an evaluation set: the keys of `dataset` without a nested `eval`.
        RawDataSource;
    outer /// `dataset:` — training rows (inline `prompts`, a `path` or a `hub` dataset) and an
        /// optional `eval` set.
        RawDataset;
    read {
        /// Inline prompts. Exactly one of `prompts` / `path` / `hub`.
        prompts: Vec<String>, kind "list of strings", shown "—", why "";
        /// A data file: `.jsonl` / `.ndjson` (one JSON object per line, blank lines skipped),
        /// `.json` (an array of objects) or `.csv` (header row, values are strings), or
        /// `.parquet`.
        path: PathBuf, kind "path", shown "—", why "";
        /// For files whose extension does not tell.
        format: DataFormat, kind "`jsonl` \\| `json` \\| `csv` \\| `parquet`",
            shown "from the extension", why "";
        /// The column with the prompt; CoMLRL's default formatter reads `item["prompt"]`. A
        /// dotted path (`meta.question`) reaches nested fields.
        prompt_field: String = "prompt".to_string(), kind "string", why "";
        /// A Hugging Face Hub dataset, read as parquet from the Hub cache (`comlrl run`
        /// downloads it when online). See [data.md](data.md).
        hub: String, kind "`org/name`", shown "—", why "";
        /// With `hub`: the dataset config.
        config: String = "default".to_string(), kind "string", why "";
        /// With `hub`: the split and an optional slice, as `datasets` writes them:
        /// `train[:1100]`, `test[33:133]`, `train[10%:20%]`.
        split: String, kind "string", shown "`train` (required in `eval`)", why "";
    }
    last {
        /// Evaluation set: `prompts` / `path` / `hub` / `format` / `config` / `split` /
        /// `prompt_field` as above. Used by `trainer.eval_*`.
        eval: RawDataSource, kind "mapping", shown "none", why "";
    }
}
