//! Shared helpers: the repository's files, HumanEval's rows, a reward built once per process.
use comlrl_code_exec::{CodeExec, Config};
use std::io::Read;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The workspace root.
pub fn root() -> PathBuf {
    comlrl_testutil::workspace_root()
}

/// Reads a gzip-compressed JSON-lines file of the repository.
pub fn jsonl_gz(rel: &str) -> Vec<serde_json::Value> {
    let f = std::fs::File::open(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(f)
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{rel}: {e}"));
    jsonl_text(&text)
}

/// Reads a JSON-lines file of the repository.
pub fn jsonl(rel: &str) -> Vec<serde_json::Value> {
    jsonl_text(&std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}")))
}

fn jsonl_text(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// HumanEval's 164 problems, from the vendored file.
pub fn humaneval() -> Vec<serde_json::Value> {
    let rows = jsonl_gz("data/humaneval/HumanEval.jsonl.gz");
    assert_eq!(rows.len(), 164);
    rows
}

/// A string field of a JSON object.
pub fn s<'a>(v: &'a serde_json::Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("no string `{key}` in {v}"))
}

/// The interpreter the tests use, or `None` after a skip.
pub fn python() -> Option<String> {
    let py = std::env::var("COMLRL_PYTHON").unwrap_or_else(|_| "python3".into());
    match std::process::Command::new(&py)
        .args(["-c", "pass"])
        .output()
    {
        Ok(o) if o.status.success() => Some(py),
        _ => {
            comlrl_testutil::skip(&format!("{py} is not runnable"));
            None
        }
    }
}

/// Where the tests' samples put their directories (checked empty after each call).
pub fn tmp_root() -> PathBuf {
    let d = std::env::temp_dir().join(format!("comlrl-code-exec-tests-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("test tmp root");
    d
}

/// The reward with short timeouts (1 s per test, 12 s per sample), built once, its samples in
/// a directory of their own.
pub fn reward() -> Option<&'static CodeExec> {
    static R: OnceLock<Option<CodeExec>> = OnceLock::new();
    // The recorded timeouts sleep, so more samples than cores can run at once.
    build(&R, "fixtures", 4)
}

/// As [`reward`], for the security cases (which check that their directory is left empty).
pub fn security_reward() -> Option<&'static CodeExec> {
    static R: OnceLock<Option<CodeExec>> = OnceLock::new();
    build(&R, "security", 2)
}

fn build(
    cell: &'static OnceLock<Option<CodeExec>>,
    sub: &str,
    parallelism: usize,
) -> Option<&'static CodeExec> {
    let py = python()?;
    cell.get_or_init(|| {
        let dir = tmp_root().join(sub);
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let params = serde_json::json!({
            "python": py,
            "test_timeout_s": 1,
            "wall_timeout_s": 12,
            "parallelism": parallelism,
            "tmp_dir": dir,
        });
        let config = Config::parse(&params.to_string()).expect("params");
        Some(CodeExec::new(config).expect("the reward loads"))
    })
    .as_ref()
}
