//! Where a plugin library lives: the file names a plugin path written without the platform's
//! prefix and suffix stands for (`target/release/comlrl_len_ratio` →
//! `libcomlrl_len_ratio.so` on Linux), shared by the scenario checker and the host's loader.
use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::path::{Path, PathBuf};

/// The candidate files for `path`, in the order they are tried:
/// 1. `path` itself;
/// 2. if its file name has no platform library suffix: `<dir>/<prefix><name><suffix>`
///    (`libcomlrl_len_ratio.so`, `libcomlrl_len_ratio.dylib`, `comlrl_len_ratio.dll`), then
///    `<dir>/<name><suffix>`. A `-` in the name is also tried as `_`, as Cargo names the file
///    after the lib name.
pub fn candidates(path: &Path) -> Vec<PathBuf> {
    let mut out = vec![path.to_path_buf()];
    let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
        return out;
    };
    if file.ends_with(DLL_SUFFIX) {
        return out;
    }
    let dir = path.parent().unwrap_or_else(|| Path::new(""));
    let mut names = vec![file.to_string()];
    if file.contains('-') {
        names.push(file.replace('-', "_"));
    }
    for name in names {
        let prefixed = if name.starts_with(DLL_PREFIX) {
            format!("{name}{DLL_SUFFIX}")
        } else {
            format!("{DLL_PREFIX}{name}{DLL_SUFFIX}")
        };
        for candidate in [prefixed, format!("{name}{DLL_SUFFIX}")] {
            let candidate = dir.join(candidate);
            if !out.contains(&candidate) {
                out.push(candidate);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_names() {
        let c = candidates(Path::new("target/release/comlrl_len_ratio"));
        assert_eq!(c[0], Path::new("target/release/comlrl_len_ratio"));
        assert_eq!(
            c[1],
            Path::new("target/release").join(format!("{DLL_PREFIX}comlrl_len_ratio{DLL_SUFFIX}"))
        );
        let full = format!("x/{DLL_PREFIX}a{DLL_SUFFIX}");
        assert_eq!(candidates(Path::new(&full)).len(), 1);
        let dashed = candidates(Path::new("comlrl-len-ratio"));
        assert!(dashed.contains(&PathBuf::from(format!(
            "{DLL_PREFIX}comlrl_len_ratio{DLL_SUFFIX}"
        ))));
    }
}
