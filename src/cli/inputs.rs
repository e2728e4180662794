//! Options shared by the model-inspection commands: which model, and text or token-id inputs.
use anyhow::{bail, Context};
use candle_core::DType;
use comlrl::model::io::peft::Adapter;
use comlrl::model::{parse_dtype, LoadOptions, ModelSource, Policy};

#[derive(Debug, clap::Args)]
pub struct ModelArgs {
    /// A hub id (`Qwen/Qwen2.5-0.5B`), a local directory in HF layout, a `*.gguf` file, or `builtin:tiny`.
    #[arg(long)]
    pub model: String,
    /// Compute dtype: f32 (default), bf16 or f16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Seed of a built-in model's random weights.
    #[arg(long, default_value_t = 0)]
    pub model_seed: u64,
}

impl ModelArgs {
    pub fn load(&self) -> anyhow::Result<Policy> {
        self.load_with_base(None)
    }

    /// As [`Self::load`], the projections' weights held in `base_dtype` when given.
    fn load_with_base(&self, base_dtype: Option<DType>) -> anyhow::Result<Policy> {
        let cwd = std::env::current_dir().context("reading the current directory")?;
        let source = ModelSource::parse(&self.model, &cwd)?;
        let opts = LoadOptions {
            dtype: parse_dtype(&self.dtype).context("--dtype")?,
            seed: self.model_seed,
            base_dtype,
            ..LoadOptions::default()
        };
        Ok(Policy::load(&source, &opts)?)
    }
}

/// The model and the prompt, as `generate` and `score` take them.
#[derive(Debug, clap::Args)]
pub struct ModelPromptArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A PEFT LoRA adapter directory (`adapter_config.json`, `adapter_model.safetensors`, as a
    /// run with `agents.adapter` writes to `models/agent_i`) applied on `--model`.
    #[arg(long)]
    pub adapter: Option<std::path::PathBuf>,
    /// The dtype the base's projections are held in under `--adapter`: f32 (default), bf16 or
    /// q8_0, as a run with `agents.base_dtype` holds them (the weights the adapter was trained
    /// on, in less memory).
    #[arg(long, requires = "adapter", default_value = "f32")]
    pub base_dtype: String,
    #[command(flatten)]
    pub prompt: PromptArgs,
}

impl ModelPromptArgs {
    /// The loaded model (with its adapter) and the prompt's token ids.
    pub fn load(&self) -> anyhow::Result<(Policy, Vec<u32>)> {
        let base_dtype = match self.base_dtype.as_str() {
            "f32" => None,
            held @ ("bf16" | "q8_0") if self.model.dtype != "f32" => bail!(
                "--base-dtype {held} holds an f32 model's projections in {held}; with --dtype {} \
                 the model is not f32: drop one of the two",
                self.model.dtype
            ),
            "bf16" => Some(DType::BF16),
            "q8_0" => Some(comlrl::model::kernels::q8_weight::HELD),
            other => bail!("--base-dtype: `{other}` is not f32, bf16 or q8_0"),
        };
        let mut policy = self.model.load_with_base(base_dtype)?;
        if let Some(dir) = &self.adapter {
            let (dtype, dev) = (policy.model.dtype(), policy.model.device().clone());
            let adapter = Adapter::load(dir, &policy.config, dtype, &dev).context("--adapter")?;
            policy = policy.with_adapter(adapter).context("--adapter")?;
            policy.weights_changed()?;
        }
        let prompt = self.prompt.ids(&policy)?;
        Ok((policy, prompt))
    }
}

/// Parses `1,2,3` into token ids, checking them against the vocabulary size.
pub fn parse_ids(flag: &str, s: &str, vocab: usize) -> anyhow::Result<Vec<u32>> {
    let mut out = Vec::new();
    for (i, part) in s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .enumerate()
    {
        let id: u32 = part
            .parse()
            .with_context(|| format!("{flag}: item {} `{part}` is not a token id", i + 1))?;
        if id as usize >= vocab {
            bail!("{flag}: token id {id} is outside the model's vocabulary (size {vocab})");
        }
        out.push(id);
    }
    Ok(out)
}

/// Token ids from either a text flag or an ids flag (clap makes them exclusive and required).
pub fn ids_from(
    policy: &Policy,
    text: &Option<String>,
    ids: &Option<String>,
    flag: &str,
) -> anyhow::Result<Vec<u32>> {
    match (text, ids) {
        (Some(t), _) => Ok(policy.tokenizer.encode(t)?),
        (None, Some(s)) => parse_ids(&format!("--{flag}-ids"), s, policy.config.vocab_size),
        (None, None) => bail!("give --{flag} TEXT or --{flag}-ids 1,2,3"),
    }
}

/// The prompt of `generate` and `score`: text or token ids.
#[derive(Debug, clap::Args)]
pub struct PromptArgs {
    /// Prompt text (encoded without added special tokens).
    #[arg(
        long,
        conflicts_with = "prompt_ids",
        required_unless_present = "prompt_ids"
    )]
    pub prompt: Option<String>,
    /// Prompt as comma-separated token ids.
    #[arg(long)]
    pub prompt_ids: Option<String>,
}

impl PromptArgs {
    /// The prompt's token ids; an empty prompt is an error (generation and scoring need one token).
    pub fn ids(&self, policy: &Policy) -> anyhow::Result<Vec<u32>> {
        let ids = ids_from(policy, &self.prompt, &self.prompt_ids, "prompt")?;
        if ids.is_empty() {
            bail!("the prompt is empty: give at least one token");
        }
        Ok(ids)
    }
}
