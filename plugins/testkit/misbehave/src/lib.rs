//! Test-only plugin that misbehaves on purpose, chosen by `params.mode`:
//! - through the safe API: `panic_create`, `error_create`, `panic_score`, `error_score`,
//!   `nan`, or `ok` (scores 1.0);
//! - below it, in a hand-written `score` (the safe API cannot express these): `write_past_n`
//!   (writes 4 scores more than asked), `skip_write` (reports success, writes nothing),
//!   `bad_utf8_error` (an error message that is not UTF-8), `stdout` (prints to stdout, then
//!   scores 1.0), and the process killers `abort`, `segv`, `stack_overflow`, `exit0`, `hang`,
//!   and `segv_bedtime` (crashes on a prompt containing "bedtime", else scores 1.0);
//! - forks (Unix): `fork_sleep` forks a process that sleeps [`SLEEPER_SECS`] seconds, then
//!   scores 1.0; `fork_abort` forks the same sleeper, then aborts. The sleeper holds the host's
//!   pipes, as any forked process does; each call forks once, and the sleeper ends by itself.
use comlrl_plugin_api::{
    shim, ErrBuf, Reward, RewardPluginV1, Sample, SampleRef, STATUS_ERROR, STATUS_OK,
};
use std::ffi::c_void;

/// The selected misbehaviour.
pub struct Misbehave {
    mode: String,
}

impl Reward for Misbehave {
    const NAME: &'static str = "misbehave";

    fn create(params_json: &str) -> Result<Self, String> {
        let mode = params_json
            .split('"')
            .skip_while(|s| *s != "mode")
            .nth(2)
            .unwrap_or("ok")
            .to_string();
        match mode.as_str() {
            "panic_create" => panic!("misbehave: panic in create as asked"),
            "error_create" => Err("misbehave: create refused as asked".to_string()),
            _ => Ok(Misbehave { mode }),
        }
    }

    fn score(&self, _sample: &Sample<'_>) -> Result<f32, String> {
        match self.mode.as_str() {
            "panic_score" => panic!("misbehave: panic in score as asked"),
            "error_score" => Err("misbehave: score refused as asked".to_string()),
            "nan" => Ok(f32::NAN),
            _ => Ok(1.0),
        }
    }
}

/// How long a forked sleeper lives if nobody kills it: longer than the tests wait for a crash
/// report, short enough that a leaked one goes away soon.
pub const SLEEPER_SECS: u32 = 10;

/// Forks one process that sleeps [`SLEEPER_SECS`] seconds and exits.
#[cfg(unix)]
fn fork_sleeper() {
    // SAFETY: fork in a multi-threaded process: the child only calls the async-signal-safe
    // `sleep` and `_exit`, touching no lock or allocator.
    unsafe {
        if libc::fork() == 0 {
            libc::sleep(SLEEPER_SECS);
            libc::_exit(0);
        }
    }
}

#[cfg(not(unix))]
fn fork_sleeper() {}

/// Recurses without end (the frame buffer keeps the optimiser from making it a loop).
#[inline(never)]
fn overflow(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 64]);
    if frame[0] == u64::MAX {
        return 0;
    }
    overflow(frame[depth as usize % 64] + 1) + frame[3]
}

/// `score` below the safe API: the raw misbehaviours, else the safe shim.
unsafe extern "C" fn score(
    state: *const c_void,
    samples: *const SampleRef,
    n: usize,
    out: *mut f32,
    err: *mut ErrBuf,
) -> i32 {
    // SAFETY: `state` is the Box<Misbehave> made by the shim's `create`.
    let this = unsafe { &*state.cast::<Misbehave>() };
    match this.mode.as_str() {
        "write_past_n" => {
            for i in 0..n + 4 {
                // SAFETY: deliberately not safe for i >= n; the host's guard space catches it.
                unsafe { out.add(i).write(1.0) };
            }
            STATUS_OK
        }
        "skip_write" => STATUS_OK,
        "bad_utf8_error" => {
            let bytes = b"misbehave: \xff\xfe not utf-8";
            // SAFETY: the host's buffer has `cap` writable bytes; we write at most that.
            unsafe {
                let buf = &mut *err;
                let k = bytes.len().min(buf.cap);
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.ptr, k);
                buf.len = k;
            }
            STATUS_ERROR
        }
        "stdout" => {
            println!("misbehave: chatter on stdout as asked");
            // SAFETY: forwarded unchanged from the host.
            unsafe { shim::score::<Misbehave>(state, samples, n, out, err) }
        }
        "abort" => std::process::abort(),
        "fork_sleep" => {
            fork_sleeper();
            // SAFETY: forwarded unchanged from the host.
            unsafe { shim::score::<Misbehave>(state, samples, n, out, err) }
        }
        "fork_abort" => {
            fork_sleeper();
            std::process::abort()
        }
        // SAFETY: deliberately not: a write through a null pointer, as asked.
        "segv" => unsafe {
            std::ptr::write_volatile(std::ptr::null_mut::<u64>(), 1);
            STATUS_OK
        },
        "segv_bedtime" => {
            // SAFETY: the host passes `n` samples whose strings stay valid during this call.
            let bedtime = (0..n).any(|i| unsafe {
                let p = &(*samples.add(i)).prompt;
                std::slice::from_raw_parts(p.ptr, p.len)
                    .windows(7)
                    .any(|w| w == b"bedtime")
            });
            if bedtime {
                // SAFETY: deliberately not: a write through a null pointer, as asked.
                unsafe { std::ptr::write_volatile(std::ptr::null_mut::<u64>(), 1) };
            }
            // SAFETY: forwarded unchanged from the host.
            unsafe { shim::score::<Misbehave>(state, samples, n, out, err) }
        }
        "stack_overflow" => overflow(0) as i32,
        "exit0" => std::process::exit(0),
        "hang" => loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        },
        // SAFETY: forwarded unchanged from the host.
        _ => unsafe { shim::score::<Misbehave>(state, samples, n, out, err) },
    }
}

static TABLE: RewardPluginV1 = RewardPluginV1 {
    score: Some(score),
    ..shim::table::<Misbehave>()
};

/// Entry point of this comlrl reward plugin (ABI version 1).
#[unsafe(no_mangle)]
pub extern "C" fn comlrl_reward_v1() -> *const RewardPluginV1 {
    &TABLE
}
