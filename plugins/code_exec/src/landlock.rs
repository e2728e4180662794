//! Landlock (Linux 5.13+) through its three system calls, without a crate: a ruleset that lets
//! the sandboxed process read (and execute) only the interpreter's and the system's library
//! directories, read and write only its own temporary directory (and `/dev/null`), and — where
//! the kernel's Landlock ABI has them — bind or connect no TCP socket (ABI 4), and signal no
//! process or reach no abstract Unix socket outside its own domain (ABI 6).
//!
//! The ruleset is built in the parent; the child only calls `landlock_restrict_self` on it
//! between `fork` and `exec` (async-signal-safe: one `prctl` and one system call).
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;

const FS_EXECUTE: u64 = 1 << 0;
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
const FS_TRUNCATE: u64 = 1 << 14;
const FS_IOCTL_DEV: u64 = 1 << 15;
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version the kernel offers, `None` where it has none (or it is disabled).
pub fn abi_version() -> Option<i32> {
    // SAFETY: the documented version query: null attribute, size 0, the VERSION flag.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    (v >= 1).then_some(v as i32)
}

/// Every filesystem right the given ABI knows.
fn fs_rights(abi: i32) -> u64 {
    let mut all = (1u64 << 13) - 1; // ABI 1: EXECUTE ..= MAKE_SYM
    if abi >= 2 {
        all |= 1 << 13; // REFER
    }
    if abi >= 3 {
        all |= FS_TRUNCATE;
    }
    if abi >= 5 {
        all |= FS_IOCTL_DEV;
    }
    all
}

/// A path opened once (`O_PATH`) to be named in rulesets, and whether it is a directory.
#[derive(Debug)]
pub struct RulePath {
    fd: OwnedFd,
    dir: bool,
}

impl RulePath {
    /// Opens `path`; `None` when it does not exist.
    pub fn open(path: &Path) -> io::Result<Option<RulePath>> {
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path with a NUL byte"))?;
        // SAFETY: a valid NUL-terminated path; the returned descriptor is owned below.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Some(RulePath {
            // SAFETY: `fd` was just opened and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            dir: meta.is_dir(),
        }))
    }
}

/// What a ruleset allows on top of "nothing".
pub struct Rules<'a> {
    /// Read and execute only.
    pub read: &'a [RulePath],
    /// Read and write files (no directory changes): `/dev/null`.
    pub read_write_files: &'a [RulePath],
    /// Everything: the sample's own directory.
    pub full: &'a Path,
}

/// Builds a ruleset for `abi` (the descriptor is close-on-exec).
pub fn ruleset(abi: i32, rules: &Rules<'_>) -> io::Result<OwnedFd> {
    let fs = fs_rights(abi);
    let attr = RulesetAttr {
        handled_access_fs: fs,
        handled_access_net: if abi >= 4 {
            NET_BIND_TCP | NET_CONNECT_TCP
        } else {
            0
        },
        scoped: if abi >= 6 {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        },
    };
    // Older kernels take the prefix of the attribute they know.
    let size = match abi {
        1..=3 => 8,
        4 | 5 => 16,
        _ => std::mem::size_of::<RulesetAttr>(),
    };
    // SAFETY: `attr` is a valid `landlock_ruleset_attr` prefix of `size` bytes.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let read_dir = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR;
    let read_file = FS_EXECUTE | FS_READ_FILE;
    for p in rules.read {
        let allowed = if p.dir { read_dir } else { read_file };
        add(&ruleset, p.fd.as_raw_fd(), allowed & fs)?;
    }
    for p in rules.read_write_files {
        let rw = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV;
        add(&ruleset, p.fd.as_raw_fd(), rw & fs)?;
    }
    let full = RulePath::open(rules.full)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the sample directory vanished"))?;
    add(&ruleset, full.fd.as_raw_fd(), fs)?;
    Ok(ruleset)
}

fn add(ruleset: &OwnedFd, parent_fd: RawFd, allowed_access: u64) -> io::Result<()> {
    let attr = PathBeneathAttr {
        allowed_access,
        parent_fd,
    };
    // SAFETY: a valid ruleset descriptor and a valid `landlock_path_beneath_attr`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// In the child, between `fork` and `exec`: no new privileges, then the ruleset. Only
/// async-signal-safe calls.
///
/// # Safety
/// Call only in a freshly forked child; `ruleset` must be a Landlock ruleset descriptor.
pub unsafe fn restrict_self(ruleset: RawFd) -> io::Result<()> {
    // SAFETY: plain system calls on integers.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
