//! The Rhai sandbox policy, in one function: which engine features scripts get, and the
//! limits that stop runaway scripts.
use rhai::module_resolvers::DummyModuleResolver;
use rhai::packages::{Package, StandardPackage};
use rhai::Engine;

/// Resource caps for reward scripts. Hitting one is a [`ScriptFailure::Limit`] error; running
/// past the time budget is a [`ScriptFailure::TimeBudget`] error.
///
/// [`ScriptFailure::Limit`]: crate::ScriptFailure::Limit
/// [`ScriptFailure::TimeBudget`]: crate::ScriptFailure::TimeBudget
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Rhai operations allowed in one `reward(completions, ctx)` call (one joint sample).
    /// Default 1,000,000: ample for character-level work on completions of tens of KB; an
    /// endless loop stops after a few tens of milliseconds.
    pub max_operations: u64,
    /// Rhai operations allowed in one `reward_batch(samples, ctx)` call (a whole batch).
    /// Default 20,000,000 (about a second of work); prefer `reward` for heavy scripts: it
    /// runs samples in parallel, each with its own `max_operations`.
    pub max_batch_operations: u64,
    /// Maximum depth of nested function calls (recursion). Default 48.
    pub max_call_levels: usize,
    /// Maximum expression nesting depth at global level / inside functions. Default 64 / 32.
    pub max_expr_depth: (usize, usize),
    /// Maximum length of a string built by the script, in bytes. Default 4 MiB.
    pub max_string_size: usize,
    /// Maximum number of items in an array or blob built by the script. Default 100,000.
    /// Rhai re-measures an array after every change (a walk over its items), so growing one
    /// item at a time costs quadratic time; this cap bounds one measurement to well under a
    /// millisecond and the whole growth to about a second (where the time budget stops it).
    pub max_array_size: usize,
    /// Maximum number of properties in an object map built by the script. Default 10,000.
    pub max_map_size: usize,
    /// Wall-clock budget of one `reward(completions, ctx)` or `transition(ctx)` call, in
    /// milliseconds (closures and callbacks included). Default 1,000.
    pub time_budget_ms: u64,
    /// Wall-clock budget of one `reward_batch(samples, ctx)` call, in milliseconds.
    /// Default 10,000.
    pub batch_time_budget_ms: u64,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            max_operations: 1_000_000,
            max_batch_operations: 20_000_000,
            max_call_levels: 48,
            max_expr_depth: (64, 32),
            max_string_size: 4 << 20,
            max_array_size: 100_000,
            max_map_size: 10_000,
            time_budget_ms: 1_000,
            batch_time_budget_ms: 10_000,
        }
    }
}

/// Build the engine every reward script runs in.
///
/// - `Engine::new_raw()` plus the standard package only: language core, arithmetic and math,
///   strings, arrays, maps, `timestamp`. No file, network, process or environment access
///   exists in these packages.
/// - `import` and `eval` are disabled keywords (a compile error at load); a module resolver
///   that resolves nothing backs the `import` ban up.
/// - Strict variables: using an undeclared variable is a compile-time error.
/// - Caps from `limits` (operations are set to `limits.max_operations`; the batch entry point
///   raises them to `max_batch_operations` once it is detected).
/// - A wall-clock deadline per call (see [`crate::budget`]): the progress callback ends the
///   script once the call's time budget is spent.
/// - Maps are checked against `max_map_size` whenever their variable is read, which catches
///   growth through `m[key] = value` (Rhai itself does not re-measure the map there).
/// - `sleep` is replaced by a function that fails: a reward has no reason to wait.
/// - `print` goes to `log::info!` and `debug` to `log::debug!`, prefixed with `script`.
pub fn sandboxed_engine(script: &str, limits: &SandboxLimits) -> Engine {
    let mut engine = Engine::new_raw();
    engine.register_global_module(StandardPackage::new().as_shared_module());
    engine.set_module_resolver(DummyModuleResolver::new());
    engine.disable_symbol("eval");
    engine.disable_symbol("import");
    engine.set_strict_variables(true);
    engine.set_max_operations(limits.max_operations);
    engine.set_max_call_levels(limits.max_call_levels);
    engine.set_max_expr_depths(limits.max_expr_depth.0, limits.max_expr_depth.1);
    engine.set_max_string_size(limits.max_string_size);
    engine.set_max_array_size(limits.max_array_size);
    engine.set_max_map_size(limits.max_map_size);
    engine.on_progress(crate::budget::on_progress);
    // Rhai checks a map's size when it is built or returned, but not when `m[key] = v` adds
    // a key; check the variable's map on every access instead (a scope lookup by name).
    let max_map = limits.max_map_size;
    // `on_var` is marked volatile (not deprecated) by Rhai; pinned to 1.27 like the debugger.
    #[allow(deprecated)]
    engine.on_var(move |name, _index, ctx| {
        let len = ctx
            .scope()
            .get(name)
            .and_then(|v| v.read_lock::<rhai::Map>().map(|m| m.len()));
        match len {
            Some(n) if max_map > 0 && n > max_map => Err(rhai::EvalAltResult::ErrorDataTooLarge(
                format!("Size of object map `{name}` ({n} properties, at most {max_map})"),
                rhai::Position::NONE,
            )
            .into()),
            _ => Ok(None),
        }
    });
    // Registered in the engine's own namespace, which is searched before the standard package.
    engine.register_fn("sleep", no_sleep::<rhai::INT>);
    engine.register_fn("sleep", no_sleep::<rhai::FLOAT>);
    let name = script.to_string();
    engine.on_print(move |text| log::info!("[{name}] {text}"));
    let name = script.to_string();
    engine.on_debug(
        move |text, _source, pos| match (pos.line(), pos.position()) {
            (Some(line), Some(col)) => log::debug!("[{name}:{line}:{col}] {text}"),
            _ => log::debug!("[{name}] {text}"),
        },
    );
    engine
}

/// The sandbox's `sleep`: always an error.
fn no_sleep<T>(_seconds: T) -> Result<(), Box<rhai::EvalAltResult>> {
    Err("`sleep` is not available to reward scripts (a reward must not wait)".into())
}
