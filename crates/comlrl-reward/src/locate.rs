//! Finding where a script hit a sandbox limit. Rhai drops the position of limit errors
//! (too many operations, stack overflow, data too large) at function boundaries, so the
//! failing call is replayed once on a copy of the sandbox with a stepping debugger that
//! records the position of every step; the last one is where the limit hit. Scripts are
//! deterministic, so the replay fails the same way. This costs nothing on the normal path.
use crate::error::Pos;
use crate::sandbox::{sandboxed_engine, SandboxLimits};
use rhai::debugger::{DebuggerCommand, DebuggerEvent};
use rhai::{Dynamic, Scope, AST};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Replay `fn_name(args)` under `limits` (with `max_ops` operations) and return the position
/// of the last step before it failed, if any.
pub(crate) fn locate_limit(
    script: &str,
    limits: &SandboxLimits,
    max_ops: u64,
    ast: &AST,
    fn_name: &str,
    args: [Dynamic; 2],
) -> Option<Pos> {
    let mut engine = sandboxed_engine(script, limits);
    engine.set_max_operations(max_ops);
    engine.on_print(|_| ());
    engine.on_debug(|_, _, _| ());
    let last = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&last);
    // The debugger API is marked volatile (not deprecated) by Rhai; pinned to 1.27.
    #[allow(deprecated)]
    engine.register_debugger(
        |_, debugger| debugger,
        move |_ctx, event, _node, _source, pos| {
            let step = matches!(event, DebuggerEvent::Start | DebuggerEvent::Step);
            if let (true, Some(line), Some(column)) = (step, pos.line(), pos.position()) {
                seen.store(((line as u64) << 32) | column as u64, Ordering::Relaxed);
            }
            Ok(DebuggerCommand::StepInto)
        },
    );
    let [a, b] = args;
    let outcome = engine.call_fn::<Dynamic>(&mut Scope::new(), ast, fn_name, (a, b));
    let packed = last.load(Ordering::Relaxed);
    if outcome.is_ok() || packed == 0 {
        return None;
    }
    Some(Pos {
        line: (packed >> 32) as usize,
        column: (packed & 0xFFFF_FFFF) as usize,
    })
}
