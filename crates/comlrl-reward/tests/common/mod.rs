//! Shared helpers of the integration tests: locating built plugins and writing scripts.
#![allow(dead_code)]
use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::path::{Path, PathBuf};

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Directories where built plugins may be: next to this test binary's profile directory,
/// `$CARGO_TARGET_DIR/release`, `<workspace>/target/release`.
pub fn plugin_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(profile) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().and_then(Path::parent).map(Path::to_path_buf))
    {
        dirs.push(profile.clone());
        if let Some(target) = profile.parent() {
            dirs.push(target.join("release"));
        }
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        dirs.push(PathBuf::from(t).join("release"));
    }
    dirs.push(workspace_root().join("target/release"));
    dirs
}

/// The built library of the plugin whose lib name is `lib` (e.g. `comlrl_len_ratio`).
/// Panics with the build command when it is missing.
pub fn plugin(lib: &str) -> PathBuf {
    let file = format!("{DLL_PREFIX}{lib}{DLL_SUFFIX}");
    let dirs = plugin_dirs();
    for dir in &dirs {
        let candidate = dir.join(&file);
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "plugin {file} is not built (looked in {dirs:?}); run `cargo build --release --workspace` first"
    );
}

/// Write `source` to a fresh script file named `<name>.rhai` and return its path.
pub fn script(name: &str, source: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reward-tests");
    std::fs::create_dir_all(&dir).expect("create test dir");
    let path = dir.join(format!("{name}.rhai"));
    std::fs::write(&path, source).expect("write test script");
    path
}

/// The shipped `rewards/len_ratio.rhai`.
pub fn len_ratio_script() -> PathBuf {
    workspace_root().join("rewards/len_ratio.rhai")
}

/// A string of exactly `n` characters mixing 1-, 2-, 3- and 4-byte UTF-8.
pub fn text(n: usize, salt: usize) -> String {
    const CHARS: [char; 6] = ['a', 'é', '日', '本', '🙂', ' '];
    (0..n).map(|i| CHARS[(i + salt) % CHARS.len()]).collect()
}
