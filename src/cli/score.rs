//! `comlrl score`: per-token log-probabilities of a completion given a prompt.
use super::inputs::{ids_from, ModelPromptArgs};
use anyhow::bail;
use comlrl::model::{completion_logprobs, Mode, ScoreLayout};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub input: ModelPromptArgs,
    #[arg(
        long,
        conflicts_with = "completion_ids",
        required_unless_present = "completion_ids"
    )]
    pub completion: Option<String>,
    #[arg(long)]
    pub completion_ids: Option<String>,
    /// Print `{"prompt_ids": [...], "completion_ids": [...], "logprobs": [...]}`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let (policy, prompt) = a.input.load()?;
    let completion = ids_from(&policy, &a.completion, &a.completion_ids, "completion")?;
    if completion.is_empty() {
        bail!("the completion is empty: nothing to score");
    }
    let layout = ScoreLayout::new(&policy.model, &[&prompt], &[&completion], policy.pad_id)?;
    let lp = completion_logprobs(&policy.model, &layout, policy.products(Mode::Infer))?;
    let lp: Vec<f32> = lp.squeeze(0)?.to_vec1()?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"prompt_ids": prompt, "completion_ids": completion, "logprobs": lp})
        );
    } else {
        println!("{:>8} {:>12}  token", "id", "logprob");
        for (id, l) in completion.iter().zip(&lp) {
            let piece = policy.tokenizer.decode(&[*id], false)?;
            println!("{id:>8} {l:>12.6}  {piece:?}");
        }
        println!(
            "total log-prob: {:.6}",
            lp.iter().map(|&x| x as f64).sum::<f64>()
        );
    }
    Ok(())
}
