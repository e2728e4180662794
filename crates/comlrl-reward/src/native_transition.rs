//! Native multi-turn transition plugins (`comlrl_transition_v1`): loaded, handshaken and never
//! unloaded like reward plugins (see `native.rs` for the lifetime and trust model); prompts
//! come back through a host callback that copies them.
use crate::error::{PluginFailure, RewardError};
use crate::native::{open_table, HostErr};
use crate::plugin_path;
use crate::transition::{TransitionFn, TransitionInput};
use comlrl_plugin_api::transition::{
    TransitionPluginV1, TRANSITION_SYMBOL, TRANSITION_SYMBOL_NAME,
};
use comlrl_plugin_api::{StrRef, STATUS_OK, STATUS_PANIC};
use std::ffi::c_void;
use std::path::{Path, PathBuf};

pub struct NativeTransition {
    path: PathBuf,
    table: &'static TransitionPluginV1,
    state: *mut c_void,
}

// SAFETY: the plugin's `next` must be callable from any thread (the export macro requires
// `Transition: Send + Sync`); `destroy` runs once from `Drop` with exclusive access.
unsafe impl Send for NativeTransition {}
// SAFETY: see `Send`.
unsafe impl Sync for NativeTransition {}

impl std::fmt::Debug for NativeTransition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeTransition")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Host side of `PushFn`: appends a copy of the prompt to the `Vec<String>` behind `sink`.
unsafe extern "C" fn push(sink: *mut c_void, prompt: StrRef) {
    // SAFETY: `sink` is the `&mut Vec<String>` passed to `next` for this very call, and
    // `prompt` is valid UTF-8 for the duration of this callback (ABI rule).
    unsafe {
        let out = &mut *sink.cast::<Vec<String>>();
        out.push(prompt.as_str().to_string());
    }
}

impl NativeTransition {
    pub fn load(path: impl AsRef<Path>, params: &serde_json::Value) -> Result<Self, RewardError> {
        let path = plugin_path::resolve(path.as_ref())?;
        let fail = |kind, msg: String| RewardError::plugin(&path, kind, msg);
        let table: &'static TransitionPluginV1 = open_table(
            &path,
            TRANSITION_SYMBOL,
            TRANSITION_SYMBOL_NAME,
            std::mem::size_of::<TransitionPluginV1>(),
        )?;
        let params_json = params.to_string();
        let mut err = HostErr::new();
        // SAFETY: `params_json` and `err` outlive the call.
        let state = unsafe { (table.create)(StrRef::new(&params_json), &mut err.raw) };
        if state.is_null() {
            return Err(fail(PluginFailure::Create, err.message()));
        }
        Ok(Self { path, table, state })
    }
}

impl TransitionFn for NativeTransition {
    fn next_prompts(&self, input: &TransitionInput) -> Result<Vec<String>, RewardError> {
        let ctx = serde_json::json!({
            "prompt": input.prompt,
            "fields": input.fields,
            "turn": input.turn,
            "agent_count": input.completions.len(),
            "completions": input.completions,
            "prompt_history": input.prompt_history,
            "response_history": input.response_history,
        })
        .to_string();
        let mut out: Vec<String> = Vec::new();
        let mut err = HostErr::new();
        // SAFETY: `state` came from this table's `create`; `ctx` and `out` outlive the call;
        // `push` matches `PushFn` and only touches `out`.
        let status = unsafe {
            (self.table.next)(
                self.state,
                StrRef::new(&ctx),
                (&mut out as *mut Vec<String>).cast::<c_void>(),
                push,
                &mut err.raw,
            )
        };
        if status != STATUS_OK {
            let kind = if status == STATUS_PANIC {
                PluginFailure::Panic
            } else {
                PluginFailure::Score
            };
            return Err(RewardError::plugin(&self.path, kind, err.message()));
        }
        if out.len() != input.completions.len() {
            return Err(RewardError::plugin(
                &self.path,
                PluginFailure::Score,
                format!(
                    "the transition returned {} prompts for {} agents",
                    out.len(),
                    input.completions.len()
                ),
            ));
        }
        Ok(out)
    }
}

impl Drop for NativeTransition {
    fn drop(&mut self) {
        // SAFETY: `state` came from `create` and is not used after this.
        unsafe { (self.table.destroy)(self.state) };
    }
}
