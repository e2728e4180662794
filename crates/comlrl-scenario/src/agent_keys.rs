//! The `agents` section's key table: every per-agent key once, with its type, default, reason,
//! check and meaning (`keys.rs` has the macro and the row syntax). [`RawAgent`] (one list
//! entry), [`RawAgentGroup`] (`{count, ...}`), [`AgentPlan`] with its [`Sampling`], the
//! defaults, range checks (under `agents.key` or `agents[i].key`), the resolved-YAML writer and
//! the docs table in docs/scenario.md all derive from it.
//!
//! To add a key: one row in `keys` (or in `group sampling` for a sampling setting); a default
//! may name `cx` ([`AgentContext`]: the agent's index, the trainer's learning rate, ...) and the
//! keys above it. Then read `agent.<name>` where the trainer uses it and regenerate the docs
//! table with `COMLRL_BLESS=1 cargo test --release -p comlrl-scenario --test scenario
//! key_tables`; `tests/cli/scenario_keys_read.rs` (main crate) fails until code under src/ reads
//! it. A key whose value needs resolving (a path, a parsed template) goes in `resolved` with a
//! `via` resolver and an `emit` writer.
use crate::agents::{compile_template, model_ref};
use crate::chat_spec;
use crate::keys::{
    at_least, if_set, learning_rate as lr_check, non_negative, section, Bad, SectionContext,
};
use crate::plan::{
    AdapterPlan, BaseDtype, ChatTemplateSpec, DatasetPlan, Dtype, ModelRef, ModelSource,
};
use crate::raw::RawAdapter;
use crate::template::Template;
use std::path::Path;

/// Agents in `agents: {model: ...}` without `count` (CoMLRL `num_agents`), and the count
/// assumed when `agents` is missing.
pub(crate) const DEFAULT_COUNT: usize = 2;

/// What an agent's defaults and resolvers need from the rest of the scenario.
pub(crate) struct AgentContext<'a> {
    /// The agent's position in `agents`, from 0.
    pub index: usize,
    /// `trainer.agent_learning_rate`: the learning rate of an agent that sets none.
    pub default_lr: f64,
    /// The scenario's directory (relative model and chat-template paths).
    pub base: &'a Path,
    /// The dataset, when it loaded: templates are checked against its fields.
    pub dataset: Option<&'a DatasetPlan>,
}

impl SectionContext for AgentContext<'_> {}

section! {
    raw /// One entry of `agents: [...]` (heterogeneous agents); also the resolved scenario's form.
        RawAgent;
    outer /// `agents: {count: N, model: ..., ...}` — N agents with the same settings.
        RawAgentGroup;
    plan /// One agent: model, dtype, sampling, learning rate and prompt template.
        AgentPlan, context cx: AgentContext<'_>;
    first {
        /// Shared form only: number of agents (CoMLRL `num_agents`). `1` is single-agent GRPO.
        count: usize = DEFAULT_COUNT, kind "integer ≥ 1", why "CoMLRL",
            check at_least(1, "use `count: 2` for two cooperating agents (1 = single-agent GRPO)");
    }
    computed {
        /// The agent's position in `agents`, from 0.
        index: usize = cx.index;
    }
    required {
        /// `builtin:<name>` (`builtin:tiny`: a ~0.1M-parameter model with random weights and a
        /// byte tokenizer, no download), a local directory in Hugging Face layout (written with
        /// `./`, `../` or `/`, or any relative path that exists as a directory; relative to the
        /// scenario file; no `~` expansion), a llama.cpp `*.gguf` file, or a hub id
        /// `owner/name` (optionally `@revision`), found in the HF cache or downloaded. A missing
        /// local directory or file, or a string that is none of these, is an error.
        model: String => ModelRef, kind "string",
            via |d, p, spec| model_ref(d, &p.key("model"), spec, cx.base),
            emit model_setting;
    }
    keys {
        /// Weight dtype during training. `auto` lets the model loader choose: f32 on CPU, where
        /// half-precision matmuls are slow or unsupported. Other spellings (`fp16`, `bfloat16`)
        /// are errors with the right spelling suggested.
        dtype: Dtype = Dtype::Auto, kind "`auto` \\| `f32` \\| `bf16` \\| `f16`",
            why "the loader's choice";
        /// Numeric type sampling decodes in: `f32` uses the trained weights themselves; `bf16`
        /// decodes with bf16 copies of the weights (refreshed after every update) and f32
        /// sums, which halves the bytes each decode step reads (a frozen `base_dtype: bf16` base
        /// is read in place by the same kernel: no copy). The loss always re-scores the
        /// samples with the f32 weights. See docs/performance.md for when it pays.
        sampling_dtype: Dtype = Dtype::F32, kind "`f32` \\| `bf16`",
            why "exact: samples from the weights being trained", check sampling_precision;
        /// Keep copies of the weights that make f32 sampling faster: contiguous transposed
        /// copies for models of at most 64 MiB, and above that, on CPUs with AVX-512, the MLP's
        /// weights packed in f32 panels (freed during update rounds, so they raise a run's peak
        /// only where sampling, not the update, sets it). `false` decodes from the weights' own
        /// layout: no extra memory, slower. Ignored with `sampling_dtype: bf16`, whose bf16 copies take their
        /// place. See docs/performance.md.
        sampling_copies: bool = true, kind "bool",
            why "faster f32 decoding, in memory the update round needs anyway";
        /// How the frozen base of an agent with an `adapter` holds its projections' weights in
        /// memory: `f32`, `bf16` (half the bytes; the products read the bf16 values widened to
        /// f32 block by block) or `q8_0` (GGUF's Q8_0 blocks, 34 bytes per 32 weights, about a
        /// quarter of f32: a Q8_0 GGUF's blocks kept bit for bit, any other source quantized
        /// at load; the products dequantize them exactly panel by panel into f32, the
        /// activations never quantized, at the cost of that dequantization in every product).
        /// Either is stored once and shared by the agents on that base, and sampling decodes
        /// from it with no copy of its own (with `sampling_dtype: bf16`, a bf16 base through the
        /// bf16 sampling kernel, reading it in place: several times faster on CPUs with AMX).
        /// Embeddings, the LM head, norms and biases stay
        /// f32; the adapters, their gradients and AdamW state are f32 either way. Needs
        /// `adapter` (full fine-tuning updates f32 weights). See [adapters.md](adapters.md).
        base_dtype: BaseDtype = BaseDtype::F32, kind "`f32` \\| `bf16` \\| `q8_0`",
            why "the base exactly as it loads";
        /// This agent's AdamW learning rate, e.g. a smaller one for a larger model.
        learning_rate: f64 = cx.default_lr, kind "number > 0",
            shown "`trainer.agent_learning_rate`", why "", check lr_check;
        /// The system message given to the chat template (a warning with
        /// `chat_template: none`).
        system_prompt: Option<String> = None, kind "string", shown "none", why "";
        /// Under `mpirun -np N` (a build with the `mpi` feature): the rank that holds, samples
        /// and trains this agent (with `replicas` R > 1: its first replica, the others on the
        /// next R − 1 ranks); must be below N (checked when the run starts, where N is known).
        /// Ignored in a one-process run. See [distributed.md](distributed.md).
        rank: Option<usize> = None, kind "integer ≥ 0",
            shown "agent i on rank i mod N (with replicas: right after the agent before it)",
            why "spreads the agents over the ranks";
        /// Data-parallel copies of this agent under MPI: its update's passes split over this many ranks, gradients summed, identical weights. Ignored in a one-process run. See [distributed.md](distributed.md).
        replicas: usize = 1, kind "integer ≥ 1", why "one copy", check at_least(1, "use `replicas: 1` (one copy) or more");
    }
    group
    /// Sampling settings of its rollouts.
    sampling:
    /// Sampling settings of one agent's rollouts (CoMLRL: `MAGRPOConfig.temperature`, ...).
    #[derive(Copy)]
    Sampling {
        /// Sampling temperature. `0` is greedy (warned: no learning signal).
        temperature: f64 = 0.6, kind "number ≥ 0", why "CoMLRL",
            check non_negative("use e.g. `temperature: 0.6` (0 = greedy)");
        /// Nucleus sampling mass; `1.0` disables it.
        top_p: f64 = 0.6, kind "number in (0, 1]", why "CoMLRL", check nucleus;
        /// Top-k filter; `null` disables it.
        top_k: Option<usize> = Some(50), kind "integer ≥ 1 or `null`", why "CoMLRL",
            check if_set(at_least(1, "use `top_k: null` to disable top-k filtering"));
        /// Completion length cap in tokens (the seed example uses 128).
        max_new_tokens: usize = 256, kind "integer ≥ 1", why "CoMLRL",
            check at_least(1, "use e.g. `max_new_tokens: 128` (CoMLRL default 256)");
    }
    resolved {
        /// The agent's first-turn prompt, built from the row: `{prompt}` is the prompt,
        /// `{field}` any other column, `{{` / `}}` literal braces. Per agent, so agents can be
        /// given different roles (CoMLRL `formatters`). A placeholder that some row lacks is an
        /// error at load, naming it. String fields are inserted as is, other JSON values as
        /// compact JSON. In later turns the prompt comes from the external transition.
        template: String => Template, kind "string", shown "`\"{prompt}\"`",
            why "CoMLRL's default formatter",
            via |d, p, text| compile_template(d, &p.key("template"), text.map(String::as_str), cx.dataset),
            emit |t| Some(t.as_str().to_string());
        /// Wraps the templated prompt as a chat for the model: `auto` = the model's own
        /// template (tokenizer files or GGUF metadata), rendered as transformers'
        /// `apply_chat_template(add_generation_prompt=True)`. See [data.md](data.md).
        chat_template: String => ChatTemplateSpec,
            kind "`none` \\| `auto` \\| path to a `.jinja` file", shown "`none`",
            why "the prompt as is, as the seed example",
            via |d, p, setting| chat_spec::resolve(
                d,
                p,
                setting.map(String::as_str),
                system_prompt.as_deref(),
                &model.source,
                cx.base,
                cx.dataset,
            ),
            emit |c| Some(c.as_setting());
        /// A LoRA adapter trained on the agent's frozen base instead of the full model (see
        /// [adapters.md](adapters.md)): `{rank, alpha, dropout, targets, init, rslora}`.
        /// `rank` (default 8, PEFT's; at most 4096 and the projection's smaller dimension),
        /// `alpha` (default 8, PEFT's; the term is scaled by alpha / rank, alpha / √rank with
        /// `rslora: true`, default false), `dropout` (PEFT's `lora_dropout` p in [0, 1): in the
        /// update's passes the low-rank branch reads the input with each element zeroed with
        /// probability p and the rest scaled by 1 / (1 − p); sampling, scoring and the KL
        /// reference run without it; default 0, PEFT's, which also lets a pass compute a
        /// shared prompt once; with `init` unset means the directory's `lora_dropout`),
        /// `targets` (default all seven projections `q_proj`, `k_proj`, `v_proj`, `o_proj`,
        /// `gate_proj`, `up_proj`, `down_proj`, as QLoRA adapts every linear layer), `init` (a
        /// PEFT adapter directory to start from, relative to the scenario; its config then
        /// gives rank, alpha, targets and rslora; default: PEFT's init, B = 0, so training
        /// starts at the base). Agents naming the same model share one copy of it; each trains
        /// and saves (as a PEFT adapter directory) only its adapter.
        adapter: RawAdapter => Option<AdapterPlan>, kind "mapping", shown "none",
            why "full fine-tuning, as CoMLRL trains its agents",
            via |d, p, raw| crate::adapter::resolve(d, p, raw, cx.base, base_dtype.to_owned()),
            emit crate::adapter::emit;
    }
}

/// The model as the resolved scenario writes it: a local one by its absolute path.
fn model_setting(m: &ModelRef) -> String {
    match &m.source {
        ModelSource::Local(p) => p.display().to_string(),
        _ => m.spec.clone(),
    }
}

/// `sampling_dtype`: f32 (or `auto`, the same) or bf16; there is no f16 sampling path.
fn sampling_precision(_key: &str, d: &Dtype) -> Option<Bad> {
    (*d == Dtype::F16).then(|| Bad {
        message: "sampling_dtype f16 is not supported".into(),
        hint:
            "use `sampling_dtype: f32` (the weights themselves) or `bf16` (bf16 copies, f32 sums)"
                .into(),
    })
}

/// `top_p` in (0, 1].
fn nucleus(_key: &str, top_p: &f64) -> Option<Bad> {
    (!(*top_p > 0.0 && *top_p <= 1.0)).then(|| Bad {
        message: format!("top_p must be in (0, 1] (got {top_p})"),
        hint: "use e.g. `top_p: 0.6`; 1.0 disables nucleus filtering".into(),
    })
}
