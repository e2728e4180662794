//! Turning a resolved scenario into what the loop needs: loaded policies, sampling settings,
//! the reward stack, and a writable output directory — all checked before any training starts.
use crate::error::{Error, Result};
use crate::model::recompute::PassPlan;
use crate::model::{ComputeDtype, LoadOptions, ModelSource, Policy, RolloutCopies, SamplingParams};
use comlrl_reward::RewardStack;
use comlrl_scenario::{AgentPlan, Dtype, Scenario};
use std::path::{Path, PathBuf};

/// The model source of an agent, in the model loader's terms.
pub fn model_source(agent: &AgentPlan, base_dir: &Path) -> Result<ModelSource> {
    Ok(match &agent.model.source {
        comlrl_scenario::ModelSource::Builtin(name) => {
            ModelSource::parse(&format!("builtin:{name}"), base_dir)?
        }
        comlrl_scenario::ModelSource::Local(p) => ModelSource::local(p.clone()),
        comlrl_scenario::ModelSource::Hub(id) => ModelSource::parse(id, base_dir)?,
    })
}

/// Loads every agent's policy (f32 on CPU; built-in weights seeded by the scenario seed), with
/// the agents' sampling weight copies when `sampling` (frozen reference policies only score).
pub fn load_policies(s: &Scenario, sampling: bool) -> Result<Vec<Policy>> {
    load_placed(s, |_| true, sampling)?
        .into_iter()
        .map(|p| p.ok_or_else(|| Error::Internal("an agent was not loaded".into())))
        .collect()
}

/// Loads the policies of the agents `here` selects (by index; `None` for the others): the
/// agents a rank holds a replica of, or those it samples; with sampling copies when `sampling`.
///
/// The agents' weights load at the same time, one agent per thread of the pool: loading is
/// mostly the kernel clearing fresh pages (on a VM, ~1.5 s per GB on one thread), which the
/// threads do side by side. Their sampling copies are built afterwards on this thread (see
/// [`LoadOptions::copies_now`]). Errors name the first failing agent by index, as a
/// sequential load would.
pub fn load_placed(
    s: &Scenario,
    here: impl Fn(usize) -> bool + Sync,
    sampling: bool,
) -> Result<Vec<Option<Policy>>> {
    use rayon::prelude::*;
    let loaded: Vec<Result<Option<Policy>>> = s
        .agents
        .par_iter()
        .map(|a| {
            here(a.index)
                .then(|| load_agent(s, a, sampling))
                .transpose()
        })
        .collect();
    let policies: Vec<Option<Policy>> = loaded.into_iter().collect::<Result<_>>()?;
    for (a, p) in s.agents.iter().zip(&policies) {
        if let Some(p) = p {
            p.weights_changed()
                .map_err(|e| e.for_agent(a.index, Some(a.model.spec.clone())))?;
        }
    }
    Ok(policies)
}

/// Loads agent `a`'s policy; with its bf16 sampling copies when `sampling` and the agent's
/// `sampling_dtype` is bf16.
fn load_agent(s: &Scenario, a: &AgentPlan, sampling: bool) -> Result<Policy> {
    match a.dtype {
        Dtype::Auto | Dtype::F32 => {}
        other => {
            return Err(Error::Config(format!(
                "agent {}: dtype {other:?} cannot be trained on the CPU yet (AdamW updates f32 weights); \
                 set `dtype: f32` (checkpoints in bf16/f16 are converted on load)",
                a.index
            )))
        }
    }
    let src = model_source(a, &s.base_dir)?;
    let sampling_dtype = match a.sampling_dtype {
        Dtype::Bf16 if sampling => candle_core::DType::BF16,
        _ => candle_core::DType::F32,
    };
    let opts = LoadOptions {
        seed: s.seed,
        sampling_dtype,
        rollout_copies: match a.sampling_copies {
            true => RolloutCopies::Auto,
            false => RolloutCopies::Never,
        },
        copies_now: false,
        ..LoadOptions::default()
    };
    Policy::load(&src, &opts).map_err(|e| e.for_agent(a.index, Some(a.model.spec.clone())))
}

/// The operand type of the update's products (`trainer.compute_dtype`, checked by the
/// scenario loader to be f32 or bf16).
pub fn compute_dtype(t: &comlrl_scenario::TrainerPlan) -> ComputeDtype {
    match t.compute_dtype {
        Dtype::Bf16 => ComputeDtype::Bf16,
        _ => ComputeDtype::F32,
    }
}

/// A note for a run whose `trainer.compute_dtype: bf16` makes the update slower than f32 would
/// on this CPU (its bf16 GEMM runs on a `vdpbf16ps` that issues at half the FMA's flops).
pub fn compute_dtype_note(t: &comlrl_scenario::TrainerPlan) -> Option<String> {
    (compute_dtype(t) == ComputeDtype::Bf16 && crate::model::kernels::bf16_gemm::slower_than_f32())
        .then(|| {
            "note: trainer.compute_dtype is bf16, but this CPU (no AMX) runs bf16 dot products \
             at half its f32 rate, so the update is slower than with `compute_dtype: f32` \
             (Qwen2.5-0.5B: 55 against 34 s a step); `comlrl bench matmul --dtype bf16` \
             compares the two"
                .to_string()
        })
}

/// How the update's recomputed passes run: products in `trainer.compute_dtype`, up to
/// `trainer.activation_budget_mb` MiB of kept layer activations per pass, a prompt shared by a
/// pass's rows computed once with `trainer.share_prompt`, bf16 weights packed once per
/// mini-batch within `trainer.packed_weights_mb`.
pub fn pass_plan(t: &comlrl_scenario::TrainerPlan) -> PassPlan {
    PassPlan {
        dtype: compute_dtype(t),
        keep_bytes: t.activation_budget_mb.saturating_mul(1 << 20),
        keep_top_bytes: 0,
        share_prompt: t.share_prompt,
        pack_bytes: t.packed_weights_mb.saturating_mul(1 << 20),
    }
}

/// The sampling settings of agent `a`'s rollouts.
pub fn sampling(a: &AgentPlan) -> SamplingParams {
    SamplingParams {
        max_new_tokens: a.sampling.max_new_tokens,
        temperature: a.sampling.temperature,
        top_p: a.sampling.top_p,
        top_k: a.sampling.top_k.unwrap_or(0),
        greedy: false,
        ignore_eos: false,
    }
}

/// The scenario's joint reward, built from its terms and processors.
pub fn reward_stack(s: &Scenario) -> Result<RewardStack> {
    Ok(RewardStack::build(
        &s.reward.terms,
        &s.reward.processors,
        &s.base_dir,
    )?)
}

/// Refuses an `output_dir` that a run must never write into (and a later `--overwrite` must
/// never clear): `/`, the home directory, a repository's root (a folder holding `.git`), and a
/// folder that contains the scenario file, an agent's local model or the dataset file.
pub fn guard_output_dir(s: &Scenario) -> Result<()> {
    let mut inputs: Vec<(&str, &Path)> = vec![("the scenario file", s.source.as_path())];
    for a in &s.agents {
        if let comlrl_scenario::ModelSource::Local(p) = &a.model.source {
            inputs.push(("an agent's model", p.as_path()));
        }
    }
    if let comlrl_scenario::DataSource::File { path, .. } = &s.dataset.train.source {
        inputs.push(("the dataset", path.as_path()));
    }
    refuse_reserved_dir(&s.output_dir)?;
    let out = resolved(&s.output_dir);
    for (what, p) in inputs {
        let p = resolved(p);
        if p.starts_with(&out) {
            return Err(Error::run_dir(
                &s.output_dir,
                format!(
                    "output_dir {} contains {what} ({}); a run writes and `--overwrite` deletes \
                     in its output_dir, so choose a folder of its own (the default is \
                     `runs/<scenario name>` beside the scenario)",
                    s.output_dir.display(),
                    p.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses `/`, the home directory and a repository's root as an output directory.
pub fn refuse_reserved_dir(dir: &Path) -> Result<()> {
    let out = resolved(dir);
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| resolved(Path::new(&h)));
    let why = if out.parent().is_none() {
        Some("the file system's root")
    } else if home.as_deref() == Some(out.as_path()) {
        Some("the home directory")
    } else if std::fs::symlink_metadata(out.join(".git")).is_ok() {
        Some("a repository's root (it holds .git)")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::run_dir(
            dir,
            format!(
                "output_dir {} is {why}; a run writes and `--overwrite` deletes in its \
                 output_dir, so choose a folder of its own (the default is \
                 `runs/<scenario name>` beside the scenario)",
                dir.display()
            ),
        )),
        None => Ok(()),
    }
}

/// `p` absolute, with symlinks resolved as far as it exists (the rest appended as written,
/// `..` and `.` folded), so that two spellings of one folder compare equal.
fn resolved(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut rest = Vec::new();
    let mut cur = abs.as_path();
    loop {
        if let Ok(c) = cur.canonicalize() {
            let mut out = c;
            for part in rest.iter().rev() {
                match part {
                    std::path::Component::ParentDir => {
                        out.pop();
                    }
                    std::path::Component::CurDir => {}
                    c => out.push(c.as_os_str()),
                }
            }
            return out;
        }
        match (cur.parent(), cur.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                cur = parent;
            }
            _ => return abs,
        }
    }
}

/// Fails early, before any model is loaded, when `dir` cannot be created or written (probed
/// with a uniquely named temporary file: never a name a user's file could have).
pub fn check_output_dir(dir: &Path) -> Result<()> {
    refuse_reserved_dir(dir)?;
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::run_dir_by(
            dir,
            format!(
                "output_dir {} cannot be created; choose a writable `output_dir`",
                dir.display()
            ),
            e,
        )
    })?;
    tempfile::Builder::new()
        .prefix(".comlrl-probe-")
        .tempfile_in(dir)
        .map_err(|e| {
            Error::run_dir_by(
                dir,
                format!(
                    "output_dir {} is not writable; choose a writable `output_dir`",
                    dir.display()
                ),
                e,
            )
        })?;
    Ok(())
}

/// The memory the agents `holds` selects (this rank's; `samples`: those it samples) will take
/// at the run's peak, estimated from their model configs before any weight is read; fails with
/// the numbers and the settings that would lower them when that exceeds the memory the machine
/// has available (see [`crate::train::setup::memory`]; `COMLRL_IGNORE_MEMORY_ESTIMATE=1` warns instead).
pub fn check_memory(
    s: &Scenario,
    holds: impl Fn(usize) -> bool,
    samples: impl Fn(usize) -> bool,
    lookup: crate::train::setup::memory::Lookup,
) -> Result<crate::train::setup::memory::MemoryEstimate> {
    crate::train::setup::memory::check(s, holds, samples, lookup)
}

/// Fails when a first-turn prompt (train or eval set, rendered as the model sees it: the
/// agent's template, then its chat template with the system prompt) encodes to no tokens, or
/// its tokens plus `max_new_tokens` exceed the agent's model positions: the check sampling
/// would make at that step, made before training (and by `comlrl check`).
pub fn check_prompt_lengths(s: &Scenario, policies: &[Policy]) -> Result<()> {
    for (agent, p) in s.agents.iter().zip(policies) {
        check_agent_prompt_lengths(s, agent, p)?;
    }
    Ok(())
}

/// [`check_prompt_lengths`] for one agent.
pub fn check_agent_prompt_lengths(s: &Scenario, agent: &AgentPlan, p: &Policy) -> Result<()> {
    let sets = [
        ("training", Some(&s.dataset.train)),
        ("eval", s.dataset.eval.as_ref()),
    ];
    let max = p.model.max_positions();
    let new = agent.sampling.max_new_tokens;
    if new >= max {
        return Err(Error::Config(format!(
            "agent {}: max_new_tokens ({new}) leaves no room for a prompt in the model's {max} positions; \
             lower `agents.max_new_tokens`",
            agent.index
        )));
    }
    let formatter = crate::train::rollout::prompt::formatter(agent, p)?;
    let room = max - new;
    for (what, set) in sets.iter().filter_map(|(w, d)| d.map(|d| (w, d))) {
        for (r, row) in set.rows.iter().enumerate() {
            let text = formatter.render(row)?;
            let fail = |found: String| {
                Error::Config(format!(
                    "agent {}: {what} prompt {} {found}; with max_new_tokens ({new}) it must fit \
                     between 1 and the model's {max} positions; shorten the prompt or lower \
                     `agents.max_new_tokens`",
                    agent.index,
                    r + 1,
                ))
            };
            check_prompt_bytes(&text, p, room).map_err(fail)?;
            let ids = p.tokenizer.encode(&text)?;
            if ids.is_empty() || ids.len() > room {
                return Err(fail(format!("encodes to {} tokens", ids.len())));
            }
        }
    }
    Ok(())
}

/// Refuses, before encoding, a prompt with more bytes than `room` tokens can stand for (see
/// `Tokenizer::max_bytes_for`); the error text says what was found.
pub fn check_prompt_bytes(text: &str, p: &Policy, room: usize) -> std::result::Result<(), String> {
    let most = p.tokenizer.max_bytes_for(room);
    match text.len() > most {
        true => Err(format!(
            "is {} bytes (as the model sees it), more than the {room} tokens left for a prompt \
             can hold with this tokenizer (at most {most} bytes)",
            text.len()
        )),
        false => Ok(()),
    }
}

/// Fails when a rollout node would score more joint actions than `trainer.max_joint_actions`
/// (the scenario loader checks this too; a hand-built plan is checked here).
pub fn check_joint_actions(s: &Scenario) -> Result<()> {
    let t = &s.trainer;
    let cross = t.joint_mode == comlrl_scenario::JointMode::Cross;
    if !cross || s.agents.len() < 2 {
        return Ok(());
    }
    match crate::train::rollout::joint::joint_count(s.agents.len(), t.num_generations, cross) {
        Some(n) if n <= t.max_joint_actions => Ok(()),
        n => Err(Error::Config(format!(
            "trainer.joint_mode: {} joint actions per prompt ({} generations, {} agents) exceed \
             trainer.max_joint_actions ({})",
            n.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string()),
            t.num_generations,
            s.agents.len(),
            t.max_joint_actions
        ))),
    }
}

/// The loaded multi-turn transition (a Rhai script, or a native plugin isolated in
/// `comlrl plugin-host` unless `isolate: false`), when the scenario has one.
pub fn transition(s: &Scenario) -> Result<Option<Box<dyn comlrl_reward::TransitionFn>>> {
    match &s.trainer.external_transition {
        Some(t) => Ok(Some(comlrl_reward::load_transition(t)?)),
        None => Ok(None),
    }
}
