//! Running the real `comlrl` binary from a test: a builder for the command line (`--set`
//! overrides, flags, environment), its outcome (exit code, stdout, stderr), and the run's
//! metrics rows read back from its output directory.
use super::bin;
use comlrl::metrics::read_jsonl;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The quick-start scenario (`scenarios/story_len_ratio_tiny.yaml`).
pub fn tiny_scenario() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/story_len_ratio_tiny.yaml")
}

/// One `comlrl` command line: the leading arguments, then each `--set` override, then flags.
#[derive(Clone, Debug, Default)]
pub struct Comlrl {
    head: Vec<String>,
    sets: Vec<String>,
    flags: Vec<String>,
    envs: Vec<(String, Option<String>)>,
}

/// `comlrl <args>`.
pub fn comlrl(args: &[&str]) -> Comlrl {
    Comlrl {
        head: args.iter().map(|s| s.to_string()).collect(),
        ..Comlrl::default()
    }
}

/// `comlrl <command> <scenario>` (`run`, `check`, `reward`, ...).
pub fn on_scenario(command: &str, scenario: &Path) -> Comlrl {
    comlrl(&[command, &scenario.display().to_string()])
}

impl Comlrl {
    /// Adds `--set key=value`.
    pub fn set(mut self, kv: impl Into<String>) -> Self {
        self.sets.push(kv.into());
        self
    }

    /// Adds `--set` for each of `kvs`.
    pub fn sets<S: AsRef<str>>(mut self, kvs: &[S]) -> Self {
        self.sets.extend(kvs.iter().map(|s| s.as_ref().to_string()));
        self
    }

    /// Adds flags (or any arguments) after the overrides.
    pub fn flags<S: AsRef<str>>(mut self, flags: &[S]) -> Self {
        self.flags
            .extend(flags.iter().map(|s| s.as_ref().to_string()));
        self
    }

    /// Sets an environment variable for the child.
    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        let v = value.as_ref().to_string_lossy().into_owned();
        self.envs.push((key.into(), Some(v)));
        self
    }

    /// Removes an environment variable for the child.
    pub fn env_remove(mut self, key: &str) -> Self {
        self.envs.push((key.into(), None));
        self
    }

    /// The `--set` overrides, in order (for loading the same scenario in-process).
    pub fn overrides(&self) -> Vec<String> {
        self.sets.clone()
    }

    /// The whole argument list, as the binary receives it.
    pub fn argv(&self) -> Vec<String> {
        let mut a = self.head.clone();
        for s in &self.sets {
            a.extend(["--set".to_string(), s.clone()]);
        }
        a.extend(self.flags.iter().cloned());
        a
    }

    fn command(&self) -> Command {
        let mut c = Command::new(bin());
        c.args(self.argv());
        for (k, v) in &self.envs {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }

    /// Runs the command to its end.
    pub fn output(&self) -> Outcome {
        let o = self.command().output().expect("run comlrl");
        Outcome {
            code: o.status.code(),
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Starts the command (stderr piped, stdout discarded) and returns at once.
    pub fn spawn(&self) -> Child {
        self.command()
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start comlrl")
    }
}

/// How a finished command went.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Whether it exited with 0.
    pub ok: bool,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
}

impl Outcome {
    /// `(ok, stdout, stderr)`.
    pub fn parts(self) -> (bool, String, String) {
        (self.ok, self.stdout, self.stderr)
    }

    /// `(exit code, stderr)`.
    pub fn code_and_stderr(self) -> (Option<i32>, String) {
        (self.code, self.stderr)
    }
}

/// `comlrl <args>` run to its end: `(ok, stdout, stderr)`.
pub fn run_comlrl(args: &[&str]) -> (bool, String, String) {
    comlrl(args).output().parts()
}

/// The rows of `dir/metrics.jsonl`.
pub fn metrics(dir: &Path) -> Vec<serde_json::Value> {
    read_jsonl(&dir.join("metrics.jsonl")).expect("metrics.jsonl")
}

/// The rows of `dir/metrics.jsonl` without the wall-clock fields (comparable across runs).
pub fn metrics_without_timing(dir: &Path) -> Vec<serde_json::Value> {
    metrics(dir)
        .into_iter()
        .map(|mut r| {
            r.as_object_mut().unwrap().retain(|k, _| {
                !(k == "step_seconds"
                    || k == "tokens_per_s"
                    || k == "train_gflops_per_s"
                    || k.starts_with("time/"))
            });
            r
        })
        .collect()
}
