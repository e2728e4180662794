//! Shared helpers of the integration tests: locating built plugins and writing scripts.
#![allow(dead_code)]
use std::path::{Path, PathBuf};

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The built library of the plugin whose lib name is `lib` (e.g. `comlrl_len_ratio`), built
/// first when missing (see `comlrl_testutil`).
pub fn plugin(lib: &str) -> PathBuf {
    comlrl_testutil::plugin(lib)
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
