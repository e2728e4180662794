//! The Rhai script and the native plugin of the length-ratio reward agree with each other and
//! with the Rust reference, on a sweep of (len1, len2) with non-ASCII text.
use crate::common;

use comlrl_reward::reference::len_ratio;
use comlrl_reward::{JointSample, NativeReward, RewardFn, RhaiReward};
use serde_json::json;

fn sweep() -> Vec<(JointSample, String, String)> {
    let mut out = Vec::new();
    for len1 in 0..=60 {
        for len2 in 0..=200 {
            let (c1, c2) = (common::text(len1, len2), common::text(len2, len1 + 1));
            out.push((JointSample::new("p", vec![c1.clone(), c2.clone()]), c1, c2));
        }
    }
    out
}

fn check(params: serde_json::Value, min: f64, max: f64) {
    let cases = sweep();
    assert!(cases.len() > 10_000);
    assert!(
        cases
            .iter()
            .any(|(_, c1, _)| c1.len() != c1.chars().count()),
        "chars != bytes"
    );
    let batch: Vec<JointSample> = cases.iter().map(|(s, ..)| s.clone()).collect();
    let rhai = RhaiReward::load(common::len_ratio_script(), &params).expect("load script");
    let native =
        NativeReward::load(common::plugin("comlrl_len_ratio"), &params).expect("load plugin");
    let from_rhai = rhai.score(&batch).expect("rhai scores");
    let from_native = native.score(&batch).expect("native scores");
    let mut at_bounds = 0;
    for (i, (_, c1, c2)) in cases.iter().enumerate() {
        let want = len_ratio(c1, c2, min, max);
        let (l1, l2) = (c1.chars().count(), c2.chars().count());
        if l1 > 0 && (l2 as f64 == min * l1 as f64 || l2 as f64 == max * l1 as f64) {
            at_bounds += 1;
            assert_eq!(want, 1.0, "bounds are inclusive");
        }
        for (who, got) in [("rhai", from_rhai[i]), ("native", from_native[i])] {
            assert!(
                (f64::from(got) - want).abs() < 1e-6,
                "{who}: len1={l1} len2={l2}: got {got}, want {want}"
            );
        }
    }
    assert!(at_bounds > 20, "the sweep hits the exact bounds");
}

#[test]
fn default_params_agree() {
    check(json!({}), 2.0, 3.0);
}

#[test]
fn custom_params_agree() {
    check(json!({"target_min": 1, "target_max": 2.5}), 1.0, 2.5);
}

#[test]
fn empty_first_completion_scores_zero() {
    let batch = vec![JointSample::new("p", vec![String::new(), "日本".into()])];
    let rhai = RhaiReward::load(common::len_ratio_script(), &json!({})).expect("load");
    let native = NativeReward::load(common::plugin("comlrl_len_ratio"), &json!({})).expect("load");
    assert_eq!(rhai.score(&batch).expect("score"), vec![0.0]);
    assert_eq!(native.score(&batch).expect("score"), vec![0.0]);
}

#[test]
fn plugin_path_without_prefix_or_extension_resolves() {
    let full = common::plugin("comlrl_len_ratio");
    let bare = full.with_file_name("comlrl_len_ratio");
    let native = NativeReward::load(&bare, &json!({})).expect("bare path resolves");
    assert_eq!(native.path(), full.as_path());
    assert_eq!(native.plugin_name(), "len_ratio");
}
