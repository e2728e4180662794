//! The trainer side of plugin isolation: [`IsolatedReward`] and [`IsolatedTransition`] run a
//! plugin in a child process (`<host> plugin-host <path>`) and call it through the protocol of
//! [`super::protocol`]. A child that dies (signal, `exit()`, abort) or runs past the time budget
//! becomes a [`RewardError::Plugin`] naming the plugin, the signal or exit status, what it was
//! doing, and the last lines the child wrote to stderr; the next call starts a fresh child.
//!
//! The child runs in a process group of its own, and every way a child ends (stopped, killed at
//! the budget, crashed, exited) ends with the whole group killed before the child is reaped: a
//! process the plugin forked cannot outlive it. The child's exit is watched directly (`waitid`
//! without reaping), not inferred from its pipes, so a plugin that forks and then dies is a
//! crash reported at once even while a forked process still holds the pipes open.
use super::protocol::{decode, read_frame_bytes, write_frame, Request, Response, SampleOut};
use crate::error::{PluginFailure, PluginRole, RewardError};
use crate::native_transition::{check_count, ctx_json};
use crate::transition::{TransitionFn, TransitionInput};
use crate::{JointSample, RewardFn};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Environment variable naming the program to run as plugin host (`<it> plugin-host <path>`).
pub const HOST_ENV: &str = "COMLRL_PLUGIN_HOST";

/// Lines of the child's stderr kept for error messages.
const STDERR_TAIL: usize = 12;

/// How long a child that was asked to stop (its stdin closed) may take to exit.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// How long a child whose output ended may take to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);

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

/// What the trainer hears from a running child.
enum Event {
    /// A frame from its stdout, or the error that ended the stream (EOF included).
    Frame(std::io::Result<Vec<u8>>),
    /// The child itself exited (seen without reaping it, see [`watch_exit`]).
    Exited,
}

/// A running plugin host, leader of its own process group.
struct HostProcess {
    child: Child,
    stdin: Option<BufWriter<ChildStdin>>,
    events: Receiver<Event>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Whether the `Exited` event was seen (the child is a zombie, not yet reaped).
    exited: bool,
    /// Set once the group was killed and the child reaped; its status, if it had exited.
    ended: Option<Option<ExitStatus>>,
}

impl HostProcess {
    /// The process group: the child's pid (it leads its own group).
    fn pgid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits up to `limit` for the child to exit on its own (without reaping it); frames that
    /// arrive meanwhile are dropped. Whether it exited.
    fn wait_exit(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while !self.exited {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Exited) => self.exited = true,
                Ok(Event::Frame(_)) => {}
                Err(RecvTimeoutError::Timeout) => return false,
                // The watcher is gone without a word: it could not wait (see `watch_exit`).
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
        true
    }

    /// Kills the whole process group and reaps the child; returns how the child ended (`None`
    /// when it had not exited by itself, that is, when it was killed here). Idempotent.
    fn end(&mut self) -> Option<ExitStatus> {
        if let Some(ended) = self.ended {
            return ended;
        }
        self.stdin = None;
        // The child is not reaped yet, so its pid still names its group: no other process can
        // have been given it.
        kill_group(self.pgid());
        let _ = self.child.kill();
        let status = self.child.wait().ok();
        let ended = if self.exited { status } else { None };
        self.ended = Some(ended);
        ended
    }

    /// The last lines the child wrote to stderr.
    fn stderr_tail(&self) -> Vec<String> {
        // Give the stderr thread a moment to collect the child's last words.
        std::thread::sleep(Duration::from_millis(50));
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

impl Drop for HostProcess {
    /// Whatever path dropped it, the group dies and the child is reaped.
    fn drop(&mut self) {
        self.end();
    }
}

/// Sends SIGKILL to every process of the group `pgid`.
#[cfg(unix)]
fn kill_group(pgid: i32) {
    if pgid > 0 {
        // SAFETY: a plain syscall; `pgid` is the group our own child leads (positive, so never
        // 0 or -1, which would mean our own group or every process).
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
    }
}

#[cfg(not(unix))]
fn kill_group(_pgid: i32) {}

/// Starts a thread that sends [`Event::Exited`] when the child `pid` exits, without reaping it
/// (`waitid` with `WNOWAIT`): the pid, and so the process group id, stays reserved until the
/// trainer reaps it after killing the group. The pipes cannot tell this: a process the plugin
/// forked keeps them open after the child died.
#[cfg(unix)]
fn watch_exit(pid: u32, tx: Sender<Event>) {
    let spawned = std::thread::Builder::new()
        .name("plugin-host-exit".into())
        .spawn(move || loop {
            // SAFETY: `siginfo_t` is plain data that `waitid` fills in; zeroed is a valid value.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: a plain syscall on our own child with a valid out-pointer. `WNOWAIT`
            // leaves the child waitable, so `Child::wait` still reaps it later.
            let r = unsafe {
                libc::waitid(
                    libc::P_PID,
                    pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOWAIT,
                )
            };
            if r == 0 {
                let _ = tx.send(Event::Exited);
                return;
            }
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                // ECHILD: already reaped (the trainer killed it). Nothing to report.
                return;
            }
        });
    if let Err(e) = spawned {
        log::warn!(
            "cannot watch the plugin host's exit ({e}); a crash is seen when its pipes close"
        );
    }
}

#[cfg(not(unix))]
fn watch_exit(_pid: u32, _tx: Sender<Event>) {}

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

/// One plugin behind a host process: how to start it, its budget, and the running child.
struct Isolated {
    role: PluginRole,
    path: PathBuf,
    host: HostCommand,
    /// The `Create` / `CreateTransition` request (JSON params inside).
    create: Request<SampleOut<'static>>,
    budget: Duration,
    child: Mutex<Option<HostProcess>>,
}

impl Isolated {
    fn fail(&self, kind: PluginFailure, message: String) -> RewardError {
        let e = RewardError::plugin(&self.path, kind, message);
        match self.role {
            PluginRole::Reward => e,
            PluginRole::Transition => e.of_transition(),
        }
    }

    /// Spawn a host in its own process group and create the plugin in it; the plugin's name.
    fn start(&self) -> Result<(HostProcess, String), RewardError> {
        let mut cmd = Command::new(&self.host.program);
        cmd.args(&self.host.args)
            .arg(&self.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            // Its own group: the trainer can kill whatever the plugin forked, and Ctrl-C in the
            // terminal (sent to the foreground group) reaches the trainer only, which stops at
            // the end of its step and still needs the plugin for it.
            cmd.process_group(0);
        }
        let mut child = cmd.spawn().map_err(|e| {
            self.fail(
                PluginFailure::Host,
                format!(
                    "cannot start the plugin host `{}`: {e}",
                    self.host.program.display()
                ),
            )
        })?;
        let (tx, events) = mpsc::channel();
        watch_exit(child.id(), tx.clone());
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            drop(HostProcess {
                child,
                stdin: None,
                events,
                stderr: Arc::default(),
                exited: false,
                ended: None,
            });
            return Err(self.fail(PluginFailure::Host, "the host's pipes are missing".into()));
        };
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let frame = match read_frame_bytes(&mut r) {
                    Ok(Some(b)) => Ok(b),
                    Ok(None) => Err(std::io::ErrorKind::UnexpectedEof.into()),
                    Err(e) => Err(e),
                };
                let end = frame.is_err();
                if tx.send(Event::Frame(frame)).is_err() || end {
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
            stdin: Some(BufWriter::new(stdin)),
            events,
            stderr: tail,
            exited: false,
            ended: None,
        };
        match self.exchange(&mut c, &self.create, "creating its state")? {
            Response::Created { plugin_name } => Ok((c, plugin_name)),
            Response::Error { kind, message } => {
                self.stop(c);
                Err(self.fail(kind, message))
            }
            Response::Scores { .. } | Response::Prompts { .. } => {
                self.stop(c);
                Err(self.fail(
                    PluginFailure::Host,
                    "the host answered create with something else".into(),
                ))
            }
        }
    }

    /// Close the child's stdin, give it a moment to exit, then kill its group and reap it.
    fn stop(&self, mut c: HostProcess) {
        c.stdin = None;
        c.wait_exit(STOP_GRACE);
        c.end();
    }

    /// Send one request and wait for its response, within the budget. On any failure the
    /// child's group is killed, the child reaped, and the error says how it ended.
    fn exchange(
        &self,
        c: &mut HostProcess,
        request: &Request<SampleOut>,
        doing: &str,
    ) -> Result<Response, RewardError> {
        let sent = match c.stdin.as_mut() {
            Some(stdin) => write_frame(stdin, request),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        let outcome = match sent {
            Ok(()) => c.events.recv_timeout(self.budget),
            Err(e) => Ok(Event::Frame(Err(e))),
        };
        match outcome {
            Ok(Event::Frame(Ok(bytes))) => {
                return decode::<Response>(&bytes).map_err(|e| {
                    c.end();
                    self.fail(
                        PluginFailure::Host,
                        format!("the host sent a garbled answer while {doing}: {e}"),
                    )
                })
            }
            Err(RecvTimeoutError::Timeout) => {
                c.end();
                return Err(self.fail(
                    PluginFailure::TimeBudget,
                    format!(
                        "the plugin ran past its time budget ({} ms) while {doing}; its process was killed",
                        self.budget.as_millis()
                    ),
                ));
            }
            Ok(Event::Exited) => c.exited = true,
            Ok(Event::Frame(Err(_))) | Err(RecvTimeoutError::Disconnected) => {
                c.wait_exit(EXIT_GRACE);
            }
        }
        let ended = c.end();
        let tail = c.stderr_tail();
        let mut message = format!("the plugin's process {} while {doing}", describe(ended));
        if !tail.is_empty() {
            message.push_str(&format!("; its last stderr lines: {}", tail.join(" | ")));
        }
        Err(self.fail(PluginFailure::Crash, message))
    }

    /// One request on the running child (a fresh one if the last call ended it). The child is
    /// kept when it answered, whatever it answered.
    fn call(&self, request: &Request<SampleOut>, doing: &str) -> Result<Response, RewardError> {
        let mut slot = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let mut c = match slot.take() {
            Some(c) => c,
            None => self.start()?.0,
        };
        let response = self.exchange(&mut c, request, doing)?;
        *slot = Some(c);
        Ok(response)
    }

    fn process_group(&self) -> Option<i32> {
        self.child
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(HostProcess::pgid)
    }

    /// Load: resolve the path, start the child and create the plugin in it.
    fn load(
        role: PluginRole,
        requested: &Path,
        create: Request<SampleOut<'static>>,
        host: HostCommand,
        budget: Duration,
    ) -> Result<(Self, String), RewardError> {
        let path = crate::plugin_path::resolve(requested).map_err(|e| match role {
            PluginRole::Reward => e,
            PluginRole::Transition => e.of_transition(),
        })?;
        let mut isolated = Isolated {
            role,
            path,
            host,
            create,
            budget,
            child: Mutex::new(None),
        };
        let (child, plugin_name) = isolated.start()?;
        *isolated.child.get_mut().unwrap_or_else(|p| p.into_inner()) = Some(child);
        Ok((isolated, plugin_name))
    }
}

impl Drop for Isolated {
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

/// A reward plugin running in a child process.
pub struct IsolatedReward {
    name: String,
    plugin_name: String,
    inner: Isolated,
}

impl std::fmt::Debug for IsolatedReward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IsolatedReward")
            .field("name", &self.name)
            .field("path", &self.inner.path)
            .field("host", &self.inner.host)
            .finish_non_exhaustive()
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
        let create = Request::Create {
            params: params.to_string(),
        };
        let (inner, plugin_name) =
            Isolated::load(PluginRole::Reward, requested, create, host, budget)?;
        Ok(IsolatedReward {
            name: requested
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "plugin".into()),
            plugin_name,
            inner,
        })
    }

    /// The resolved library file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The name the plugin gives itself.
    pub fn plugin_name(&self) -> &str {
        &self.plugin_name
    }

    /// The process group of the running host (its pid), if one runs now: every process the
    /// plugin starts is in it, and all of them are killed when the host ends.
    pub fn process_group(&self) -> Option<i32> {
        self.inner.process_group()
    }
}

impl RewardFn for IsolatedReward {
    fn name(&self) -> &str {
        &self.name
    }

    fn score(&self, batch: &[JointSample]) -> Result<Vec<f32>, RewardError> {
        let samples: Vec<SampleOut> = batch
            .iter()
            .map(|s| SampleOut {
                prompt: &s.prompt,
                completions: &s.completions,
                fields: &s.fields,
            })
            .collect();
        let doing = format!("scoring a batch of {} joint samples", batch.len());
        let fail = |kind, m: String| self.inner.fail(kind, m);
        match self.inner.call(&Request::Score { samples }, &doing)? {
            Response::Scores { bits } if bits.len() == batch.len() => {
                Ok(bits.into_iter().map(f32::from_bits).collect())
            }
            Response::Scores { bits } => Err(fail(
                PluginFailure::Host,
                format!(
                    "the host sent {} scores for {} joint samples",
                    bits.len(),
                    batch.len()
                ),
            )),
            Response::Error { kind, message } => Err(fail(kind, message)),
            Response::Created { .. } | Response::Prompts { .. } => Err(fail(
                PluginFailure::Host,
                "the host answered a batch with something else than scores".into(),
            )),
        }
    }
}

/// A multi-turn transition plugin running in a child process (`isolate: true` on
/// `trainer.external_transition`, the default on Unix): the same protocol, crash reports and
/// process-group handling as [`IsolatedReward`].
pub struct IsolatedTransition {
    plugin_name: String,
    inner: Isolated,
}

impl std::fmt::Debug for IsolatedTransition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IsolatedTransition")
            .field("path", &self.inner.path)
            .field("host", &self.inner.host)
            .finish_non_exhaustive()
    }
}

impl IsolatedTransition {
    /// Start the host for the transition plugin at `path` (resolved like
    /// [`crate::NativeTransition::load`]) and create its state from `params`. `budget` bounds
    /// every call (create and each `next`); past it the child is killed.
    pub fn load(
        path: impl AsRef<Path>,
        params: &serde_json::Value,
        host: HostCommand,
        budget: Duration,
    ) -> Result<Self, RewardError> {
        let create = Request::CreateTransition {
            params: params.to_string(),
        };
        let (inner, plugin_name) =
            Isolated::load(PluginRole::Transition, path.as_ref(), create, host, budget)?;
        Ok(IsolatedTransition { plugin_name, inner })
    }

    /// The resolved library file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The name the plugin gives itself.
    pub fn plugin_name(&self) -> &str {
        &self.plugin_name
    }

    /// The process group of the running host (its pid), if one runs now.
    pub fn process_group(&self) -> Option<i32> {
        self.inner.process_group()
    }
}

impl TransitionFn for IsolatedTransition {
    fn next_prompts(&self, input: &TransitionInput) -> Result<Vec<String>, RewardError> {
        let doing = format!(
            "writing the prompts of turn {} for {} agents",
            input.turn + 1,
            input.completions.len()
        );
        let request = Request::Next {
            ctx: ctx_json(input),
        };
        let fail = |kind, m: String| self.inner.fail(kind, m);
        match self.inner.call(&request, &doing)? {
            Response::Prompts { prompts } => {
                check_count(&self.inner.path, prompts, input.completions.len())
            }
            Response::Error { kind, message } => Err(fail(kind, message)),
            Response::Created { .. } | Response::Scores { .. } => Err(fail(
                PluginFailure::Host,
                "the host answered `next` with something else than prompts".into(),
            )),
        }
    }
}
