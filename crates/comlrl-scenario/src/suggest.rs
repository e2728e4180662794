//! "Did you mean ...?": the closest valid spelling by edit distance, and the table of keys that
//! CoMLRL users will reach for but that live elsewhere (or under another name) in a scenario.

/// The candidate closest to `word`, if it is close enough to be a plausible typo.
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let lower = word.to_ascii_lowercase();
    let best = candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(&lower, c), *c))
        .min_by_key(|(d, _)| *d)?;
    let (dist, cand) = best;
    let limit = (word.len().max(cand.len()) / 3).max(2);
    if dist <= limit || (cand.len() >= 3 && lower.starts_with(cand)) {
        Some(cand)
    } else {
        None
    }
}

/// A hint for a key that is valid in CoMLRL (or an obvious guess) but not where it was written.
pub(crate) fn moved_key(section: &str, key: &str) -> Option<&'static str> {
    Some(match (section, key) {
        ("trainer", "learning_rate") | ("trainer", "lr") => {
            "CoMLRL 1.4 calls it `agent_learning_rate`: use `trainer.agent_learning_rate` \
             (or `agents.learning_rate` for a per-agent override)"
        }
        ("trainer", "logging_steps") => "logging cadence lives in `logging.steps`",
        ("trainer", "max_new_tokens")
        | ("trainer", "temperature")
        | ("trainer", "top_p")
        | ("trainer", "top_k") => "sampling settings are per agent: set them under `agents`",
        ("trainer", "num_agents") | ("", "num_agents") => {
            "set the number of agents with `agents.count`"
        }
        ("trainer", "eval_batch_size") => {
            "comlrl evaluates one eval prompt at a time, as it trains (each prompt's G \
             generations per agent are the batch), so a batch size would change nothing: \
             remove `eval_batch_size` (`eval_num_samples` sets how many prompts)"
        }
        ("trainer", "termination_threshold") => "it is `trainer.early_termination_threshold`",
        ("trainer", "seed") | ("trainer", "output_dir") | ("trainer", "checkpoint_every") => {
            "this is a top-level key, not a `trainer` key"
        }
        ("trainer", "reward_processor") | ("trainer", "reward_processors") => {
            "reward processors are the top-level `reward_processors` list"
        }
        ("trainer", "wandb") | ("", "wandb") | ("", "tensorboard") => {
            "tracking settings live under `logging` (`logging.wandb`, `logging.tensorboard`)"
        }
        ("", "magrpo") | ("", "config") | ("", "args") => {
            "MAGRPOConfig settings go in the `trainer` section"
        }
        ("", "model") | ("", "models") => {
            "models are set per agent: `agents: {count: 2, model: ...}`"
        }
        ("", "external_transition") | ("", "external") => {
            "the multi-turn transition is `trainer.external_transition`"
        }
        ("", "processors") | ("reward", "processors") | ("reward", "reward_processors") => {
            "processors are the top-level `reward_processors` list"
        }
        ("", "train_dataset") | ("", "data") => "the training data is the `dataset` section",
        ("", "eval_dataset") => "the evaluation data is `dataset.eval`",
        ("agents", "num_agents") | ("agents", "n") => "it is `agents.count`",
        ("agents", "model_name") | ("agents", "name") => "it is `agents.model`",
        ("agents", "formatter") | ("agents", "prompt") => {
            "the prompt format is `template` (e.g. `template: \"{prompt}\"`)"
        }
        ("dataset", "template") => "templates are per agent: `agents.template`",
        ("dataset", "eval_dataset") => "it is `dataset.eval`",
        _ => return None,
    })
}

/// A hint for a common alternative spelling of an enum value.
pub(crate) fn value_alias(value: &str) -> Option<&'static str> {
    Some(match value.to_ascii_lowercase().as_str() {
        "fp32" | "float32" | "float" => "f32",
        "fp16" | "float16" | "half" => "f16",
        "bfloat16" | "bf_16" => "bf16",
        "align" | "index" => "aligned",
        "crossed" | "cartesian" | "product" => "cross",
        "none" | "off" | "constant_with_warmup" => "constant",
        "cos" => "cosine",
        _ => return None,
    })
}

/// `did you mean `x`?` for `word` among `candidates`, or the list of valid spellings.
pub(crate) fn did_you_mean(word: &str, candidates: &[&str]) -> String {
    let list = candidates
        .iter()
        .map(|c| format!("`{c}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let guess = value_alias(word)
        .filter(|a| candidates.contains(a))
        .or_else(|| closest(word, candidates));
    match guess {
        Some(g) => format!("did you mean `{g}`? (valid: {list})"),
        None => format!("valid: {list}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_words() {
        let keys = ["num_generations", "num_turns", "joint_mode"];
        assert_eq!(closest("num_generatons", &keys), Some("num_generations"));
        assert_eq!(closest("crossed", &["aligned", "cross"]), Some("cross"));
        assert_eq!(closest("zzz", &keys), None);
        assert!(did_you_mean("crossed", &["aligned", "cross"]).contains("did you mean `cross`?"));
        assert!(did_you_mean("fp16", &["auto", "f32", "bf16", "f16"]).contains("`f16`?"));
    }
}
