//! `comlrl reward`: score given completions with a scenario's whole reward stack (terms,
//! weights, processors), to try a reward without training.
use super::scenario_args::ScenarioArgs;
use anyhow::{bail, Context};
use comlrl::train::setup::rewards;
use comlrl_reward::JointSample;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// JSONL file, one joint sample per line: `{"prompt": "...", "completions": ["agent 0", "agent 1"], ...}`
    /// (other fields are dataset fields the reward may read).
    #[arg(long)]
    pub completions: PathBuf,
    /// One JSON line per input: `{"reward": final, "components": {"name": raw, ...}}`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let s = a.scenario.load()?;
    let stack = rewards::reward_stack(&s)?;
    let path = &a.completions;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut batch = vec![];
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), i + 1);
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: not valid JSON", at()))?;
        let Some(mut obj) = v.as_object().cloned() else {
            bail!(
                "{}: expected an object with \"prompt\" and \"completions\"",
                at()
            );
        };
        let prompt = match obj.remove("prompt") {
            Some(serde_json::Value::String(p)) => p,
            _ => bail!("{}: \"prompt\" must be a string", at()),
        };
        let completions: Vec<String> = match obj.remove("completions") {
            Some(serde_json::Value::Array(items)) => items
                .into_iter()
                .map(|c| c.as_str().map(String::from))
                .collect::<Option<_>>()
                .with_context(|| {
                    format!("{}: \"completions\" must be an array of strings", at())
                })?,
            _ => bail!(
                "{}: \"completions\" must be an array of strings, one per agent",
                at()
            ),
        };
        if completions.len() != s.agents.len() {
            bail!(
                "{}: {} completions, but the scenario has {} agents",
                at(),
                completions.len(),
                s.agents.len()
            );
        }
        batch.push(JointSample {
            prompt,
            completions,
            fields: obj,
        });
    }
    let scored = stack.score(&batch)?;
    let names: Vec<String> = stack
        .component_names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    if a.json {
        for sc in &scored {
            let comps: serde_json::Map<String, serde_json::Value> = names
                .iter()
                .zip(&sc.components)
                .map(|(n, v)| (n.clone(), serde_json::json!(v)))
                .collect();
            println!(
                "{}",
                serde_json::json!({"reward": sc.reward, "components": comps})
            );
        }
    } else {
        print!("{:>4}  {:>12}", "#", "reward");
        for n in &names {
            print!("  {n:>14}");
        }
        println!("  first completion");
        for (i, (sc, js)) in scored.iter().zip(&batch).enumerate() {
            print!("{:>4}  {:>12.6}", i + 1, sc.reward);
            for c in &sc.components {
                print!("  {c:>14.6}");
            }
            let first: String = js
                .completions
                .first()
                .map(|c| c.chars().take(40).collect())
                .unwrap_or_default();
            println!("  {first:?}");
        }
    }
    Ok(())
}
