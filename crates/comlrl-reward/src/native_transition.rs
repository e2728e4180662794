//! Native multi-turn transition plugins (`comlrl_transition_v1`): loaded, handshaken and never
//! unloaded like reward plugins (see `native.rs` for the lifetime and trust model); prompts
//! come back through a host callback that copies them. This is the in-process backend
//! (`isolate: false`); `crate::isolate::IsolatedTransition` runs the same code in a child
//! process (`comlrl plugin-host`).
use crate::error::{PluginFailure, RewardError};
use crate::guard::HostErr;
use crate::native::{open_table, read_name, require};
use crate::plugin_path;
use crate::transition::{TransitionFn, TransitionInput};
use comlrl_plugin_api::transition::{
    NextFn, TransitionPluginV1, TRANSITION_SYMBOL, TRANSITION_SYMBOL_NAME,
};
use comlrl_plugin_api::{DestroyFn, StrRef};
use std::ffi::c_void;
use std::path::{Path, PathBuf};

/// A loaded native transition plugin and the state it created.
pub struct NativeTransition {
    path: PathBuf,
    plugin_name: String,
    next_fn: NextFn,
    destroy_fn: DestroyFn,
    state: *mut c_void,
}

/// Where the host's `push` callback collects the prompts of one `next` call.
struct Sink {
    prompts: Vec<String>,
    /// Index and error of the first prompt that was not valid UTF-8.
    bad: Option<(usize, String)>,
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

/// Host side of `PushFn`: appends a checked copy of the prompt to the [`Sink`] behind `sink`.
unsafe extern "C" fn push(sink: *mut c_void, prompt: StrRef) {
    // SAFETY: `sink` is the `&mut Sink` passed to `next` for this very call.
    let sink = unsafe { &mut *sink.cast::<Sink>() };
    let index = sink.prompts.len();
    let bytes: &[u8] = if prompt.len == 0 {
        &[]
    } else if prompt.ptr.is_null() {
        sink.bad
            .get_or_insert((index, "a null pointer with a non-zero length".into()));
        sink.prompts.push(String::new());
        return;
    } else {
        // SAFETY: the plugin promises `len` readable bytes at `ptr` for this callback; they
        // are not trusted to be UTF-8 (checked below).
        unsafe { std::slice::from_raw_parts(prompt.ptr, prompt.len) }
    };
    match std::str::from_utf8(bytes) {
        Ok(s) => sink.prompts.push(s.to_string()),
        Err(e) => {
            sink.bad
                .get_or_insert((index, format!("not valid UTF-8 ({e})")));
            sink.prompts.push(String::new());
        }
    }
}

impl NativeTransition {
    /// Load the transition plugin at `path` (platform names are tried, as for rewards), check
    /// its ABI and create its state from `params`.
    pub fn load(path: impl AsRef<Path>, params: &serde_json::Value) -> Result<Self, RewardError> {
        Self::load_inner(path.as_ref(), params).map_err(RewardError::of_transition)
    }

    fn load_inner(path: &Path, params: &serde_json::Value) -> Result<Self, RewardError> {
        let path = plugin_path::resolve(path)?;
        let fail = |kind, msg: String| RewardError::plugin(&path, kind, msg);
        let table: &'static TransitionPluginV1 = open_table(
            &path,
            TRANSITION_SYMBOL,
            TRANSITION_SYMBOL_NAME,
            std::mem::size_of::<TransitionPluginV1>(),
        )?;
        let checked = (|| {
            Ok::<_, String>((
                read_name(table.name)?,
                require(table.create, "create")?,
                require(table.next, "next")?,
                require(table.destroy, "destroy")?,
            ))
        })();
        let (plugin_name, create, next_fn, destroy_fn) =
            checked.map_err(|m| fail(PluginFailure::Table, m))?;
        let params_json = params.to_string();
        let mut err = HostErr::new();
        // SAFETY: `params_json` and `err` outlive the call.
        let state = unsafe { create(StrRef::new(&params_json), &mut err.raw) };
        if err.overrun() {
            return Err(fail(PluginFailure::Memory, err.message()));
        }
        if state.is_null() {
            return Err(fail(PluginFailure::Create, err.message()));
        }
        Ok(Self {
            path,
            plugin_name,
            next_fn,
            destroy_fn,
            state,
        })
    }
}

/// The context a transition plugin's `next` gets, as JSON text: the fields of the Rhai `ctx`
/// minus `params` (which went to `create`).
pub(crate) fn ctx_json(input: &TransitionInput) -> String {
    serde_json::json!({
        "prompt": input.prompt,
        "fields": input.fields,
        "turn": input.turn,
        "agent_count": input.completions.len(),
        "completions": input.completions,
        "prompt_history": input.prompt_history,
        "response_history": input.response_history,
    })
    .to_string()
}

/// `prompts` must hold one prompt per agent.
pub(crate) fn check_count(
    path: &Path,
    prompts: Vec<String>,
    agents: usize,
) -> Result<Vec<String>, RewardError> {
    if prompts.len() != agents {
        return Err(RewardError::plugin(
            path,
            PluginFailure::Score,
            format!(
                "the transition returned {} prompts for {agents} agents",
                prompts.len(),
            ),
        )
        .of_transition());
    }
    Ok(prompts)
}

impl NativeTransition {
    /// The resolved library file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The name the plugin gives itself.
    pub fn plugin_name(&self) -> &str {
        &self.plugin_name
    }

    /// Calls the plugin's `next` on `ctx` (see [`ctx_json`]) and returns the prompts it pushed,
    /// each checked as UTF-8 (their count is the caller's to check).
    pub(crate) fn next_json(&self, ctx: &str) -> Result<Vec<String>, RewardError> {
        let mut sink = Sink {
            prompts: Vec::new(),
            bad: None,
        };
        let mut err = HostErr::new();
        // SAFETY: `state` came from this table's `create`; `ctx` and `sink` outlive the call;
        // `push` matches `PushFn` and only touches `sink`.
        let status = unsafe {
            (self.next_fn)(
                self.state,
                StrRef::new(ctx),
                (&mut sink as *mut Sink).cast::<c_void>(),
                push,
                &mut err.raw,
            )
        };
        err.check_call(&self.path, status)
            .map_err(RewardError::of_transition)?;
        if let Some((i, what)) = sink.bad {
            return Err(RewardError::plugin(
                &self.path,
                PluginFailure::Return,
                format!("the transition's prompt for agent {i} is {what}"),
            )
            .of_transition());
        }
        Ok(sink.prompts)
    }
}

impl TransitionFn for NativeTransition {
    fn next_prompts(&self, input: &TransitionInput) -> Result<Vec<String>, RewardError> {
        let prompts = self.next_json(&ctx_json(input))?;
        check_count(&self.path, prompts, input.completions.len())
    }
}

impl Drop for NativeTransition {
    fn drop(&mut self) {
        // SAFETY: `state` came from `create` and is not used after this.
        unsafe { (self.destroy_fn)(self.state) };
    }
}
