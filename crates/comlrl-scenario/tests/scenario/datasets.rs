//! Dataset files (JSONL, JSON, CSV) with a prompt-field mapping and extra fields, eval sets, and
//! prompt templates filled from row fields.
use crate::common;

use comlrl_scenario::{DataFormat, DataSource, ErrorKind};
use common::{check, Fixture, BASE};

fn with_data(path_line: &str) -> String {
    BASE.replace("  prompts: [\"a\", \"b\"]\n", path_line)
}

fn with_template(text: &str, template: &str) -> String {
    text.replace(
        "  model: builtin:tiny\n",
        &format!("  model: builtin:tiny\n  template: {template:?}\n"),
    )
}

const JSONL: &str = "{\"question\": \"2+2?\", \"answer\": 4, \"level\": \"easy\"}\n\n{\"question\": \"3*3?\", \"answer\": 9, \"level\": \"hard\"}\n";

#[test]
fn jsonl_with_field_mapping_and_extra_fields() {
    let f = Fixture::new();
    let path = f.write("train.jsonl", JSONL);
    let s = f.ok(
        &with_data("  path: train.jsonl\n  prompt_field: question\n"),
        &[],
    );
    let ds = &s.dataset.train;
    assert_eq!(
        ds.source,
        DataSource::File {
            path,
            format: DataFormat::Jsonl
        }
    );
    assert_eq!(ds.prompt_field, "question");
    assert_eq!(ds.rows.len(), 2);
    assert_eq!(ds.rows[0].prompt, "2+2?");
    assert_eq!(ds.rows[1].fields["answer"], 9);
    assert_eq!(ds.rows[1].fields["level"], "hard");
    assert!(!ds.rows[0].fields.contains_key("question"));
}

#[test]
fn csv_and_json_files() {
    let f = Fixture::new();
    f.write(
        "train.csv",
        "id,text,label\n1,\"Hello, world\",pos\n2,Bye,neg\n",
    );
    let s = f.ok(&with_data("  path: train.csv\n  prompt_field: text\n"), &[]);
    let rows = &s.dataset.train.rows;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].prompt, "Hello, world");
    assert_eq!(rows[0].fields["id"], "1");
    assert_eq!(rows[1].fields["label"], "neg");
    f.write("train.json", "[{\"prompt\": \"p1\", \"k\": true}]");
    let s = f.ok(&with_data("  path: train.json\n"), &[]);
    assert_eq!(s.dataset.train.rows[0].prompt, "p1");
    f.write("rows.txt", "{\"prompt\": \"p\"}\n");
    let s = f.ok(&with_data("  path: rows.txt\n  format: jsonl\n"), &[]);
    assert_eq!(s.dataset.train.rows.len(), 1);
}

#[test]
fn eval_set_and_template_substitution() {
    let f = Fixture::new();
    f.write("train.jsonl", JSONL);
    f.write(
        "eval.jsonl",
        "{\"question\": \"1+1?\", \"answer\": 2, \"level\": \"easy\"}\n",
    );
    let text = with_template(
        &with_data("  path: train.jsonl\n  prompt_field: question\n  eval: {path: eval.jsonl, prompt_field: question}\n"),
        "Q ({level}): {prompt} {{answer: {answer}}}",
    );
    let s = f.ok(&text, &[]);
    let eval = s.dataset.eval.as_ref().expect("eval set");
    assert_eq!(eval.rows[0].prompt, "1+1?");
    let t = &s.agents[1].template;
    assert_eq!(
        t.render(&s.dataset.train.rows[0]),
        "Q (easy): 2+2? {answer: 4}"
    );
    assert_eq!(t.render(&eval.rows[0]), "Q (easy): 1+1? {answer: 2}");
}

#[test]
fn unknown_placeholder_is_an_error_naming_it() {
    let f = Fixture::new();
    f.write("train.jsonl", JSONL);
    let data = with_data("  path: train.jsonl\n  prompt_field: question\n");
    let (_, d) = f.one(&with_template(&data, "{prompt} ({levl})"), &[]);
    check(
        &d,
        ErrorKind::Template,
        "agents.template",
        7,
        3,
        &["unknown placeholder `{levl}`", "did you mean `{level}`?"],
    );
    let (_, d) = f.one(&with_template(&data, "{question}"), &[]);
    check(
        &d,
        ErrorKind::Template,
        "agents.template",
        7,
        3,
        &["prompt column", "`{prompt}`"],
    );
    let (_, d) = f.one(&with_template(BASE, "{prompt"), &[]);
    check(
        &d,
        ErrorKind::Template,
        "agents.template",
        6,
        3,
        &["unclosed"],
    );
    // A field present in only some rows.
    f.write(
        "mixed.jsonl",
        "{\"prompt\": \"a\", \"x\": 1}\n{\"prompt\": \"b\"}\n",
    );
    let (_, d) = f.one(
        &with_template(&with_data("  path: mixed.jsonl\n"), "{x}"),
        &[],
    );
    check(&d, ErrorKind::Template, "agents.template", 6, 3, &["row 2"]);
}

#[test]
fn bad_rows_name_file_and_line() {
    let f = Fixture::new();
    f.write("bad.jsonl", "{\"question\": \"q\"}\n{\"q\": \"x\"}\n");
    let (_, d) = f.one(
        &with_data("  path: bad.jsonl\n  prompt_field: question\n"),
        &[],
    );
    check(
        &d,
        ErrorKind::Dataset,
        "dataset.path",
        2,
        3,
        &["bad.jsonl:2", "no `question` field"],
    );
    f.write("bad.csv", "id,txt\n1,x\n");
    let (_, d) = f.one(&with_data("  path: bad.csv\n  prompt_field: text\n"), &[]);
    check(
        &d,
        ErrorKind::Dataset,
        "dataset.path",
        2,
        3,
        &["bad.csv:1", "prompt_field: txt"],
    );
    f.write("empty.jsonl", "\n\n");
    let (_, d) = f.one(&with_data("  path: empty.jsonl\n"), &[]);
    check(&d, ErrorKind::Dataset, "dataset.path", 2, 3, &["empty"]);
    f.write("data.xlsx", "");
    let (_, d) = f.one(&with_data("  path: data.xlsx\n"), &[]);
    check(
        &d,
        ErrorKind::InvalidValue,
        "dataset.path",
        2,
        3,
        &["format: jsonl | json | csv"],
    );
    let (_, d) = f.one(&with_data("  path: bad.jsonl\n  prompts: [x]\n"), &[]);
    check(
        &d,
        ErrorKind::InvalidValue,
        "dataset.path",
        2,
        3,
        &["both `prompts` and `path`"],
    );
}

/// Runs `f` on a thread and waits at most 10 s for it, so that a FIFO opened by mistake fails
/// the test instead of blocking it.
fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("finished within 10 s (a FIFO was opened?)")
}

/// A data path that is a FIFO or a device (directly or through a symlink) is refused by its
/// type, without being opened; one that is missing says so.
#[cfg(unix)]
#[test]
fn data_paths_that_are_not_regular_files() {
    let f = Fixture::new();
    let dir = f.dir.path().to_path_buf();
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.jsonl")).expect("symlink");
    let (_, d) = f.one(&with_data("  path: zero.jsonl\n"), &[]);
    check(
        &d,
        ErrorKind::Dataset,
        "dataset.path",
        2,
        3,
        &[
            "zero.jsonl is a symlink to /dev/zero, which is a character device, not a regular file",
            "pipes and devices are not read",
        ],
    );
    let (_, d) = f.one(&with_data("  path: /dev/zero\n  format: json\n"), &[]);
    check(
        &d,
        ErrorKind::Dataset,
        "dataset.path",
        2,
        3,
        &["/dev/zero is a character device, not a regular file"],
    );
    std::os::unix::fs::symlink(dir.join("gone.jsonl"), dir.join("dangling.jsonl"))
        .expect("symlink");
    let (_, d) = f.one(&with_data("  path: dangling.jsonl\n"), &[]);
    check(
        &d,
        ErrorKind::MissingFile,
        "dataset.path",
        2,
        3,
        &["gone.jsonl, which does not exist"],
    );
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join("pipe.jsonl"))
        .status();
    if !made.is_ok_and(|s| s.success()) {
        comlrl_testutil::skip("the FIFO case: `mkfifo` is not available");
        return;
    }
    for (path, format) in [("pipe.jsonl", "jsonl"), ("pipe.jsonl", "parquet")] {
        let text = with_data(&format!("  path: {path}\n  format: {format}\n"));
        let origin = f.origin();
        let e = within_10s(move || {
            comlrl_scenario::load_str(&text, &origin, &[])
                .unwrap_err()
                .to_string()
        });
        assert!(
            e.contains("pipe.jsonl is a FIFO (named pipe), not a regular file"),
            "{e}"
        );
    }
    // The scenario file itself.
    let fifo = dir.join("s.fifo.yaml");
    std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    let e = within_10s(move || comlrl_scenario::load(&fifo, &[]).unwrap_err().to_string());
    assert!(
        e.contains("cannot read scenario file") && e.contains("is a FIFO (named pipe)"),
        "{e}"
    );
}

/// One JSONL line or CSV record over the row cap is refused with its file and line, without
/// reading the rest of it.
#[test]
fn rows_over_the_cap_name_file_and_line() {
    let cap = comlrl_scenario::files::MAX_ROW_BYTES as usize;
    let f = Fixture::new();
    let long = "x".repeat(cap);
    // Exactly at the cap (with a CRLF ending) is a row like any other.
    let at_cap = format!("{{\"prompt\": \"{}\"}}", &long[..cap - 14]);
    assert_eq!(at_cap.len(), cap);
    f.write("ok.jsonl", &format!("{{\"prompt\": \"a\"}}\n{at_cap}\r\n"));
    let s = f.ok(&with_data("  path: ok.jsonl\n"), &[]);
    assert_eq!(s.dataset.train.rows[1].prompt.len(), cap - 14);
    f.write(
        "big.jsonl",
        &format!("{{\"prompt\": \"a\"}}\n{{\"prompt\": \"{long}\"}}\n{{\"prompt\": \"b\"}}\n"),
    );
    let (_, d) = f.one(&with_data("  path: big.jsonl\n"), &[]);
    check(
        &d,
        ErrorKind::Dataset,
        "dataset.path",
        2,
        3,
        &["big.jsonl:2: the line is longer than the 16 MiB a row may hold"],
    );
    f.write("big.csv", &format!("prompt,n\na,1\n\"{long}\",2\n"));
    let (_, d) = f.one(&with_data("  path: big.csv\n"), &[]);
    check(
        &d,
        ErrorKind::Dataset,
        "dataset.path",
        2,
        3,
        &["big.csv:3: the record is longer than the 16 MiB"],
    );
    std::fs::write(
        f.dir.path().join("latin1.jsonl"),
        b"{\"prompt\": \"a\"}\n{\"prompt\": \"\xe9\"}\n",
    )
    .expect("write");
    let (_, d) = f.one(&with_data("  path: latin1.jsonl\n"), &[]);
    check(
        &d,
        ErrorKind::Dataset,
        "dataset.path",
        2,
        3,
        &["latin1.jsonl:2: not UTF-8 text"],
    );
    // A file over the size cap is refused from its size (a sparse file: nothing is written).
    let huge = std::fs::File::create(f.dir.path().join("huge.json")).expect("create");
    huge.set_len(comlrl_scenario::files::MAX_DATA_FILE_BYTES + 1)
        .expect("set_len");
    let (_, d) = f.one(&with_data("  path: huge.json\n"), &[]);
    check(
        &d,
        ErrorKind::Dataset,
        "dataset.path",
        2,
        3,
        &[
            "huge.json: it is 1073741825 bytes, more than the 1 GiB this reader accepts",
            "convert it to parquet",
        ],
    );
}
