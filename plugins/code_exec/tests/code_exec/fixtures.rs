//! The plugin's reward equals `execution_reward_aux` at the pinned commit, bit for bit, on the
//! cases `scripts/fixtures/record_code_reward_cases.py` recorded from the Python original
//! (tests/fixtures/humaneval/reward_cases.jsonl.gz).
//!
//! The reference ran with its 10 s per-test timeout; these runs use 1 s. The cases either finish
//! in milliseconds or loop forever, so the same tests time out either way.
use crate::common::{self, s};
use comlrl_code_exec::{Item, TestStatus};
use std::collections::HashMap;

#[test]
fn reward_equals_the_python_reference_on_every_recorded_case() {
    let Some(reward) = common::reward() else {
        return;
    };
    let rows = common::humaneval();
    let by_id: HashMap<&str, &serde_json::Value> =
        rows.iter().map(|r| (s(r, "task_id"), r)).collect();
    let cases = common::jsonl_gz("tests/fixtures/humaneval/reward_cases.jsonl.gz");
    assert!(cases.len() >= 200, "only {} recorded cases", cases.len());
    let items: Vec<Item<'_>> = cases
        .iter()
        .map(|c| {
            let problem = c["task_id"].as_str().map_or(c, |id| by_id[id]);
            Item {
                prompt: s(problem, "prompt"),
                aux: s(c, "aux"),
                main: s(c, "main"),
                test: s(problem, "test"),
                entry_point: s(problem, "entry_point"),
            }
        })
        .collect();
    let outcomes = reward.evaluate_batch(&items);
    let mut wrong = Vec::new();
    let mut seen = HashMap::<&str, usize>::new();
    for (c, o) in cases.iter().zip(&outcomes) {
        let id = s(c, "id");
        let want = f64::from_bits(c["reward_bits"].as_u64().expect("reward_bits"));
        match o {
            Ok(o) if o.reward.to_bits() == want.to_bits() => {
                let mut mark = |k: &'static str, on: bool| {
                    if on {
                        *seen.entry(k).or_default() += 1;
                    }
                };
                mark("aux missing", !o.aux_defined);
                mark("main missing", !o.main_defined);
                mark("syntax error", o.syntax_ok == Some(false));
                mark("all tests passed", o.all_passed());
                mark(
                    "some tests failed",
                    o.statuses.contains(&TestStatus::Failed),
                );
                mark("timeout", o.statuses.contains(&TestStatus::TimedOut));
                mark(
                    "tests stopped after timeouts",
                    o.statuses.contains(&TestStatus::TimedOut)
                        && o.statuses.contains(&TestStatus::NotRun),
                );
                mark(
                    "test reward dropped after a pass",
                    !o.test_reward_added && o.statuses.contains(&TestStatus::Passed),
                );
                mark("uses aux bonus", o.uses_aux);
                mark("not-a-wrapper bonus", o.uses_aux && !o.wrapper);
                mark("wrapper", o.wrapper);
                mark("ignored aux penalty", o.ignored_aux);
                mark(
                    "no tests extracted",
                    o.syntax_ok == Some(true) && o.tests.is_empty(),
                );
            }
            Ok(o) => wrong.push(format!("{id}: {} (want {want}); {o:?}", o.reward)),
            Err(e) => wrong.push(format!("{id}: error {e}")),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases differ:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
    for k in [
        "aux missing",
        "main missing",
        "syntax error",
        "all tests passed",
        "some tests failed",
        "timeout",
        "tests stopped after timeouts",
        "test reward dropped after a pass",
        "uses aux bonus",
        "not-a-wrapper bonus",
        "wrapper",
        "ignored aux penalty",
        "no tests extracted",
    ] {
        assert!(
            seen.get(k).is_some_and(|&n| n > 0),
            "no recorded case covers `{k}`: {seen:?}"
        );
    }
}
