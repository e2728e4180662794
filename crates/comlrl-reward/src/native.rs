//! The native-plugin backend: load a cdylib, check its ABI handshake before anything else,
//! and score batches through its C function table.
//!
//! Lifetime choice: a loaded [`Library`] is leaked (`Box::leak`) and never unloaded. The
//! function table and every function pointer in it then stay valid for the whole process,
//! which is what makes holding `&'static RewardPluginV1` sound; unloading Rust cdylibs is
//! fragile anyway (thread-locals, registered destructors). Loading the same plugin twice
//! costs one more handle on the same mapping, nothing else.
//!
//! Trust model: a plugin is native code running inside the trainer with its full rights. Its
//! panics are caught, but memory errors, aborts or endless loops in it cannot be contained.
//! Only load plugins you would run as programs.
use crate::error::{PluginFailure, RewardError};
use crate::{plugin_path, JointSample, RewardFn};
use comlrl_plugin_api::{
    ErrBuf, RewardPluginV1, SampleRef, StrRef, TableHeader, ABI_VERSION, ENTRY_SYMBOL,
    ENTRY_SYMBOL_NAME, STATUS_OK, STATUS_PANIC,
};
use libloading::Library;
use std::ffi::c_void;
use std::path::{Path, PathBuf};

/// Capacity of the host-owned error buffer handed to the plugin.
const ERR_CAPACITY: usize = 4096;

/// A loaded native reward plugin with its state.
pub struct NativeReward {
    name: String,
    path: PathBuf,
    table: &'static RewardPluginV1,
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
    // SAFETY: loading runs the library's initialisers. Plugins are trusted code by contract
    // (see the module docs); there is no way to load one without this.
    let library =
        unsafe { Library::new(path) }.map_err(|e| fail(PluginFailure::Load, e.to_string()))?;
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

/// A host-owned error buffer.
pub(crate) struct HostErr {
    bytes: Vec<u8>,
    pub(crate) raw: ErrBuf,
}

impl HostErr {
    pub(crate) fn new() -> Self {
        let mut bytes = vec![0u8; ERR_CAPACITY];
        let raw = ErrBuf {
            ptr: bytes.as_mut_ptr(),
            cap: bytes.len(),
            len: 0,
        };
        HostErr { bytes, raw }
    }

    pub(crate) fn message(&self) -> String {
        let len = self.raw.len.min(self.bytes.len());
        let text = String::from_utf8_lossy(&self.bytes[..len]).into_owned();
        if text.is_empty() {
            "(the plugin gave no message)".to_string()
        } else {
            text
        }
    }
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
        // SAFETY: `name` is a static UTF-8 string of the plugin (ABI rule).
        let plugin_name = unsafe { table.name.as_str() }.to_string();

        let params_json = params.to_string();
        let mut err = HostErr::new();
        // SAFETY: `params_json` and `err` are valid for the duration of the call.
        let state = unsafe { (table.create)(StrRef::new(&params_json), &mut err.raw) };
        if state.is_null() {
            return Err(fail(PluginFailure::Create, err.message()));
        }
        let name = requested
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or(plugin_name);
        Ok(NativeReward {
            name,
            path,
            table,
            state,
        })
    }

    /// The resolved library file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The name the plugin gives itself.
    pub fn plugin_name(&self) -> &str {
        // SAFETY: static UTF-8 string of the plugin (ABI rule).
        unsafe { self.table.name.as_str() }
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
        let mut out = vec![f32::NAN; batch.len()];
        let mut err = HostErr::new();
        // SAFETY: `state` came from this table's `create`; `samples` holds `batch.len()`
        // samples whose strings live in `batch`, `completions` and `fields` until the call
        // returns; `out` has room for `batch.len()` floats; `err` is a valid host buffer.
        let status = unsafe {
            (self.table.score)(
                self.state,
                samples.as_ptr(),
                samples.len(),
                out.as_mut_ptr(),
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
        if let Some((i, v)) = out.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(RewardError::plugin(
                &self.path,
                PluginFailure::Return,
                format!("score #{i} is {v}"),
            ));
        }
        Ok(out)
    }
}

impl Drop for NativeReward {
    fn drop(&mut self) {
        // SAFETY: `state` came from this table's `create` and is not used after this; the
        // library is never unloaded, so `destroy` is still mapped.
        unsafe { (self.table.destroy)(self.state) };
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
