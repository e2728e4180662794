//! The Rhai backend: a reward script compiled once at load, its entry point checked then, and
//! scored in the sandbox of [`crate::sandbox`], one joint sample per call (in parallel) or
//! the whole batch in one call.
//!
//! Entry points (define exactly one):
//! - `fn reward(completions, ctx)` → a number. `completions`: array of strings, agent 0 first;
//!   `ctx`: `#{prompt, params, fields, agent_count}`.
//! - `fn reward_batch(samples, ctx)` → an array with one number per sample. `samples`: array
//!   of `#{prompt, completions, fields, agent_count}`; `ctx`: `#{params, batch_size}`.
use crate::budget::{is_timeout, Deadline};
use crate::convert::{json_to_dynamic, object_to_map};
use crate::error::{Pos, RewardError, ScriptFailure};
use crate::locate::locate_limit;
use crate::sandbox::{sandboxed_engine, SandboxLimits};
use crate::{JointSample, RewardFn};
use rayon::prelude::*;
use rhai::{Array, Dynamic, Engine, EvalAltResult, Map, Position, Scope, AST, INT};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Name of the per-sample entry point.
pub const ENTRY: &str = "reward";
/// Name of the batched entry point.
pub const BATCH_ENTRY: &str = "reward_batch";

/// Which entry point a script defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `fn reward(completions, ctx)`.
    PerSample,
    /// `fn reward_batch(samples, ctx)`.
    Batch,
}

/// A compiled reward script.
pub struct RhaiReward {
    name: String,
    path: PathBuf,
    engine: Engine,
    ast: AST,
    entry: Entry,
    params: Dynamic,
    limits: SandboxLimits,
}

impl std::fmt::Debug for RhaiReward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RhaiReward")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("entry", &self.entry)
            .finish_non_exhaustive()
    }
}

/// The text of the script at `path` (a reward or a transition), or a `cannot read` error.
pub(crate) fn read_script(path: &Path) -> Result<String, RewardError> {
    std::fs::read_to_string(path)
        .map_err(|e| RewardError::script(path, None, ScriptFailure::Read, e.to_string()))
}

/// A Rhai position as a script position (column 1 when Rhai gives only the line).
pub(crate) fn to_pos(p: Position) -> Option<Pos> {
    match (p.line(), p.position()) {
        (Some(line), Some(column)) => Some(Pos { line, column }),
        (Some(line), None) => Some(Pos { line, column: 1 }),
        _ => None,
    }
}

impl RhaiReward {
    /// Read, compile and check the script at `path`, with the scenario's `params`, under the
    /// default [`SandboxLimits`].
    pub fn load(path: impl AsRef<Path>, params: &serde_json::Value) -> Result<Self, RewardError> {
        Self::load_with_limits(path, params, &SandboxLimits::default())
    }

    /// [`RhaiReward::load`] with explicit limits.
    pub fn load_with_limits(
        path: impl AsRef<Path>,
        params: &serde_json::Value,
        limits: &SandboxLimits,
    ) -> Result<Self, RewardError> {
        let path = path.as_ref();
        Self::from_source(path, &read_script(path)?, params, limits)
    }

    /// Compile `source` as if read from `path` (the path is used for the name and messages).
    pub fn from_source(
        path: &Path,
        source: &str,
        params: &serde_json::Value,
        limits: &SandboxLimits,
    ) -> Result<Self, RewardError> {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "reward".to_string());
        let mut engine = sandboxed_engine(&path.display().to_string(), limits);
        let mut ast = engine.compile(source).map_err(|e| {
            let mut message = e.0.to_string();
            if ["'import'", "'eval'"].iter().any(|k| message.contains(k)) {
                message.push_str(" (`import` and `eval` are not available to reward scripts)");
            }
            RewardError::script(path, to_pos(e.1), ScriptFailure::Syntax, message)
        })?;
        ast.set_source(path.display().to_string());
        let entry = find_entry(&ast)
            .map_err(|msg| RewardError::script(path, None, ScriptFailure::Entry, msg))?;
        if entry == Entry::Batch {
            engine.set_max_operations(limits.max_batch_operations);
        }
        let reward = RhaiReward {
            name,
            path: path.to_path_buf(),
            engine,
            ast,
            entry,
            params: json_to_dynamic(params),
            limits: *limits,
        };
        // Run the top-level statements once now, so their errors surface at load time.
        let deadline = Deadline::start(reward.budget());
        let outcome = reward.engine.run_ast(&reward.ast);
        let expired = deadline.expired();
        drop(deadline);
        outcome.map_err(|e| reward.eval_error(*e, None))?;
        if expired {
            return Err(timeout_error(
                &reward.path,
                reward.budget(),
                None,
                &[],
                None,
            ));
        }
        Ok(reward)
    }

    /// The script file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The entry point the script defines.
    pub fn entry(&self) -> Entry {
        self.entry
    }

    /// The wall-clock budget of one call of the entry point.
    pub fn budget(&self) -> Duration {
        Duration::from_millis(match self.entry {
            Entry::PerSample => self.limits.time_budget_ms,
            Entry::Batch => self.limits.batch_time_budget_ms,
        })
    }

    /// Turn a Rhai evaluation error into a [`RewardError`] with the innermost position.
    fn eval_error(&self, err: EvalAltResult, sample: Option<usize>) -> RewardError {
        let mut chain = Vec::new();
        let mut inner = err;
        loop {
            match inner {
                EvalAltResult::ErrorInFunctionCall(name, _, next, _) => {
                    chain.push(name);
                    inner = *next;
                }
                EvalAltResult::ErrorInModule(name, next, _) => {
                    chain.push(name);
                    inner = *next;
                }
                other => {
                    inner = other;
                    break;
                }
            }
        }
        let pos = to_pos(inner.take_position());
        if let EvalAltResult::ErrorTerminated(token, _) = &inner {
            if is_timeout(token) {
                return timeout_error(&self.path, self.budget(), pos, &chain, sample);
            }
        }
        let kind = match inner {
            EvalAltResult::ErrorTooManyOperations(_)
            | EvalAltResult::ErrorStackOverflow(_)
            | EvalAltResult::ErrorDataTooLarge(..)
            | EvalAltResult::ErrorTooManyVariables(_)
            | EvalAltResult::ErrorTooManyModules(_) => ScriptFailure::Limit,
            _ => ScriptFailure::Runtime,
        };
        let mut message = inner.to_string();
        if !chain.is_empty() {
            message.push_str(&format!(" (in {})", chain.join(" -> ")));
        }
        if let Some(i) = sample {
            message.push_str(&format!(", scoring joint sample #{i}"));
        }
        RewardError::script(&self.path, pos, kind, message)
    }

    fn return_error(&self, message: String) -> RewardError {
        RewardError::script(&self.path, None, ScriptFailure::Return, message)
    }

    /// Accept an int or a finite float (also finite as `f32`).
    fn number(&self, value: &Dynamic, what: &str) -> Result<f32, RewardError> {
        let x = if let Ok(i) = value.as_int() {
            i as f64
        } else if let Ok(f) = value.as_float() {
            f
        } else {
            return Err(self.return_error(format!(
                "{what} returned a value of type `{}`; expected an integer or a float",
                value.type_name()
            )));
        };
        let y = x as f32;
        if !y.is_finite() {
            return Err(
                self.return_error(format!("{what} returned {x}, which is not a finite f32"))
            );
        }
        Ok(y)
    }

    /// Arguments of `reward(completions, ctx)` for one sample.
    fn sample_args(&self, sample: &JointSample) -> [Dynamic; 2] {
        let completions: Array = sample
            .completions
            .iter()
            .map(|c| Dynamic::from(c.clone()))
            .collect();
        let mut ctx = Map::new();
        ctx.insert("prompt".into(), Dynamic::from(sample.prompt.clone()));
        ctx.insert("params".into(), self.params.clone());
        ctx.insert(
            "fields".into(),
            Dynamic::from_map(object_to_map(&sample.fields)),
        );
        ctx.insert(
            "agent_count".into(),
            Dynamic::from_int(sample.completions.len() as INT),
        );
        [Dynamic::from_array(completions), Dynamic::from_map(ctx)]
    }

    /// Arguments of `reward_batch(samples, ctx)`.
    fn batch_args(&self, batch: &[JointSample]) -> [Dynamic; 2] {
        let samples: Array = batch
            .iter()
            .map(|s| {
                let mut m = Map::new();
                m.insert("prompt".into(), Dynamic::from(s.prompt.clone()));
                let comps: Array = s
                    .completions
                    .iter()
                    .map(|c| Dynamic::from(c.clone()))
                    .collect();
                m.insert("completions".into(), Dynamic::from_array(comps));
                m.insert("fields".into(), Dynamic::from_map(object_to_map(&s.fields)));
                m.insert(
                    "agent_count".into(),
                    Dynamic::from_int(s.completions.len() as INT),
                );
                Dynamic::from_map(m)
            })
            .collect();
        let mut ctx = Map::new();
        ctx.insert("params".into(), self.params.clone());
        ctx.insert("batch_size".into(), Dynamic::from_int(batch.len() as INT));
        [Dynamic::from_array(samples), Dynamic::from_map(ctx)]
    }

    /// Call the entry point; a limit error without a position is located by a replay.
    fn call(
        &self,
        fn_name: &str,
        args: impl Fn() -> [Dynamic; 2],
        sample: Option<usize>,
    ) -> Result<Dynamic, RewardError> {
        let [a, b] = args();
        let deadline = Deadline::start(self.budget());
        let outcome = self
            .engine
            .call_fn::<Dynamic>(&mut Scope::new(), &self.ast, fn_name, (a, b));
        let expired = deadline.expired();
        drop(deadline);
        let e = match outcome {
            Ok(_) if expired => {
                return Err(timeout_error(&self.path, self.budget(), None, &[], sample))
            }
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        let mut err = self.eval_error(*e, sample);
        if let RewardError::Script {
            kind: ScriptFailure::Limit,
            pos: pos @ None,
            ..
        } = &mut err
        {
            let max_ops = match self.entry {
                Entry::PerSample => self.limits.max_operations,
                Entry::Batch => self.limits.max_batch_operations,
            };
            let script = self.path.display().to_string();
            *pos = locate_limit(&script, &self.limits, max_ops, &self.ast, fn_name, args());
        }
        Err(err)
    }

    fn score_one(&self, index: usize, sample: &JointSample) -> Result<f32, RewardError> {
        let value = self.call(ENTRY, || self.sample_args(sample), Some(index))?;
        self.number(&value, &format!("`{ENTRY}` for joint sample #{index}"))
    }

    fn score_batch(&self, batch: &[JointSample]) -> Result<Vec<f32>, RewardError> {
        let value = self.call(BATCH_ENTRY, || self.batch_args(batch), None)?;
        let type_name = value.type_name();
        let Some(values) = value.try_cast::<Array>() else {
            return Err(self.return_error(format!(
                "`{BATCH_ENTRY}` returned a value of type `{type_name}`; expected an array with one number per sample"
            )));
        };
        if values.len() != batch.len() {
            return Err(self.return_error(format!(
                "`{BATCH_ENTRY}` returned {} values for {} joint samples; return exactly one number per sample",
                values.len(),
                batch.len()
            )));
        }
        values
            .iter()
            .enumerate()
            .map(|(i, v)| self.number(v, &format!("`{BATCH_ENTRY}` (item #{i})")))
            .collect()
    }
}

/// The error of a call that ran past its budget: "reward script exceeded its time budget (N
/// ms) at file:line", with the call chain and the sample when known.
pub(crate) fn timeout_error(
    path: &Path,
    budget: Duration,
    pos: Option<Pos>,
    chain: &[String],
    sample: Option<usize>,
) -> RewardError {
    let at = match pos {
        Some(p) => format!(" at {}:{}", path.display(), p.line),
        None => format!(" in {}", path.display()),
    };
    let mut message = format!(
        "reward script exceeded its time budget ({} ms){at}",
        budget.as_millis()
    );
    if !chain.is_empty() {
        message.push_str(&format!(" (in {})", chain.join(" -> ")));
    }
    if let Some(i) = sample {
        message.push_str(&format!(", scoring joint sample #{i}"));
    }
    RewardError::script(path, pos, ScriptFailure::TimeBudget, message)
}

/// Find the single entry point and check its arity.
fn find_entry(ast: &AST) -> Result<Entry, String> {
    let mut found = Vec::new();
    for f in ast.iter_functions() {
        let entry = match f.name {
            ENTRY => Entry::PerSample,
            BATCH_ENTRY => Entry::Batch,
            _ => continue,
        };
        if f.params.len() != 2 {
            return Err(format!(
                "`fn {}` takes {} parameter(s); it must take exactly 2 ({})",
                f.name,
                f.params.len(),
                if entry == Entry::PerSample {
                    "completions, ctx"
                } else {
                    "samples, ctx"
                }
            ));
        }
        found.push(entry);
    }
    match found.as_slice() {
        [one] => Ok(*one),
        [] => Err(format!("no entry point: the script defines neither `fn {ENTRY}(completions, ctx)` nor `fn {BATCH_ENTRY}(samples, ctx)`")),
        _ => Err(format!("the script defines both `fn {ENTRY}` and `fn {BATCH_ENTRY}`; keep exactly one")),
    }
}

impl RewardFn for RhaiReward {
    fn name(&self) -> &str {
        &self.name
    }

    fn score(&self, batch: &[JointSample]) -> Result<Vec<f32>, RewardError> {
        match self.entry {
            Entry::Batch => self.score_batch(batch),
            Entry::PerSample => {
                // Collect every result first so the reported error is deterministic (the
                // lowest failing index), whatever the thread scheduling.
                let results: Vec<Result<f32, RewardError>> = batch
                    .par_iter()
                    .enumerate()
                    .map(|(i, s)| self.score_one(i, s))
                    .collect();
                results.into_iter().collect()
            }
        }
    }
}
