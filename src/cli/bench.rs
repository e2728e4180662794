//! `comlrl bench`: run the benchmarks and write their JSON report.
use anyhow::Context;
use comlrl::bench::model::{run as bench_model, ModelBenchOptions};
use comlrl::model::{LoadOptions, ModelSource, Policy};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Models to benchmark (hub id, directory or builtin:<preset>); default: builtin:tiny and
    /// builtin:small (32M parameters).
    #[arg(long = "model")]
    pub models: Vec<String>,
    /// Where to write the JSON report.
    #[arg(long, default_value = "bench-results/model.json")]
    pub out: PathBuf,
    /// Timed repetitions per measurement (after one warm-up); the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Sampling batch and new tokens.
    #[arg(long, default_value_t = 8)]
    pub sample_batch: usize,
    #[arg(long, default_value_t = 128)]
    pub new_tokens: usize,
    /// Training batch (sequences) and sequence length.
    #[arg(long, default_value_t = 8)]
    pub train_batch: usize,
    #[arg(long, default_value_t = 160)]
    pub train_seq: usize,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let models = if a.models.is_empty() {
        vec!["builtin:tiny".to_string(), "builtin:small".to_string()]
    } else {
        a.models.clone()
    };
    let opts = ModelBenchOptions {
        sample_batch: a.sample_batch,
        new_tokens: a.new_tokens,
        train_batch: a.train_batch,
        train_seq: a.train_seq,
        repeats: a.repeats.max(1),
        ..Default::default()
    };
    let cwd = std::env::current_dir()?;
    let mut reports = vec![];
    for m in &models {
        let policy = Policy::load(&ModelSource::parse(m, &cwd)?, &LoadOptions::default())?;
        eprintln!(
            "benchmarking {m} ({} parameters)...",
            policy.num_parameters()
        );
        let r = bench_model(&policy, &opts)?;
        eprintln!(
            "  sampling {:.1} tok/s ({} x {} new tokens, {:.2} s); train step fwd {:.3} s + bwd {:.3} s = {:.1} GFLOP/s",
            r.sampling.tokens_per_s, opts.sample_batch, opts.new_tokens, r.sampling.seconds,
            r.train_step.forward_s, r.train_step.backward_s, r.train_step.gflops_per_s
        );
        reports.push(r);
    }
    let json = serde_json::json!({
        "machine": comlrl::bench::sys::machine(),
        "models": reports,
    });
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&json)?;
    std::fs::write(&a.out, &text).with_context(|| format!("writing {}", a.out.display()))?;
    println!("{text}");
    Ok(())
}
