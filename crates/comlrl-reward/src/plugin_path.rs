//! Resolution of a plugin path as written in a scenario to an existing library file, so that
//! `target/release/comlrl_len_ratio` works on Linux, macOS and Windows alike.
use crate::error::RewardError;
use std::path::{Path, PathBuf};

pub use comlrl_plugin_api::library_files::candidates;

/// The first candidate that is an existing file, or [`RewardError::PluginNotFound`] listing
/// every path tried.
pub fn resolve(path: &Path) -> Result<PathBuf, RewardError> {
    let tried = candidates(path);
    match tried.iter().find(|p| p.is_file()) {
        Some(found) => Ok(found.clone()),
        None => Err(RewardError::PluginNotFound {
            role: crate::error::PluginRole::Reward,
            requested: path.to_path_buf(),
            tried,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::env::consts::DLL_SUFFIX;

    #[test]
    fn missing_lists_tried_paths() {
        let err = resolve(Path::new("/nonexistent/dir/foo")).expect_err("missing");
        let s = err.to_string();
        assert!(
            s.contains("/nonexistent/dir/foo") && s.contains(DLL_SUFFIX),
            "{s}"
        );
        assert!(s.contains("cargo build --release --workspace"), "{s}");
    }
}
