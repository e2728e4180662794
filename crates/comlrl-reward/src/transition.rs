//! Multi-turn external transitions written in Rhai: a script that builds every agent's next-turn
//! prompt from the branch's history, compiled once and run in the reward sandbox.
//!
//! Entry point: `fn transition(ctx)` → an array of strings, one prompt per agent, where `ctx` is
//! `#{prompt, fields, params, turn, agent_count, completions, prompt_history, response_history}`:
//! `completions` are the agents' completions of the parent joint action (agent 0 first),
//! `prompt_history[i]` / `response_history[i]` agent i's prompts and completions along the
//! branch so far (including the parent turn), `turn` the 1-based turn just completed.
use crate::budget::{is_timeout, Deadline};
use crate::convert::{json_to_dynamic, object_to_map};
use crate::error::{RewardError, ScriptFailure, TRANSITION_TERM};
use crate::sandbox::{sandboxed_engine, SandboxLimits};
use crate::script::{read_script, timeout_error, to_pos};
use crate::spec::{CodeSource, OnError, TransitionPlan, DEFAULT_ISOLATE, ISOLATED_BUDGET_MS};
use rhai::{Array, Dynamic, Engine, Map, Scope, AST, INT};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Name of the entry point.
pub const TRANSITION_ENTRY: &str = "transition";

/// What a transition sees about the branch it extends.
#[derive(Debug, Clone)]
pub struct TransitionInput<'a> {
    /// The dataset row's prompt.
    pub prompt: &'a str,
    /// The dataset row's fields.
    pub fields: &'a serde_json::Map<String, serde_json::Value>,
    /// 1-based index of the turn that just ended.
    pub turn: usize,
    /// The agents' completions of the parent joint action, agent 0 first.
    pub completions: &'a [String],
    /// `prompt_history[i]`: agent i's prompts along the branch, including the parent turn.
    pub prompt_history: &'a [Vec<String>],
    /// `response_history[i]`: agent i's completions along the branch, including the parent turn.
    pub response_history: &'a [Vec<String>],
}

/// Anything that writes the agents' next-turn prompts: a Rhai script or a native plugin.
pub trait TransitionFn: Send + Sync {
    /// One prompt per agent, in agent order.
    fn next_prompts(&self, input: &TransitionInput) -> Result<Vec<String>, RewardError>;
}

/// Loads the scenario's transition: a Rhai script (in the sandbox, `time_budget_ms` per call),
/// or a native plugin — in a child process (`comlrl plugin-host`, see [`crate::isolate`]) unless
/// `isolate: false`, with the default and budget of reward plugins ([`DEFAULT_ISOLATE`],
/// [`ISOLATED_BUDGET_MS`] per call). With `on_error: skip_step` every failure of a call comes
/// back as [`RewardError::SkipStep`] for [`TRANSITION_TERM`], which the trainer skips like a
/// failing reward term's.
pub fn load_transition(plan: &TransitionPlan) -> Result<Box<dyn TransitionFn>, RewardError> {
    if plan.time_budget_ms == Some(0) {
        return Err(RewardError::Config(
            "`trainer.external_transition` has `time_budget_ms: 0`; give at least 1 (milliseconds) or remove it for the default".into(),
        ));
    }
    let loaded: Box<dyn TransitionFn> = match &plan.source {
        CodeSource::Rhai(path) => {
            if plan.isolate.is_some() {
                return Err(RewardError::Config(
                    "`isolate` applies to transition plugins only; Rhai scripts always run in the sandbox".into(),
                ));
            }
            let mut limits = SandboxLimits::default();
            if let Some(ms) = plan.time_budget_ms {
                limits.time_budget_ms = ms;
            }
            Box::new(RhaiTransition::load_with_limits(
                path,
                &plan.params,
                &limits,
            )?)
        }
        CodeSource::Plugin(path) if plan.isolate.unwrap_or(DEFAULT_ISOLATE) => {
            let budget = Duration::from_millis(plan.time_budget_ms.unwrap_or(ISOLATED_BUDGET_MS));
            Box::new(crate::isolate::IsolatedTransition::load(
                path,
                &plan.params,
                crate::isolate::HostCommand::from_env()?,
                budget,
            )?)
        }
        CodeSource::Plugin(path) => Box::new(crate::native_transition::NativeTransition::load(
            path,
            &plan.params,
        )?),
    };
    Ok(match plan.on_error {
        OnError::Fail => loaded,
        OnError::SkipStep => Box::new(SkipOnError(loaded)),
    })
}

/// A transition whose failures skip the training step (`on_error: skip_step`).
struct SkipOnError(Box<dyn TransitionFn>);

impl TransitionFn for SkipOnError {
    fn next_prompts(&self, input: &TransitionInput) -> Result<Vec<String>, RewardError> {
        self.0.next_prompts(input).map_err(|e| match e {
            e @ RewardError::SkipStep { .. } => e,
            e => RewardError::SkipStep {
                term: TRANSITION_TERM.into(),
                source: Box::new(e),
            },
        })
    }
}

/// A compiled transition script.
pub struct RhaiTransition {
    path: PathBuf,
    budget: Duration,
    engine: Engine,
    ast: AST,
    params: Dynamic,
}

impl std::fmt::Debug for RhaiTransition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RhaiTransition")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RhaiTransition {
    /// Reads, compiles and checks the script (its `fn transition(ctx)` must exist), under the
    /// default [`SandboxLimits`] (each call gets `time_budget_ms`).
    pub fn load(path: impl AsRef<Path>, params: &serde_json::Value) -> Result<Self, RewardError> {
        Self::load_with_limits(path, params, &SandboxLimits::default())
    }

    /// [`RhaiTransition::load`] with explicit limits.
    pub fn load_with_limits(
        path: impl AsRef<Path>,
        params: &serde_json::Value,
        limits: &SandboxLimits,
    ) -> Result<Self, RewardError> {
        let path = path.as_ref();
        let source = read_script(path)?;
        let engine = sandboxed_engine(&path.display().to_string(), limits);
        let mut ast = engine.compile(&source).map_err(|e| {
            RewardError::script(path, to_pos(e.1), ScriptFailure::Syntax, e.0.to_string())
        })?;
        ast.set_source(path.display().to_string());
        let ok = ast
            .iter_functions()
            .any(|f| f.name == TRANSITION_ENTRY && f.params.len() == 1);
        if !ok {
            return Err(RewardError::script(
                path,
                None,
                ScriptFailure::Entry,
                "define `fn transition(ctx)` returning an array with one prompt string per agent",
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
            budget: Duration::from_millis(limits.time_budget_ms),
            engine,
            ast,
            params: json_to_dynamic(params),
        })
    }
}

impl TransitionFn for RhaiTransition {
    fn next_prompts(&self, input: &TransitionInput) -> Result<Vec<String>, RewardError> {
        let strings =
            |v: &[String]| -> Array { v.iter().map(|s| Dynamic::from(s.clone())).collect() };
        let nested =
            |v: &[Vec<String>]| -> Array { v.iter().map(|h| Dynamic::from(strings(h))).collect() };
        let mut ctx = Map::new();
        ctx.insert("prompt".into(), input.prompt.to_string().into());
        ctx.insert("fields".into(), Dynamic::from(object_to_map(input.fields)));
        ctx.insert("params".into(), self.params.clone());
        ctx.insert("turn".into(), Dynamic::from(input.turn as INT));
        ctx.insert(
            "agent_count".into(),
            Dynamic::from(input.completions.len() as INT),
        );
        ctx.insert(
            "completions".into(),
            Dynamic::from(strings(input.completions)),
        );
        ctx.insert(
            "prompt_history".into(),
            Dynamic::from(nested(input.prompt_history)),
        );
        ctx.insert(
            "response_history".into(),
            Dynamic::from(nested(input.response_history)),
        );
        let deadline = Deadline::start(self.budget);
        let outcome: Result<Dynamic, _> = self.engine.call_fn(
            &mut Scope::new(),
            &self.ast,
            TRANSITION_ENTRY,
            (Dynamic::from(ctx),),
        );
        let expired = deadline.expired();
        drop(deadline);
        if expired && outcome.is_ok() {
            return Err(timeout_error(&self.path, self.budget, None, &[], None));
        }
        let out = outcome.map_err(|e| {
            let mut inner = &*e;
            while let rhai::EvalAltResult::ErrorInFunctionCall(_, _, next, _) = inner {
                inner = next;
            }
            if let rhai::EvalAltResult::ErrorTerminated(token, at) = inner {
                if is_timeout(token) {
                    return timeout_error(&self.path, self.budget, to_pos(*at), &[], None);
                }
            }
            let p = to_pos(e.position());
            let kind = match inner {
                rhai::EvalAltResult::ErrorTooManyOperations(_)
                | rhai::EvalAltResult::ErrorStackOverflow(_)
                | rhai::EvalAltResult::ErrorDataTooLarge(..) => ScriptFailure::Limit,
                _ => ScriptFailure::Runtime,
            };
            RewardError::script(&self.path, p, kind, e.to_string())
        })?;
        let ret = |m: String| RewardError::script(&self.path, None, ScriptFailure::Return, m);
        let arr = out.into_array().map_err(|t| {
            ret(format!(
                "transition returned a `{t}`; expected an array of strings, one per agent"
            ))
        })?;
        if arr.len() != input.completions.len() {
            return Err(ret(format!(
                "transition returned {} prompts for {} agents",
                arr.len(),
                input.completions.len()
            )));
        }
        arr.into_iter()
            .enumerate()
            .map(|(i, v)| {
                v.into_string().map_err(|t| {
                    ret(format!(
                        "transition's prompt for agent {i} is a `{t}`, not a string"
                    ))
                })
            })
            .collect()
    }
}
