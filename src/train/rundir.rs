//! The run directory (`output_dir`): one run at a time (an advisory lock held for the whole
//! run), no silent reuse (a fresh run refuses a directory holding a previous run unless told to
//! `--overwrite` it), and the run id that ties checkpoints to the run that wrote them.
use crate::error::{Error, Result};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The lock file in `output_dir`; it holds the pid and host of the run holding the lock.
pub const LOCK_FILE: &str = ".comlrl.lock";
/// The run's identity: `{"run_id": "…"}`, written at a fresh start, kept across resumes.
pub const RUN_FILE: &str = "run.json";

/// How a run starts in its output directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartMode {
    /// A new run; the directory must not hold a previous one.
    Fresh,
    /// Continue the run whose checkpoints are in the directory.
    Resume,
    /// A new run; a previous run's checkpoints, metrics, models and tracker state are deleted.
    Overwrite,
}

/// What a previous run leaves behind; a fresh run refuses a directory that holds any of it.
const RUN_OUTPUTS: [&str; 3] = ["checkpoints", "metrics.jsonl", "models"];
/// Everything `--overwrite` removes (the run's outputs and the trackers' state: TensorBoard's
/// `tb/` and W&B's `wandb-run.json`, named here as literals so that training does not import
/// the trackers; `tests/layers.rs` checks they match the trackers' constants).
pub const CLEARED: [&str; 12] = [
    "checkpoints",
    "metrics.jsonl",
    "metrics.csv",
    "metrics.jsonl.tmp",
    "metrics.csv.tmp",
    "models",
    ".models.tmp",
    "training.svg",
    "tb",
    "wandb-run.json",
    RUN_FILE,
    "run.json.tmp",
];

/// The claim on an output directory: the lock is held until this is dropped (closing the file
/// releases it, also when the process dies).
#[derive(Debug)]
pub struct RunLock {
    _file: File,
    dir: PathBuf,
    run_id: String,
}

impl RunLock {
    /// The locked run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The id of the run (new for a fresh start, the recorded one on resume).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }
}

/// Creates `dir` if needed, takes its lock (refusing when another run holds it) and checks it
/// against `mode`: a fresh run refuses a previous run's outputs, `Overwrite` clears them,
/// `Resume` reads the run id. A fresh start records a new run id.
pub fn claim(dir: &Path, mode: StartMode) -> Result<RunLock> {
    crate::train::setup::check_output_dir(dir)?;
    let file = lock(dir)?;
    let run_id = match mode {
        StartMode::Resume => read_run_id(dir)?,
        StartMode::Fresh => {
            let found = previous_outputs(dir);
            if !found.is_empty() {
                return Err(Error::run_dir(
                    dir,
                    format!(
                        "output_dir {} holds a previous run ({}); pass --resume to continue it, \
                         --overwrite to delete it and start over, or choose another `output_dir`",
                        dir.display(),
                        found.join(", ")
                    ),
                ));
            }
            new_run(dir)?
        }
        StartMode::Overwrite => {
            for name in CLEARED {
                remove(&dir.join(name))?;
            }
            new_run(dir)?
        }
    };
    Ok(RunLock {
        _file: file,
        dir: dir.to_path_buf(),
        run_id,
    })
}

/// The previous run's outputs found in `dir` (an empty `metrics.jsonl` does not count: a run
/// stopped before its first row leaves one).
fn previous_outputs(dir: &Path) -> Vec<String> {
    RUN_OUTPUTS
        .iter()
        .filter(|name| {
            let p = dir.join(name);
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => std::fs::read_dir(&p).is_ok_and(|mut d| d.next().is_some()),
                Ok(m) => m.len() > 0,
                Err(_) => false,
            }
        })
        .map(|n| n.to_string())
        .collect()
}

fn remove(p: &Path) -> Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p).map_err(|e| Error::io(p, e)),
        Ok(_) => std::fs::remove_file(p).map_err(|e| Error::io(p, e)),
        Err(_) => Ok(()),
    }
}

/// Takes the exclusive advisory lock on `dir/.comlrl.lock` without waiting, then writes this
/// process's pid and host into it.
fn lock(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    // SAFETY: flock on a file descriptor this function owns (open for the call's duration).
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let holder = if holder.is_empty() {
                "another process".to_string()
            } else {
                holder.to_string()
            };
            return Err(Error::run_dir(
                &path,
                format!(
                    "output_dir {} is in use by another run ({holder}, lock file {}); wait for it \
                     to finish or choose another `output_dir`",
                    dir.display(),
                    path.display()
                ),
            ));
        }
        return Err(Error::run_dir_by(
            &path,
            format!(
                "cannot lock {}; choose an `output_dir` on a file system with file locks",
                path.display()
            ),
            err,
        ));
    }
    let host = crate::runtime::hostname();
    let text = format!("pid {} on host {host}\n", std::process::id());
    file.set_len(0)
        .and_then(|_| file.rewind())
        .and_then(|_| file.write_all(text.as_bytes()))
        .and_then(|_| file.flush())
        .map_err(|e| Error::io(&path, e))?;
    Ok(file)
}

/// Records a new random run id in `dir/run.json` (written to a temporary file, then renamed).
fn new_run(dir: &Path) -> Result<String> {
    let id = format!("{:016x}", rand::random::<u64>());
    let path = dir.join(RUN_FILE);
    let tmp = dir.join("run.json.tmp");
    let text = serde_json::json!({ "run_id": id }).to_string();
    std::fs::write(&tmp, text + "\n").map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    Ok(id)
}

/// The run id recorded in `dir/run.json`.
pub fn read_run_id(dir: &Path) -> Result<String> {
    let path = dir.join(RUN_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::run_dir_by(
            &path,
            format!(
                "--resume: {} cannot be read; this directory holds no resumable run \
                 (start a new one with --overwrite)",
                path.display()
            ),
            e,
        )
    })?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::run_dir_by(&path, format!("{}: not JSON", path.display()), e))?;
    v.get("run_id")
        .and_then(|x| x.as_str())
        .filter(|s| !s.is_empty())
        .map(String::from)
        .ok_or_else(|| {
            Error::run_dir(
                &path,
                format!("{}: field `run_id` missing or not a string", path.display()),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_claim_is_refused_while_the_first_is_held() {
        let tmp = tempfile::tempdir().unwrap();
        let first = claim(tmp.path(), StartMode::Fresh).unwrap();
        let err = claim(tmp.path(), StartMode::Fresh).unwrap_err().to_string();
        assert!(err.contains("in use by another run"), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        claim(tmp.path(), StartMode::Fresh).unwrap();
    }

    #[test]
    fn fresh_refuses_a_previous_run_and_overwrite_clears_it() {
        let tmp = tempfile::tempdir().unwrap();
        let first = claim(tmp.path(), StartMode::Fresh).unwrap();
        let id = first.run_id().to_string();
        drop(first);
        std::fs::write(tmp.path().join("metrics.jsonl"), "{\"step\": 1}\n").unwrap();
        std::fs::create_dir_all(tmp.path().join("checkpoints/step-00000001")).unwrap();
        let err = claim(tmp.path(), StartMode::Fresh).unwrap_err().to_string();
        assert!(
            err.contains("--resume") && err.contains("--overwrite") && err.contains("checkpoints"),
            "{err}"
        );
        assert_eq!(
            claim(tmp.path(), StartMode::Resume).unwrap().run_id(),
            id,
            "resume keeps the run id"
        );
        let again = claim(tmp.path(), StartMode::Overwrite).unwrap();
        assert_ne!(again.run_id(), id);
        assert!(!tmp.path().join("checkpoints").exists());
        assert!(!tmp.path().join("metrics.jsonl").exists());
    }
}
