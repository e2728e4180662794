//! The wall-clock time budget of one script call: a per-thread deadline that the sandbox's
//! progress callback ([`rhai::Engine::on_progress`]) checks, so a stalled script stops
//! wherever it runs — in its own code, in closures handed to `map`/`sort`/`filter`, or in
//! built-ins that call back into the script.
//!
//! The engine is shared by the threads that score samples in parallel, so the deadline lives
//! in a thread-local set around each call ([`Deadline::start`]) rather than in the engine.
use rhai::Dynamic;
use std::cell::Cell;
use std::time::{Duration, Instant};

/// The termination token the progress callback returns when the deadline has passed.
pub(crate) const TIMEOUT_TOKEN: &str = "comlrl: time budget exceeded";

/// Check the clock once every this many progress ticks (a tick is one Rhai operation; the
/// slowest single operation is bounded by the array/string size caps).
const CHECK_EVERY: u32 = 64;

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static TICKS: Cell<u32> = const { Cell::new(0) };
    static EXPIRED: Cell<bool> = const { Cell::new(false) };
}

/// The deadline of the script call running on this thread; restores the previous one (none,
/// normally) when dropped.
pub(crate) struct Deadline {
    previous: Option<Instant>,
}

impl Deadline {
    /// Start a budget of `budget` for the call about to run on this thread.
    pub(crate) fn start(budget: Duration) -> Deadline {
        let at = Instant::now().checked_add(budget);
        let previous = DEADLINE.with(|d| d.replace(at));
        TICKS.with(|t| t.set(0));
        EXPIRED.with(|e| e.set(false));
        Deadline { previous }
    }

    /// Whether the budget ran out during the call. Built-ins that swallow their callback's
    /// errors (`sort`'s comparator) can let a script finish after its budget ran out; such a
    /// call still counts as over budget.
    pub(crate) fn expired(&self) -> bool {
        EXPIRED.with(Cell::get)
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        DEADLINE.with(|d| d.set(self.previous));
    }
}

/// The progress callback: `Some(token)` (which terminates the script) once this thread's
/// deadline has passed.
pub(crate) fn on_progress(_operations: u64) -> Option<Dynamic> {
    let tick = TICKS.with(|t| {
        let n = t.get().wrapping_add(1);
        t.set(n);
        n
    });
    // Once expired, every further operation is refused at once.
    let expired = EXPIRED.with(Cell::get);
    if !expired && !tick.is_multiple_of(CHECK_EVERY) {
        return None;
    }
    let deadline = DEADLINE.with(Cell::get)?;
    if expired || Instant::now() >= deadline {
        EXPIRED.with(|e| e.set(true));
        return Some(Dynamic::from(TIMEOUT_TOKEN.to_string()));
    }
    None
}

/// Whether a termination token is ours (the time budget), as opposed to any other.
pub(crate) fn is_timeout(token: &Dynamic) -> bool {
    token
        .read_lock::<rhai::ImmutableString>()
        .is_some_and(|s| s.as_str() == TIMEOUT_TOKEN)
}
