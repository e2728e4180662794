//! A loaded policy: config, trainable weights (a `VarMap` named as the checkpoint), the model
//! built over them, the tokenizer and the special token ids; loading from any `ModelSource` and
//! saving back to HF layout. With a LoRA adapter ([`Policy::with_adapter`]) the base is frozen
//! (shared, never a variable) and the adapter's tensors are the trainable variables, saved as a
//! PEFT adapter directory.
use crate::model::decoder::adapted;
use crate::model::decoder::causal_lm::CausalLm;
use crate::model::decoder::config::ModelConfig;
use crate::model::decoder::forward::Mode;
use crate::model::decoder::lora;
use crate::model::decoder::lora_dropout::LoraDropout;
use crate::model::decoder::tensors;
use crate::model::error::{Error, Result};
use crate::model::io::gguf::export::{self, Exported, Quant};
use crate::model::io::model_dir::{
    copy, dir_chat_template, ids_of, read_json, special_ids, write_json,
};
use crate::model::io::peft::Adapter;
use crate::model::io::safetensors;
use crate::model::io::source::ModelSource;
use crate::model::kernels::{f32_panels, q8_weight};
use crate::model::sample::copies::{CopyProducts, SamplingCopies, SamplingWeights};
use crate::model::sample::generate::Sampler;
use crate::model::tokenizer::{Tokenizer, BYTE_EOS_ID};
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Parses a dtype name as written in scenarios and on the command line.
pub fn parse_dtype(s: &str) -> Result<DType> {
    match s {
        "f32" | "float32" => Ok(DType::F32),
        "bf16" | "bfloat16" => Ok(DType::BF16),
        "f16" | "float16" => Ok(DType::F16),
        other => Err(Error::Invalid(format!(
            "unknown dtype `{other}`: use f32 (default on CPU), bf16 or f16"
        ))),
    }
}

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::BF16 => "bfloat16",
        DType::F16 => "float16",
        _ => "float32",
    }
}

/// With [`RolloutCopies::Auto`], models whose weights take at most this many bytes sample with
/// transposed copies: the copy costs at most this much, and decoding at such sizes is bound by
/// the products' packing, not by memory (`comlrl bench models --rollout-copies never|always`
/// compares the two).
pub const SMALL_MODEL_BYTES: usize = 64 << 20;

/// Whether f32 sampling keeps contiguous transposed copies of the weights: faster small-M
/// products (the more so the smaller the model), one extra copy of the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RolloutCopies {
    /// Copies for models of at most [`SMALL_MODEL_BYTES`], where they cost little; none above,
    /// where memory is the tighter limit (every agent's weights twice over).
    #[default]
    Auto,
    /// Always keep the copies.
    Always,
    /// Never: decode products run as W · xᵀ on the checkpoint-layout weights.
    Never,
}

impl RolloutCopies {
    /// The f32 sampling copies of a model above [`SMALL_MODEL_BYTES`] (or any model with
    /// `Never`): with `Auto`, the MLP's weights packed in panels where the CPU has AVX-512F
    /// (`kernels::f32_panels`: decode products stream them faster than the checkpoint layout;
    /// freed during update rounds, so a run's peak stays the update's); none with `Never` or
    /// elsewhere.
    pub fn large(self, device: &Device) -> SamplingWeights {
        let panels = self != RolloutCopies::Never && device.is_cpu() && f32_panels::usable();
        match panels {
            true => SamplingWeights::MlpPanels,
            false => SamplingWeights::Checkpoint,
        }
    }

    /// Whether a model with `weight_bytes` of weights gets the copies.
    pub fn wanted(self, weight_bytes: usize) -> bool {
        match self {
            RolloutCopies::Auto => weight_bytes <= SMALL_MODEL_BYTES,
            RolloutCopies::Always => true,
            RolloutCopies::Never => false,
        }
    }
}

/// How to load a policy.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Training/compute dtype; checkpoints of any float dtype are converted to it.
    pub dtype: DType,
    /// Where the weights live.
    pub device: Device,
    /// Seed of built-in models' random weights.
    pub seed: u64,
    /// Transposed f32 copies of the weights for sampling (see [`RolloutCopies`]).
    pub rollout_copies: RolloutCopies,
    /// The dtype sampling decodes in: f32 (the weights themselves) or bf16 (a bf16 copy of
    /// the weights, f32 accumulation; takes precedence over `rollout_copies`).
    pub sampling_dtype: DType,
    /// Build the sampling copies while loading; `false` leaves them to the first
    /// [`Policy::weights_changed`], on the caller's thread: glibc gives each thread its own
    /// arena, and copies built on a loader thread, freed for an update round, could not serve
    /// the round's gradients (the process would hold them twice until the next trim).
    pub copies_now: bool,
    /// The dtype the projections' weights are held in (`agents.base_dtype`): `None` as
    /// `dtype`, or bf16 for a base an adapter freezes ([`Policy::with_adapter`]; full
    /// fine-tuning needs f32 weights, which the scenario enforces), or `kernels::q8_weight::HELD`
    /// for GGUF Q8_0 blocks (kept as a Q8_0 GGUF stores them, else quantized at load).
    /// Converted tensor by tensor as they load; the products widen or dequantize them block by
    /// block (`kernels::{bf16_weight, q8_weight}`), and sampling reads them with no copy of its
    /// own (with `sampling_dtype` bf16, a bf16 base through the bf16 copies' kernel, in place:
    /// `sample::copies`).
    pub base_dtype: Option<DType>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            dtype: DType::F32,
            device: Device::Cpu,
            seed: 0,
            rollout_copies: RolloutCopies::Auto,
            sampling_dtype: DType::F32,
            copies_now: true,
            base_dtype: None,
        }
    }
}

/// One agent's model: weights, config and tokenizer, with the trainable variables.
pub struct Policy {
    /// Where it was loaded from.
    pub source: ModelSource,
    /// Its `config.json`.
    pub config: ModelConfig,
    /// The network.
    pub model: CausalLm,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// Generation stops at any of these.
    pub eos_ids: Vec<u32>,
    /// Token id used to pad batches.
    pub pad_id: u32,
    varmap: VarMap,
    names: Vec<String>,
    dir: Option<PathBuf>,
    /// The source's `config.json` as read (None for built-in models): saved back with only the
    /// dtype fields changed, so every key the source had survives and none is added.
    source_config: Option<serde_json::Value>,
    sampling_weights: SamplingWeights,
    /// The copies of the weights sampling multiplies by, as `sampling_weights` says.
    copies: SamplingCopies,
    /// The chat template (tokenizer_config.json / chat_template.jinja, or a GGUF's
    /// `tokenizer.chat_template`).
    chat_template: Option<String>,
    /// `tokenizer_config.json` to write on save when there is no source directory to copy it
    /// from (GGUF sources).
    tokenizer_config: Option<serde_json::Value>,
    /// The LoRA adapter on the frozen base, whose tensors are then the trainable variables.
    adapter: Option<Adapter>,
    /// With an adapter: the sampling copies of the (frozen) base are built as
    /// `sampling_weights` says, so [`Policy::weights_changed`] has nothing to rebuild. Shared,
    /// with the copies, by the policies of [`Policy::share_base`].
    base_copies_built: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The optimizer step the next update's gradients are for, as the trainer set it: with an
    /// adapter's dropout, which masks the update draws ([`Policy::lora_dropout`]).
    update_step: std::sync::atomic::AtomicU64,
}

impl Policy {
    /// Loads the model, config and tokenizer at `source` as `opts` say.
    pub fn load(source: &ModelSource, opts: &LoadOptions) -> Result<Self> {
        if let ModelSource::Gguf(path) = source {
            return Self::load_gguf(source.clone(), path, opts);
        }
        match source.resolve_dir()? {
            None => {
                let ModelSource::Builtin(name) = source else {
                    return Err(Error::Internal("builtin without a name".into()));
                };
                let cfg = ModelConfig::preset(name).ok_or_else(|| Error::Resolve {
                    model: source.describe(),
                    msg: "unknown preset".into(),
                })?;
                let tensors = tensors::random_tensors(
                    &cfg,
                    opts.seed,
                    opts.dtype,
                    opts.base_dtype,
                    &opts.device,
                )?;
                let tokenizer = Tokenizer::byte_level()?;
                Self::assemble(
                    source.clone(),
                    cfg,
                    tensors,
                    tokenizer,
                    vec![BYTE_EOS_ID],
                    BYTE_EOS_ID,
                    None,
                    opts,
                )
            }
            Some(dir) => Self::load_dir(source.clone(), &dir, opts),
        }
    }

    fn load_dir(source: ModelSource, dir: &Path, opts: &LoadOptions) -> Result<Self> {
        let cfg_path = dir.join("config.json");
        if !cfg_path.is_file() {
            return Err(Error::file(
                dir,
                "no config.json: not a model directory in Hugging Face layout",
            ));
        }
        let cfg = ModelConfig::from_file(&cfg_path)?;
        let source_config = read_json(&cfg_path)?;
        let tok_path = dir.join("tokenizer.json");
        if !tok_path.is_file() {
            return Err(Error::file(
                dir,
                "no tokenizer.json (the fast-tokenizer file) next to config.json",
            ));
        }
        let tokenizer = Tokenizer::from_file(&tok_path)?;
        let files = safetensors::checkpoint_files(dir)?;
        let tensors =
            safetensors::load_tensors(&cfg, &files, opts.dtype, opts.base_dtype, &opts.device)?;
        let (eos_ids, pad_id) = special_ids(dir, &cfg, &tokenizer)?;
        let mut policy = Self::assemble(
            source,
            cfg,
            tensors,
            tokenizer,
            eos_ids,
            pad_id,
            Some(dir.to_path_buf()),
            opts,
        )?;
        policy.source_config = source_config;
        policy.chat_template = dir_chat_template(dir)?;
        Ok(policy)
    }

    /// A llama.cpp GGUF file: config from its metadata, tokenizer rebuilt from
    /// `tokenizer.ggml.*`, weights dequantized to `opts.dtype`.
    fn load_gguf(source: ModelSource, path: &Path, opts: &LoadOptions) -> Result<Self> {
        let g = crate::model::io::gguf::load(path, opts.dtype, opts.base_dtype, &opts.device)?;
        let cfg = crate::model::io::gguf::read::model_config(path, &g.config)?;
        let tokenizer = Tokenizer::from_json(&g.tokenizer)
            .map_err(|e| Error::file(path, format!("tokenizer from GGUF metadata: {e}")))?;
        let tensors = crate::model::io::gguf::read::take_expected(&cfg, g.tensors, path)?;
        let eos_ids = ids_of(cfg.eos_token_id.as_ref());
        if eos_ids.is_empty() {
            return Err(Error::file(
                path,
                "no `tokenizer.ggml.eos_token_id` in the GGUF metadata: generation would never stop",
            ));
        }
        let pad_id = ids_of(cfg.pad_token_id.as_ref())
            .first()
            .copied()
            .unwrap_or(eos_ids[0]);
        let mut tc = serde_json::json!({
            "tokenizer_class": "PreTrainedTokenizerFast",
            "clean_up_tokenization_spaces": false,
            "model_max_length": cfg.max_position_embeddings,
        });
        for (k, v) in &g.special_tokens {
            tc[k] = v.clone();
        }
        if let Some(t) = &g.chat_template {
            tc["chat_template"] = t.clone().into();
        }
        let mut policy =
            Self::assemble(source, cfg, tensors, tokenizer, eos_ids, pad_id, None, opts)?;
        policy.source_config = Some(g.config);
        policy.chat_template = g.chat_template;
        policy.tokenizer_config = Some(tc);
        Ok(policy)
    }

    /// The `tokenizer_config.json` built from GGUF metadata (special tokens, chat template);
    /// `None` for sources with tokenizer files of their own.
    pub fn built_tokenizer_config(&self) -> Option<&serde_json::Value> {
        self.tokenizer_config.as_ref()
    }

    /// The model's chat template, if its tokenizer files (or GGUF metadata) carry one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        source: ModelSource,
        config: ModelConfig,
        mut tensors: HashMap<String, Tensor>,
        tokenizer: Tokenizer,
        eos_ids: Vec<u32>,
        pad_id: u32,
        dir: Option<PathBuf>,
        opts: &LoadOptions,
    ) -> Result<Self> {
        let varmap = VarMap::new();
        let names: Vec<String> = tensors::expected_tensors(&config)?
            .into_iter()
            .map(|(n, _, _)| n)
            .collect();
        {
            let mut data = varmap
                .data()
                .lock()
                .map_err(|_| Error::Internal("var map lock poisoned".into()))?;
            for name in &names {
                let t = tensors
                    .remove(name)
                    .ok_or_else(|| Error::Internal(format!("tensor {name} not prepared")))?;
                // A loader that read it in the model's dtype (GGUF): the base's dtype now,
                // one tensor at a time.
                let held = tensors::held_dtype(name, opts.dtype, opts.base_dtype);
                let t = tensors::hold(&t, held)?;
                data.insert(name.clone(), Var::from_tensor(&t)?);
            }
        }
        for (what, id) in eos_ids
            .iter()
            .map(|&i| ("eos_token_id", i))
            .chain([("pad_token_id", pad_id)])
        {
            if id as usize >= config.vocab_size {
                let at = dir.clone().unwrap_or_default();
                return Err(Error::file(
                    at,
                    format!(
                        "{what} {id} is outside the vocabulary (vocab_size {})",
                        config.vocab_size
                    ),
                ));
            }
        }
        let vb = VarBuilder::from_varmap(&varmap, opts.dtype, &opts.device);
        let model = CausalLm::new(&config, vb)?;
        // A VarBuilder over a VarMap creates (randomly initialised) any variable it is asked
        // for that is not there: the model must read exactly the expected tensors.
        {
            let data = varmap
                .data()
                .lock()
                .map_err(|_| Error::Internal("var map lock poisoned".into()))?;
            if let Some(extra) = data.keys().find(|k| !names.contains(k)) {
                return Err(Error::Internal(format!(
                    "the model reads tensor `{extra}`, which tensors::expected_tensors does not list"
                )));
            }
        }
        let weight_bytes: usize = varmap
            .all_vars()
            .iter()
            .map(|v| v.elem_count() * v.dtype().size_in_bytes())
            .sum();
        let copies = opts.rollout_copies.wanted(weight_bytes);
        let sampling_weights = match (opts.sampling_dtype, copies) {
            (DType::BF16, _) => SamplingWeights::Bf16,
            (DType::F32, true) => SamplingWeights::Transposed,
            (DType::F32, false) => opts.rollout_copies.large(&opts.device),
            (other, _) => {
                return Err(Error::Invalid(format!(
                    "sampling dtype {other:?} is not supported: use f32 or bf16"
                )))
            }
        };
        let copies = SamplingCopies::for_model(&model);
        if opts.copies_now {
            copies.refresh(&model, sampling_weights)?;
        }
        Ok(Self {
            source,
            config,
            model,
            tokenizer,
            eos_ids,
            pad_id,
            varmap,
            names,
            dir,
            source_config: None,
            sampling_weights,
            copies,
            chat_template: None,
            tokenizer_config: None,
            adapter: None,
            base_copies_built: Default::default(),
            update_step: Default::default(),
        })
    }

    /// This policy as a frozen base with `adapter` on it: the base's tensors are shared (not
    /// copied) and no longer variables; [`Policy::vars`] is then the adapter's tensors and
    /// [`Policy::save`] writes a PEFT adapter directory. Replaces any adapter it had. Its
    /// sampling copies are built on the next [`Policy::weights_changed`] (until then sampling
    /// multiplies by the base's own tensors).
    pub fn with_adapter(mut self, adapter: Adapter) -> Result<Self> {
        self.model = self.adapted_model(&adapter)?;
        self.copies = SamplingCopies::for_model(&self.model);
        self.adapter = Some(adapter);
        // Fresh copies for the new model's tensors, and a flag of their own.
        self.base_copies_built = Default::default();
        Ok(self)
    }

    /// Another policy on this one's base (the same tensors: one copy in memory however many
    /// agents share it) with `adapter` on it; this policy is unchanged. When this policy has an
    /// adapter (its base frozen), the new one also shares its sampling copies of the base (the
    /// same weights, so the same copies: one set however many agents sample), built by whichever
    /// of them calls [`Policy::weights_changed`] first; otherwise the new policy's own copies
    /// are built on its first [`Policy::weights_changed`].
    pub fn share_base(&self, adapter: Adapter) -> Result<Self> {
        let model = self.adapted_model(&adapter)?;
        // A frozen base's tensors keep their ids through `attach` (detaching a tensor that is
        // no variable is the tensor itself), so this policy's slots, keyed by id, serve the new
        // model; a full model's variables are detached into new tensors, which need their own.
        let (copies, built) = match self.adapter.is_some() {
            true => (self.copies.clone(), self.base_copies_built.clone()),
            false => (SamplingCopies::for_model(&model), Default::default()),
        };
        Ok(Self {
            source: self.source.clone(),
            config: self.config.clone(),
            model,
            tokenizer: self.tokenizer.clone(),
            eos_ids: self.eos_ids.clone(),
            pad_id: self.pad_id,
            varmap: self.varmap.clone(),
            names: self.names.clone(),
            dir: self.dir.clone(),
            source_config: self.source_config.clone(),
            sampling_weights: self.sampling_weights,
            copies,
            chat_template: self.chat_template.clone(),
            tokenizer_config: self.tokenizer_config.clone(),
            adapter: Some(adapter),
            base_copies_built: built,
            update_step: Default::default(),
        })
    }

    fn adapted_model(&self, adapter: &Adapter) -> Result<CausalLm> {
        adapter
            .spec
            .validate(&self.config)
            .map_err(|e| Error::Invalid(format!("adapter on {}: {e}", self.source.describe())))?;
        Ok(adapted::attach(
            &self.model,
            &adapter.spec,
            &adapter.by_key(),
            adapter.dropout,
        )?)
    }

    /// A full model with `adapter` merged into this policy's base: every targeted projection's W
    /// replaced by W + s·B·A (`lora::merged_weight`), every other tensor, the config, tokenizer
    /// and special ids as this policy has them. The result has no adapter, so [`Policy::save`]
    /// writes an HF model directory and [`Policy::export_gguf`] a GGUF of the merged model.
    /// `adapter` is checked against the base first (targets, rank against each projection's
    /// dims, every tensor's shape): a mismatch is an error naming the projection.
    pub fn merge(&self, adapter: &Adapter) -> Result<Self> {
        let model = self.source.describe();
        adapter
            .spec
            .validate(&self.config)
            .map_err(|e| Error::Invalid(format!("adapter on {model}: {e}")))?;
        let pairs = adapter.by_key();
        let scale = adapter.spec.scale();
        let mut tensors: HashMap<String, Tensor> = self
            .base_vars()
            .into_iter()
            .map(|(n, v)| {
                // A base held as Q8_0 blocks merges (and exports) its dequantized values.
                let t = v.as_tensor().detach();
                match q8_weight::is_q8_weight(&t) {
                    true => Ok((n, q8_weight::dequantize(&t)?.to_dtype(self.model.dtype())?)),
                    false => Ok((n, t)),
                }
            })
            .collect::<Result<_>>()?;
        for (l, m, ab, _) in adapter.spec.tensors(&self.config) {
            if ab != "lora_A" {
                continue;
            }
            let name = crate::model::io::peft::base_weight_name(l, m);
            let w = tensors.get(&name).ok_or_else(|| {
                Error::Invalid(format!(
                    "adapter on {model}: the base has no tensor `{name}` for layer {l} {m}"
                ))
            })?;
            let (a, b) = match (pairs.get(&(l, m, "lora_A")), pairs.get(&(l, m, "lora_B"))) {
                (Some(a), Some(b)) => (a.as_tensor(), b.as_tensor()),
                _ => {
                    return Err(Error::Internal(format!(
                        "adapter on {model}: layer {l} {m} lacks lora_A or lora_B"
                    )))
                }
            };
            let merged = lora::merged_weight(w, a, b, scale).map_err(|e| Error::Export {
                model: model.clone(),
                msg: format!("merging the adapter into layer {l} {m}"),
                source: Some(Box::new(e)),
            })?;
            tensors.insert(name, merged);
        }
        let opts = LoadOptions {
            dtype: self.model.dtype(),
            device: self.model.device().clone(),
            // An export never samples: no copies.
            rollout_copies: RolloutCopies::Never,
            copies_now: false,
            ..LoadOptions::default()
        };
        let mut merged = Self::assemble(
            self.source.clone(),
            self.config.clone(),
            tensors,
            self.tokenizer.clone(),
            self.eos_ids.clone(),
            self.pad_id,
            self.dir.clone(),
            &opts,
        )?;
        merged.source_config = self.source_config.clone();
        merged.chat_template = self.chat_template.clone();
        merged.tokenizer_config = self.tokenizer_config.clone();
        Ok(merged)
    }

    /// The LoRA adapter, if the policy has one.
    pub fn adapter(&self) -> Option<&Adapter> {
        self.adapter.as_ref()
    }

    /// Sets the optimizer step the next update's gradients are for (the trainer, before each
    /// mini-batch): it keys the masks of the adapter's dropout, so a resumed run draws the
    /// masks an uninterrupted one drew.
    pub fn set_update_step(&self, step: u64) {
        self.update_step
            .store(step, std::sync::atomic::Ordering::Relaxed);
    }

    /// The masks of an update pass over the sequences `seqs` (one stable id each within the
    /// mini-batch), `width` positions each, where the adapter has a dropout (else `None`):
    /// keyed by the adapter's dropout key and the update step ([`Policy::set_update_step`]).
    pub fn lora_dropout(&self, seqs: Vec<u64>, width: usize) -> Option<LoraDropout> {
        let ad = self.adapter.as_ref().filter(|a| a.dropout > 0.0)?;
        let step = self.update_step.load(std::sync::atomic::Ordering::Relaxed);
        let key = crate::model::decoder::lora_dropout::stream_key(ad.dropout_key, step);
        Some(LoraDropout::hashed(key, seqs, width))
    }

    /// The base model's weights as loaded, in checkpoint order (the trainable variables when
    /// there is no adapter; frozen when there is one).
    pub fn base_vars(&self) -> Vec<(String, Var)> {
        let data = match self.varmap.data().lock() {
            Ok(d) => d,
            Err(p) => p.into_inner(),
        };
        self.names
            .iter()
            .filter_map(|n| data.get(n).map(|v| (n.clone(), v.clone())))
            .collect()
    }

    /// Call after the weights changed in place (an optimizer step, a checkpoint restore) so
    /// that sampling sees them.
    /// With an adapter the copies are of the frozen base, which never changes: they are built
    /// once (and again only after [`Policy::release_sampling_copies`]); the adapters are read
    /// by the products themselves.
    pub fn weights_changed(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        if self.adapter.is_some() && self.base_copies_built.load(Ordering::Acquire) {
            return Ok(());
        }
        self.copies.refresh(&self.model, self.sampling_weights)?;
        self.base_copies_built
            .store(self.adapter.is_some(), Ordering::Release);
        Ok(())
    }

    /// Frees the bf16 sampling copies and the MLP's f32 panels (an update round does not read
    /// them, and they are half a model or more); sampling needs [`Policy::weights_changed`]
    /// first, which rebuilds them. Returns whether there were any: the transposed f32 copies
    /// (models of at most [`SMALL_MODEL_BYTES`], where memory is no concern) stay.
    pub fn release_sampling_copies(&self) -> Result<bool> {
        use SamplingWeights::{Bf16, MlpPanels};
        if !matches!(self.sampling_weights, Bf16 | MlpPanels) {
            return Ok(false);
        }
        self.base_copies_built
            .store(false, std::sync::atomic::Ordering::Release);
        self.copies
            .refresh(&self.model, SamplingWeights::Checkpoint)?;
        Ok(true)
    }

    /// Rebuilds the sampling copies as `kind` says (for comparing kinds; loading chose one and
    /// [`Policy::weights_changed`] keeps to it).
    pub fn refresh_sampling_copies(&self, kind: SamplingWeights) -> Result<()> {
        self.base_copies_built
            .store(false, std::sync::atomic::Ordering::Release);
        self.copies.refresh(&self.model, kind)?;
        Ok(())
    }

    /// The model with its sampling copies, for [`crate::model::generate`].
    pub fn sampler(&self) -> Sampler<'_> {
        Sampler {
            model: &self.model,
            copies: &self.copies,
        }
    }

    /// The products of a forward of this policy in `mode`: its sampling copies where they
    /// serve `mode` (see `model::sample::copies`), else the weights themselves.
    pub fn products(&self, mode: Mode) -> CopyProducts<'_> {
        self.copies.products(mode)
    }

    /// Writes this policy to `out` as a llama.cpp GGUF with matrices in `quant` (with an
    /// adapter: the merged model, [`Policy::merge`]).
    pub fn export_gguf(&self, quant: Quant, out: &Path) -> Result<()> {
        // With an adapter, the GGUF is of the merged model (llama.cpp has no separate LoRA
        // term in the file this writes).
        if let Some(a) = &self.adapter {
            return self.merge(a)?.export_gguf(quant, out);
        }
        let model = Exported {
            model: self.source.describe(),
            config: &self.config,
            saved_config: self.saved_config()?,
            vars: self.vars(),
            tokenizer: &self.tokenizer,
            eos_id: *self.eos_ids.first().unwrap_or(&self.pad_id),
            pad_id: self.pad_id,
            chat_template: self.chat_template(),
        };
        export::export(&model, quant, out)
    }

    /// Trainable variables in checkpoint order (the tied embedding appears once); with an
    /// adapter, the adapter's tensors under PEFT's names.
    pub fn vars(&self) -> Vec<(String, Var)> {
        match &self.adapter {
            Some(a) => a.vars(),
            None => self.base_vars(),
        }
    }

    /// Number of trainable parameters.
    pub fn num_parameters(&self) -> usize {
        self.vars().iter().map(|(_, v)| v.elem_count()).sum()
    }

    /// Saves weights, config.json, generation_config.json and tokenizer files in HF layout;
    /// with an adapter, the adapter directory as PEFT writes it (the base is unchanged).
    /// Written to a temporary sibling directory first and renamed into place, so `dir` is
    /// never left half-written.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let parent = dir.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| "model".into());
        let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
        }
        std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
        self.write_files(&tmp)?;
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        std::fs::rename(&tmp, dir).map_err(|e| Error::io(dir, e))
    }

    /// The `config.json` written with the weights: the source's own file with only the dtype
    /// fields set to the weights' dtype (`torch_dtype` for transformers 4, `dtype` for 5);
    /// for built-in models the preset, with its special token ids and no null keys.
    pub fn saved_config(&self) -> Result<serde_json::Value> {
        let mut cfg = match &self.source_config {
            Some(v) => v.clone(),
            None => {
                let mut v = serde_json::to_value(&self.config)
                    .map_err(|e| Error::serialize("the model config", e))?;
                v["eos_token_id"] = self.eos_ids.first().copied().unwrap_or(self.pad_id).into();
                v["pad_token_id"] = self.pad_id.into();
                v["bos_token_id"] = self.pad_id.into();
                v
            }
        };
        let dt = dtype_name(self.model.dtype());
        cfg["torch_dtype"] = dt.into();
        cfg["dtype"] = dt.into();
        Ok(cfg)
    }

    fn write_files(&self, out: &Path) -> Result<()> {
        if let Some(a) = &self.adapter {
            return a.save(out, &self.source.describe());
        }
        let tensors: BTreeMap<String, Tensor> = self
            .vars()
            .into_iter()
            .map(|(n, v)| {
                // A base held as Q8_0 blocks merges (and exports) its dequantized values.
                let t = v.as_tensor().detach();
                match q8_weight::is_q8_weight(&t) {
                    true => Ok((n, q8_weight::dequantize(&t)?.to_dtype(self.model.dtype())?)),
                    false => Ok((n, t)),
                }
            })
            .collect::<Result<_>>()?;
        safetensors::save_tensors(&tensors, &out.join("model.safetensors"))?;
        write_json(&out.join("config.json"), &self.saved_config()?)?;
        let src_gen = self.dir.as_ref().map(|d| d.join("generation_config.json"));
        match src_gen.filter(|p| p.is_file()) {
            Some(p) => copy(&p, &out.join("generation_config.json"))?,
            None => {
                let eos: serde_json::Value = if self.eos_ids.len() == 1 {
                    self.eos_ids[0].into()
                } else {
                    self.eos_ids.clone().into()
                };
                let g = serde_json::json!({"eos_token_id": eos, "pad_token_id": self.pad_id, "bos_token_id": self.pad_id});
                write_json(&out.join("generation_config.json"), &g)?;
            }
        }
        match &self.dir {
            Some(d) => {
                copy(&d.join("tokenizer.json"), &out.join("tokenizer.json"))?;
                for f in [
                    "tokenizer_config.json",
                    "special_tokens_map.json",
                    "vocab.json",
                    "merges.txt",
                    "chat_template.jinja",
                ] {
                    if d.join(f).is_file() {
                        copy(&d.join(f), &out.join(f))?;
                    }
                }
            }
            None => {
                self.tokenizer.save(&out.join("tokenizer.json"))?;
                if let Some(tc) = &self.tokenizer_config {
                    return write_json(&out.join("tokenizer_config.json"), tc);
                }
                let tc = serde_json::json!({
                    "tokenizer_class": "PreTrainedTokenizerFast",
                    "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                    "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
                    "clean_up_tokenization_spaces": false, "model_max_length": self.config.max_position_embeddings
                });
                write_json(&out.join("tokenizer_config.json"), &tc)?;
            }
        }
        Ok(())
    }
}
