//! Hostile completions: each is contained and scored, the call returns, nothing outside the
//! sample's temporary directory changes, and no process it started outlives the call. Every
//! case is bounded by its own code (a fork bomb stops at 5,000 children, a write at 10 GB) so
//! that a failing sandbox cannot take the machine down, and by the reward's 1 s per-test and
//! 12 s per-sample limits.
//!
//! A case that needs a layer the OS does not offer here (Landlock, a PID namespace or a pids
//! cgroup, a network namespace) skips, naming it.
use crate::common;
use comlrl_code_exec::{CodeExec, Outcome, TestStatus};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One case at a time: the process checks look at the whole machine.
static SERIAL: Mutex<()> = Mutex::new(());

const PROMPT: &str = "def f(x):\n    \"\"\"Return x.\"\"\"\n";
const AUX: &str = "def aux(x):\n    return x";

/// Scores `main` (defining `f`) against `test` (the body of `check(candidate)`), checking the
/// time it took, that the sample directory is gone and that no process carries `marker`.
fn score(reward: &CodeExec, main: &str, asserts: &[&str], marker: &str) -> Outcome {
    let test: String = std::iter::once("\n\ndef check(candidate):\n".to_string())
        .chain(asserts.iter().map(|a| format!("    {a}\n")))
        .collect();
    let start = Instant::now();
    let out = reward
        .evaluate(PROMPT, AUX, main, &test, "f")
        .unwrap_or_else(|e| panic!("the sample was not scored: {e}"));
    let took = start.elapsed();
    assert!(took < Duration::from_secs(15), "the call took {took:?}");
    let left: Vec<_> = std::fs::read_dir(&reward.config.tmp_dir)
        .expect("tmp root")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "sample directories left behind: {left:?}");
    let survivors = processes_with(marker);
    assert!(
        survivors.is_empty(),
        "processes outlived the call: {survivors:?}"
    );
    out
}

/// Pids whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(marker) {
                found.push(pid);
            }
        }
    }
    found
}

fn marker(case: &str) -> String {
    format!("comlrl-code-exec-security-{case}-{}", std::process::id())
}

/// A decoy directory with one file, outside the sandbox's directory.
fn decoy(case: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "comlrl-code-exec-decoy-{case}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(d.join("home")).expect("decoy");
    std::fs::write(d.join("home/keep.txt"), "keep").expect("decoy file");
    d
}

fn needs(reward: &CodeExec, what: &str, on: bool) -> bool {
    if !on {
        comlrl_testutil::skip(&format!(
            "this machine offers no {what} (sandbox: {})",
            reward.sandbox().layers().describe()
        ));
    }
    on
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Level 1 + 2 without a passing test: 0.4 + 0.6 + 0.5.
const NO_TEST_PASSED: f64 = 1.5;

#[test]
fn deleting_a_home_directory_outside_the_sample_changes_nothing() {
    let Some(reward) = common::security_reward() else {
        return;
    };
    if !needs(
        reward,
        "Landlock",
        reward.sandbox().layers().landlock.is_some(),
    ) {
        return;
    }
    let _g = lock();
    let d = decoy("rmtree");
    let home = d.join("home");
    let main = format!(
        "def f(x):\n    import os, shutil\n    os.environ['HOME'] = {home:?}\n    shutil.rmtree(os.path.expanduser('~'))\n    return x"
    );
    let out = score(
        reward,
        &main,
        &["assert candidate(1) == 1"],
        &marker("rmtree"),
    );
    assert_eq!(out.statuses, vec![TestStatus::Failed]);
    assert_eq!(out.reward, NO_TEST_PASSED);
    assert_eq!(
        std::fs::read_to_string(home.join("keep.txt"))
            .ok()
            .as_deref(),
        Some("keep")
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_fork_bomb_is_held_to_the_process_limit_and_dies_with_the_sample() {
    let Some(reward) = common::security_reward() else {
        return;
    };
    // SAFETY: getuid cannot fail.
    let root = unsafe { libc::getuid() } == 0;
    let layers = reward.sandbox().layers();
    if !needs(
        reward,
        "pids cgroup (root is not bound by RLIMIT_NPROC)",
        !root || layers.cgroup.is_some(),
    ) {
        return;
    }
    let _g = lock();
    let m = marker("forkbomb");
    // Each child execs a sleeper named by the marker; the loop stops itself at 5,000.
    let main = format!(
        "def f(x):\n    import os, sys\n    n = 0\n    while n < 5000:\n        try:\n            pid = os.fork()\n        except OSError:\n            break\n        if pid == 0:\n            try:\n                os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {m:?}])\n            finally:\n                os._exit(0)\n        n += 1\n    return n"
    );
    let limit = reward.config.max_processes;
    let out = score(
        reward,
        &main,
        &[&format!("assert candidate(1) < {limit}")],
        &m,
    );
    assert_eq!(
        out.statuses,
        vec![TestStatus::Passed],
        "more than {limit} processes were started"
    );
}

#[test]
fn an_endless_loop_times_out_and_is_scored() {
    let Some(reward) = common::security_reward() else {
        return;
    };
    let _g = lock();
    let main = "def f(x):\n    while True:\n        pass\n    return x";
    let out = score(
        reward,
        main,
        &[
            "assert candidate(1) == 1",
            "assert candidate(2) == 2",
            "assert candidate(3) == 3",
            "assert candidate(4) == 4",
        ],
        &marker("loop"),
    );
    assert_eq!(
        out.statuses,
        vec![
            TestStatus::TimedOut,
            TestStatus::TimedOut,
            TestStatus::TimedOut,
            TestStatus::NotRun
        ]
    );
    assert_eq!(out.reward, NO_TEST_PASSED + 1.0 * 0.0);
}

#[test]
fn a_50_gb_allocation_fails_inside_the_sample() {
    let Some(reward) = common::security_reward() else {
        return;
    };
    let _g = lock();
    let main = "def f(x):\n    block = bytearray(50 * 1024 ** 3)\n    return len(block)";
    let out = score(reward, main, &["assert candidate(1) > 0"], &marker("alloc"));
    assert_eq!(out.statuses, vec![TestStatus::Failed]);
    assert_eq!(out.reward, NO_TEST_PASSED);
}

#[test]
fn a_10_gb_write_stops_at_the_file_size_limit_and_nothing_is_written_outside() {
    let Some(reward) = common::security_reward() else {
        return;
    };
    if !needs(
        reward,
        "Landlock",
        reward.sandbox().layers().landlock.is_some(),
    ) {
        return;
    }
    let _g = lock();
    let outside =
        std::env::temp_dir().join(format!("comlrl-code-exec-escape-{}", std::process::id()));
    let main = format!(
        "def f(x):\n    written = 0\n    try:\n        open({outside:?}, 'w').write('escaped')\n    except OSError:\n        pass\n    chunk = b'\\0' * (1 << 20)\n    with open('big.bin', 'wb') as fh:\n        for _ in range(10 * 1024):\n            fh.write(chunk)\n            written += 1\n    return written"
    );
    let out = score(
        reward,
        &main,
        &["assert candidate(1) == 10240"],
        &marker("write"),
    );
    assert_eq!(out.statuses, vec![TestStatus::Failed]);
    assert!(!outside.exists(), "the sample wrote {}", outside.display());
}

#[test]
fn sockets_reach_nothing() {
    let Some(reward) = common::security_reward() else {
        return;
    };
    // UDP is stopped only by the network namespace (Landlock covers TCP).
    if !needs(
        reward,
        "network namespace",
        reward.sandbox().layers().net_namespace,
    ) {
        return;
    }
    let _g = lock();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let main = format!(
        "def f(x):\n    import socket\n    reached = []\n    for host in ('127.0.0.1', '1.1.1.1'):\n        try:\n            socket.create_connection((host, {port} if host == '127.0.0.1' else 53), timeout=0.5).close()\n            reached.append(host)\n        except OSError:\n            pass\n    try:\n        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n        s.sendto(b'x', ('127.0.0.1', {port}))\n        reached.append('udp')\n    except OSError:\n        pass\n    return reached"
    );
    let out = score(
        reward,
        &main,
        &["assert candidate(1) == []"],
        &marker("socket"),
    );
    assert_eq!(
        out.statuses,
        vec![TestStatus::Passed],
        "a socket reached out"
    );
    assert!(
        listener.accept().is_err(),
        "the listener outside got a connection"
    );
}

#[test]
fn the_environment_and_the_trainers_secrets_are_out_of_reach() {
    let Some(reward) = common::security_reward() else {
        return;
    };
    // /proc/<pid>/environ is closed by Landlock (root may read any process's).
    if !needs(
        reward,
        "Landlock",
        reward.sandbox().layers().landlock.is_some(),
    ) {
        return;
    }
    let _g = lock();
    // Edition 2021: set_var is safe; the other tests do not read this variable.
    std::env::set_var("COMLRL_CODE_EXEC_TEST_SECRET", "hunter2");
    let me = std::process::id();
    let main = format!(
        "def f(x):\n    import os\n    found = [k for k, v in os.environ.items() if 'hunter2' in v]\n    try:\n        found.append(open('/proc/{me}/environ', 'rb').read().count(b'hunter2'))\n    except OSError:\n        pass\n    return found"
    );
    let out = score(
        reward,
        &main,
        &["assert candidate(1) == []"],
        &marker("env"),
    );
    assert_eq!(
        out.statuses,
        vec![TestStatus::Passed],
        "the sample saw the secret"
    );
}

#[test]
fn a_daemon_does_not_outlive_the_call() {
    let Some(reward) = common::security_reward() else {
        return;
    };
    let layers = reward.sandbox().layers();
    if !needs(
        reward,
        "PID namespace or pids cgroup",
        layers.pid_namespace || layers.cgroup.is_some(),
    ) {
        return;
    }
    let _g = lock();
    let m = marker("daemon");
    let main = format!(
        "def f(x):\n    import os, sys\n    if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n            os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {m:?}])\n        os._exit(0)\n    os.wait()\n    return x"
    );
    let out = score(reward, &main, &["assert candidate(1) == 1"], &m);
    assert_eq!(out.statuses, vec![TestStatus::Passed]);
}

#[test]
fn megabytes_of_output_are_capped() {
    let Some(reward) = common::security_reward() else {
        return;
    };
    let _g = lock();
    let program = "def f(x):\n    print('x' * (8 << 20))\n    return x".to_string();
    let (exec, run) = reward
        .execute(&program, &["assert f(1) == 1".to_string()])
        .expect("run");
    assert_eq!(exec.passed(), 1);
    let cap = (reward.config.output_kib << 10) as usize;
    assert!(run.output.len() <= cap, "{} bytes kept", run.output.len());
    assert!(
        run.output_dropped >= 8 << 20,
        "{} bytes dropped",
        run.output_dropped
    );
}
