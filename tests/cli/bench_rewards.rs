//! `comlrl bench rewards` on real joint samples (`--samples-file`): the code_exec reward of the
//! HumanEval scenario measured at two parallelisms, with and without its sandbox's layers
//! (`--bare`), reported per core and per sample. Skips without a `python3`.
use crate::common;

#[test]
fn bench_rewards_measures_code_exec_per_core_and_its_sandbox_cost() {
    if common::python_with(&["json"]).is_none() {
        return;
    }
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let plugin = comlrl_testutil::plugin("comlrl_code_exec");
    let tmp = tempfile::tempdir().unwrap();
    let scenario = std::fs::read_to_string(root.join("scenarios/humaneval_coop_tiny.yaml"))
        .unwrap()
        .replace(
            "../target/release/comlrl_code_exec",
            &plugin.display().to_string(),
        )
        .replace(
            "../data/humaneval",
            &root.join("data/humaneval").display().to_string(),
        )
        .replace(
            "../models/tiny-story",
            &root.join("models/tiny-story").display().to_string(),
        );
    let scenario_path = tmp.path().join("humaneval_coop_tiny.yaml");
    std::fs::write(&scenario_path, scenario).unwrap();
    let samples = tmp.path().join("samples.jsonl");
    let sample = |main: &str| {
        serde_json::json!({
            "prompt": "def f(x):\n",
            "fields": {"test": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "f"},
            "completions": ["def aux(x):\n    return x + 1", main],
        })
        .to_string()
    };
    let lines = [
        sample("def f(x):\n    y = aux(x)\n    return y * 1"),
        sample("def f(x):\n    return 0"),
    ];
    std::fs::write(&samples, lines.join("\n") + "\n").unwrap();
    let out = tmp.path().join("rewards.json");
    let scenario_arg = scenario_path.display().to_string();
    let samples_arg = samples.display().to_string();
    let out_arg = out.display().to_string();
    let o = common::comlrl(&[
        "bench",
        "rewards",
        &scenario_arg,
        "--samples-file",
        &samples_arg,
        "--samples",
        "4",
        "--parallelism",
        "1,2",
        "--bare",
        "--out",
        &out_arg,
    ])
    .output();
    assert!(o.ok, "{}", o.stderr);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let rows = report["rewards"].as_array().expect("rewards");
    // Two terms (level, pass_all) at two parallelisms.
    assert_eq!(rows.len(), 4, "{report}");
    for r in rows {
        assert_eq!(r["result"]["samples"], 4, "{r}");
        let p = r["parallelism"].as_f64().expect("parallelism");
        let sps = r["result"]["samples_per_s"].as_f64().expect("samples/s");
        let per_core = r["samples_per_s_per_core"].as_f64().expect("per core");
        assert!(sps > 0.0 && (per_core * p - sps).abs() < 1e-6 * sps, "{r}");
        let ms = r["ms_per_sample"].as_f64().expect("ms per sample");
        assert!((ms - 1000.0 * p / sps).abs() < 1e-6 * ms, "{r}");
        assert!(
            r["bare"]["samples_per_s"].as_f64().is_some_and(|b| b > 0.0),
            "{r}"
        );
        assert!(r["sandbox_overhead_ms_per_sample"].is_number(), "{r}");
    }
    assert!(report["machine"].is_object(), "{report}");

    // Joint samples that do not fit the scenario's agents are a clear error naming the file.
    std::fs::write(
        &samples,
        "{\"prompt\": \"p\", \"completions\": [\"only one\"]}\n",
    )
    .unwrap();
    let o = common::comlrl(&[
        "bench",
        "rewards",
        &scenario_arg,
        "--samples-file",
        &samples_arg,
    ])
    .output();
    assert!(
        !o.ok && o.stderr.contains("samples.jsonl") && o.stderr.contains("1 completions"),
        "{}",
        o.stderr
    );
    std::fs::write(&samples, "{\"prompt\": 3}\n").unwrap();
    let o = common::comlrl(&[
        "bench",
        "rewards",
        &scenario_arg,
        "--samples-file",
        &samples_arg,
    ])
    .output();
    assert!(
        !o.ok && o.stderr.contains("samples.jsonl:1") && o.stderr.contains("`prompt`"),
        "{}",
        o.stderr
    );
}
