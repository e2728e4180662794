//! Path resolution: relative paths are taken against the scenario file's directory and cleaned
//! lexically (no symlink resolution, so paths that do not exist yet still resolve).
use std::path::{Component, Path, PathBuf};

/// Absolute, cleaned directory of the scenario file `origin`.
pub(crate) fn base_dir(origin: &Path) -> PathBuf {
    let dir = match origin.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    clean(&std::path::absolute(&dir).unwrap_or(dir))
}

/// `p` if absolute, else `base/p`; cleaned.
pub(crate) fn resolve(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        clean(p)
    } else {
        clean(&base.join(p))
    }
}

/// Removes `.` and folds `..` into the preceding normal component.
pub(crate) fn clean(p: &Path) -> PathBuf {
    let mut out: Vec<Component> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir) | Some(Component::Prefix(_)) => {}
                _ => out.push(c),
            },
            other => out.push(other),
        }
    }
    if out.is_empty() {
        return PathBuf::from(".");
    }
    out.iter().collect()
}

/// Why `abs` cannot be read as the file `what` names (`Rhai script`, `data file`): it does not
/// exist, or it is a directory, a FIFO, a device, ... (symlinks followed; see
/// [`crate::files::not_regular`]).
pub(crate) fn not_a_file(what: &str, abs: &Path) -> String {
    let why = crate::files::not_regular(abs).unwrap_or_else(|| "is not a regular file".into());
    format!("{what} {} {why}", abs.display())
}

/// Whether a model string names a local directory (as opposed to a hub id or `builtin:`).
/// Mirrors the model loader: `/`, `./`, `../`, `~`, `.` and `..` always mean a directory.
pub(crate) fn is_local_model(spec: &str) -> bool {
    spec.starts_with("./")
        || spec.starts_with("../")
        || spec.starts_with('/')
        || spec.starts_with('~')
        || spec == "."
        || spec == ".."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_not_a_file() {
        let dir = std::env::temp_dir();
        assert!(not_a_file("data file", &dir).ends_with("is a directory, not a file"));
        let missing = dir.join("comlrl-no-such-file");
        assert!(not_a_file("data file", &missing).ends_with("does not exist"));
    }

    #[test]
    fn cleans_and_resolves() {
        assert_eq!(
            resolve(Path::new("/a/scenarios"), Path::new("../rewards/x.rhai")),
            PathBuf::from("/a/rewards/x.rhai")
        );
        assert_eq!(clean(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(
            resolve(Path::new("/a"), Path::new("/x/y")),
            PathBuf::from("/x/y")
        );
    }
}
