//! Parquet dataset files and `dataset.hub` datasets read from a fake Hugging Face cache (parquet
//! files written here with the parquet crate's writer): layouts, slices, percent slices, nested
//! fields by dotted path, the download hook, and the errors.
use crate::common;

use comlrl_scenario::{
    load_str_with, DataFormat, DataSource, ErrorKind, HubRequest, LoadOptions, Scenario,
    ScenarioError,
};
use common::{Fixture, BASE};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const SCHEMA: &str = "message schema {
  required binary prompt (UTF8);
  optional group meta {
    optional binary question (UTF8);
    optional int64 n;
  }
}";

/// Writes rows `(prompt, meta.question, meta.n)` for `ids` as `p{i}`, `q{i}`, `i`.
fn write_parquet(path: &Path, ids: std::ops::Range<i64>) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let schema = Arc::new(parse_message_type(SCHEMA).expect("schema"));
    let props = Arc::new(WriterProperties::builder().build());
    let file = std::fs::File::create(path).expect("create");
    let mut w = SerializedFileWriter::new(file, schema, props).expect("writer");
    let mut rg = w.next_row_group().expect("row group");
    let n = ids.clone().count();
    let text = |prefix: &str| -> Vec<ByteArray> {
        ids.clone()
            .map(|i| ByteArray::from(format!("{prefix}{i}").as_str()))
            .collect()
    };
    let mut col = 0;
    while let Some(mut c) = rg.next_column().expect("column") {
        match col {
            0 => {
                c.typed::<ByteArrayType>()
                    .write_batch(&text("p"), None, None)
                    .expect("write");
            }
            1 => {
                c.typed::<ByteArrayType>()
                    .write_batch(&text("q"), Some(&vec![2; n]), None)
                    .expect("write");
            }
            _ => {
                let v: Vec<i64> = ids.clone().collect();
                c.typed::<Int64Type>()
                    .write_batch(&v, Some(&vec![2; n]), None)
                    .expect("write");
            }
        }
        c.close().expect("close column");
        col += 1;
    }
    rg.close().expect("close row group");
    w.close().expect("close file");
}

/// A fake cache: `org/data` with `data/train-*` (10 rows over two files) and `data/test-*`
/// (5 rows) on main, and config `cfg` (4 rows) in the refs/convert/parquet layout.
fn fake_cache(root: &Path) {
    let repo = root.join("datasets--org--data");
    std::fs::create_dir_all(repo.join("refs/refs/convert")).expect("mkdir");
    std::fs::write(repo.join("refs/main"), "aaa111").expect("ref");
    std::fs::write(repo.join("refs/refs/convert/parquet"), "bbb222").expect("ref");
    let main = repo.join("snapshots/aaa111/data");
    write_parquet(&main.join("train-00000-of-00002.parquet"), 0..6);
    write_parquet(&main.join("train-00001-of-00002.parquet"), 6..10);
    write_parquet(&main.join("test-00000-of-00001.parquet"), 100..105);
    write_parquet(
        &repo.join("snapshots/bbb222/cfg/train/0000.parquet"),
        200..204,
    );
}

fn with_data(lines: &str) -> String {
    BASE.replace("  prompts: [\"a\", \"b\"]\n", lines)
}

fn opts(root: &Path) -> LoadOptions {
    LoadOptions {
        hub_cache: Some(root.to_path_buf()),
        ..LoadOptions::default()
    }
}

fn load(f: &Fixture, text: &str, o: &LoadOptions) -> Result<Scenario, ScenarioError> {
    load_str_with(text, &f.origin(), &[], o)
}

fn prompts(rows: &[comlrl_scenario::Row]) -> Vec<String> {
    rows.iter().map(|r| r.prompt.clone()).collect()
}

fn ids(prefix: &str, r: std::ops::Range<i64>) -> Vec<String> {
    r.map(|i| format!("{prefix}{i}")).collect()
}

#[test]
fn parquet_file_with_nested_prompt_field() {
    let f = Fixture::new();
    write_parquet(&f.dir.path().join("train.parquet"), 0..3);
    let text = with_data("  path: train.parquet\n  prompt_field: meta.question\n").replace(
        "  model: builtin:tiny\n",
        "  model: builtin:tiny\n  template: \"{prompt} ({meta.n}, {prompt_col})\"\n",
    );
    // `prompt_col` does not exist: the template check names the dotted fields it knows.
    let e = load(&f, &text, &LoadOptions::default()).unwrap_err();
    assert!(e.to_string().contains("prompt_col"), "{e}");
    let text = text.replace(", {prompt_col}", ", {prompt}");
    let s = load(&f, &text, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let ds = &s.dataset.train;
    assert_eq!(prompts(&ds.rows), ids("q", 0..3));
    assert!(matches!(
        &ds.source,
        DataSource::File {
            format: DataFormat::Parquet,
            ..
        }
    ));
    assert_eq!(ds.rows[1].fields["prompt"], "p1");
    assert_eq!(ds.rows[1].field("meta.n"), Some(&serde_json::json!(1)));
    assert_eq!(s.agents[0].template.render(&ds.rows[2]), "q2 (2, q2)");
}

#[test]
fn parquet_errors_name_file_row_and_column() {
    let f = Fixture::new();
    write_parquet(&f.dir.path().join("train.parquet"), 0..3);
    let e = load(
        &f,
        &with_data("  path: train.parquet\n  prompt_field: meta.n\n"),
        &LoadOptions::default(),
    )
    .unwrap_err();
    let d = &e.diagnostics()[0];
    assert_eq!(d.kind, ErrorKind::Dataset);
    assert!(
        d.message
            .contains("train.parquet: row 0: field `meta.n` must be a string, found 0"),
        "{e}"
    );
    let e = load(
        &f,
        &with_data("  path: train.parquet\n  prompt_field: question\n"),
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("row 0: no `question` field (fields: meta, prompt)"),
        "{e}"
    );
    f.write("bad.parquet", "not parquet");
    let e = load(
        &f,
        &with_data("  path: bad.parquet\n"),
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("bad.parquet: not a readable parquet file"),
        "{e}"
    );
}

#[test]
fn hub_splits_and_slices_from_the_cache() {
    let f = Fixture::new();
    let cache = tempfile::tempdir().expect("tempdir");
    fake_cache(cache.path());
    let o = opts(cache.path());
    // The whole split, across two files in name order.
    let s = load(&f, &with_data("  hub: org/data\n"), &o).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(prompts(&s.dataset.train.rows), ids("p", 0..10));
    match &s.dataset.train.source {
        DataSource::Hub {
            repo,
            config,
            split,
            files,
        } => {
            assert_eq!((repo.as_str(), config.as_str()), ("org/data", "default"));
            assert_eq!(split, "train");
            assert_eq!(files.len(), 2);
            assert!(files[0].ends_with("snapshots/aaa111/data/train-00000-of-00002.parquet"));
        }
        other => panic!("{other:?}"),
    }
    let cases: [(&str, Vec<String>); 4] = [
        ("train[:4]", ids("p", 0..4)),
        ("train[3:8]", ids("p", 3..8)),
        ("train[-2:]", ids("p", 8..10)),
        ("train[10%:45%]", ids("p", 1..4)), // 1.0 .. 4.5 → 4 (half to even)
    ];
    for (split, want) in cases {
        let text = with_data(&format!("  hub: org/data\n  split: \"{split}\"\n"));
        let s = load(&f, &text, &o).unwrap_or_else(|e| panic!("{split}: {e}"));
        assert_eq!(prompts(&s.dataset.train.rows), want, "{split}");
    }
    // Another config in the refs/convert/parquet layout; an eval split with its own slice.
    let text = with_data(
        "  hub: org/data\n  config: cfg\n  prompt_field: meta.question\n  eval: {hub: org/data, split: \"test[20%:60%]\"}\n",
    );
    let s = load(&f, &text, &o).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(prompts(&s.dataset.train.rows), ids("q", 200..204));
    let eval = s.dataset.eval.as_ref().expect("eval");
    assert_eq!(prompts(&eval.rows), ids("p", 101..103));
    // The resolved scenario names the dataset and reloads to the same rows.
    let yaml = s.to_yaml();
    assert!(
        yaml.contains("hub: org/data") && yaml.contains("config: cfg"),
        "{yaml}"
    );
    let again = load_str_with(&yaml, &f.origin(), &[], &o).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.dataset, s.dataset);
}

#[test]
fn hub_errors() {
    let f = Fixture::new();
    let cache = tempfile::tempdir().expect("tempdir");
    fake_cache(cache.path());
    let o = opts(cache.path());
    let err = |text: &str| {
        let e = load(&f, &with_data(text), &o).unwrap_err();
        (e.to_string(), e.diagnostics()[0].clone())
    };
    let (msg, d) = err("  hub: org/missing\n");
    assert_eq!(
        (d.kind, d.key.as_str()),
        (ErrorKind::MissingFile, "dataset.hub")
    );
    let looked = cache.path().join("datasets--org--missing");
    assert!(msg.contains(&looked.display().to_string()), "{msg}");
    assert!(
        msg.contains("huggingface-cli download --repo-type dataset org/missing"),
        "{msg}"
    );
    let (msg, d) = err("  hub: org/data\n  split: validation\n");
    assert_eq!(d.key, "dataset.hub");
    assert!(
        msg.contains("no parquet file of config `default`, split `validation`"),
        "{msg}"
    );
    let (msg, d) = err("  hub: org/data\n  split: \"train[:11]\"\n");
    assert_eq!(
        (d.kind, d.key.as_str()),
        (ErrorKind::InvalidValue, "dataset.split")
    );
    assert!(msg.contains("out of range: the split has 10 rows"), "{msg}");
    let (msg, _) = err("  hub: org/data\n  split: \"train[1:2%]\"\n");
    assert!(
        msg.contains("both bounds must be rows or both percentages"),
        "{msg}"
    );
    let (msg, d) = err("  hub: org/data\n  split: \"train[5:5]\"\n");
    assert_eq!(
        (d.kind, d.key.as_str()),
        (ErrorKind::Dataset, "dataset.split")
    );
    assert!(msg.contains("the dataset is empty"), "{msg}");
    let (msg, _) = err("  hub: org/data\n  path: x.jsonl\n");
    assert!(msg.contains("both `path` and `hub` are set"), "{msg}");
    let (msg, _) = err("  hub: not-a-repo\n");
    assert!(msg.contains("not a Hub dataset id"), "{msg}");
    let (msg, _) = err("  hub: org/data\n  eval: {hub: org/data}\n");
    assert!(
        msg.contains("an eval set from the Hub needs a `split`"),
        "{msg}"
    );
    let (msg, _) = err("  hub: org/data\n  prompt_field: meta.nope\n");
    assert!(msg.contains("row 0: no `meta.nope` field"), "{msg}");
    // Keys that only apply to another source are warnings.
    let s = load(&f, &with_data("  prompts: [a]\n  split: train\n"), &o).expect("loads");
    assert!(
        s.warnings.iter().any(|w| w.contains("dataset.split")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn hub_ids_follow_the_hubs_rules() {
    let f = Fixture::new();
    let cache = tempfile::tempdir().expect("tempdir");
    fake_cache(cache.path());
    let o = opts(cache.path());
    for (id, why) in [
        ("../..", "starts or ends with `-` or `.`"),
        ("org/..", "starts or ends with `-` or `.`"),
        ("-org/data", "starts or ends with `-` or `.`"),
        ("org/da..ta", "holds `--` or `..`"),
        ("org/da--ta", "holds `--` or `..`"),
        ("org/data.git", "ends in `.git`"),
        ("org/da ta", "only letters, digits"),
        ("org/dätä", "only letters, digits"),
        ("org/a/b", "one `/`"),
        ("/data", "the owner is empty"),
        ("org/data@main", "only letters, digits"),
    ] {
        let e = load(&f, &with_data(&format!("  hub: \"{id}\"\n")), &o).unwrap_err();
        let msg = e.to_string();
        let d = &e.diagnostics()[0];
        assert_eq!(
            (d.kind, d.key.as_str()),
            (ErrorKind::InvalidValue, "dataset.hub")
        );
        assert!(
            msg.contains("not a Hub dataset id") && msg.contains(why),
            "{id}: {msg}"
        );
    }
    let long = format!("org/{}", "d".repeat(97));
    let e = load(&f, &with_data(&format!("  hub: {long}\n")), &o).unwrap_err();
    assert!(e.to_string().contains("more than 96"), "{e}");
    assert_eq!(
        comlrl_scenario::hub::repo_id_problem(&format!("o_1/{}", "d".repeat(96))),
        None
    );
    // A model's id, and its revision, go through the same rules.
    let model = |spec: &str| {
        let text = BASE.replace("model: builtin:tiny", &format!("model: \"{spec}\""));
        load(&f, &text, &o).map_err(|e| e.to_string())
    };
    assert!(model("Qwen/Qwen2.5-0.5B@refs/pr/1").is_ok());
    let e = model("Qwen/Qwen2.5-0.5B@../../x").unwrap_err();
    assert!(e.contains("starts with `.`"), "{e}");
    let e = model("Qwen--x/y").unwrap_err();
    assert!(e.contains("holds `--` or `..`"), "{e}");
}

/// A ref of the cache must name a snapshot folder: a tampered one (a path out of the cache, or
/// a link to a device) is an error naming the ref, and nothing outside the cache is read.
#[test]
fn tampered_refs_are_refused() {
    let f = Fixture::new();
    let cache = tempfile::tempdir().expect("tempdir");
    fake_cache(cache.path());
    // Rows the tampered ref would reach: a "snapshot" outside the repository's folder.
    write_parquet(&cache.path().join("outside/data/train-0.parquet"), 500..503);
    let o = opts(cache.path());
    let refs = cache.path().join("datasets--org--data/refs");
    let main = refs.join("main");
    for bad in ["../../outside", "/etc", "aaa111/../../../outside", ".."] {
        std::fs::write(&main, bad).expect("ref");
        let e = load(&f, &with_data("  hub: org/data\n"), &o).unwrap_err();
        let msg = e.to_string();
        let d = &e.diagnostics()[0];
        assert_eq!(
            (d.kind, d.key.as_str()),
            (ErrorKind::Dataset, "dataset.hub"),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("the Hub cache ref {}", main.display()))
                && msg.contains("not a commit hash"),
            "{bad}: {msg}"
        );
    }
    #[cfg(unix)]
    {
        std::fs::remove_file(&main).expect("rm");
        std::os::unix::fs::symlink("/dev/zero", &main).expect("symlink");
        let started = std::time::Instant::now();
        let msg = load(&f, &with_data("  hub: org/data\n"), &o)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("is a symlink to /dev/zero, which is a character device"),
            "{msg}"
        );
        assert!(started.elapsed().as_secs() < 5);
    }
    // A 40-hex commit (what huggingface_hub writes), with its newline, is followed.
    std::fs::remove_file(&main).expect("rm");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    std::fs::write(&main, format!("{commit}\n")).expect("ref");
    std::fs::rename(
        cache.path().join("datasets--org--data/snapshots/aaa111"),
        cache
            .path()
            .join(format!("datasets--org--data/snapshots/{commit}")),
    )
    .expect("rename");
    let s = load(&f, &with_data("  hub: org/data\n"), &o).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.dataset.train.rows.len(), 10);
}

#[test]
fn hub_download_hook_fills_the_cache() {
    let f = Fixture::new();
    let cache = tempfile::tempdir().expect("tempdir");
    let asked: Arc<Mutex<Vec<HubRequest>>> = Arc::default();
    let seen = asked.clone();
    let o = LoadOptions {
        hub_cache: Some(cache.path().to_path_buf()),
        hub_download: Some(Arc::new(move |req: &HubRequest, root: &Path| {
            seen.lock().expect("lock").push(req.clone());
            let snap: PathBuf = root.join("datasets--org--dl/snapshots/ccc");
            write_parquet(&snap.join("data/train-00000-of-00001.parquet"), 0..3);
            Ok(())
        })),
        ..LoadOptions::default()
    };
    let s = load(
        &f,
        &with_data("  hub: org/dl\n  split: \"train[1:]\"\n"),
        &o,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(prompts(&s.dataset.train.rows), ids("p", 1..3));
    let asked = asked.lock().expect("lock").clone();
    assert_eq!(
        asked,
        vec![HubRequest {
            repo: "org/dl".into(),
            config: "default".into(),
            split: "train".into()
        }]
    );
    // A failing download is reported with what was looked at.
    let o = LoadOptions {
        hub_cache: Some(cache.path().to_path_buf()),
        hub_download: Some(Arc::new(|_: &HubRequest, _: &Path| {
            Err("offline".to_string())
        })),
        ..LoadOptions::default()
    };
    let e = load(&f, &with_data("  hub: org/other\n"), &o).unwrap_err();
    assert!(e.to_string().contains("downloading failed: offline"), "{e}");
}
