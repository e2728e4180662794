//! The C ABI of native multi-turn transition plugins (`comlrl_transition_v1`): the same rules
//! as reward plugins (header checked first, borrowed UTF-8 in, nothing owned crosses,
//! `catch_unwind` everywhere), with prompts handed back through a host callback.
//!
//! The host calls `next(state, ctx_json, sink, push, err)`; `ctx_json` is a JSON object with
//! `prompt`, `fields`, `turn` (1-based, the turn just completed), `agent_count`, `completions`
//! (the parent joint action, agent 0 first), `prompt_history` and `response_history` (one
//! array per agent). The plugin calls `push(sink, prompt)` once per agent, in agent order;
//! the host copies each prompt during the call.
use super::{guard, report, CreateFn, DestroyFn, ErrBuf, StrRef, ABI_VERSION};
use super::{STATUS_ERROR, STATUS_OK};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Name of the exported transition entry symbol (ABI version 1).
pub const TRANSITION_SYMBOL_NAME: &str = "comlrl_transition_v1";
/// [`TRANSITION_SYMBOL_NAME`] NUL-terminated, for a dynamic loader.
pub const TRANSITION_SYMBOL: &[u8] = b"comlrl_transition_v1\0";

/// Host callback receiving one prompt (borrowed for the duration of the call).
pub type PushFn = unsafe extern "C" fn(sink: *mut c_void, prompt: StrRef);

/// `next(state, ctx_json, sink, push, err) -> status`.
pub type NextFn = unsafe extern "C" fn(
    state: *const c_void,
    ctx_json: StrRef,
    sink: *mut c_void,
    push: PushFn,
    err: *mut ErrBuf,
) -> i32;

/// Entry point type of [`TRANSITION_SYMBOL`].
pub type TransitionEntryFn = unsafe extern "C" fn() -> *const TransitionPluginV1;

/// The function table of a transition plugin; starts with the same header as reward tables.
#[repr(C)]
#[derive(Debug)]
pub struct TransitionPluginV1 {
    /// [`TableHeader::abi_version`](crate::TableHeader::abi_version).
    pub abi_version: u32,
    /// `size_of::<TransitionPluginV1>()` as built by the plugin.
    pub size: u32,
    /// The plugin's name (static UTF-8), for logs.
    pub name: StrRef,
    /// Create the state from the params JSON; `None` (null) is refused by the host.
    pub create: Option<CreateFn>,
    /// Write the next-turn prompts for one context, through the host's `push` callback.
    pub next: Option<NextFn>,
    /// Free the state.
    pub destroy: Option<DestroyFn>,
}

// SAFETY: the table is immutable static data (a name pointing to a static string and function
// pointers), so sharing it between threads is sound.
unsafe impl Sync for TransitionPluginV1 {}

/// What a transition plugin author implements; [`export_transition!`] does the rest.
pub trait Transition: Send + Sync + Sized + 'static {
    /// Name shown in logs and errors.
    const NAME: &'static str;
    /// Build from the scenario's `params` (JSON text; `{}` when none).
    fn create(params_json: &str) -> Result<Self, String>;
    /// One next-turn prompt per agent, from the context JSON described in the module docs.
    fn next_prompts(&self, ctx_json: &str) -> Result<Vec<String>, String>;
}

/// Shims behind [`export_transition!`]. Not for direct use.
#[doc(hidden)]
pub mod shim {
    use super::*;

    /// # Safety
    /// Called by the host with valid arguments (see [`CreateFn`]).
    pub unsafe extern "C" fn create<T: Transition>(
        params_json: StrRef,
        err: *mut ErrBuf,
    ) -> *mut c_void {
        // SAFETY: the host's arguments are forwarded under the same contract.
        unsafe { guard::create_state(params_json, err, T::create) }
    }

    /// # Safety
    /// `state` came from [`create::<T>`]; the other arguments are valid for this call.
    pub unsafe extern "C" fn next<T: Transition>(
        state: *const c_void,
        ctx_json: StrRef,
        sink: *mut c_void,
        push: PushFn,
        err: *mut ErrBuf,
    ) -> i32 {
        if state.is_null() {
            // SAFETY: `err` is the host's buffer.
            unsafe { report(err, "null state passed to next") };
            return STATUS_ERROR;
        }
        let result = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `state` is the Box<T> made by `create::<T>`, shared read-only.
            let t = unsafe { &*state.cast::<T>() };
            // SAFETY: the host passes valid UTF-8 that outlives this call.
            let ctx = unsafe { ctx_json.as_str() };
            t.next_prompts(ctx)
        }));
        // SAFETY: `err` is the host's buffer.
        match unsafe { guard::settle(result, err, "next") } {
            Ok(prompts) => {
                for p in &prompts {
                    // SAFETY: `push` and `sink` come from the host, which copies the prompt
                    // before returning; `p` outlives the call.
                    unsafe { push(sink, StrRef::new(p)) };
                }
                STATUS_OK
            }
            Err(status) => status,
        }
    }

    /// # Safety
    /// `state` came from [`create::<T>`] and is not used afterwards.
    pub unsafe extern "C" fn destroy<T: Transition>(state: *mut c_void) {
        // SAFETY: `state` came from `create::<T>` (that is, `create_state::<T>`) and is not
        // used afterwards.
        unsafe { guard::destroy_state::<T>(state) }
    }

    pub const fn table<T: Transition>() -> TransitionPluginV1 {
        TransitionPluginV1 {
            abi_version: ABI_VERSION,
            size: std::mem::size_of::<TransitionPluginV1>() as u32,
            name: StrRef::new(T::NAME),
            create: Some(create::<T>),
            next: Some(next::<T>),
            destroy: Some(destroy::<T>),
        }
    }
}

/// Export a [`Transition`] implementation as a comlrl transition plugin (defines
/// `comlrl_transition_v1`; once per cdylib).
#[macro_export]
macro_rules! export_transition {
    ($ty:ty) => {
        /// Entry point of this comlrl transition plugin (ABI version 1).
        #[unsafe(no_mangle)]
        pub extern "C" fn comlrl_transition_v1() -> *const $crate::transition::TransitionPluginV1 {
            static TABLE: $crate::transition::TransitionPluginV1 =
                $crate::transition::shim::table::<$ty>();
            &TABLE
        }
    };
}
