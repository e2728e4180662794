//! Runs one program in a fresh temporary directory under every confinement layer the OS
//! offers; `docs/rewards.md` ("The code_exec plugin: sandbox layers") says what each layer stops
//! and what is left without it.
//!
//! The child (C) is started with an emptied environment, `/dev/null` as stdin, its stdout and
//! stderr on pipes (read up to a cap, the rest drained and counted), and a report pipe on fd 3.
//! Between `fork` and `exec`, C: starts a session of its own (so it leads a process group), joins
//! the sample's pids cgroup, sets the rlimits, unshares the network and PID namespaces, and forks
//! the program's process (G), which is PID 1 of the new namespace: when G ends, the kernel kills
//! every process left in the namespace. C only waits for G and exits with its status. G restricts
//! itself with Landlock, empties its capability bounding set (so that root's `exec` grants no
//! capabilities), and `exec`s the interpreter. The parent watches C through a pidfd, kills the
//! whole process group and the cgroup's members when C ends or the wall-clock limit passes, and
//! removes the directory.
use crate::cgroup::{CgroupRoot, SampleCgroup};
use crate::landlock::{self, RulePath, Rules};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Resource limits of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Wall-clock limit of the whole run.
    pub wall: Duration,
    /// `RLIMIT_CPU`, seconds.
    pub cpu_seconds: u64,
    /// `RLIMIT_AS`, bytes.
    pub address_space: u64,
    /// `RLIMIT_FSIZE`, bytes.
    pub file_size: u64,
    /// Processes: `pids.max` of the cgroup, and `RLIMIT_NPROC` for a non-root user.
    pub processes: u64,
    /// Bytes of stdout + stderr kept.
    pub output: usize,
}

/// Which layers a sandbox uses (decided once, by probing, when the reward is created).
#[derive(Debug, Clone, Default)]
pub struct Layers {
    /// Landlock ABI version in use, `None` for no Landlock.
    pub landlock: Option<i32>,
    /// A network namespace (no interface but a downed loopback).
    pub net_namespace: bool,
    /// A PID namespace whose init is the program.
    pub pid_namespace: bool,
    /// A pids cgroup per sample.
    pub cgroup: Option<CgroupRoot>,
    /// Empty the capability bounding set (root only; others have none).
    pub drop_capabilities: bool,
}

impl Layers {
    /// One line naming the layers in use and those missing.
    pub fn describe(&self) -> String {
        let on_off = |b: bool| if b { "on" } else { "OFF" };
        format!(
            "landlock {}, network namespace {}, pid namespace {}, pids cgroup {}, capabilities dropped {}, rlimits on, empty environment on",
            self.landlock.map_or("OFF".to_string(), |v| format!("on (ABI {v})")),
            on_off(self.net_namespace),
            on_off(self.pid_namespace),
            self.cgroup
                .as_ref()
                .map_or("OFF".to_string(), |c| format!("on ({})", c.dir().display())),
            on_off(self.drop_capabilities),
        )
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The program exited with this status.
    Exited(i32),
    /// The program was killed by this signal (e.g. `RLIMIT_CPU`'s SIGXCPU / SIGKILL).
    Signaled(i32),
    /// The wall-clock limit passed; everything was killed.
    TimedOut,
}

/// What came back from a run.
#[derive(Debug, Clone)]
pub struct Run {
    /// Everything written to fd 3 (capped at [`REPORT_CAP`]).
    pub report: String,
    /// The first [`Limits::output`] bytes of stdout and stderr, interleaved as read.
    pub output: Vec<u8>,
    /// Bytes of output read past the cap and dropped.
    pub output_dropped: u64,
    /// How it ended.
    pub end: End,
}

/// Bytes of the fd-3 report kept.
pub const REPORT_CAP: usize = 1 << 20;

/// A configured sandbox; `run` may be called from several threads at once.
#[derive(Debug)]
pub struct Sandbox {
    program: PathBuf,
    args: Vec<String>,
    read_paths: Vec<RulePath>,
    rw_files: Vec<RulePath>,
    tmp_root: PathBuf,
    limits: Limits,
    layers: Layers,
    last_cap: i32,
    nproc_rlimit: Option<u64>,
}

/// Numbers the runs of this process (directory and cgroup names), across sandboxes.
static RUNS: AtomicU64 = AtomicU64::new(0);

impl Sandbox {
    /// A sandbox running `program args…` with read access to `read_paths` (missing ones are
    /// skipped), temporary directories under `tmp_root`.
    pub fn new(
        program: PathBuf,
        args: Vec<String>,
        read_paths: &[PathBuf],
        tmp_root: PathBuf,
        limits: Limits,
        layers: Layers,
    ) -> io::Result<Sandbox> {
        let mut reads = Vec::new();
        for p in read_paths {
            if let Some(r) = RulePath::open(p)? {
                reads.push(r);
            }
        }
        let mut rw = Vec::new();
        if let Some(r) = RulePath::open(Path::new("/dev/null"))? {
            rw.push(r);
        }
        let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(63);
        // SAFETY: getuid cannot fail.
        let root = unsafe { libc::getuid() } == 0;
        Ok(Sandbox {
            program,
            args,
            read_paths: reads,
            rw_files: rw,
            tmp_root,
            nproc_rlimit: (!root).then(|| limits.processes.saturating_add(uid_processes())),
            limits,
            layers,
            last_cap,
        })
    }

    /// The layers in use.
    pub fn layers(&self) -> &Layers {
        &self.layers
    }

    /// The limits in use.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Runs the program once in a fresh directory holding `files` (name, content); the
    /// directory is removed afterwards.
    pub fn run(&self, files: &[(&str, &[u8])]) -> io::Result<Run> {
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        let name = format!("comlrl-code-exec-{}-{n}", std::process::id());
        let dir = self.tmp_root.join(&name);
        std::fs::create_dir(&dir)?;
        let _cleanup = RemoveDir(dir.clone());
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        for (file, content) in files {
            std::fs::write(dir.join(file), content)?;
        }
        let ruleset = match self.layers.landlock {
            Some(abi) => Some(landlock::ruleset(
                abi,
                &Rules {
                    read: &self.read_paths,
                    read_write_files: &self.rw_files,
                    full: &dir,
                },
            )?),
            None => None,
        };
        let mut cgroup: Option<SampleCgroup> = match &self.layers.cgroup {
            Some(root) => Some(root.create(&name, self.limits.processes)?),
            None => None,
        };
        let (report_r, report_w) = pipe()?;
        let child = Child {
            report_w: report_w.as_raw_fd(),
            cgroup_procs: cgroup.as_ref().and_then(|c| c.procs_fd()),
            ruleset: ruleset.as_ref().map(|r| r.as_raw_fd()),
            ns_flags: (if self.layers.net_namespace {
                libc::CLONE_NEWNET
            } else {
                0
            }) | (if self.layers.pid_namespace {
                libc::CLONE_NEWPID
            } else {
                0
            }),
            fork_init: self.layers.pid_namespace,
            drop_caps: self.layers.drop_capabilities,
            last_cap: self.last_cap,
            cpu: self.limits.cpu_seconds,
            address_space: self.limits.address_space,
            file_size: self.limits.file_size,
            nproc: self.nproc_rlimit,
        };
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .current_dir(&dir)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: the closure only makes async-signal-safe system calls on integers it
        // captured by value (see `Child::setup`); it allocates nothing.
        unsafe {
            cmd.pre_exec(move || child.setup());
        }
        let mut proc = cmd.spawn()?;
        drop(report_w);
        drop(ruleset);
        if let Some(c) = cgroup.as_mut() {
            c.close_procs();
        }
        let pid = proc.id() as libc::pid_t;
        let stdout: OwnedFd = proc.stdout.take().expect("piped stdout").into();
        let stderr: OwnedFd = proc.stderr.take().expect("piped stderr").into();
        let watch = Watch {
            pid,
            pidfd: pidfd_open(pid),
            cgroup: cgroup.as_ref(),
        };
        let collected = watch.collect(
            [&stdout, &stderr, &report_r],
            Instant::now() + self.limits.wall,
            self.limits.output,
        );
        let status = proc.wait()?;
        drop(cgroup);
        let end = if collected.timed_out {
            End::TimedOut
        } else {
            use std::os::unix::process::ExitStatusExt;
            match (status.code(), status.signal()) {
                (Some(c), _) if c > 128 && self.layers.pid_namespace => End::Signaled(c - 128),
                (Some(c), _) => End::Exited(c),
                (None, Some(s)) => End::Signaled(s),
                (None, None) => End::Exited(-1),
            }
        };
        Ok(Run {
            report: String::from_utf8_lossy(&collected.report).into_owned(),
            output: collected.output,
            output_dropped: collected.dropped,
            end,
        })
    }
}

/// Processes of this user now (for a non-root `RLIMIT_NPROC`, which counts them all).
fn uid_processes() -> u64 {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0u64;
    for e in entries.flatten() {
        let is_pid = e
            .file_name()
            .to_str()
            .is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()));
        if is_pid {
            // Threads count too: add the task count.
            let tasks = std::fs::read_dir(e.path().join("task")).map_or(1, |t| t.count() as u64);
            if e.metadata().is_ok_and(|m| m.uid() == uid) {
                n += tasks;
            }
        }
    }
    n
}

struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        if std::fs::remove_dir_all(&self.0).is_err() {
            // A sample may have left a directory without write permission: restore and retry.
            let _ = Command::new("chmod")
                .args(["-R", "u+rwx"])
                .arg(&self.0)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two fresh descriptors owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: a plain system call; a non-negative result is a fresh descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: as above.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// What the child does between `fork` and `exec`; everything is a plain integer.
#[derive(Clone, Copy)]
struct Child {
    report_w: RawFd,
    cgroup_procs: Option<RawFd>,
    ruleset: Option<RawFd>,
    ns_flags: libc::c_int,
    fork_init: bool,
    drop_caps: bool,
    last_cap: i32,
    cpu: u64,
    address_space: u64,
    file_size: u64,
    nproc: Option<u64>,
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn rlimit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> io::Result<()> {
    let l = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: a valid rlimit struct.
    check(unsafe { libc::setrlimit(resource, &l) })
}

impl Child {
    /// Runs in the forked child: only async-signal-safe calls, no allocation.
    fn setup(self) -> io::Result<()> {
        // SAFETY: plain system calls on integers and stack buffers, in the single-threaded
        // child between fork and exec.
        unsafe {
            check(libc::setsid())?;
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
            if let Some(fd) = self.cgroup_procs {
                let mut buf = [0u8; 24];
                let len = itoa(libc::getpid() as u64, &mut buf);
                if libc::write(fd, buf.as_ptr().cast(), len) != len as isize {
                    return Err(io::Error::last_os_error());
                }
            }
            if self.report_w == 3 {
                check(libc::fcntl(3, libc::F_SETFD, 0))?;
            } else {
                check(libc::dup2(self.report_w, 3))?;
            }
            if self.ns_flags != 0 {
                check(libc::unshare(self.ns_flags))?;
            }
            if self.fork_init {
                let g = libc::fork();
                if g < 0 {
                    return Err(io::Error::last_os_error());
                }
                if g > 0 {
                    // C: drop every descriptor but stdio (the report pipe, std's exec-error
                    // pipe), wait for G, exit with its status.
                    libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                    let mut status = 0;
                    loop {
                        let r = libc::waitpid(g, &mut status, 0);
                        if r == g {
                            break;
                        }
                        if r < 0 && *libc::__errno_location() != libc::EINTR {
                            libc::_exit(125);
                        }
                    }
                    if libc::WIFEXITED(status) {
                        libc::_exit(libc::WEXITSTATUS(status));
                    }
                    libc::_exit(128 + libc::WTERMSIG(status));
                }
                check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
            }
            // The limits bind G (and what it starts), set after the fork so that C's copy of
            // the parent's address space is not held against them.
            rlimit(libc::RLIMIT_CORE, 0, 0)?;
            rlimit(libc::RLIMIT_CPU, self.cpu, self.cpu.saturating_add(1))?;
            rlimit(libc::RLIMIT_AS, self.address_space, self.address_space)?;
            rlimit(libc::RLIMIT_FSIZE, self.file_size, self.file_size)?;
            rlimit(libc::RLIMIT_NOFILE, 256, 256)?;
            if let Some(n) = self.nproc {
                rlimit(libc::RLIMIT_NPROC, n, n)?;
            }
            match self.ruleset {
                Some(fd) => landlock::restrict_self(fd)?,
                None => check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?,
            }
            if self.drop_caps {
                for cap in 0..=self.last_cap {
                    libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
                }
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_CLEAR_ALL,
                    0,
                    0,
                    0,
                );
            }
        }
        Ok(())
    }
}

/// Decimal digits of `v` into `buf`; the length.
fn itoa(mut v: u64, buf: &mut [u8; 24]) -> usize {
    let mut tmp = [0u8; 24];
    let mut n = 0;
    loop {
        tmp[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for (i, b) in buf.iter_mut().take(n).enumerate() {
        *b = tmp[n - 1 - i];
    }
    n
}

struct Watch<'a> {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
    cgroup: Option<&'a SampleCgroup>,
}

struct Collected {
    report: Vec<u8>,
    output: Vec<u8>,
    dropped: u64,
    timed_out: bool,
}

/// Grace for the pipes to reach end-of-file once everything was killed.
const GRACE: Duration = Duration::from_millis(500);

impl Watch<'_> {
    /// Whether C has ended (without reaping it).
    fn ended(&self) -> bool {
        // SAFETY: waitid on our own child with WNOWAIT leaves it to `wait`.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_PID,
                self.pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            r == 0 && info.si_pid() != 0
        }
    }

    fn kill_everything(&self) {
        // SAFETY: signalling the child's process group (it called setsid, so pgid == pid).
        unsafe { libc::kill(-self.pid, libc::SIGKILL) };
        if let Some(c) = self.cgroup {
            c.kill_all();
        }
    }

    fn collect(&self, pipes: [&OwnedFd; 3], deadline: Instant, cap: usize) -> Collected {
        let mut out = Collected {
            report: Vec::new(),
            output: Vec::new(),
            dropped: 0,
            timed_out: false,
        };
        for p in pipes {
            // SAFETY: setting O_NONBLOCK on our own pipe end.
            unsafe {
                let fl = libc::fcntl(p.as_raw_fd(), libc::F_GETFL);
                libc::fcntl(p.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
            }
        }
        let mut open = [true; 3];
        let mut ended_at: Option<Instant> = None;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let now = Instant::now();
            if ended_at.is_none() {
                if now >= deadline {
                    out.timed_out = true;
                    self.kill_everything();
                    ended_at = Some(now);
                } else if self.ended() {
                    self.kill_everything();
                    ended_at = Some(now);
                }
            }
            if let Some(t) = ended_at {
                if !open.iter().any(|&o| o) || now >= t + GRACE {
                    break;
                }
            }
            let mut fds: Vec<libc::pollfd> = pipes
                .iter()
                .zip(open)
                .map(|(p, o)| libc::pollfd {
                    fd: if o { p.as_raw_fd() } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            let watch_pidfd = ended_at.is_none() && self.pidfd.is_some();
            if let (true, Some(pf)) = (watch_pidfd, &self.pidfd) {
                fds.push(libc::pollfd {
                    fd: pf.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            let until = match ended_at {
                Some(t) => t + GRACE,
                None => deadline,
            };
            let mut wait_ms = until.saturating_duration_since(now).as_millis().min(1000) as i32;
            if self.pidfd.is_none() && ended_at.is_none() {
                wait_ms = wait_ms.min(5);
            }
            // SAFETY: `fds` is a valid array of pollfd of the given length.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait_ms) };
            if r < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                break;
            }
            for (i, fd) in fds.iter().take(3).enumerate() {
                if !open[i] || fd.revents == 0 {
                    continue;
                }
                // SAFETY: reading into our own buffer from our own pipe end.
                let n = unsafe { libc::read(fd.fd, buf.as_mut_ptr().cast(), buf.len()) };
                if n == 0 {
                    open[i] = false;
                } else if n > 0 {
                    let chunk = &buf[..n as usize];
                    let (sink, limit) = if i == 2 {
                        (&mut out.report, REPORT_CAP)
                    } else {
                        (&mut out.output, cap)
                    };
                    let room = limit.saturating_sub(sink.len());
                    sink.extend_from_slice(&chunk[..room.min(chunk.len())]);
                    if i != 2 {
                        out.dropped += chunk.len().saturating_sub(room) as u64;
                    }
                } else if io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                    open[i] = false;
                }
            }
        }
        if ended_at.is_none() {
            self.kill_everything();
        }
        out
    }
}
