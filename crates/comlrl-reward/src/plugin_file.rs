//! Sanity check of a plugin file before it is handed to the dynamic loader: it must be a
//! shared library of a format this host loads (ELF or Mach-O), and every segment and section
//! the headers describe must lie inside the file. `dlopen` maps a truncated library without
//! complaint and the process then dies of SIGBUS on first touch; this turns that into an error.
use object::{Object, ObjectKind, ObjectSection, ObjectSegment};
use std::path::Path;

/// `Ok` when `path` looks like a complete shared library; otherwise what is wrong with it.
pub(crate) fn check_library_file(path: &Path) -> Result<(), String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read the file: {e}"))?;
    check_library_bytes(&data)
}

/// [`check_library_file`] on the file's bytes.
pub(crate) fn check_library_bytes(data: &[u8]) -> Result<(), String> {
    let len = data.len() as u64;
    let file = object::File::parse(data).map_err(|e| {
        format!("not a shared library this host can load ({e}; {len} bytes): the file may be truncated or not a library at all")
    })?;
    if file.kind() != ObjectKind::Dynamic {
        return Err(format!(
            "not a shared library (the file is an object of kind {:?}); build the plugin with `crate-type = [\"cdylib\"]`",
            file.kind()
        ));
    }
    let past_end = |what: &str, off: u64, size: u64| -> Result<(), String> {
        match off.checked_add(size) {
            Some(end) if end <= len => Ok(()),
            _ => Err(format!(
                "the file is truncated: {what} at offset {off} of {size} bytes runs past its end ({len} bytes); rebuild or copy the plugin again"
            )),
        }
    };
    for segment in file.segments() {
        let (off, size) = segment.file_range();
        past_end("a segment", off, size)?;
    }
    for section in file.sections() {
        if let Some((off, size)) = section.file_range() {
            let name = section.name().unwrap_or("?");
            past_end(&format!("section `{name}`"), off, size)?;
        }
    }
    Ok(())
}
