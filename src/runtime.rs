//! Process-wide CPU settings applied once at start-up, before any thread exists: candle's
//! elementwise thread pool size and glibc's allocator policy. Measured by `comlrl bench models`
//! (see docs/performance.md): together they cut the training step's backward pass ~3× here.
//! Also the process's memory readings (resident and peak), for logs and benchmark reports, and
//! the machine's host name (for lock files and event-file names).

/// What [`tune`] changed, for benchmark reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Tuning {
    /// `CANDLE_NUM_THREADS` in effect (set to 1 when the user had not set it).
    pub candle_num_threads: String,
    /// `RAYON_NUM_THREADS` in effect (the matmul thread count; set once when the user had not).
    pub rayon_num_threads: String,
    /// Whether glibc's malloc was told to keep freed memory (no mmap for large blocks, no trim).
    pub malloc_keeps_memory: bool,
}

/// Applies the defaults unless `COMLRL_NO_TUNING` is set. Call first thing in `main`.
///
/// - `CANDLE_NUM_THREADS=1` unless set: candle's elementwise pool spins on a barrier while
///   waiting for descheduled workers; on few cores that costs more than it gains. Matmuls keep
///   using rayon's pool (`RAYON_NUM_THREADS`).
/// - `RAYON_NUM_THREADS` = physical cores unless set: candle's own default, but read once
///   instead of from /proc/cpuinfo on every matmul.
/// - glibc `M_MMAP_MAX=0`, `M_TRIM_THRESHOLD=-1` (never trim on free; mallopt(3)): every op
///   output is a fresh buffer; by default large ones are mmap'd and unmapped again, so each op
///   page-faults its output in. A finite threshold still lets a large model's pass free more
///   than it at once and hand it back, for the next pass to fault in again;
///   [`release_free_memory`] trims at most once per update round instead.
pub fn tune() -> Tuning {
    if std::env::var_os("COMLRL_NO_TUNING").is_some() {
        return Tuning {
            candle_num_threads: std::env::var("CANDLE_NUM_THREADS")
                .unwrap_or_else(|_| "default".into()),
            rayon_num_threads: std::env::var("RAYON_NUM_THREADS")
                .unwrap_or_else(|_| "default".into()),
            malloc_keeps_memory: false,
        };
    }
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // Single-threaded at this point (called before anything spawns threads).
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        // candle asks for the thread count on every matmul and, without this variable, counts
        // physical cores by parsing /proc/cpuinfo each time (~15% of a tiny-model run). The same
        // count, computed once.
        std::env::set_var(
            "RAYON_NUM_THREADS",
            num_cpus::get_physical().max(1).to_string(),
        );
    }
    Tuning {
        candle_num_threads: std::env::var("CANDLE_NUM_THREADS").unwrap_or_default(),
        rayon_num_threads: std::env::var("RAYON_NUM_THREADS").unwrap_or_default(),
        malloc_keeps_memory: malloc_keep_memory(),
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn malloc_keep_memory() -> bool {
    // SAFETY: mallopt only changes allocator parameters; it is called once at start-up with
    // valid parameter constants and values.
    unsafe {
        let a = libc::mallopt(libc::M_MMAP_MAX, 0);
        let b = libc::mallopt(libc::M_TRIM_THRESHOLD, -1);
        a == 1 && b == 1
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn malloc_keep_memory() -> bool {
    false
}

/// Peak resident set size of this process in bytes (`VmHWM`), if the OS reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Current resident set size of this process in bytes (`VmRSS`), if the OS reports it.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Hands the allocator's free pages back to the OS (glibc `malloc_trim`), which otherwise keeps
/// them (see `malloc_keep_memory`): called between sampling and the update round, whose peak
/// then counts only the pages it touches again, not the sampling's freed ones. Skipped while
/// the process holds less than [`TRIM_ABOVE_BYTES`]: what it could return is small there, and
/// faulting it back in costs more than it saves.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() {
    release_free_memory_above(TRIM_ABOVE_BYTES);
}

/// [`release_free_memory`] where the process holds at least `min_rss` bytes. After an update
/// round the trainer trims only above [`TRIM_AFTER_UPDATE_ABOVE_BYTES`]: the round's freed
/// gradients and scratch would otherwise sit under the next sampling's peak, which for a large
/// model is the run's; for small models the pages sampling faults back in cost more than the
/// trim saves (`bench/results/` has the measurements).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory_above(min_rss: u64) {
    if rss_bytes().is_some_and(|rss| rss < min_rss) {
        return;
    }
    // SAFETY: malloc_trim only returns free memory of the allocator's arenas to the OS; it
    // touches no live allocation and is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Resident size below which [`release_free_memory`] does nothing.
pub const TRIM_ABOVE_BYTES: u64 = 1 << 30;

/// Resident size below which the trainer does not trim after an update round.
pub const TRIM_AFTER_UPDATE_ABOVE_BYTES: u64 = 8 << 30;

/// Nothing to do on other allocators.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() {}

/// Nothing to do on other allocators.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory_above(_min_rss: u64) {}

/// "rss X MB, peak Y MB" for debug logs.
pub fn memory_line() -> String {
    let mb = |b: Option<u64>| b.map_or("?".into(), |b| format!("{:.0} MB", b as f64 / 1e6));
    format!("rss {}, peak {}", mb(rss_bytes()), mb(peak_rss_bytes()))
}

/// Bytes this process can still allocate, and what limits it: the least of the kernel's
/// `MemAvailable` (/proc/meminfo), the room left under the memory limit of each cgroup the
/// process is in (v2 `memory.max` − `memory.current`, v1 `memory.limit_in_bytes` −
/// `memory.usage_in_bytes`, each level up to the root) and under an address-space limit
/// (`ulimit -v` − the process's current `VmSize`). `None` where none of these can be read.
pub fn available_memory() -> Option<(u64, String)> {
    let mut best: Option<(u64, String)> = None;
    let mut offer = |bytes: u64, what: String| {
        if best.as_ref().is_none_or(|(b, _)| bytes < *b) {
            best = Some((bytes, what));
        }
    };
    if let Some(kb) = kb_field("/proc/meminfo", "MemAvailable:") {
        offer(kb * 1024, "MemAvailable, /proc/meminfo".into());
    }
    for (limit, usage, what) in cgroup_limits() {
        offer(limit.saturating_sub(usage), what);
    }
    if let (Some(limit), Some(kb)) = (
        address_space_limit(),
        kb_field("/proc/self/status", "VmSize:"),
    ) {
        offer(
            limit.saturating_sub(kb * 1024),
            format!("under the address-space limit, ulimit -v {}", limit / 1024),
        );
    }
    best
}

/// The number of kB on the line of `file` that starts with `key`.
fn kb_field(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// (limit, usage, name) of every memory-limited cgroup level this process is in.
fn cgroup_limits() -> Vec<(u64, u64, String)> {
    let read = |p: &std::path::Path| -> Option<u64> {
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    };
    let Ok(groups) = std::fs::read_to_string("/proc/self/cgroup") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in groups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => continue,
        };
        let (root, limit_file, usage_file) = if controllers.is_empty() {
            ("/sys/fs/cgroup", "memory.max", "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                "/sys/fs/cgroup/memory",
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        } else {
            continue;
        };
        // The process's own group and each one above it (a limit may sit on any level); in a
        // cgroup namespace the mount itself is the process's group.
        let mut dir = std::path::Path::new(root).join(path.trim_start_matches('/'));
        loop {
            // v1 reports "no limit" as a number near 2^63, v2 as "max" (which does not parse).
            if let (Some(limit), Some(usage)) =
                (read(&dir.join(limit_file)), read(&dir.join(usage_file)))
            {
                if limit < 1 << 60 {
                    out.push((
                        limit,
                        usage,
                        format!("under the cgroup limit {}", dir.join(limit_file).display()),
                    ));
                }
            }
            if dir == std::path::Path::new(root) || !dir.pop() {
                break;
            }
        }
    }
    out
}

/// The address-space limit (`RLIMIT_AS`, `ulimit -v`) in bytes, if one is set.
fn address_space_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct into the one it is given.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) };
    // rlim_t is u64 on Linux, not on every Unix.
    #[allow(clippy::unnecessary_cast)]
    let cur = r.rlim_cur as u64;
    (rc == 0 && r.rlim_cur != libc::RLIM_INFINITY).then_some(cur)
}

/// The machine's host name (`unknown` when the system does not say).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer it is given.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
