//! `comlrl export --gguf`: write a model (a run's `models/agent_i`, any HF directory, hub id or
//! GGUF) as a llama.cpp GGUF file for llama.cpp / ollama.
use super::inputs::ModelArgs;
use anyhow::{bail, Context};
use comlrl::model::gguf::{export, Quant};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Write a GGUF file (the only export format).
    #[arg(long)]
    pub gguf: bool,
    /// Storage of the weight matrices: f16, q8_0 or f32 (norms and biases stay f32).
    #[arg(long, default_value = "f16")]
    pub quant: String,
    /// The file to write (`*.gguf`).
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if !a.gguf {
        bail!("pass --gguf: GGUF is the only export format (a run's models/agent_i is already an HF directory)");
    }
    let quant = Quant::parse(&a.quant).context("--quant")?;
    let policy = a.model.load()?;
    export(&policy, quant, &a.out).with_context(|| {
        format!(
            "exporting {} to {}",
            policy.source.describe(),
            a.out.display()
        )
    })?;
    let size = std::fs::metadata(&a.out).map(|m| m.len()).unwrap_or(0);
    println!(
        "wrote {} ({:.1} MB, {} matrices as {})",
        a.out.display(),
        size as f64 / 1e6,
        policy.vars().iter().filter(|(_, v)| v.rank() == 2).count(),
        a.quant
    );
    Ok(())
}
