//! The native-plugin backend: load a cdylib, check its ABI handshake before anything else,
//! and score batches through its C function table.
//!
//! Lifetime choice: a loaded [`Library`] is leaked (`Box::leak`) and never unloaded. The
//! function table and every function pointer in it then stay valid for the whole process,
//! which is what makes holding `&'static RewardPluginV1` sound; unloading Rust cdylibs is
//! fragile anyway (thread-locals, registered destructors). Loading the same plugin twice
//! costs one more handle on the same mapping, nothing else.
//!
//! Trust model: a plugin is native code running inside the trainer with its full rights.
//! What the host can check, it checks: the file before `dlopen` (a truncated library is an
//! error, not SIGBUS), the table before the first call (version, size, non-null entries, a
//! UTF-8 name), every string the plugin hands back, and the score buffer (guard space after
//! the `n` scores, see [`crate::guard`]). Its panics are caught. Memory errors, aborts,
//! `exit()` or endless loops inside it cannot be contained in-process: run such plugins with
//! `isolate: true` (a child process, see [`crate::isolate`]).
use crate::error::{PluginFailure, RewardError};
use crate::guard::{GuardedScores, HostErr};
use crate::{plugin_path, JointSample, RewardFn};
use comlrl_plugin_api::{
    CreateFn, DestroyFn, RewardPluginV1, SampleRef, ScoreFn, StrRef, TableHeader, ABI_VERSION,
    ENTRY_SYMBOL, ENTRY_SYMBOL_NAME,
};
use libloading::Library;
use std::ffi::c_void;
use std::path::{Path, PathBuf};

/// Longest plugin name accepted, in bytes (a longer one is a garbage length).
const MAX_NAME_LEN: usize = 1024;

/// A loaded native reward plugin with its state.
pub struct NativeReward {
    name: String,
    plugin_name: String,
    path: PathBuf,
    score_fn: ScoreFn,
    destroy_fn: DestroyFn,
    state: *mut c_void,
}

// SAFETY: `state` is only used through the plugin's `score` (shared, documented as callable
// from any thread at once: the export macro requires `Reward: Send + Sync`) and `destroy`
// (once, from `Drop`, with exclusive access). The table is `'static` and immutable.
unsafe impl Send for NativeReward {}
// SAFETY: see `Send`; `&NativeReward` only allows `score`, which plugins must make thread-safe.
unsafe impl Sync for NativeReward {}

impl std::fmt::Debug for NativeReward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeReward")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Check the stable table prefix; the rest of the table is read only if this passes.
pub fn check_header(header: &TableHeader) -> Result<(), String> {
    check_header_size(header, std::mem::size_of::<RewardPluginV1>())
}

/// [`check_header`] for a table type of `needed` bytes (reward or transition tables).
pub(crate) fn check_header_size(header: &TableHeader, needed: usize) -> Result<(), String> {
    if header.abi_version != ABI_VERSION {
        return Err(format!(
            "the plugin speaks ABI version {}, this host speaks version {ABI_VERSION}",
            header.abi_version
        ));
    }
    if (header.size as usize) < needed {
        return Err(format!(
            "the plugin's function table is {} bytes, version {ABI_VERSION} needs at least {needed}",
            header.size
        ));
    }
    Ok(())
}

/// Opens the library at `path` (leaked: never unloaded, see the module docs), calls its entry
/// `symbol` and checks the returned table's header (ABI version, at least `min_size` bytes)
/// before handing out the table. `T` is the `#[repr(C)]` table type the symbol promises.
pub(crate) fn open_table<T>(
    path: &Path,
    symbol: &[u8],
    symbol_name: &str,
    min_size: usize,
) -> Result<&'static T, RewardError> {
    let fail = |kind, msg: String| RewardError::plugin(path, kind, msg);
    crate::plugin_file::check_library_file(path).map_err(|m| fail(PluginFailure::Load, m))?;
    // SAFETY: loading runs the library's initialisers. Plugins are trusted code by contract
    // (see the module docs); there is no way to load one without this.
    let library =
        unsafe { Library::new(path) }.map_err(|e| fail(PluginFailure::Load, with_sources(&e)))?;
    let library: &'static Library = Box::leak(Box::new(library));
    // SAFETY: `fn() -> *const T` is the documented type of this symbol; a library that
    // exports the name with another type breaks the plugin contract.
    let entry =
        unsafe { library.get::<unsafe extern "C" fn() -> *const T>(symbol) }.map_err(|e| {
            fail(
                PluginFailure::Symbol,
                format!("the library does not export `{symbol_name}` ({e})"),
            )
        })?;
    // SAFETY: calling the entry point has no preconditions; it returns a static table.
    let raw = unsafe { entry() };
    if raw.is_null() {
        return Err(fail(
            PluginFailure::Abi,
            format!("`{symbol_name}` returned null"),
        ));
    }
    // SAFETY: every table version starts with `TableHeader` (repr(C)); the pointer is
    // non-null and points into the loaded (never unloaded) library.
    let header = unsafe { &*raw.cast::<TableHeader>() };
    check_header_size(header, min_size).map_err(|m| fail(PluginFailure::Abi, m))?;
    // SAFETY: the header matched this host's version and the table is large enough for `T`;
    // it is static data of a library that stays loaded.
    Ok(unsafe { &*raw })
}

/// An error's text followed by its sources' (libloading puts `dlerror`'s text in the source).
pub(crate) fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        text.push_str(": ");
        text.push_str(&s.to_string());
        next = s.source();
    }
    text
}

/// The plugin's name, checked: a non-null pointer (unless empty), a sane length, UTF-8.
pub(crate) fn read_name(name: StrRef) -> Result<String, String> {
    if name.len == 0 {
        return Ok(String::new());
    }
    if name.ptr.is_null() {
        return Err(format!(
            "the table's name pointer is null (with length {})",
            name.len
        ));
    }
    if name.len > MAX_NAME_LEN {
        return Err(format!(
            "the table's name is {} bytes long; at most {MAX_NAME_LEN} are accepted",
            name.len
        ));
    }
    // SAFETY: a non-null pointer to `len` (≤ 1 KiB) bytes of the plugin's static data, as
    // the ABI requires; the bytes are not trusted to be UTF-8 (checked below).
    let bytes = unsafe { std::slice::from_raw_parts(name.ptr, name.len) };
    std::str::from_utf8(bytes)
        .map(str::to_string)
        .map_err(|e| format!("the table's name is not valid UTF-8 ({e})"))
}

/// The table's function pointers, all non-null, or which one is null.
pub(crate) fn require<F>(f: Option<F>, what: &str) -> Result<F, String> {
    f.ok_or_else(|| format!("the table's `{what}` function pointer is null"))
}

/// A reward table after validation: its name and its three functions.
struct Checked {
    name: String,
    create: CreateFn,
    score: ScoreFn,
    destroy: DestroyFn,
}

fn check_table(table: &RewardPluginV1) -> Result<Checked, String> {
    Ok(Checked {
        name: read_name(table.name)?,
        create: require(table.create, "create")?,
        score: require(table.score, "score")?,
        destroy: require(table.destroy, "destroy")?,
    })
}

impl NativeReward {
    /// Load the plugin at `path` (platform names are tried, see [`plugin_path::candidates`]),
    /// check its ABI and create its state from `params`.
    pub fn load(path: impl AsRef<Path>, params: &serde_json::Value) -> Result<Self, RewardError> {
        let requested = path.as_ref();
        let path = plugin_path::resolve(requested)?;
        let fail = |kind, msg: String| RewardError::plugin(&path, kind, msg);

        let table: &'static RewardPluginV1 = open_table(
            &path,
            ENTRY_SYMBOL,
            ENTRY_SYMBOL_NAME,
            std::mem::size_of::<RewardPluginV1>(),
        )?;
        let table = check_table(table).map_err(|m| fail(PluginFailure::Table, m))?;

        let params_json = params.to_string();
        let mut err = HostErr::new();
        // SAFETY: `params_json` and `err` are valid for the duration of the call.
        let state = unsafe { (table.create)(StrRef::new(&params_json), &mut err.raw) };
        if err.overrun() {
            return Err(fail(PluginFailure::Memory, err.message()));
        }
        if state.is_null() {
            return Err(fail(PluginFailure::Create, err.message()));
        }
        let name = requested
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| table.name.clone());
        Ok(NativeReward {
            name,
            plugin_name: table.name,
            path,
            score_fn: table.score,
            destroy_fn: table.destroy,
            state,
        })
    }

    /// The resolved library file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The name the plugin gives itself.
    pub fn plugin_name(&self) -> &str {
        &self.plugin_name
    }
}

impl RewardFn for NativeReward {
    fn name(&self) -> &str {
        &self.name
    }

    fn score(&self, batch: &[JointSample]) -> Result<Vec<f32>, RewardError> {
        // Borrowed views of the batch; they must outlive the call below.
        let completions: Vec<Vec<StrRef>> = batch
            .iter()
            .map(|s| s.completions.iter().map(|c| StrRef::new(c)).collect())
            .collect();
        let fields: Vec<String> = batch
            .iter()
            .map(|s| {
                if s.fields.is_empty() {
                    Ok("{}".to_string())
                } else {
                    serde_json::to_string(&s.fields)
                }
            })
            .collect::<Result<_, _>>()
            .map_err(|e| {
                RewardError::plugin(
                    &self.path,
                    PluginFailure::Score,
                    format!("cannot encode the row fields as JSON: {e}"),
                )
            })?;
        let samples: Vec<SampleRef> = batch
            .iter()
            .zip(&completions)
            .zip(&fields)
            .map(|((s, comps), f)| SampleRef {
                prompt: StrRef::new(&s.prompt),
                completions: comps.as_ptr(),
                n_completions: comps.len(),
                fields_json: StrRef::new(f),
            })
            .collect();
        let mut out = GuardedScores::new(batch.len());
        let mut err = HostErr::new();
        // SAFETY: `state` came from this table's `create`; `samples` holds `batch.len()`
        // samples whose strings live in `batch`, `completions` and `fields` until the call
        // returns; `out` has room for `batch.len()` floats (plus guard space); `err` is a
        // valid host buffer.
        let status = unsafe {
            (self.score_fn)(
                self.state,
                samples.as_ptr(),
                samples.len(),
                out.as_mut_ptr(),
                &mut err.raw,
            )
        };
        err.check_call(&self.path, status)?;
        out.finish().map_err(|m| {
            let kind = if m.starts_with("score #") {
                PluginFailure::Return
            } else {
                PluginFailure::Memory
            };
            RewardError::plugin(&self.path, kind, m)
        })
    }
}

impl Drop for NativeReward {
    fn drop(&mut self) {
        // SAFETY: `state` came from this table's `create` and is not used after this; the
        // library is never unloaded, so `destroy` is still mapped.
        unsafe { (self.destroy_fn)(self.state) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_checks() {
        let size = std::mem::size_of::<RewardPluginV1>() as u32;
        assert!(check_header(&TableHeader {
            abi_version: ABI_VERSION,
            size
        })
        .is_ok());
        assert!(check_header(&TableHeader {
            abi_version: ABI_VERSION,
            size: size + 8
        })
        .is_ok());
        let e = check_header(&TableHeader {
            abi_version: ABI_VERSION,
            size: 8,
        })
        .expect_err("small");
        assert!(e.contains("8 bytes"), "{e}");
        let e = check_header(&TableHeader {
            abi_version: 2,
            size,
        })
        .expect_err("version");
        assert!(e.contains("version 2"), "{e}");
    }
}
