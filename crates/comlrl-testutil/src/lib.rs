//! Test support shared by the workspace's test suites: the plugin libraries that tests load,
//! built on first use, so `cargo test --workspace --release` passes as the first command run in
//! a fresh clone (it does not build `cdylib` plugins by itself).
use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// The cargo target directory the running test binary was built into
/// (`<target>/<profile>/deps/<test>`), which honours `CARGO_TARGET_DIR`.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Package names of the workspace members under `plugins/` (read from the root Cargo.toml, so
/// a new plugin crate needs no change here).
pub fn plugin_packages() -> Vec<String> {
    let root = workspace_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("root Cargo.toml");
    let members = manifest
        .split_once("members")
        .and_then(|(_, rest)| rest.split_once('[').map(|(_, r)| r))
        .and_then(|rest| rest.split_once(']').map(|(m, _)| m))
        .expect("[workspace] members list in Cargo.toml");
    members
        .split('"')
        .filter(|m| m.starts_with("plugins/"))
        .map(|m| {
            let toml = std::fs::read_to_string(root.join(m).join("Cargo.toml"))
                .unwrap_or_else(|e| panic!("{m}/Cargo.toml: {e}"));
            toml.lines()
                .find_map(|l| {
                    let (k, v) = l.split_once('=')?;
                    (k.trim() == "name").then(|| v.trim().trim_matches('"').to_string())
                })
                .unwrap_or_else(|| panic!("{m}/Cargo.toml has no package name"))
        })
        .collect()
}

/// Builds every plugin crate in release mode into [`target_dir`] once per test process, and
/// returns `<target>/release`. Panics with cargo's output when the build fails.
pub fn plugins_built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let target = target_dir();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(workspace_root())
            .args(["build", "--release", "--quiet", "--target-dir"])
            .arg(&target);
        for p in plugin_packages() {
            cmd.args(["-p", &p]);
        }
        let out = cmd.output().expect("run cargo to build the plugins");
        assert!(
            out.status.success(),
            "building the plugins failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        target.join("release")
    })
}

/// The built library of the plugin whose lib name is `lib` (e.g. `comlrl_len_ratio`), built
/// first if needed.
pub fn plugin(lib: &str) -> PathBuf {
    let path = plugins_built().join(format!("{DLL_PREFIX}{lib}{DLL_SUFFIX}"));
    assert!(path.is_file(), "plugin {} was not built", path.display());
    path
}

/// Whether `COMLRL_REQUIRE_ALL=1` is set: every test that would skip for want of something
/// optional (a Python package, MPI, a CPU feature, a file named by an environment variable)
/// fails instead, so a by-hand run with everything installed proves that nothing was skipped.
pub fn require_all() -> bool {
    std::env::var("COMLRL_REQUIRE_ALL").is_ok_and(|v| v == "1")
}

/// Skips the rest of the calling test with `reason` (printed as `skipped: <reason>`): the
/// caller returns right after. Under `COMLRL_REQUIRE_ALL=1` it panics with the reason instead.
pub fn skip(reason: &str) {
    assert!(
        !require_all(),
        "COMLRL_REQUIRE_ALL=1, but this test would be skipped: {reason}"
    );
    eprintln!("skipped: {reason}");
}
