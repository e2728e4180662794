//! Reading the files a scenario names (the scenario itself, data files, chat templates, Hub cache
//! refs): regular files only, symlinks followed and the file they end at checked, and a size cap
//! checked before a file is read whole. A FIFO is refused from its metadata and never opened
//! (opening one for reading blocks until a writer comes), and a device such as `/dev/zero` is
//! refused by type (it reads without end).
//!
//! The caps, each far above what a real file of that kind holds, so that only a wrong or
//! hostile file meets them:
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;

/// A scenario file: the largest real ones are a few KiB; 16 MiB leaves room for tens of
/// thousands of inline prompts (more belong in a data file).
pub const MAX_SCENARIO_BYTES: u64 = 16 * MIB;

/// A JSONL, JSON or CSV data file, read whole before its rows are built: 1 GiB, several million
/// prompts. Larger sets: split them, or convert them to parquet (read row by row).
pub const MAX_DATA_FILE_BYTES: u64 = 1024 * MIB;

/// One JSONL line or CSV record: 16 MiB, about four million tokens of text, more than the
/// context window of any model comlrl loads, so no trainable row comes near it.
pub const MAX_ROW_BYTES: u64 = 16 * MIB;

/// A chat template file (`*.jinja`): real templates are a few KiB (Llama 3.1's, with tool
/// calling, is 5 KiB).
pub const MAX_TEMPLATE_BYTES: u64 = MIB;

/// A `tokenizer_config.json` (read for its chat template and special tokens): real ones are up
/// to a few MiB (those listing hundreds of thousands of added tokens).
pub const MAX_TOKENIZER_CONFIG_BYTES: u64 = 64 * MIB;

/// A ref in the Hugging Face cache (`refs/main`): a 40-character commit hash.
pub const MAX_REF_BYTES: u64 = 1024;

/// `n` bytes in words (`16 MiB`, `1 GiB`, `1024 bytes`).
pub fn bytes(n: u64) -> String {
    if n >= 1 << 30 && n.is_multiple_of(1 << 30) {
        format!("{} GiB", n >> 30)
    } else if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// What a non-regular file is, in words (`a FIFO`).
fn kind(meta: &Metadata) -> &'static str {
    let ft = meta.file_type();
    if ft.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    "not a regular file"
}

/// Why `path` is not a regular file, as the rest of a sentence that starts with the path
/// (`is a FIFO (named pipe), not a regular file`, `does not exist`, `is a symlink to /dev/zero,
/// which is a character device, not a regular file`); `None` when it is one (after symlinks).
pub fn not_regular(path: &Path) -> Option<String> {
    let what = |meta: &Metadata| match kind(meta) {
        "a directory" => "a directory, not a file".to_string(),
        "not a regular file" => "not a regular file".to_string(),
        k => format!("{k}, not a regular file"),
    };
    let link = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_symlink());
    let target = || -> PathBuf {
        std::fs::canonicalize(path)
            .or_else(|_| std::fs::read_link(path))
            .unwrap_or_default()
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => None,
        Ok(meta) if link.is_some() => Some(format!(
            "is a symlink to {}, which is {}",
            target().display(),
            what(&meta)
        )),
        Ok(meta) => Some(format!("is {}", what(&meta))),
        Err(_) if link.is_some() => Some(format!(
            "is a symlink to {}, which does not exist",
            target().display()
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some("does not exist".into()),
        Err(e) => Some(format!("cannot be read: {e}")),
    }
}

/// Opens `path` for reading if it is a regular file (after symlinks) of at most `cap` bytes;
/// returns it with its size. The errors say what the file is, or its size and the cap, and
/// `too_big` (what to do about a file over the cap).
pub fn open_regular(path: &Path, cap: u64, too_big: &str) -> io::Result<(File, u64)> {
    if let Some(why) = not_regular(path) {
        let kind = if why == "does not exist" {
            io::ErrorKind::NotFound
        } else {
            io::ErrorKind::InvalidInput
        };
        return Err(io::Error::new(kind, format!("it {why}")));
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    // A FIFO swapped in after the check would block open(); non-blocking, it opens at once and
    // is refused below. Reads of a regular file ignore the flag.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path)?;
    // The path could have been replaced between the check and the open: check what was opened.
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is {}", kind(&meta)),
        ));
    }
    let size = meta.len();
    if size > cap {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "it is {size} bytes, more than the {} this reader accepts; {too_big}",
                bytes(cap)
            ),
        ));
    }
    Ok((file, size))
}

/// The whole text of the regular file `path` of at most `cap` bytes (see [`open_regular`]).
pub fn read_text(path: &Path, cap: u64, too_big: &str) -> io::Result<String> {
    let (file, size) = open_regular(path, cap, too_big)?;
    let mut text = String::with_capacity(size as usize);
    // A file that grows after the size check stops at the cap all the same.
    file.take(cap + 1).read_to_string(&mut text)?;
    if text.len() as u64 > cap {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "it grew past the {} this reader accepts while being read",
                bytes(cap)
            ),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_by_type_and_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("a.txt");
        std::fs::write(&f, "hello").expect("write");
        assert_eq!(read_text(&f, 5, "").expect("reads"), "hello");
        let e = read_text(&f, 4, "split it").unwrap_err().to_string();
        assert!(
            e.contains("5 bytes, more than the 4 bytes") && e.ends_with("split it"),
            "{e}"
        );
        assert_eq!(
            not_regular(&dir.path().join("nope")).as_deref(),
            Some("does not exist")
        );
        assert_eq!(
            not_regular(dir.path()).as_deref(),
            Some("is a directory, not a file")
        );
        #[cfg(unix)]
        {
            let zero = dir.path().join("zero.jsonl");
            std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
            let e = read_text(&zero, 1 << 20, "").unwrap_err().to_string();
            assert_eq!(
                e,
                "it is a symlink to /dev/zero, which is a character device, not a regular file"
            );
            let dangling = dir.path().join("gone.jsonl");
            std::os::unix::fs::symlink(dir.path().join("gone"), &dangling).expect("symlink");
            let why = not_regular(&dangling).expect("not regular");
            assert!(why.ends_with("which does not exist"), "{why}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("state.json");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: mkfifo on a NUL-terminated path the test owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = std::time::Instant::now();
        let e = read_text(&fifo, 1 << 20, "").unwrap_err().to_string();
        assert!(e.contains("FIFO"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn sizes_in_words() {
        assert_eq!(bytes(16 * MIB), "16 MiB");
        assert_eq!(bytes(1 << 30), "1 GiB");
        assert_eq!(bytes(1024), "1024 bytes");
    }
}
