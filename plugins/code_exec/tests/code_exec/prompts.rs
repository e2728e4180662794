//! The agents' prompts: the Rust port of the environment repository's formatters, and the
//! scenario's templates over the split files, both string-equal to the prompts recorded from the
//! Python formatters (tests/fixtures/humaneval/prompts.jsonl.gz) on all 164 problems; the split
//! files are the configuration's splits of the vendored data plus `params`.
use crate::common::{self, s};
use comlrl_code_exec::prompts;

#[test]
fn the_formatter_port_gives_the_recorded_prompts_for_all_164_problems() {
    let rows = common::humaneval();
    let recorded = common::jsonl_gz("tests/fixtures/humaneval/prompts.jsonl.gz");
    assert_eq!(recorded.len(), 164);
    for (row, want) in rows.iter().zip(&recorded) {
        assert_eq!(s(row, "task_id"), s(want, "task_id"));
        let (p, e) = (s(row, "prompt"), s(row, "entry_point"));
        assert_eq!(
            prompts::aux_prompt(p, e),
            s(want, "aux"),
            "{}",
            s(row, "task_id")
        );
        assert_eq!(
            prompts::main_prompt(p, e),
            s(want, "main"),
            "{}",
            s(row, "task_id")
        );
    }
}

#[test]
fn the_split_files_are_the_configs_splits_plus_params() {
    let rows = common::humaneval();
    for (file, range) in [
        ("data/humaneval/train.jsonl", 33..163),
        ("data/humaneval/eval.jsonl", 0..32),
    ] {
        let got = common::jsonl(file);
        let want: Vec<serde_json::Value> = rows[range]
            .iter()
            .map(|r| {
                let mut r = r.clone();
                let params =
                    prompts::params_field(s(&r, "prompt"), s(&r, "entry_point")).expect("params");
                r["params"] = params.into();
                r
            })
            .collect();
        assert_eq!(
            got, want,
            "{file} differs from the vendored data; rerun scripts/humaneval_splits.py"
        );
    }
}

#[test]
fn the_scenarios_templates_render_the_recorded_prompts() {
    let rows = common::humaneval();
    let recorded = common::jsonl_gz("tests/fixtures/humaneval/prompts.jsonl.gz");
    let opts = comlrl_scenario::LoadOptions {
        require_reward_files: false,
        ..Default::default()
    };
    for name in [
        "humaneval_coop.yaml",
        "humaneval_coop_tiny.yaml",
        "humaneval_coop_2turn_tiny.yaml",
    ] {
        let path = common::root().join("scenarios").join(name);
        let sc =
            comlrl_scenario::load_with(&path, &[], &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(sc.agents.len(), 2, "{name}");
        // Every one of the 164 problems, as a row of the split files would hold it.
        for (row, want) in rows.iter().zip(&recorded) {
            let mut fields = row.as_object().expect("object").clone();
            let prompt = fields.remove("prompt").expect("prompt");
            let prompt = prompt.as_str().expect("string").to_string();
            let params = prompts::params_field(&prompt, s(row, "entry_point")).expect("params");
            fields.insert("params".into(), params.into());
            let r = comlrl_scenario::Row { prompt, fields };
            let id = s(row, "task_id");
            assert_eq!(
                sc.agents[0].template.render(&r),
                s(want, "aux"),
                "{name}, {id}, agent 0"
            );
            assert_eq!(
                sc.agents[1].template.render(&r),
                s(want, "main"),
                "{name}, {id}, agent 1"
            );
        }
        // The split files the scenario reads: the configuration's splits.
        let train: Vec<&str> = sc
            .dataset
            .train
            .rows
            .iter()
            .map(|r| r.fields["task_id"].as_str().unwrap_or(""))
            .collect();
        let want: Vec<&str> = rows[33..163].iter().map(|r| s(r, "task_id")).collect();
        assert_eq!(train, want, "{name}: training rows");
        let eval = sc.dataset.eval.as_ref().expect("an eval set");
        let got: Vec<&str> = eval
            .rows
            .iter()
            .map(|r| r.fields["task_id"].as_str().unwrap_or(""))
            .collect();
        let want: Vec<&str> = rows[..32].iter().map(|r| s(r, "task_id")).collect();
        assert_eq!(got, want, "{name}: eval rows");
    }
}
