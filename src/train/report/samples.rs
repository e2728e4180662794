//! The sampled texts a metrics row shows (`logging.completions`): the window keeps its last N
//! joint actions, and the row writes them beside the numbers.
use serde::{Deserialize, Serialize};

/// One sampled joint action as logged: what each agent wrote for the prompt and what it earned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedSample {
    /// The training step (1-based) that sampled it.
    pub step: usize,
    /// The turn (1-based) of the rollout tree it belongs to.
    pub turn: usize,
    /// The dataset prompt (before each agent's template).
    pub prompt: String,
    /// Each agent's completion, decoded.
    pub completions: Vec<String>,
    /// The joint reward (after the reward processors).
    pub reward: f32,
    /// Each reward term's raw value, in the terms' order.
    pub terms: Vec<f32>,
    /// Each agent's completion's return.
    pub returns: Vec<f32>,
    /// Each agent's completion's advantage.
    pub advantages: Vec<f32>,
}

/// Appends `new` to `kept`, keeping only the last `cap`.
pub fn keep_last(kept: &mut Vec<LoggedSample>, new: Vec<LoggedSample>, cap: usize) {
    kept.extend(new);
    if kept.len() > cap {
        kept.drain(..kept.len() - cap);
    }
}

impl LoggedSample {
    /// The sample as one JSON line of `completions.jsonl` (term values under their names).
    pub fn to_json(&self, term_names: &[String]) -> serde_json::Value {
        let terms: serde_json::Map<String, serde_json::Value> = term_names
            .iter()
            .zip(&self.terms)
            .map(|(n, v)| (n.clone(), finite(*v)))
            .collect();
        serde_json::json!({
            "step": self.step,
            "turn": self.turn,
            "prompt": self.prompt,
            "completions": self.completions,
            "reward": finite(self.reward),
            "terms": terms,
            "returns": self.returns.iter().map(|&v| finite(v)).collect::<Vec<_>>(),
            "advantages": self.advantages.iter().map(|&v| finite(v)).collect::<Vec<_>>(),
        })
    }

    /// The sample as TensorBoard's text plugin shows it (markdown).
    pub fn to_markdown(&self, term_names: &[String]) -> String {
        let mut out = format!(
            "**step {}, turn {}**, reward {}\n\n**prompt**\n\n{}\n",
            self.step,
            self.turn,
            self.reward,
            fenced(&self.prompt)
        );
        for (i, text) in self.completions.iter().enumerate() {
            let ret = self.returns.get(i).copied().unwrap_or(f32::NAN);
            let adv = self.advantages.get(i).copied().unwrap_or(f32::NAN);
            out.push_str(&format!(
                "\n**agent {i}** (return {ret}, advantage {adv})\n\n{}\n",
                fenced(text)
            ));
        }
        if !term_names.is_empty() {
            out.push_str("\n| term | value |\n| --- | --- |\n");
            for (n, v) in term_names.iter().zip(&self.terms) {
                out.push_str(&format!("| {n} | {v} |\n"));
            }
        }
        out
    }
}

/// A JSON number, or null for NaN and infinities (JSON has neither).
fn finite(v: f32) -> serde_json::Value {
    if v.is_finite() {
        serde_json::json!(v as f64)
    } else {
        serde_json::Value::Null
    }
}

/// `text` in a code fence longer than any backtick run inside it, so a model's markdown cannot
/// close it.
fn fenced(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}\n{text}\n{fence}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(step: usize) -> LoggedSample {
        LoggedSample {
            step,
            turn: 1,
            prompt: "Write a story".into(),
            completions: vec!["Once ```upon```".into(), "a time".into()],
            reward: 0.5,
            terms: vec![0.25, f32::NAN],
            returns: vec![0.5, 0.5],
            advantages: vec![1.0, -1.0],
        }
    }

    #[test]
    fn the_last_cap_samples_are_kept() {
        let mut kept = vec![];
        keep_last(&mut kept, (1..=3).map(sample).collect(), 2);
        keep_last(&mut kept, vec![sample(4)], 2);
        assert_eq!(kept.iter().map(|s| s.step).collect::<Vec<_>>(), [3, 4]);
    }

    #[test]
    fn json_names_the_terms_and_markdown_fences_the_texts() {
        let names = vec!["len".to_string(), "broken".to_string()];
        let j = sample(7).to_json(&names);
        assert_eq!(j["terms"]["len"], 0.25);
        assert!(j["terms"]["broken"].is_null());
        assert_eq!(j["completions"][1], "a time");
        let md = sample(7).to_markdown(&names);
        assert!(md.contains("````\nOnce ```upon```\n````"), "{md}");
        assert!(md.contains("| len | 0.25 |"), "{md}");
    }
}
