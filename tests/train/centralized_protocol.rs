//! CoMLRL 1.4.3's centralized protocol against its own adapter
//! (`preference/centralized_protocol.json`, from `scripts/fixtures/make_centralized.py`): the one
//! prompt that asks a policy for every agent's output, and the split of an answer into the
//! agents' outputs (tags in other cases and with spaces, out of order, repeated, missing,
//! nested, unclosed, `agent_12` beside `agent_1`, none at all), exactly.
use crate::common::{fixtures, json};
use comlrl::train::rollout::centralized::{build_prompt, parse, split};

fn strs(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn prompts_and_splits_match_comlrl() {
    let meta = json(&fixtures().join("preference/centralized_protocol.json"));
    for case in meta["prompts"].as_array().unwrap() {
        let prompts = strs(&case["agent_prompts"]);
        let refs: Vec<&str> = prompts.iter().map(String::as_str).collect();
        assert_eq!(build_prompt(&refs), case["prompt"].as_str().unwrap());
    }
    let parses = meta["parses"].as_array().unwrap();
    assert!(parses.iter().any(|c| c["parse"].is_null()));
    for case in parses {
        let n = case["agents"].as_u64().unwrap() as usize;
        let c = case["completion"].as_str().unwrap();
        let want = (!case["parse"].is_null()).then(|| strs(&case["parse"]));
        assert_eq!(parse(c, n), want, "{n} agents: {c:?}");
        assert_eq!(split(c, n), strs(&case["split"]), "{n} agents: {c:?}");
    }
}
