//! `comlrl bench`: run the benchmarks (models, rewards) and write their JSON reports.
use anyhow::Context;
use comlrl::bench::model::{run as bench_model, ModelBenchOptions};
use comlrl::model::{LoadOptions, ModelSource, Policy, RolloutCopies};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// Sampling tokens/s and forward+backward seconds of models.
    Models(ModelsArgs),
    /// Joint samples/s of the reward terms of scenarios (e.g. the Rhai and native len_ratio).
    Rewards(RewardsArgs),
    /// A scenario's training loop for N steps: seconds per step by phase, tokens/s, GFLOP/s,
    /// peak memory.
    Train(TrainArgs),
    /// The machine's f32 matmul rate on a large square product (the reference for GFLOP/s).
    Matmul(MatmulArgs),
}

#[derive(Debug, clap::Args)]
pub struct MatmulArgs {
    /// Matrix size N of the N×N×N product.
    #[arg(long, default_value_t = 2048)]
    pub size: usize,
    /// Timed repetitions (after one warm-up).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Also time decode-shaped products x (M, K) · Wᵀ (W of N × K) as `M,K,N`, e.g.
    /// `16,896,4864`: f32 (the sampling path), candle's bf16 matmul and the bf16 sampling kernel.
    #[arg(long, num_args = 1..)]
    pub decode: Vec<String>,
    /// `bf16`: also time the square product with the bf16 GEMM (bf16 operands, f32 sums), each
    /// backend this machine runs (AMX, AVX-512 BF16, portable) against f32.
    #[arg(long, default_value = "f32", value_parser = ["f32", "bf16"])]
    pub dtype: String,
    /// Also time products `M,K,N[,LAYOUT[,bf16]]` f32 vs the bf16 GEMM, LAYOUT `nn` (a · b, the
    /// default), `nt` (a · wᵀ, w of N × K) or `tn` (acc += aᵀ · b, a of K × M), e.g.
    /// `1280,896,4864,nt`; `bf16` holds the bf16 GEMM's b (w) in bf16, as a frozen bf16 base's
    /// weight is (`agents.base_dtype: bf16`), e.g. `1280,896,4864,nt,bf16`.
    #[arg(long, num_args = 1..)]
    pub gemm: Vec<String>,
    /// Where to write the JSON report.
    #[arg(long, default_value = "bench-results/matmul.json")]
    pub out: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct TrainArgs {
    #[command(flatten)]
    pub scenario: super::scenario_args::ScenarioArgs,
    /// Steps to time (one step = one training prompt); default: the whole scenario.
    #[arg(long)]
    pub steps: Option<usize>,
    /// Where to write the JSON report.
    #[arg(long, default_value = "bench-results/train.json")]
    pub out: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct RewardsArgs {
    /// Scenario files whose reward terms are measured.
    #[arg(required = true)]
    pub scenarios: Vec<PathBuf>,
    /// Joint samples per measurement: synthetic text, or the lines of `--samples-file` cycled
    /// (default: 10,000 synthetic, or each line of the file once).
    #[arg(long)]
    pub samples: Option<usize>,
    /// JSON lines of joint samples `{"prompt", "fields", "completions": [...]}` to score instead
    /// of synthetic text (rewards that read the row's fields or run code need real ones, e.g.
    /// `scripts/humaneval_bench_samples.py`'s).
    #[arg(long)]
    pub samples_file: Option<PathBuf>,
    /// Measure each native term once per value with its `params.parallelism` set to it (e.g.
    /// `1,2`), reporting samples/s per core and milliseconds per sample.
    #[arg(long, value_delimiter = ',')]
    pub parallelism: Vec<usize>,
    /// Also measure each native term with `params.layers: none` (code_exec: no sandbox layers
    /// but the rlimits) and report the layers' cost per sample.
    #[arg(long)]
    pub bare: bool,
    #[arg(long, default_value = "bench-results/rewards.json")]
    pub out: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct ModelsArgs {
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
    /// Tokens per sampling prompt (the prefill; short prompts time decoding itself).
    #[arg(long, default_value_t = 32)]
    pub prompt_tokens: usize,
    /// Training batch (sequences) and sequence length.
    #[arg(long, default_value_t = 8)]
    pub train_batch: usize,
    #[arg(long, default_value_t = 160)]
    pub train_seq: usize,
    /// Sample with contiguous transposed copies of the weights (one extra copy of the weights):
    /// `auto` decides as training does (copies for models of at most 64 MiB, the MLP's weights
    /// in f32 panels above on AVX-512 CPUs), `always` (also `--rollout-copies` alone) or
    /// `never` (no copies).
    #[arg(long, default_value = "auto", value_parser = ["auto", "always", "never"],
          num_args = 0..=1, default_missing_value = "always")]
    pub rollout_copies: String,
    /// The dtype sampling decodes in: f32, or bf16 (bf16 weight copies, f32 accumulation).
    #[arg(long, default_value = "f32", value_parser = ["f32", "bf16"])]
    pub sampling_dtype: String,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    eprintln!("{}", comlrl::bench::sys::machine_line());
    match a.what {
        What::Models(m) => run_models(m),
        What::Rewards(r) => run_rewards(r),
        What::Train(t) => run_train(t),
        What::Matmul(m) => {
            let r = comlrl::bench::matmul::run(m.size, m.repeats)?;
            eprintln!(
                "{n}x{n}x{n} f32: {:.1} GFLOP/s median, {:.1} best",
                r.gflops_per_s,
                r.best_gflops_per_s,
                n = m.size
            );
            let mut decode = vec![];
            for shape in &m.decode {
                let d: Vec<usize> = shape
                    .split(',')
                    .map(|v| v.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .ok()
                    .filter(|d: &Vec<usize>| d.len() == 3 && d.iter().all(|&v| v > 0))
                    .with_context(|| {
                        format!("--decode {shape}: expected M,K,N (three positive integers)")
                    })?;
                let r = comlrl::bench::matmul::run_decode(d[0], d[1], d[2], m.repeats.max(3) * 4)?;
                eprintln!(
                    "decode {}x{} . ({}x{})^T: f32 {:.1} GFLOP/s ({:.1} GB/s of weights, cold {:.1} GFLOP/s; gemm {:.1}; f32 panels cold {:.1} GFLOP/s, {:.1} GB/s), candle bf16 {:.1} GFLOP/s, bf16 kernel ({}) {:.1} GFLOP/s ({:.1} GB/s, cold {:.1} GFLOP/s), vdpbf16ps alone {:.1} GFLOP/s; frozen bases, cold: bf16 {:.1} (read in place by the bf16 kernel {:.1}), q8_0 fused {:.1}, q8_0 via a dequantized row {:.1} GFLOP/s",
                    r.m, r.k, r.n, r.k, r.f32_gflops_per_s, r.f32_weight_gb_per_s, r.f32_cold_gflops_per_s,
                    r.f32_gemm_gflops_per_s, r.f32_panels_cold_gflops_per_s,
                    r.f32_panels_cold_gflops_per_s * 4.0 / (2.0 * r.m as f64),
                    r.candle_bf16_gflops_per_s,
                    r.bf16_kernel, r.bf16_kernel_gflops_per_s, r.bf16_kernel_weight_gb_per_s,
                    r.bf16_kernel_cold_gflops_per_s, r.vdpbf16ps_gflops_per_s,
                    r.bf16_base_cold_gflops_per_s, r.bf16_base_in_place_cold_gflops_per_s,
                    r.q8_0_fused_cold_gflops_per_s,
                    r.q8_0_dequantize_cold_gflops_per_s
                );
                decode.push(r);
            }
            let mut gemm = vec![];
            if m.dtype == "bf16" {
                gemm.push(bench_gemm(m.size, m.size, m.size, "nn", false, m.repeats)?);
            }
            for shape in &m.gemm {
                let parts: Vec<&str> = shape.split(',').map(str::trim).collect();
                let dims: Option<Vec<usize>> = parts
                    .iter()
                    .take(3)
                    .map(|v| v.parse::<usize>().ok().filter(|&v| v > 0))
                    .collect();
                let b_dtype = parts.get(4).copied();
                let (Some(d), 3..=5, None | Some("bf16")) =
                    (dims.filter(|d| d.len() == 3), parts.len(), b_dtype)
                else {
                    anyhow::bail!(
                        "--gemm {shape}: expected M,K,N or M,K,N,LAYOUT or M,K,N,LAYOUT,bf16 (three positive integers, LAYOUT nn, nt or tn, then bf16 for a bf16 b)"
                    )
                };
                let layout = parts.get(3).copied().unwrap_or("nn");
                let b_bf16 = b_dtype.is_some();
                gemm.push(bench_gemm(d[0], d[1], d[2], layout, b_bf16, m.repeats)?);
            }
            let json = serde_json::json!({"machine": comlrl::bench::sys::machine(), "matmul": r, "decode": decode, "gemm": gemm});
            write_report(&m.out, &json)
        }
    }
}

/// Times one bf16-GEMM shape and prints its line.
fn bench_gemm(
    m: usize,
    k: usize,
    n: usize,
    layout: &str,
    b_bf16: bool,
    repeats: usize,
) -> anyhow::Result<comlrl::bench::matmul::GemmReport> {
    let l: comlrl::bench::matmul::GemmLayout = layout
        .parse()
        .map_err(|e| anyhow::anyhow!("--gemm {m},{k},{n},{layout}: {e}"))?;
    let r = comlrl::bench::matmul::run_gemm(m, k, n, l, b_bf16, repeats)?;
    let rates: Vec<String> = r
        .bf16
        .iter()
        .map(|b| {
            let pre = b
                .prepacked_gflops_per_s
                .map_or(String::new(), |p| format!(" ({p:.1} with b pre-packed)"));
            format!("{} {:.1}{pre}", b.backend, b.gflops_per_s)
        })
        .collect();
    let held = if b_bf16 { ", b held in bf16" } else { "" };
    eprintln!(
        "gemm {m}x{k}x{n} {layout}{held}: f32 {:.1} GFLOP/s; bf16 (default {}): {} GFLOP/s",
        r.f32_gflops_per_s,
        comlrl::model::kernels::bf16_gemm::backend(),
        rates.join(", ")
    );
    Ok(r)
}

fn run_train(a: TrainArgs) -> anyhow::Result<()> {
    let scenario = a.scenario.load()?;
    eprintln!(
        "benchmarking {} ({} steps)...",
        a.scenario.scenario.display(),
        a.steps.map_or("all".to_string(), |n| n.to_string())
    );
    let r = comlrl::bench::train::run(scenario, a.steps)?;
    let p = |k: &str| {
        r.phases_per_step
            .get(k)
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0)
    };
    let skipped = if r.zero_advantage_frac > 0.0 {
        format!(
            "; {:.0}% of completions had advantage 0 (the update skips them)",
            100.0 * r.zero_advantage_frac
        )
    } else {
        String::new()
    };
    eprintln!(
        "  {:.2} s/step (median {:.2}): sampling {:.2}, reward {:.3}, update {:.2} (forward {:.2} + backward {:.2} + optimizer {:.2}, summed over agents); {:.0} tok/s sampling, {:.1} GFLOP/s update, peak RSS {}{skipped}",
        r.seconds_per_step.mean,
        r.seconds_per_step.median,
        p("sampling"),
        p("reward"),
        p("update"),
        p("forward"),
        p("backward"),
        p("optimizer"),
        r.sampling_tokens_per_s,
        r.update_gflops_per_s,
        r.peak_rss_bytes
            .map_or("?".into(), |b| format!("{:.2} GB", b as f64 / 1e9)),
    );
    let json = serde_json::json!({
        "machine": comlrl::bench::sys::machine(),
        "overrides": a.scenario.overrides,
        "train": r,
    });
    write_report(&a.out, &json)
}

fn run_rewards(a: RewardsArgs) -> anyhow::Result<()> {
    let file_batch = a
        .samples_file
        .as_deref()
        .map(read_joint_samples)
        .transpose()?;
    let mut results = vec![];
    for path in &a.scenarios {
        let s = comlrl_scenario::load(path, &[])
            .with_context(|| format!("invalid scenario {}", path.display()))?;
        let batch = match &file_batch {
            Some(lines) => {
                let n = a.samples.unwrap_or(lines.len());
                let batch: Vec<_> = lines.iter().cycle().take(n).cloned().collect();
                if let Some(bad) = batch.iter().find(|j| j.completions.len() != s.agents.len()) {
                    anyhow::bail!(
                        "{}: a joint sample has {} completions, the scenario {} has {} agents",
                        a.samples_file.as_deref().unwrap_or(Path::new("")).display(),
                        bad.completions.len(),
                        path.display(),
                        s.agents.len()
                    );
                }
                batch
            }
            None => {
                comlrl_reward::bench::synthetic_batch(a.samples.unwrap_or(10_000), s.agents.len())
            }
        };
        for term in &s.reward.terms {
            let name = term.name.clone().unwrap_or_default();
            let measure = |params: &serde_json::Value| -> anyhow::Result<_> {
                let reward: Box<dyn comlrl_reward::RewardFn> = match (&term.rhai, &term.plugin) {
                    (Some(p), _) => Box::new(comlrl_reward::RhaiReward::load(p, params)?),
                    (None, Some(p)) => Box::new(comlrl_reward::NativeReward::load(p, params)?),
                    (None, None) => unreachable!("a term is a script or a plugin"),
                };
                Ok(comlrl_reward::bench::throughput_on(
                    reward.as_ref(),
                    &batch,
                )?)
            };
            let kind = match (&term.rhai, &term.plugin) {
                (Some(_), _) => "rhai",
                (None, Some(_)) => "native",
                (None, None) => continue,
            };
            // Rhai scripts run on one thread; only native terms take a parallelism.
            let settings: Vec<Option<usize>> = if kind == "native" && !a.parallelism.is_empty() {
                a.parallelism.iter().map(|&p| Some(p)).collect()
            } else {
                vec![None]
            };
            for parallelism in settings {
                let mut params = term.params.clone();
                if let (Some(p), serde_json::Value::Object(m)) = (parallelism, &mut params) {
                    m.insert("parallelism".into(), p.into());
                } else if let Some(p) = parallelism {
                    params = serde_json::json!({"parallelism": p});
                }
                let r = measure(&params)?;
                let mut row = serde_json::json!({
                    "scenario": path, "term": name, "kind": kind, "result": r,
                });
                let per_sample_ms = |sps: f64, p: usize| 1000.0 * p as f64 / sps;
                if let Some(p) = parallelism {
                    row["parallelism"] = p.into();
                    row["samples_per_s_per_core"] = (r.samples_per_s / p as f64).into();
                    row["ms_per_sample"] = per_sample_ms(r.samples_per_s, p).into();
                }
                let mut line = format!(
                    "{} {name} ({kind}{}): {:.1} joint samples/s",
                    path.display(),
                    parallelism.map_or(String::new(), |p| format!(", {p} at once")),
                    r.samples_per_s
                );
                if a.bare && kind == "native" {
                    let mut bare = params.clone();
                    if let serde_json::Value::Object(m) = &mut bare {
                        m.insert("layers".into(), "none".into());
                    } else {
                        bare = serde_json::json!({"layers": "none"});
                    }
                    let b = measure(&bare).with_context(|| {
                        format!("term `{name}` with params.layers: none (only code_exec takes it)")
                    })?;
                    let p = parallelism.unwrap_or(1);
                    let overhead =
                        per_sample_ms(r.samples_per_s, p) - per_sample_ms(b.samples_per_s, p);
                    line.push_str(&format!(
                        "; without the sandbox's layers {:.1}/s: the layers cost {overhead:.1} ms per sample",
                        b.samples_per_s
                    ));
                    row["bare"] = serde_json::to_value(&b)?;
                    row["sandbox_overhead_ms_per_sample"] = overhead.into();
                }
                eprintln!("{line}");
                results.push(row);
            }
        }
    }
    let json = serde_json::json!({"machine": comlrl::bench::sys::machine(), "rewards": results});
    write_report(&a.out, &json)
}

/// Reads `--samples-file`: one joint sample per line.
fn read_joint_samples(path: &Path) -> anyhow::Result<Vec<comlrl_reward::JointSample>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the joint samples in {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let at = || format!("{}:{}", path.display(), i + 1);
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: not a JSON object", at()))?;
        let prompt = v["prompt"]
            .as_str()
            .with_context(|| format!("{}: `prompt` must be a string", at()))?;
        let completions: Vec<String> = v["completions"]
            .as_array()
            .and_then(|a| a.iter().map(|c| c.as_str().map(str::to_string)).collect())
            .with_context(|| format!("{}: `completions` must be a list of strings", at()))?;
        let fields = match &v["fields"] {
            serde_json::Value::Null => serde_json::Map::new(),
            serde_json::Value::Object(m) => m.clone(),
            _ => anyhow::bail!("{}: `fields` must be a mapping", at()),
        };
        out.push(comlrl_reward::JointSample {
            prompt: prompt.to_string(),
            completions,
            fields,
        });
    }
    if out.is_empty() {
        anyhow::bail!("{} holds no joint samples", path.display());
    }
    Ok(out)
}

fn write_report(out: &std::path::Path, json: &serde_json::Value) -> anyhow::Result<()> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(json)?;
    std::fs::write(out, &text).with_context(|| format!("writing {}", out.display()))?;
    println!("{text}");
    Ok(())
}

fn run_models(a: ModelsArgs) -> anyhow::Result<()> {
    let models = if a.models.is_empty() {
        vec!["builtin:tiny".to_string(), "builtin:small".to_string()]
    } else {
        a.models.clone()
    };
    let opts = ModelBenchOptions {
        sample_batch: a.sample_batch,
        new_tokens: a.new_tokens,
        prompt_tokens: a.prompt_tokens.max(1),
        train_batch: a.train_batch,
        train_seq: a.train_seq,
        repeats: a.repeats.max(1),
        rollout_copies: match a.rollout_copies.as_str() {
            "always" => RolloutCopies::Always,
            "never" => RolloutCopies::Never,
            _ => RolloutCopies::Auto,
        },
        sampling_bf16: a.sampling_dtype == "bf16",
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
            "  sampling {:.1} tok/s ({} x {} new tokens, {}, {:.2} s); train step fwd {:.3} s + bwd {:.3} s = {:.1} GFLOP/s",
            r.sampling.tokens_per_s, opts.sample_batch, opts.new_tokens, r.sampling.sampling_dtype, r.sampling.seconds,
            r.train_step.forward_s, r.train_step.backward_s, r.train_step.gflops_per_s
        );
        reports.push(r);
    }
    let json = serde_json::json!({
        "machine": comlrl::bench::sys::machine(),
        "models": reports,
    });
    write_report(&a.out, &json)
}
