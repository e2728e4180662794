//! A checkpoint's `manifest.json`: the run id, the step and the size and SHA-256 of every file
//! of the checkpoint, written last; a checkpoint is only used when its files match it.
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// File name of the manifest inside a checkpoint directory.
pub const MANIFEST: &str = "manifest.json";
const FORMAT: u32 = 1;

/// The contents of `manifest.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest format version.
    pub format: u32,
    /// The run that wrote the checkpoint.
    pub run_id: String,
    /// Training step of the checkpoint.
    pub step: usize,
    /// Every other file of the checkpoint, by name.
    pub files: BTreeMap<String, FileSum>,
}

/// Size and SHA-256 of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSum {
    /// Size in bytes.
    pub bytes: u64,
    /// SHA-256, lowercase hex.
    pub sha256: String,
}

/// The largest `manifest.json` read: a checkpoint lists a few files per agent.
const MANIFEST_CAP: u64 = 1 << 20;
const DAMAGED: &str = "it is not a manifest comlrl wrote, or it is damaged";

/// Size and SHA-256 of a regular file, read in 1 MiB blocks.
pub fn sum(path: &Path) -> Result<FileSum> {
    let (mut f, _) =
        comlrl_scenario::files::open_regular(path, u64::MAX, "").map_err(|e| Error::io(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        bytes += n as u64;
    }
    let sha256 = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok(FileSum { bytes, sha256 })
}

/// Hashes every regular file of `dir` (in parallel: one file's hash runs on one core, and a
/// checkpoint holds several large ones) and writes `dir/manifest.json`.
pub fn write(dir: &Path, run_id: &str, step: usize) -> Result<()> {
    use rayon::prelude::*;
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != MANIFEST && entry.path().is_file() {
            names.push(name);
        }
    }
    let files = names
        .into_par_iter()
        .map(|name| sum(&dir.join(&name)).map(|s| (name, s)))
        .collect::<Result<BTreeMap<_, _>>>()?;
    let m = Manifest {
        format: FORMAT,
        run_id: run_id.to_string(),
        step,
        files,
    };
    let path = dir.join(MANIFEST);
    let text = serde_json::to_string_pretty(&m)
        .map_err(|e| Error::serialize("the checkpoint manifest", e))?;
    std::fs::write(&path, text).map_err(|e| Error::io(&path, e))
}

/// The run id recorded in `dir/manifest.json`, when it is a readable manifest.
pub fn run_id_of(dir: &Path) -> Option<String> {
    let path = dir.join(MANIFEST);
    let text = comlrl_scenario::files::read_text(&path, MANIFEST_CAP, DAMAGED).ok()?;
    let m: Manifest = serde_json::from_str(&text).ok()?;
    Some(m.run_id)
}

/// Reads `dir/manifest.json` and checks that every file in `required` is listed and that every
/// listed file has its recorded size and hash.
pub fn verify(dir: &Path, required: &[String]) -> Result<Manifest> {
    let path = dir.join(MANIFEST);
    let text = comlrl_scenario::files::read_text(&path, MANIFEST_CAP, DAMAGED)
        .map_err(|e| {
        Error::checkpoint_by(
            &path,
            "cannot be read: the checkpoint is incomplete or from an older comlrl, and cannot be verified",
            e,
        )
    })?;
    let m: Manifest = serde_json::from_str(&text)
        .map_err(|e| Error::checkpoint_by(&path, "not a checkpoint manifest", e))?;
    if m.format != FORMAT {
        return Err(Error::checkpoint(
            &path,
            format!("field `format` is {}, expected {FORMAT}", m.format),
        ));
    }
    for name in required {
        if !m.files.contains_key(name) {
            return Err(Error::checkpoint(
                &path,
                format!("field `files` does not list `{name}`"),
            ));
        }
    }
    for (name, want) in &m.files {
        if name.contains('/') || name.contains('\\') || name.starts_with('.') {
            return Err(Error::checkpoint(
                &path,
                format!("field `files` lists `{name}`, which is not a file of the checkpoint"),
            ));
        }
        let file = dir.join(name);
        // The size first: a listed file that is a device, a FIFO or a much larger file is
        // refused before a byte is hashed (a symlink to /dev/zero would be hashed forever).
        if let Some(why) = comlrl_scenario::files::not_regular(&file) {
            return Err(Error::checkpoint(
                &file,
                format!("{why}: the checkpoint is damaged"),
            ));
        }
        let meta = std::fs::metadata(&file).map_err(|e| Error::io(&file, e))?;
        let damaged = |bytes: u64| {
            Error::checkpoint(
                &file,
                format!(
                    "{bytes} bytes, the manifest records {}: the checkpoint is damaged",
                    want.bytes
                ),
            )
        };
        if meta.len() != want.bytes {
            return Err(damaged(meta.len()));
        }
        let got = sum(&file)?;
        if got.bytes != want.bytes {
            return Err(damaged(got.bytes));
        }
        if got.sha256 != want.sha256 {
            return Err(Error::checkpoint(
                &file,
                "its SHA-256 differs from the one in manifest.json: the checkpoint is damaged or was edited",
            ));
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flipped_byte_is_caught() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a.bin"), [1u8, 2, 3, 4]).unwrap();
        write(tmp.path(), "id", 3).unwrap();
        let req = vec!["a.bin".to_string()];
        let m = verify(tmp.path(), &req).unwrap();
        assert_eq!((m.run_id.as_str(), m.step), ("id", 3));
        std::fs::write(tmp.path().join("a.bin"), [1u8, 2, 7, 4]).unwrap();
        let err = verify(tmp.path(), &req).unwrap_err().to_string();
        assert!(err.contains("a.bin") && err.contains("SHA-256"), "{err}");
        let err = verify(tmp.path(), &["b.bin".to_string()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("b.bin"), "{err}");
    }
}
