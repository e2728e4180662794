//! The `level_feedback` transition writes the prompts the Python original writes, string for
//! string, on the cases `scripts/fixtures/record_feedback_cases.py` recorded from
//! `format_followup_prompts` at the ported commit (tests/fixtures/humaneval/feedback_cases.jsonl.gz):
//! every reward case with the tests cut to their first assert and with all of them, the aux
//! usages the misuse analysis tells apart, and histories.
//!
//! The original ran with its 10 s per-test timeout; these runs use 1 s (the timeout's text is the
//! same, and the cases either finish in milliseconds or loop forever).
use crate::common::{self, s};
use comlrl_code_exec::LevelFeedback;
use std::collections::HashMap;

/// One case's next prompts (or error), filled by a worker.
type Slot = std::sync::Mutex<Option<Result<Vec<String>, String>>>;

fn transition(py: &str, slice: i64, history: bool) -> LevelFeedback {
    let dir = common::tmp_root().join(format!("feedback-{slice}-{history}"));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let params = serde_json::json!({
        "python": py,
        "test_timeout_s": 1,
        "wall_timeout_s": 12,
        "tmp_dir": dir,
        "sandbox_slice": slice,
        "history": history,
    });
    LevelFeedback::from_params(&params.to_string()).expect("the transition loads")
}

#[test]
fn prompts_equal_the_python_originals_on_every_recorded_case() {
    let Some(py) = common::python() else {
        return;
    };
    let rows = common::humaneval();
    let by_id: HashMap<&str, &serde_json::Value> =
        rows.iter().map(|r| (s(r, "task_id"), r)).collect();
    let cases = common::jsonl_gz("tests/fixtures/humaneval/feedback_cases.jsonl.gz");
    assert!(cases.len() >= 400, "only {} recorded cases", cases.len());
    let key = |c: &serde_json::Value| {
        (
            c["sandbox_slice"].as_i64().expect("sandbox_slice"),
            c["history"].as_bool().unwrap_or(false),
        )
    };
    let mut transitions = HashMap::new();
    for c in &cases {
        let (slice, history) = key(c);
        transitions
            .entry((slice, history))
            .or_insert_with(|| transition(&py, slice, history));
    }
    let ctxs: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            let problem = c["task_id"].as_str().map_or(c, |id| by_id[id]);
            let none = serde_json::json!([]);
            serde_json::json!({
                "prompt": s(problem, "prompt"),
                "fields": {"test": s(problem, "test"), "entry_point": s(problem, "entry_point")},
                "turn": 1,
                "agent_count": 2,
                "completions": [s(c, "aux"), s(c, "main")],
                "prompt_history": c.get("prompt_history").unwrap_or(&none),
                "response_history": c.get("response_history").unwrap_or(&none),
            })
        })
        .collect();
    // The timeout cases sleep, so more cases than cores run at once.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<Slot> = cases.iter().map(|_| Slot::default()).collect();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(c) = cases.get(i) else { break };
                let r = transitions[&key(c)].next(&ctxs[i]);
                *results[i].lock().expect("lock") = Some(r);
            });
        }
    });
    let mut wrong = Vec::new();
    let mut lines = HashMap::<&str, usize>::new();
    for (c, r) in cases.iter().zip(results) {
        let id = s(c, "id");
        let got = r.into_inner().expect("lock").expect("every case ran");
        let got = match got {
            Ok(p) => p,
            Err(e) => {
                wrong.push(format!("{id}: error {e}"));
                continue;
            }
        };
        let want = [s(c, "aux_prompt"), s(c, "main_prompt")];
        for (agent, (g, w)) in got.iter().zip(want).enumerate() {
            if g != w {
                wrong.push(format!(
                    "{id} (agent {agent}):\n--- comlrl\n{g}\n--- original\n{w}"
                ));
            }
        }
        for (needle, what) in [
            ("- Syntax: ERROR", "syntax error"),
            ("SyntaxError at line", "syntax error position"),
            ("-> TimeoutException", "timeout"),
            ("-> AssertionError", "failed assert"),
            ("-> NameError", "name error"),
            ("- Tests: no test cases found", "no tests"),
            ("passed\n  Failed case", "partial pass"),
            (
                "Aux definition: MISSING (Aux function not defined)",
                "aux missing",
            ),
            ("missing return statement", "no return"),
            ("Aux usage: main does NOT call aux", "aux not called"),
            ("standalone call (not assigned)", "standalone aux call"),
            ("but never used", "aux result unused"),
            ("main calls aux and uses its result", "aux used"),
            ("thin wrapper over aux", "wrapper"),
            ("History: your previous main responses", "history"),
        ] {
            if want[1].contains(needle) || want[0].contains(needle) {
                *lines.entry(what).or_default() += 1;
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases differ:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n\n")
    );
    // The cases cover every line the prompts can hold.
    for what in [
        "syntax error",
        "syntax error position",
        "timeout",
        "failed assert",
        "name error",
        "no tests",
        "partial pass",
        "aux missing",
        "no return",
        "aux not called",
        "standalone aux call",
        "aux result unused",
        "aux used",
        "wrapper",
        "history",
    ] {
        assert!(
            lines.get(what).copied().unwrap_or(0) > 0,
            "no case shows {what}: {lines:?}"
        );
    }
}

#[test]
fn bad_params_and_contexts_are_clear_errors() {
    let Some(py) = common::python() else {
        return;
    };
    for (params, needle) in [
        (
            serde_json::json!({"sandbox_slice": "one"}),
            "params.sandbox_slice",
        ),
        (serde_json::json!({"history": 1}), "params.history"),
        (
            serde_json::json!({"max_error_chars": -1}),
            "params.max_error_chars",
        ),
        (serde_json::json!({"score": "level"}), "params.score"),
        (serde_json::json!({"unknown": 1}), "unknown param `unknown`"),
    ] {
        let mut p = params.clone();
        p["python"] = py.clone().into();
        let e = LevelFeedback::from_params(&p.to_string()).expect_err("refused");
        assert!(e.contains(needle), "{e}");
    }
    // A long exception text is cut where asked, and only there.
    let dir = common::tmp_root().join("feedback-cut");
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let cut = |n: usize| {
        let params = serde_json::json!({"python": py, "tmp_dir": dir, "max_error_chars": n});
        LevelFeedback::from_params(&params.to_string()).expect("loads")
    };
    let long = serde_json::json!({
        "prompt": "def f(x):\n",
        "fields": {"test": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "f"},
        "turn": 1,
        "agent_count": 2,
        "completions": ["def aux(x):\n    return x", "def f(x):\n    raise ValueError('é' * 5000)"],
        "prompt_history": [],
        "response_history": [],
    });
    let full = &cut(0).next(&long).expect("prompts")[1];
    assert!(
        full.contains(&format!("ValueError: {}\n", "é".repeat(5000))),
        "{full}"
    );
    let short = &cut(10).next(&long).expect("prompts")[1];
    assert!(
        short.contains(&format!("ValueError: {} …\n", "é".repeat(10))),
        "{short}"
    );
    assert!(short.len() < 1000, "{short}");
    let t = transition(&py, 1, false);
    let ctx = |agents: usize, fields: serde_json::Value| {
        serde_json::json!({
            "prompt": "def f(x):\n",
            "fields": fields,
            "turn": 1,
            "agent_count": agents,
            "completions": vec!["def f(x):\n    return x"; agents],
            "prompt_history": [],
            "response_history": [],
        })
    };
    let e = t
        .next(&ctx(3, serde_json::json!({"test": "", "entry_point": "f"})))
        .expect_err("three agents");
    assert!(e.contains("two agents"), "{e}");
    let e = t
        .next(&ctx(2, serde_json::json!({"entry_point": "f"})))
        .expect_err("no test field");
    assert!(e.contains("`test`"), "{e}");
}
