//! `dataset.hub`: finding a Hugging Face dataset's parquet files for one config and split in the
//! local Hub cache, laid out as `huggingface_hub` writes it
//! (`<cache>/datasets--org--name/{refs,snapshots/<rev>}/...`). Downloading is the caller's job
//! (the `comlrl` binary uses `hf-hub`): [`crate::LoadOptions::hub_download`].
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What to look for: `repo` (`org/name`), `config` (`default` unless set) and the split name
/// (without its slice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRequest {
    /// Dataset id, `org/name`.
    pub repo: String,
    /// The dataset config.
    pub config: String,
    /// The split name, without its slice.
    pub split: String,
}

/// Downloads the files of a [`HubRequest`] into the cache at the given root (any layout that
/// [`is_split_file`] accepts); returns a message on failure.
pub type HubDownload = Arc<dyn Fn(&HubRequest, &Path) -> Result<(), String> + Send + Sync>;

/// Revisions searched, in order: the repository's own files, then the Hub's parquet conversion.
pub const REVISIONS: [&str; 2] = ["main", "refs/convert/parquet"];

/// The Hub cache root: `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`.
pub fn cache_root() -> PathBuf {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("HF_HOME").filter(|p| !p.is_empty()) {
        return PathBuf::from(p).join("hub");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".cache").join("huggingface").join("hub")
}

/// `datasets--org--name` under `root`.
pub fn repo_dir(root: &Path, repo: &str) -> PathBuf {
    root.join(format!("datasets--{}", repo.replace('/', "--")))
}

/// Whether `path` (relative to a snapshot, `/`-separated) is a parquet file of `config`/`split`
/// in one of the layouts the Hub uses:
/// - `<config>/<split>/*.parquet` (the `refs/convert/parquet` branch),
/// - `<config>/<split>-*.parquet` or `<config>/<split>.parquet` (`push_to_hub` with a config),
/// - `data/<split>-*.parquet` or `data/<split>.parquet` (`push_to_hub`, config `default`).
pub fn is_split_file(path: &str, config: &str, split: &str) -> bool {
    let Some(file_dir) = path.strip_suffix(".parquet") else {
        return false;
    };
    let parts: Vec<&str> = file_dir.split('/').collect();
    let named = |stem: &str| stem == split || stem.starts_with(&format!("{split}-"));
    match parts.as_slice() {
        [c, s, _] => *c == config && *s == split,
        [dir, stem] => (*dir == config || (*dir == "data" && config == "default")) && named(stem),
        _ => false,
    }
}

/// The cached parquet files of the request, sorted by path: those of the first revision (see
/// [`REVISIONS`], then any other snapshot) that has some. `Err` describes what was looked at.
pub fn find_cached(root: &Path, req: &HubRequest) -> Result<Vec<PathBuf>, String> {
    let dir = repo_dir(root, &req.repo);
    let snapshots = dir.join("snapshots");
    let mut candidates: Vec<PathBuf> = REVISIONS
        .iter()
        .filter_map(|rev| std::fs::read_to_string(dir.join("refs").join(rev)).ok())
        .map(|hash| snapshots.join(hash.trim()))
        .collect();
    if let Ok(entries) = std::fs::read_dir(&snapshots) {
        let mut others: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
        others.sort();
        for o in others {
            if !candidates.contains(&o) {
                candidates.push(o);
            }
        }
    }
    for snap in &candidates {
        let mut files = Vec::new();
        collect(snap, snap, 0, &mut |rel, abs| {
            if is_split_file(rel, &req.config, &req.split) {
                files.push(abs.to_path_buf());
            }
        });
        if !files.is_empty() {
            files.sort();
            return Ok(files);
        }
    }
    let looked = if candidates.is_empty() {
        format!("{} has no snapshots", dir.display())
    } else {
        format!(
            "no parquet file of config `{}`, split `{}` in {}",
            req.config,
            req.split,
            snapshots.display()
        )
    };
    Err(looked)
}

/// Walks `dir` (three levels deep at most), calling `f` with each file's `/`-joined path
/// relative to `root` and its full path.
fn collect(root: &Path, dir: &Path, depth: usize, f: &mut dyn FnMut(&str, &Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if depth < 2 {
                collect(root, &p, depth + 1, f);
            }
        } else if let Ok(rel) = p.strip_prefix(root) {
            let rel: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            f(&rel.join("/"), &p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_split_file;

    #[test]
    fn layouts() {
        assert!(is_split_file(
            "default/train/0000.parquet",
            "default",
            "train"
        ));
        assert!(is_split_file("main/test/0001.parquet", "main", "test"));
        assert!(is_split_file(
            "data/train-00000-of-00002.parquet",
            "default",
            "train"
        ));
        assert!(is_split_file("data/test.parquet", "default", "test"));
        assert!(is_split_file(
            "socratic/train-00000-of-00001.parquet",
            "socratic",
            "train"
        ));
        assert!(!is_split_file("data/train-0.parquet", "socratic", "train"));
        assert!(!is_split_file("data/trainx-0.parquet", "default", "train"));
        assert!(!is_split_file(
            "default/test/0000.parquet",
            "default",
            "train"
        ));
        assert!(!is_split_file("data/train-0.json", "default", "train"));
        assert!(!is_split_file("train-0.parquet", "default", "train"));
    }
}
