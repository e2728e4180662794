//! Opening files that a user, a scenario or another file points at. Where a regular file is
//! expected, anything else is refused by its type before a byte is read: a FIFO blocks
//! `open()` and `read()` forever, `/dev/zero` never ends, a directory is not data. Symlinks are
//! followed, and what they resolve to must be a regular file too. Whole-file reads are bounded
//! by a cap the caller states.
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What a non-regular file is, in the words an error message uses.
pub fn kind_of(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

fn not_regular(m: &Metadata) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("is {}, not a regular file", kind_of(m)),
    )
}

/// Opens `path` for reading when it is (or a symlink resolves to) a regular file, and returns
/// it with its metadata. Opened non-blocking, then checked on the open descriptor, so a FIFO
/// swapped in between a check and the open cannot block either.
pub fn open_regular(path: &Path) -> io::Result<(File, Metadata)> {
    // A FIFO's open() blocks until a writer appears; O_NONBLOCK makes it return at once.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    Ok((file, meta))
}

/// The metadata of the regular file `path` resolves to; any other kind is an error naming it.
pub fn regular_metadata(path: &Path) -> io::Result<Metadata> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    Ok(meta)
}

/// Reads the regular file `path` whole when it holds at most `cap` bytes; a larger file is an
/// error giving both sizes (`what` names the file's role, e.g. "a checkpoint state").
pub fn read_capped(path: &Path, cap: u64, what: &str) -> io::Result<Vec<u8>> {
    let (file, meta) = open_regular(path)?;
    if meta.len() > cap {
        return Err(too_large(meta.len(), cap, what));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    // `take` bounds the read even if the file grows after the size check.
    file.take(cap + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(too_large(buf.len() as u64, cap, what));
    }
    Ok(buf)
}

/// [`read_capped`] as UTF-8 text.
pub fn read_capped_string(path: &Path, cap: u64, what: &str) -> io::Result<String> {
    String::from_utf8(read_capped(path, cap, what)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()))
}

fn too_large(len: u64, cap: u64, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{len} bytes, more than {cap} for {what}: not a file comlrl wrote, or damaged"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn fifos_devices_and_directories_are_refused_by_type_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("pipe");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path the test owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let link = tmp.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let t = Instant::now();
        for (path, word) in [
            (fifo.as_path(), "FIFO"),
            (link.as_path(), "character device"),
            (tmp.path(), "directory"),
        ] {
            let err = read_capped(path, 1 << 20, "a test file").unwrap_err();
            assert!(err.to_string().contains(word), "{}: {err}", path.display());
        }
        assert!(t.elapsed() < Duration::from_secs(5), "blocked");
    }

    #[test]
    fn reads_are_capped_and_symlinks_to_regular_files_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("a.json");
        std::fs::write(&f, b"0123456789").unwrap();
        let link = tmp.path().join("b.json");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(read_capped_string(&link, 10, "x").unwrap(), "0123456789");
        let err = read_capped(&f, 9, "a manifest").unwrap_err().to_string();
        assert!(
            err.contains("10 bytes") && err.contains("a manifest"),
            "{err}"
        );
    }
}
