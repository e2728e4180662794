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

/// A centralized comparator of an iterative round (`comparator_generation_mode: centralized`
/// with a local policy) against `MADPOIterTrainer`'s own methods: the tagged prompt of a row's
/// agent prompts (the templates of the shipped centralized scenario, CoMLRL's formatters in the
/// fixture), and a policy's answers split into each agent's candidates, in answer order.
#[test]
fn a_centralized_comparators_prompt_and_split_match_comlrl() {
    use comlrl::train::rollout::centralized::split_by_agent;
    let meta = json(&fixtures().join("preference/centralized_protocol.json"));
    let c = &meta["comparator"];
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/story_len_ratio_centralized.yaml");
    let s = comlrl_scenario::load(&path, &[]).unwrap();
    let row = comlrl_scenario::Row {
        prompt: c["item"]["prompt"].as_str().unwrap().into(),
        fields: Default::default(),
    };
    let formatted: Vec<String> = s.agents.iter().map(|a| a.template.render(&row)).collect();
    assert_eq!(formatted, strs(&c["agent_prompts"]));
    let refs: Vec<&str> = formatted.iter().map(String::as_str).collect();
    assert_eq!(build_prompt(&refs), c["prompt"].as_str().unwrap());
    let want: Vec<Vec<String>> = c["outputs"].as_array().unwrap().iter().map(strs).collect();
    assert_eq!(split_by_agent(&strs(&c["answers"]), formatted.len()), want);
}
