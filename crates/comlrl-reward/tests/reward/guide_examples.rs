//! The Rhai examples of the rewards guide (docs/rewards.md, ```rhai blocks) load as reward
//! scripts and score; the guide's Rust examples are doctests of the crate.
use comlrl_reward::{JointSample, RewardFn, RhaiReward, SandboxLimits};
use std::path::{Path, PathBuf};

fn guide() -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/rewards.md");
    let text = std::fs::read_to_string(&path).expect("docs/rewards.md");
    (path, text)
}

/// The bodies of the guide's fenced blocks tagged `lang`, in order.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}\n");
    text.split(open.as_str())
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn every_rhai_example_of_the_guide_loads_and_scores() {
    let (path, text) = guide();
    let examples = blocks(&text, "rhai");
    assert!(examples.len() >= 2, "the guide lost its Rhai examples");
    let sample = JointSample::new("prompt", vec!["ab".into(), "abcde".into()]);
    for (i, source) in examples.iter().enumerate() {
        let name = path.with_file_name(format!("rewards-example-{}.rhai", i + 1));
        let reward = RhaiReward::from_source(
            &name,
            source,
            &serde_json::json!({}),
            &SandboxLimits::default(),
        )
        .unwrap_or_else(|e| panic!("example {} of {}: {e}", i + 1, path.display()));
        let scores = reward
            .score(std::slice::from_ref(&sample))
            .unwrap_or_else(|e| panic!("example {} of {}: {e}", i + 1, path.display()));
        assert_eq!(scores.len(), 1);
        assert!(scores[0].is_finite(), "example {}: {scores:?}", i + 1);
    }
}

#[test]
fn the_length_ratio_example_is_the_shipped_script() {
    let (_, text) = guide();
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../rewards/len_ratio.rhai"),
    )
    .expect("rewards/len_ratio.rhai");
    let example = &blocks(&text, "rhai")[0];
    let code = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| l.split("//").next().unwrap_or("").trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    };
    assert_eq!(
        code(example),
        code(&shipped),
        "docs/rewards.md's len_ratio example differs from rewards/len_ratio.rhai"
    );
}
