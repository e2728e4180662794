//! A pids cgroup per sample, where this process may create one: `pids.max` bounds how many
//! processes a sample can have, root included (an `RLIMIT_NPROC` does not bind root), and the
//! cgroup's member list finds every process of the sample to kill, even one that left the
//! process group (`setsid`). cgroup v1 (`/sys/fs/cgroup/pids`) or v2 (a hierarchy whose
//! `cgroup.subtree_control` enables `pids`).
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where sample cgroups are created.
#[derive(Debug, Clone)]
pub struct CgroupRoot {
    dir: PathBuf,
}

impl CgroupRoot {
    /// The first candidate hierarchy where a child cgroup with `pids.max` can be created.
    pub fn detect() -> Option<CgroupRoot> {
        let mut candidates = vec![PathBuf::from("/sys/fs/cgroup/pids")];
        let v2 = Path::new("/sys/fs/cgroup");
        if fs::read_to_string(v2.join("cgroup.subtree_control"))
            .is_ok_and(|s| s.split_whitespace().any(|c| c == "pids"))
        {
            candidates.push(v2.to_path_buf());
        }
        static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        candidates.into_iter().find_map(|dir| {
            let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let probe = dir.join(format!("comlrl-code-exec-probe-{}-{n}", std::process::id()));
            let ok = fs::create_dir(&probe).is_ok() && probe.join("pids.max").exists();
            let _ = fs::remove_dir(&probe);
            ok.then_some(CgroupRoot { dir })
        })
    }

    /// The hierarchy's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates the cgroup `name` with at most `max_processes` processes.
    pub fn create(&self, name: &str, max_processes: u64) -> io::Result<SampleCgroup> {
        let dir = self.dir.join(name);
        fs::create_dir(&dir)?;
        let mut cg = SampleCgroup { dir, procs: None };
        fs::write(cg.dir.join("pids.max"), max_processes.to_string())?;
        let procs = fs::OpenOptions::new()
            .write(true)
            .open(cg.dir.join("cgroup.procs"))?;
        cg.procs = Some(procs.into());
        Ok(cg)
    }
}

/// One sample's cgroup; removed (its processes killed) on drop.
#[derive(Debug)]
pub struct SampleCgroup {
    dir: PathBuf,
    procs: Option<OwnedFd>,
}

impl SampleCgroup {
    /// The open `cgroup.procs` (close-on-exec) that the child writes its pid into.
    pub fn procs_fd(&self) -> Option<RawFd> {
        self.procs.as_ref().map(|f| f.as_raw_fd())
    }

    /// Closes the parent's copy of `cgroup.procs` (after the child has started).
    pub fn close_procs(&mut self) {
        self.procs = None;
    }

    /// Kills every member until none is left (or a second has passed); the number of
    /// processes found.
    pub fn kill_all(&self) -> usize {
        let kill_file = self.dir.join("cgroup.kill");
        if kill_file.exists() {
            let _ = fs::OpenOptions::new()
                .write(true)
                .open(&kill_file)
                .and_then(|mut f| f.write_all(b"1"));
        }
        let start = Instant::now();
        let mut seen = 0;
        loop {
            let pids: Vec<i32> = fs::read_to_string(self.dir.join("cgroup.procs"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if pids.is_empty() || start.elapsed() > Duration::from_secs(1) {
                return seen;
            }
            seen += pids.len();
            for pid in pids {
                // SAFETY: sending a signal to a pid is a plain system call.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for SampleCgroup {
    fn drop(&mut self) {
        self.procs = None;
        self.kill_all();
        let start = Instant::now();
        while fs::remove_dir(&self.dir).is_err() && start.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}
