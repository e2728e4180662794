//! Dataset files (JSONL, JSON, CSV) with a prompt-field mapping and extra fields, eval sets, and
//! prompt templates filled from row fields.
mod common;

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
