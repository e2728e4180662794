//! The guard shared by the reward and transition shims: building and dropping a plugin's state
//! and settling a call's outcome (an `Err` or a panic reported into the host's error buffer),
//! so that no panic crosses the C ABI.
use super::{panic_message, report, ErrBuf, StrRef, STATUS_ERROR, STATUS_PANIC};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe, UnwindSafe};

/// A guarded call's value, or (after reporting why into `err`) the status to return:
/// `STATUS_ERROR` for an `Err` from the plugin, `STATUS_PANIC` for a panic in `call`.
///
/// # Safety
/// `err` is null or the host's buffer (see [`report`]).
pub(crate) unsafe fn settle<R>(
    outcome: std::thread::Result<Result<R, String>>,
    err: *mut ErrBuf,
    call: &str,
) -> Result<R, i32> {
    let (msg, status) = match outcome {
        Ok(Ok(value)) => return Ok(value),
        Ok(Err(msg)) => (msg, STATUS_ERROR),
        Err(payload) => (
            format!("panicked in {call}: {}", panic_message(payload)),
            STATUS_PANIC,
        ),
    };
    // SAFETY: the caller guarantees `err` is null or the host's buffer.
    unsafe { report(err, &msg) };
    Err(status)
}

/// The body of a `create` shim: `make` run on the params under `catch_unwind`; the state boxed
/// and handed to the host, or null with the reason in `err`.
///
/// # Safety
/// `params_json` is valid UTF-8 that outlives the call; `err` is null or the host's buffer.
pub(crate) unsafe fn create_state<T>(
    params_json: StrRef,
    err: *mut ErrBuf,
    make: impl FnOnce(&str) -> Result<T, String> + UnwindSafe,
) -> *mut c_void {
    // SAFETY: the host passes valid UTF-8 that outlives this call.
    let params = unsafe { params_json.as_str() };
    // SAFETY: `err` is the host's buffer.
    match unsafe { settle(catch_unwind(|| make(params)), err, "create") } {
        Ok(state) => Box::into_raw(Box::new(state)).cast::<c_void>(),
        Err(_) => std::ptr::null_mut(),
    }
}

/// The body of a `destroy` shim: the state dropped under `catch_unwind` (a panicking `Drop` is
/// swallowed); null is ignored.
///
/// # Safety
/// `state` is null or came from [`create_state::<T>`] and is not used afterwards.
pub(crate) unsafe fn destroy_state<T>(state: *mut c_void) {
    if state.is_null() {
        return;
    }
    // SAFETY: `state` is the Box<T> made by `create_state::<T>`, now owned back by us.
    let boxed = unsafe { Box::from_raw(state.cast::<T>()) };
    let _ = catch_unwind(AssertUnwindSafe(move || drop(boxed)));
}
