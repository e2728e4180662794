//! `comlrl generate`: sample completions from a model and print them (text or JSON).
use super::inputs::ModelPromptArgs;
use anyhow::bail;
use comlrl::model::{generate, SamplingParams};
use rand::SeedableRng;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub input: ModelPromptArgs,
    /// Number of completions.
    #[arg(short = 'n', long, default_value_t = 1)]
    pub num: usize,
    #[arg(long, default_value_t = 128)]
    pub max_new_tokens: usize,
    /// Sampling temperature (CoMLRL's default 0.6).
    #[arg(long, default_value_t = 0.6)]
    pub temperature: f64,
    /// Nucleus mass (CoMLRL's default 0.6; 1 disables).
    #[arg(long, default_value_t = 0.6)]
    pub top_p: f64,
    /// Top-k candidates (CoMLRL's default 50; 0 disables).
    #[arg(long, default_value_t = 50)]
    pub top_k: usize,
    /// Argmax decoding instead of sampling.
    #[arg(long, conflicts_with_all = ["temperature", "top_p", "top_k"])]
    pub greedy: bool,
    /// Do not stop at EOS.
    #[arg(long)]
    pub ignore_eos: bool,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print one JSON object `{"samples": [{"ids": [...], "text": "..."}]}`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.temperature < 0.0 {
        bail!("--temperature must be ≥ 0 (0 means greedy)");
    }
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        bail!("--top-p must be in (0, 1]");
    }
    let (policy, prompt) = a.input.load()?;
    let params = SamplingParams {
        max_new_tokens: a.max_new_tokens,
        temperature: a.temperature,
        top_p: a.top_p,
        top_k: a.top_k,
        greedy: a.greedy,
        ignore_eos: a.ignore_eos,
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(a.seed);
    let out = generate(
        policy.sampler(),
        &[&prompt],
        a.num,
        &params,
        &policy.eos_ids,
        policy.pad_id,
        &mut rng,
    )?;
    let mut samples = Vec::new();
    for ids in out.into_iter().flatten() {
        let text = policy.tokenizer.decode(&ids, true)?;
        samples.push(serde_json::json!({"ids": ids, "text": text}));
    }
    if a.json {
        println!("{}", serde_json::json!({ "samples": samples }));
    } else {
        for (i, s) in samples.iter().enumerate() {
            println!(
                "--- sample {i} ({} tokens)",
                s["ids"].as_array().map_or(0, |v| v.len())
            );
            println!("{}", s["text"].as_str().unwrap_or_default());
        }
    }
    Ok(())
}
