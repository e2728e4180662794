//! Test-only transition plugin: each agent's next prompt is `Revise (turn N): <its completion>`.
//! With params `{"panic": true}` it panics, to test that the host reports it; with
//! `{"bad_utf8": true}` its raw `next` hands back prompts that are not UTF-8, to test that the
//! host checks them. With `{"misbehave": M}` its `next` does what a broken plugin does, to
//! test isolation: `abort`, `segv` (a write through a null pointer), `exit0`, `hang` (sleeps
//! without end), `stdout` (prints to stdout, then answers normally), or `abort_bedtime`
//! (aborts when the row's prompt contains "bedtime", else answers normally).
use comlrl_plugin_api::transition::{shim, PushFn, Transition, TransitionPluginV1};
use comlrl_plugin_api::{ErrBuf, StrRef, STATUS_OK};
use std::ffi::c_void;

struct Revise {
    panic: bool,
    bad_utf8: bool,
    misbehave: String,
}

impl Transition for Revise {
    const NAME: &'static str = "revise";

    fn create(params_json: &str) -> Result<Self, String> {
        let v: serde_json::Value = serde_json::from_str(params_json).map_err(|e| e.to_string())?;
        Ok(Revise {
            panic: v.get("panic").and_then(|p| p.as_bool()).unwrap_or(false),
            bad_utf8: v.get("bad_utf8").and_then(|p| p.as_bool()).unwrap_or(false),
            misbehave: v
                .get("misbehave")
                .and_then(|p| p.as_str())
                .unwrap_or_default()
                .to_string(),
        })
    }

    fn next_prompts(&self, ctx_json: &str) -> Result<Vec<String>, String> {
        if self.panic {
            panic!("asked to panic");
        }
        let ctx: serde_json::Value = serde_json::from_str(ctx_json).map_err(|e| e.to_string())?;
        let turn = ctx["turn"].as_u64().ok_or("ctx.turn missing")?;
        match self.misbehave.as_str() {
            "abort" => std::process::abort(),
            // SAFETY: deliberately not: a write through a null pointer, as asked.
            "segv" => unsafe { std::ptr::write_volatile(std::ptr::null_mut::<u64>(), 1) },
            "exit0" => std::process::exit(0),
            "hang" => loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            },
            "stdout" => println!("revise: chatter on stdout as asked"),
            "abort_bedtime"
                if ctx["prompt"]
                    .as_str()
                    .is_some_and(|p| p.contains("bedtime")) =>
            {
                std::process::abort()
            }
            _ => {}
        }
        let comps = ctx["completions"]
            .as_array()
            .ok_or("ctx.completions missing")?;
        Ok(comps
            .iter()
            .map(|c| format!("Revise (turn {turn}): {}", c.as_str().unwrap_or_default()))
            .collect())
    }
}

/// `next` below the safe API: invalid UTF-8 when asked, else the safe shim.
unsafe extern "C" fn next(
    state: *const c_void,
    ctx_json: StrRef,
    sink: *mut c_void,
    push: PushFn,
    err: *mut ErrBuf,
) -> i32 {
    // SAFETY: `state` is the Box<Revise> made by the shim's `create`.
    let this = unsafe { &*state.cast::<Revise>() };
    if this.bad_utf8 {
        static BYTES: [u8; 3] = [b'a', 0xff, b'b'];
        for _ in 0..2 {
            // SAFETY: `push` and `sink` come from the host; the bytes are static.
            unsafe {
                push(
                    sink,
                    StrRef {
                        ptr: BYTES.as_ptr(),
                        len: 3,
                    },
                )
            };
        }
        return STATUS_OK;
    }
    // SAFETY: forwarded unchanged from the host.
    unsafe { shim::next::<Revise>(state, ctx_json, sink, push, err) }
}

static TABLE: TransitionPluginV1 = TransitionPluginV1 {
    next: Some(next),
    ..shim::table::<Revise>()
};

/// Entry point of this comlrl transition plugin (ABI version 1).
#[unsafe(no_mangle)]
pub extern "C" fn comlrl_transition_v1() -> *const TransitionPluginV1 {
    &TABLE
}
