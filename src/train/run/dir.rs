//! The run directory (`output_dir`): one run at a time (an advisory lock held for the whole
//! run), no silent reuse (a fresh run refuses a directory holding a previous run unless told to
//! `--overwrite` it), and the run id that ties checkpoints to the run that wrote them; and the
//! folders a run must never write into (the file system's root, the home directory, a
//! repository's root, a folder holding its own inputs).
use crate::error::{Error, Result};
use comlrl_scenario::Scenario;
use serde::{Deserialize, Serialize};
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
    /// A new run; what the previous run's record (`run.json`) names is deleted first.
    Overwrite,
}

/// What a previous run leaves behind; a fresh run refuses a directory that holds any of it.
const RUN_OUTPUTS: [&str; 3] = ["checkpoints", "metrics.jsonl", "models"];
/// Every name a run may create in its output directory (its outputs, their temporaries and the
/// trackers' state: TensorBoard's `tb/` and W&B's `wandb-run.json`, named here as literals so
/// that training does not import the trackers; `tests/cli/layers.rs` checks they match the
/// trackers' constants). A run starts only where none of them exists or a previous run's
/// record lists them, so whatever stands under these names was written by comlrl; `run.json`
/// lists them and `--overwrite` deletes exactly what the record lists.
pub const CLEARED: [&str; 14] = [
    "checkpoints",
    "metrics.jsonl",
    "metrics.csv",
    "metrics.jsonl.tmp",
    "metrics.csv.tmp",
    "completions.jsonl",
    "completions.jsonl.tmp",
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

/// `run.json`: the run's id and the names it owns in the directory.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    run_id: String,
    /// The entries of the directory this run creates (none existed when it started). Missing
    /// in records written before comlrl kept one: such a record proves nothing about the
    /// files beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    created: Option<Vec<String>>,
}

/// The most `run.json` may hold (an id and a dozen names).
const RECORD_CAP: u64 = 64 * 1024;

/// Creates `dir` if needed, takes its lock (refusing when another run holds it) and checks it
/// against `mode`: a fresh run refuses a previous run's outputs and files it did not write,
/// `Overwrite` deletes what the previous run's record lists, `Resume` reads the run id. A
/// fresh start records a new run id.
pub fn claim(dir: &Path, mode: StartMode) -> Result<RunLock> {
    check_output_dir(dir)?;
    let lock_path = dir.join(LOCK_FILE);
    let new_lock = std::fs::symlink_metadata(&lock_path).is_err();
    let file = lock(dir)?;
    match take(dir, mode) {
        Ok(run_id) => Ok(RunLock {
            _file: file,
            dir: dir.to_path_buf(),
            run_id,
        }),
        Err(e) => {
            // A refused directory keeps nothing of this run (the lock file is ours only if
            // this claim made it).
            if new_lock {
                let _ = std::fs::remove_file(&lock_path);
            }
            Err(e)
        }
    }
}

/// [`claim`] under the lock: the run id, after the checks and deletions `mode` asks for.
fn take(dir: &Path, mode: StartMode) -> Result<String> {
    Ok(match mode {
        StartMode::Resume => read_run_id(dir)?,
        StartMode::Fresh => {
            let record = read_record(dir)?;
            let found = previous_outputs(dir);
            if record.is_some() && !found.is_empty() {
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
            refuse_foreign(dir, record.as_ref(), "")?;
            new_run(dir)?
        }
        StartMode::Overwrite => {
            let record = read_record(dir)?;
            if let Some(r) = &record {
                let Some(created) = &r.created else {
                    return Err(Error::run_dir(
                        dir,
                        format!(
                            "--overwrite: {} was written by an older comlrl and does not list what \
                             its run created, so comlrl deletes nothing; remove the previous run's \
                             files yourself ({}) or choose another `output_dir`",
                            dir.join(RUN_FILE).display(),
                            present(dir, None).join(", ")
                        ),
                    ));
                };
                // The record is a file anyone can edit: only names comlrl writes are deleted.
                if let Some(bad) = created.iter().find(|n| !CLEARED.contains(&n.as_str())) {
                    return Err(Error::run_dir(
                        dir,
                        format!(
                            "--overwrite: {} lists `{bad}`, which comlrl never writes; the record \
                             was edited, so comlrl deletes nothing; remove the previous run's \
                             files yourself or choose another `output_dir`",
                            dir.join(RUN_FILE).display()
                        ),
                    ));
                }
                for name in created {
                    remove(&dir.join(name))?;
                }
            }
            refuse_foreign(dir, record.as_ref(), "--overwrite: ")?;
            new_run(dir)?
        }
    })
}

/// The names of [`CLEARED`] present in `dir` that `record` does not own (all of them without
/// a record, and all of them with a record that lists nothing).
fn present(dir: &Path, record: Option<&Record>) -> Vec<String> {
    let owned = |n: &str| {
        record.is_some_and(|r| match &r.created {
            Some(c) => c.iter().any(|x| x == n),
            // An older comlrl's record: its run wrote what stands under these names.
            None => true,
        })
    };
    CLEARED
        .iter()
        .filter(|n| **n != RUN_FILE && !owned(n))
        .filter(|n| std::fs::symlink_metadata(dir.join(n)).is_ok())
        .map(|n| n.to_string())
        .collect()
}

/// Refuses a directory holding files under a run's names that no comlrl run's record owns:
/// they are someone else's, and this run would write into them (and a later `--overwrite`
/// would delete them).
fn refuse_foreign(dir: &Path, record: Option<&Record>, prefix: &str) -> Result<()> {
    let foreign = present(dir, record);
    if foreign.is_empty() {
        return Ok(());
    }
    Err(Error::run_dir(
        dir,
        format!(
            "{prefix}output_dir {} holds {} that no comlrl run recorded writing (no {} lists \
             them); comlrl neither writes into nor deletes files it did not create: move them \
             away or choose another `output_dir`",
            dir.display(),
            foreign.join(", "),
            RUN_FILE
        ),
    ))
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

/// Removes `p`: a directory with what it holds, anything else (a symlink too: never what it
/// points to) as a file.
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

/// Records a new random run id in `dir/run.json`, with the names the run owns (written to a
/// temporary file, then renamed).
fn new_run(dir: &Path) -> Result<String> {
    let id = format!("{:016x}", rand::random::<u64>());
    let path = dir.join(RUN_FILE);
    let tmp = dir.join("run.json.tmp");
    let record = Record {
        run_id: id.clone(),
        created: Some(CLEARED.iter().map(|n| n.to_string()).collect()),
    };
    let text = serde_json::to_string(&record).map_err(|e| Error::serialize("run.json", e))?;
    std::fs::write(&tmp, text + "\n").map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    Ok(id)
}

/// The record in `dir/run.json`, `None` when there is none; an unreadable one is an error.
fn read_record(dir: &Path) -> Result<Option<Record>> {
    let path = dir.join(RUN_FILE);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(None);
    }
    let text =
        comlrl_scenario::files::read_text(&path, RECORD_CAP, "it is not a run record comlrl wrote")
            .map_err(|e| {
                Error::run_dir_by(&path, format!("{} cannot be read", path.display()), e)
            })?;
    let record: Record = serde_json::from_str(&text).map_err(|e| {
        Error::run_dir_by(
            &path,
            format!(
                "{} is not a comlrl run record (`{{\"run_id\": …}}`); comlrl does not touch this \
                 directory: choose another `output_dir`",
                path.display()
            ),
            e,
        )
    })?;
    if record.run_id.is_empty() {
        return Err(Error::run_dir(
            &path,
            format!("{}: field `run_id` is empty", path.display()),
        ));
    }
    Ok(Some(record))
}

/// The run id recorded in `dir/run.json`.
pub fn read_run_id(dir: &Path) -> Result<String> {
    let path = dir.join(RUN_FILE);
    match read_record(dir) {
        Ok(Some(r)) => Ok(r.run_id),
        Ok(None) => Err(Error::run_dir(
            &path,
            format!(
                "--resume: {} does not exist; this directory holds no resumable run \
                 (start a new one with --overwrite)",
                path.display()
            ),
        )),
        Err(e) => Err(e),
    }
}

/// Refuses an `output_dir` that a run must never write into (and a later `--overwrite` must
/// never clear): `/`, the home directory, a repository's root (a folder holding `.git`), and a
/// folder that contains the scenario file, an agent's local model or the dataset file.
pub fn guard_output_dir(s: &Scenario) -> Result<()> {
    let mut inputs: Vec<(&str, &Path)> = vec![("the scenario file", s.source.as_path())];
    for a in &s.agents {
        if let comlrl_scenario::ModelSource::Local(p) = &a.model.source {
            inputs.push(("an agent's model", p.as_path()));
        }
    }
    if let comlrl_scenario::DataSource::File { path, .. } = &s.dataset.train.source {
        inputs.push(("the dataset", path.as_path()));
    }
    refuse_reserved_dir(&s.output_dir)?;
    let out = resolved(&s.output_dir);
    for (what, p) in inputs {
        let p = resolved(p);
        if p.starts_with(&out) {
            return Err(Error::run_dir(
                &s.output_dir,
                format!(
                    "output_dir {} contains {what} ({}); a run writes and `--overwrite` deletes \
                     in its output_dir, so choose a folder of its own (the default is \
                     `runs/<scenario name>` beside the scenario)",
                    s.output_dir.display(),
                    p.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses `/`, the home directory and a repository's root as an output directory.
pub fn refuse_reserved_dir(dir: &Path) -> Result<()> {
    let out = resolved(dir);
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| resolved(Path::new(&h)));
    let why = if out.parent().is_none() {
        Some("the file system's root")
    } else if home.as_deref() == Some(out.as_path()) {
        Some("the home directory")
    } else if std::fs::symlink_metadata(out.join(".git")).is_ok() {
        Some("a repository's root (it holds .git)")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::run_dir(
            dir,
            format!(
                "output_dir {} is {why}; a run writes and `--overwrite` deletes in its \
                 output_dir, so choose a folder of its own (the default is \
                 `runs/<scenario name>` beside the scenario)",
                dir.display()
            ),
        )),
        None => Ok(()),
    }
}

/// `p` absolute, with symlinks resolved as far as it exists (the rest appended as written,
/// `..` and `.` folded), so that two spellings of one folder compare equal.
fn resolved(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut rest = Vec::new();
    let mut cur = abs.as_path();
    loop {
        if let Ok(c) = cur.canonicalize() {
            let mut out = c;
            for part in rest.iter().rev() {
                match part {
                    std::path::Component::ParentDir => {
                        out.pop();
                    }
                    std::path::Component::CurDir => {}
                    c => out.push(c.as_os_str()),
                }
            }
            return out;
        }
        match (cur.parent(), cur.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                cur = parent;
            }
            _ => return abs,
        }
    }
}

/// Fails early, before any model is loaded, when `dir` cannot be created or written (probed
/// with a uniquely named temporary file: never a name a user's file could have).
pub fn check_output_dir(dir: &Path) -> Result<()> {
    refuse_reserved_dir(dir)?;
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::run_dir_by(
            dir,
            format!(
                "output_dir {} cannot be created; choose a writable `output_dir`",
                dir.display()
            ),
            e,
        )
    })?;
    tempfile::Builder::new()
        .prefix(".comlrl-probe-")
        .tempfile_in(dir)
        .map_err(|e| {
            Error::run_dir_by(
                dir,
                format!(
                    "output_dir {} is not writable; choose a writable `output_dir`",
                    dir.display()
                ),
                e,
            )
        })?;
    Ok(())
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

    /// Decoy user files beside a run and under a run's names: (path, content).
    fn decoys(dir: &Path, names: &[&str]) -> Vec<(PathBuf, String)> {
        names
            .iter()
            .map(|n| {
                let p = dir.join(n);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, format!("user data {n}")).unwrap();
                (p, format!("user data {n}"))
            })
            .collect()
    }

    fn intact(files: &[(PathBuf, String)]) {
        for (p, text) in files {
            assert_eq!(
                std::fs::read_to_string(p).ok().as_deref(),
                Some(text.as_str()),
                "{} was changed or deleted",
                p.display()
            );
        }
    }

    #[test]
    fn overwrite_deletes_what_the_record_lists_and_nothing_beside_it() {
        let tmp = tempfile::tempdir().unwrap();
        let kept = decoys(
            tmp.path(),
            &["notes.txt", "data/keep.bin", ".comlrl-write-test"],
        );
        drop(claim(tmp.path(), StartMode::Fresh).unwrap());
        std::fs::create_dir_all(tmp.path().join("models/agent_0")).unwrap();
        std::fs::write(tmp.path().join("metrics.jsonl"), "{}\n").unwrap();
        drop(claim(tmp.path(), StartMode::Overwrite).unwrap());
        assert!(!tmp.path().join("models").exists());
        assert!(!tmp.path().join("metrics.jsonl").exists());
        intact(&kept);
        let text = std::fs::read_to_string(tmp.path().join(RUN_FILE)).unwrap();
        assert!(
            text.contains("\"created\"") && text.contains("\"models\""),
            "{text}"
        );
    }

    #[test]
    fn files_under_a_runs_names_that_no_run_recorded_are_refused_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let theirs = decoys(
            tmp.path(),
            &[
                "models/precious.bin",
                "tb/events",
                "checkpoints/step-best/x",
            ],
        );
        for mode in [StartMode::Fresh, StartMode::Overwrite] {
            let err = claim(tmp.path(), mode).unwrap_err().to_string();
            assert!(
                err.contains("checkpoints, models, tb") && err.contains("no comlrl run recorded"),
                "{mode:?}: {err}"
            );
        }
        intact(&theirs);
        assert!(!tmp.path().join(RUN_FILE).exists());
        // An older comlrl's record proves nothing about what it wrote: no deleting on its word.
        std::fs::write(tmp.path().join(RUN_FILE), "{\"run_id\": \"abc\"}\n").unwrap();
        let err = claim(tmp.path(), StartMode::Overwrite)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("older comlrl") && err.contains("deletes nothing"),
            "{err}"
        );
        // A record naming something comlrl never writes was edited.
        let edited = "{\"run_id\": \"abc\", \"created\": [\"models\", \"..\"]}";
        std::fs::write(tmp.path().join(RUN_FILE), edited).unwrap();
        let err = claim(tmp.path(), StartMode::Overwrite)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`..`") && err.contains("deletes nothing"),
            "{err}"
        );
        intact(&theirs);
    }

    #[test]
    fn the_root_a_repository_and_a_fifo_record_are_refused() {
        let err = refuse_reserved_dir(Path::new("/")).unwrap_err().to_string();
        assert!(err.contains("root"), "{err}");
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join(".git")).unwrap();
        let err = claim(tmp.path(), StartMode::Overwrite)
            .unwrap_err()
            .to_string();
        assert!(err.contains("repository"), "{err}");
        let tmp = tempfile::tempdir().unwrap();
        let fifo = std::ffi::CString::new(tmp.path().join(RUN_FILE).as_os_str().as_encoded_bytes())
            .unwrap();
        // SAFETY: mkfifo on a NUL-terminated path the test owns.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let err = format!("{:?}", claim(tmp.path(), StartMode::Resume).unwrap_err());
        assert!(err.contains("FIFO"), "{err}");
    }
}
