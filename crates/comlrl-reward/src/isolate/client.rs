//! The trainer side of plugin isolation: [`IsolatedReward`] runs a plugin in a child process
//! (`<host> plugin-host <path>`) and scores batches through it (see [`super::protocol`]).
//! A child that dies (signal, `exit()`, abort) or runs past the time budget becomes a
//! [`RewardError::Plugin`] naming the plugin, the signal or exit status, what it was doing,
//! and the last lines the child wrote to stderr; the next call starts a fresh child.
use super::protocol::{decode, read_frame_bytes, write_frame, Request, Response, SampleOut};
use crate::error::{PluginFailure, RewardError};
use crate::{JointSample, RewardFn};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Environment variable naming the program to run as plugin host (`<it> plugin-host <path>`).
pub const HOST_ENV: &str = "COMLRL_PLUGIN_HOST";

/// Lines of the child's stderr kept for error messages.
const STDERR_TAIL: usize = 12;

/// How to start a plugin host: `program args... <plugin path>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCommand {
    /// The executable.
    pub program: PathBuf,
    /// Arguments before the plugin path (`["plugin-host"]` for the comlrl binary).
    pub args: Vec<OsString>,
}

impl HostCommand {
    /// `program plugin-host <path>`: the comlrl binary, or anything with that subcommand.
    pub fn comlrl(program: impl Into<PathBuf>) -> Self {
        HostCommand {
            program: program.into(),
            args: vec!["plugin-host".into()],
        }
    }

    /// The default host: `$COMLRL_PLUGIN_HOST plugin-host` when set, else this executable
    /// (`comlrl`) with `plugin-host`.
    pub fn from_env() -> Result<Self, RewardError> {
        if let Some(p) = std::env::var_os(HOST_ENV).filter(|p| !p.is_empty()) {
            return Ok(HostCommand::comlrl(p));
        }
        std::env::current_exe()
            .map(HostCommand::comlrl)
            .map_err(|e| {
                RewardError::Config(format!(
                    "cannot find this executable to run isolated plugins ({e}); set {HOST_ENV} to the comlrl binary"
                ))
            })
    }
}

/// A running plugin host.
struct HostProcess {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    frames: Receiver<std::io::Result<Vec<u8>>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

/// A reward plugin running in a child process.
pub struct IsolatedReward {
    name: String,
    plugin_name: String,
    path: PathBuf,
    host: HostCommand,
    params: String,
    budget: Duration,
    child: Mutex<Option<HostProcess>>,
}

impl std::fmt::Debug for IsolatedReward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IsolatedReward")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

/// What the child's death looks like in words.
fn describe(status: Option<ExitStatus>) -> String {
    let Some(status) = status else {
        return "did not exit after closing its output (it was killed)".into();
    };
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            let name = match sig {
                libc::SIGSEGV => " SIGSEGV",
                libc::SIGABRT => " SIGABRT",
                libc::SIGBUS => " SIGBUS",
                libc::SIGILL => " SIGILL",
                libc::SIGFPE => " SIGFPE",
                libc::SIGKILL => " SIGKILL",
                libc::SIGTERM => " SIGTERM",
                _ => "",
            };
            return format!("crashed (signal {sig}{name})");
        }
    }
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => format!("ended ({status})"),
    }
}

impl IsolatedReward {
    /// Start the host for the plugin at `path` (resolved like [`crate::NativeReward::load`])
    /// and create the plugin's state from `params`. `budget` bounds every call (create and
    /// each batch); past it the child is killed.
    pub fn load(
        path: impl AsRef<Path>,
        params: &serde_json::Value,
        host: HostCommand,
        budget: Duration,
    ) -> Result<Self, RewardError> {
        let requested = path.as_ref();
        let path = crate::plugin_path::resolve(requested)?;
        let mut reward = IsolatedReward {
            name: requested
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "plugin".into()),
            plugin_name: String::new(),
            path,
            host,
            params: params.to_string(),
            budget,
            child: Mutex::new(None),
        };
        let (child, plugin_name) = reward.start()?;
        reward.plugin_name = plugin_name;
        *reward.child.get_mut().unwrap_or_else(|p| p.into_inner()) = Some(child);
        Ok(reward)
    }

    /// The resolved library file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The name the plugin gives itself.
    pub fn plugin_name(&self) -> &str {
        &self.plugin_name
    }

    fn fail(&self, kind: PluginFailure, message: String) -> RewardError {
        RewardError::plugin(&self.path, kind, message)
    }

    /// Spawn a host and create the plugin in it.
    fn start(&self) -> Result<(HostProcess, String), RewardError> {
        let mut child = Command::new(&self.host.program)
            .args(&self.host.args)
            .arg(&self.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                self.fail(
                    PluginFailure::Host,
                    format!(
                        "cannot start the plugin host `{}`: {e}",
                        self.host.program.display()
                    ),
                )
            })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(self.fail(PluginFailure::Host, "the host's pipes are missing".into()));
        };
        let (tx, frames) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let frame = match read_frame_bytes(&mut r) {
                    Ok(Some(b)) => Ok(b),
                    Ok(None) => Err(std::io::ErrorKind::UnexpectedEof.into()),
                    Err(e) => Err(e),
                };
                let end = frame.is_err();
                if tx.send(frame).is_err() || end {
                    return;
                }
            }
        });
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let keep = Arc::clone(&tail);
        let plugin = self.path.display().to_string();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                eprintln!("[plugin {plugin}] {line}");
                let mut t = keep.lock().unwrap_or_else(|p| p.into_inner());
                if t.len() == STDERR_TAIL {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
        let mut c = HostProcess {
            child,
            stdin: BufWriter::new(stdin),
            frames,
            stderr: tail,
        };
        match self.exchange(
            &mut c,
            &Request::<SampleOut>::Create {
                params: self.params.clone(),
            },
            "creating its state",
        )? {
            Response::Created { plugin_name } => Ok((c, plugin_name)),
            Response::Error { kind, message } => {
                self.stop(c);
                Err(self.fail(kind, message))
            }
            Response::Scores { .. } => {
                self.stop(c);
                Err(self.fail(
                    PluginFailure::Host,
                    "the host answered create with scores".into(),
                ))
            }
        }
    }

    /// Close the child's stdin and reap it (killing it if it lingers).
    fn stop(&self, c: HostProcess) {
        let HostProcess {
            mut child, stdin, ..
        } = c;
        drop(stdin);
        let _ = wait_for(&mut child, Duration::from_secs(2));
    }

    /// Send one request and wait for its response, within the budget. On any failure the
    /// child is reaped and the error says how it ended.
    fn exchange(
        &self,
        c: &mut HostProcess,
        request: &Request<SampleOut>,
        doing: &str,
    ) -> Result<Response, RewardError> {
        let sent = write_frame(&mut c.stdin, request);
        let outcome = match sent {
            Ok(()) => c.frames.recv_timeout(self.budget),
            Err(e) => Ok(Err(e)),
        };
        let ended = match outcome {
            Ok(Ok(bytes)) => {
                return decode::<Response>(&bytes).map_err(|e| {
                    let _ = c.child.kill();
                    let _ = c.child.wait();
                    self.fail(
                        PluginFailure::Host,
                        format!("the host sent a garbled answer while {doing}: {e}"),
                    )
                })
            }
            Err(RecvTimeoutError::Timeout) => {
                let _ = c.child.kill();
                let _ = c.child.wait();
                return Err(self.fail(
                    PluginFailure::TimeBudget,
                    format!(
                        "the plugin ran past its time budget ({} ms) while {doing}; its process was killed",
                        self.budget.as_millis()
                    ),
                ));
            }
            Ok(Err(_)) | Err(RecvTimeoutError::Disconnected) => {
                wait_for(&mut c.child, Duration::from_secs(5))
            }
        };
        // Give the stderr thread a moment to collect the child's last words.
        std::thread::sleep(Duration::from_millis(50));
        let tail: Vec<String> = c
            .stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        let mut message = format!("the plugin's process {} while {doing}", describe(ended));
        if !tail.is_empty() {
            message.push_str(&format!("; its last stderr lines: {}", tail.join(" | ")));
        }
        Err(self.fail(PluginFailure::Crash, message))
    }
}

/// Wait for the child up to `limit`; kill it past that. `None` when it had to be killed.
fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

impl RewardFn for IsolatedReward {
    fn name(&self) -> &str {
        &self.name
    }

    fn score(&self, batch: &[JointSample]) -> Result<Vec<f32>, RewardError> {
        let mut slot = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let mut c = match slot.take() {
            Some(c) => c,
            None => self.start()?.0,
        };
        let samples: Vec<SampleOut> = batch
            .iter()
            .map(|s| SampleOut {
                prompt: &s.prompt,
                completions: &s.completions,
                fields: &s.fields,
            })
            .collect();
        let doing = format!("scoring a batch of {} joint samples", batch.len());
        let response = self.exchange(&mut c, &Request::Score { samples }, &doing)?;
        // The child is healthy (it answered): keep it for the next batch.
        *slot = Some(c);
        match response {
            Response::Scores { bits } if bits.len() == batch.len() => {
                Ok(bits.into_iter().map(f32::from_bits).collect())
            }
            Response::Scores { bits } => Err(self.fail(
                PluginFailure::Host,
                format!(
                    "the host sent {} scores for {} joint samples",
                    bits.len(),
                    batch.len()
                ),
            )),
            Response::Error { kind, message } => Err(self.fail(kind, message)),
            Response::Created { .. } => Err(self.fail(
                PluginFailure::Host,
                "the host answered a batch with `created`".into(),
            )),
        }
    }
}

impl Drop for IsolatedReward {
    fn drop(&mut self) {
        if let Some(c) = self
            .child
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            self.stop(c);
        }
    }
}
