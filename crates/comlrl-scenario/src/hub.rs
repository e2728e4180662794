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

/// The longest owner or name of a Hub repository (`huggingface_hub`'s `validate_repo_id`).
pub const MAX_REPO_PART: usize = 96;

/// Why `id` is not a Hugging Face repository id `owner/name` as `huggingface_hub` accepts one
/// (`validate_repo_id`): an owner and a name of 1 to [`MAX_REPO_PART`] letters, digits, `-`, `_`
/// or `.`, neither starting nor ending with `-` or `.`, no `--` or `..` (the cache folder
/// `models--owner--name` uses `--` as its separator), not ending in `.git`. `None`: valid.
pub fn repo_id_problem(id: &str) -> Option<String> {
    let Some((owner, name)) = id.split_once('/') else {
        return Some("a Hub id has the form `owner/name`".into());
    };
    if name.contains('/') {
        return Some("a Hub id has one `/` (`owner/name`)".into());
    }
    for (what, part) in [("owner", owner), ("name", name)] {
        if part.is_empty() {
            return Some(format!("the {what} is empty"));
        }
        if part.len() > MAX_REPO_PART {
            return Some(format!(
                "the {what} is {} characters long, more than {MAX_REPO_PART}",
                part.len()
            ));
        }
        if let Some(c) = part
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        {
            return Some(format!(
                "the {what} holds {c:?}: only letters, digits, `-`, `_` and `.` are allowed"
            ));
        }
        let edge = |c: char| matches!(c, '-' | '.');
        if part.starts_with(edge) || part.ends_with(edge) {
            return Some(format!("the {what} starts or ends with `-` or `.`"));
        }
        if part.contains("--") || part.contains("..") {
            return Some(format!("the {what} holds `--` or `..`"));
        }
    }
    if name.ends_with(".git") {
        return Some("the name ends in `.git`".into());
    }
    None
}

/// Why `rev` (the `@revision` of a Hub id: a branch, tag or commit) is not one this loader
/// follows: `/`-separated parts of letters, digits, `-`, `_` and `.`, none empty and none
/// starting with `.` (so no `..`), at most 255 bytes. It names a file under the cache's
/// `refs/`, so it must not climb out of it. `None`: valid.
pub fn revision_problem(rev: &str) -> Option<String> {
    if rev.is_empty() || rev.len() > 255 {
        return Some("a revision has 1 to 255 characters".into());
    }
    for part in rev.split('/') {
        if part.is_empty() || part.starts_with('.') {
            return Some(format!(
                "the revision `{rev}` has an empty part or one that starts with `.`"
            ));
        }
        if let Some(c) = part
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        {
            return Some(format!(
                "the revision `{rev}` holds {c:?}: only letters, digits, `-`, `_`, `.` and `/` are allowed"
            ));
        }
    }
    None
}

/// The commit a ref file of the Hub cache (`<repo>/refs/main`) points to; `Ok(None)` when there
/// is no such file. `huggingface_hub` writes a 40-character commit hash there, which names the
/// snapshot folder `snapshots/<hash>`; anything that is not one plain folder name (letters,
/// digits, `-`, `_`, `.`; not `.` or `..`), or a file that is not a small regular file, is an
/// error naming the ref, since following it would read outside the cache.
pub fn read_ref(path: &Path) -> Result<Option<String>, String> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    let shown = path.display();
    let text = crate::files::read_text(
        path,
        crate::files::MAX_REF_BYTES,
        "a ref holds a commit hash",
    )
    .map_err(|e| format!("cannot read the Hub cache ref {shown}: {e}"))?;
    let commit = text.trim();
    let plain = !commit.is_empty()
        && commit != "."
        && commit != ".."
        && commit
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !plain {
        let mut shown_commit: String = commit.chars().take(60).collect();
        if shown_commit.len() < commit.len() {
            shown_commit.push('…');
        }
        return Err(format!(
            "the Hub cache ref {shown} holds {shown_commit:?}, not a commit hash; delete it (and \
             the cache folder if it was tampered with) so that it is downloaded again"
        ));
    }
    Ok(Some(commit.to_string()))
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
pub fn find_cached(root: &Path, req: &HubRequest) -> Result<Vec<PathBuf>, FindError> {
    let dir = repo_dir(root, &req.repo);
    let snapshots = dir.join("snapshots");
    let mut candidates = Vec::new();
    for rev in REVISIONS {
        if let Some(commit) = read_ref(&dir.join("refs").join(rev)).map_err(FindError::Bad)? {
            candidates.push(snapshots.join(commit));
        }
    }
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
    Err(FindError::Missing(looked))
}

/// Why [`find_cached`] found no files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FindError {
    /// The files are not in the cache (what was looked at): download them.
    Missing(String),
    /// The cache is damaged (a ref that is not a commit): downloading would not mend it.
    Bad(String),
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
