//! TensorBoard scalars: a writer of `events.out.tfevents.*` files under `<output_dir>/tb/`, the
//! tracker that feeds it, and a reader (used by the tests and by anyone checking a run).
//!
//! The format is TFRecord framing around `tensorflow.Event` protobufs. Each record is
//! `u64 length | u32 masked CRC32C(length) | data | u32 masked CRC32C(data)`, little-endian, with
//! `masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8`. The first event carries
//! `file_version: "brain.Event:2"`; each metrics row is one event with `wall_time`, `step` and a
//! `summary` holding one `simple_value` per metric. On `--resume` a new file starts with a
//! `session_log { status: START }` at the first step to come, which tells TensorBoard to drop the
//! older file's rows from that step on (they were logged after the checkpoint and are redone).
//!
//! No maintained Rust crate writes these files without pulling in a protobuf toolchain, so the
//! few fields needed are encoded by hand (protobuf wire format); CRC32C comes from `crc32c`.
use super::{track_error, Record, Tracker};
use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The TensorBoard directory inside the output directory.
pub const DIR: &str = "tb";
const FILE_VERSION: &str = "brain.Event:2";

/// `tensorflow.Event` field numbers (and the nested messages' ones).
mod field {
    pub const WALL_TIME: u32 = 1; // double
    pub const STEP: u32 = 2; // int64
    pub const FILE_VERSION: u32 = 3; // string
    pub const SUMMARY: u32 = 5; // Summary
    pub const SESSION_LOG: u32 = 6; // SessionLog
    pub const SUMMARY_VALUE: u32 = 1; // Summary.value (repeated)
    pub const VALUE_TAG: u32 = 1; // Summary.Value.tag
    pub const VALUE_SIMPLE: u32 = 2; // Summary.Value.simple_value (float)
    pub const SESSION_STATUS: u32 = 1; // SessionLog.status (START = 1)
}

fn masked_crc(data: &[u8]) -> u32 {
    let c = crc32c::crc32c(data);
    (c.rotate_right(15)).wrapping_add(0xa282_ead8)
}

fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn key(buf: &mut Vec<u8>, field: u32, wire: u8) {
    varint(buf, ((field as u64) << 3) | wire as u64);
}

fn bytes_field(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
    key(buf, field, 2);
    varint(buf, data.len() as u64);
    buf.extend_from_slice(data);
}

fn event_head(wall_time: f64, step: u64) -> Vec<u8> {
    let mut e = vec![];
    key(&mut e, field::WALL_TIME, 1);
    e.extend_from_slice(&wall_time.to_le_bytes());
    key(&mut e, field::STEP, 0);
    varint(&mut e, step);
    e
}

/// An `Event` with one scalar summary value per `(tag, value)`.
pub fn scalars_event(wall_time: f64, step: u64, values: &[(String, f64)]) -> Vec<u8> {
    let mut summary = vec![];
    for (tag, v) in values {
        let mut val = vec![];
        bytes_field(&mut val, field::VALUE_TAG, tag.as_bytes());
        key(&mut val, field::VALUE_SIMPLE, 5);
        val.extend_from_slice(&(*v as f32).to_le_bytes());
        bytes_field(&mut summary, field::SUMMARY_VALUE, &val);
    }
    let mut e = event_head(wall_time, step);
    bytes_field(&mut e, field::SUMMARY, &summary);
    e
}

/// Appends TFRecord-framed events to one `events.out.tfevents.*` file.
pub struct EventWriter {
    path: PathBuf,
    file: std::fs::File,
}

impl EventWriter {
    /// Creates a new event file in `dir` and writes its `file_version` event.
    pub fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let now = super::now();
        // TensorBoard reads a directory's files in name order: the new file must sort after
        // the ones already there (a resumed run can start within the same second).
        let secs = (now as u64).max(latest_file_secs(dir).map_or(0, |s| s + 1));
        let path = dir.join(format!(
            "events.out.tfevents.{secs:010}.{}.{}",
            hostname(),
            std::process::id()
        ));
        let file = std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
        let mut w = Self { path, file };
        let mut e = event_head(now, 0);
        bytes_field(&mut e, field::FILE_VERSION, FILE_VERSION.as_bytes());
        w.write_event(&e)?;
        Ok(w)
    }

    /// The event file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one serialised `Event` and flushes it (TensorBoard reads files while they grow).
    pub fn write_event(&mut self, event: &[u8]) -> Result<()> {
        let len = (event.len() as u64).to_le_bytes();
        let mut rec = Vec::with_capacity(event.len() + 16);
        rec.extend_from_slice(&len);
        rec.extend_from_slice(&masked_crc(&len).to_le_bytes());
        rec.extend_from_slice(event);
        rec.extend_from_slice(&masked_crc(event).to_le_bytes());
        self.file
            .write_all(&rec)
            .and_then(|()| self.file.flush())
            .map_err(|e| Error::io(&self.path, e))
    }

    /// A `session_log { status: START }` at `step`: TensorBoard drops older events from `step` on.
    pub fn write_restart(&mut self, wall_time: f64, step: u64) -> Result<()> {
        let mut log = vec![];
        key(&mut log, field::SESSION_STATUS, 0);
        varint(&mut log, 1);
        let mut e = event_head(wall_time, step);
        bytes_field(&mut e, field::SESSION_LOG, &log);
        self.write_event(&e)
    }
}

/// The largest `<secs>` of the `events.out.tfevents.<secs>.*` files in `dir`.
fn latest_file_secs(dir: &Path) -> Option<u64> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix("events.out.tfevents.")?;
            rest.split('.').next()?.parse::<u64>().ok()
        })
        .max()
}

fn hostname() -> String {
    let raw = std::fs::read_to_string("/etc/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let clean: String = raw
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .collect();
    if clean.is_empty() {
        "comlrl".into()
    } else {
        clean
    }
}

/// The TensorBoard tracker: one event per metrics row.
pub struct TensorBoardTracker {
    dir: PathBuf,
    resume: bool,
    writer: Option<EventWriter>,
}

impl TensorBoardTracker {
    /// A tracker writing under `dir`; `resume` keeps the event files already there.
    pub fn new(dir: &Path, resume: bool) -> Self {
        Self {
            dir: dir.to_path_buf(),
            resume,
            writer: None,
        }
    }

    /// Clears a fresh run's old event files and starts this run's file.
    fn start_file(&mut self, prior: &[Record]) -> Result<()> {
        if !self.resume && self.dir.is_dir() {
            let entries = std::fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
            for p in entries.filter_map(|e| e.ok().map(|e| e.path())) {
                let is_events = p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("events.out.tfevents."));
                if is_events && p.is_file() {
                    std::fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
                }
            }
        }
        let mut w = EventWriter::create(&self.dir)?;
        if self.resume {
            let next = prior.last().map(|r| r.step + 1).unwrap_or(1);
            w.write_restart(super::now(), next)?;
        }
        self.writer = Some(w);
        Ok(())
    }

    fn writer(&mut self) -> Result<&mut EventWriter> {
        match &mut self.writer {
            Some(w) => Ok(w),
            None => Err(track_error("TensorBoard: writer not open")),
        }
    }
}

impl Tracker for TensorBoardTracker {
    fn name(&self) -> &'static str {
        "TensorBoard"
    }

    fn open(&mut self, prior: &[Record]) -> Result<()> {
        let opened = self.start_file(prior);
        opened.map_err(|e| {
            track_error(format!(
                "TensorBoard: {}; no event files are written for this run (training goes on)",
                e.chain()
            ))
        })
    }

    fn log(&mut self, records: &[Record]) -> Result<()> {
        let w = self.writer()?;
        for r in records {
            w.write_event(&scalars_event(r.timestamp, r.step, &r.values))
                .map_err(|e| {
                    track_error(format!(
                        "TensorBoard: {}; no further events are written (training goes on)",
                        e.chain()
                    ))
                })?;
        }
        Ok(())
    }

    fn finish(&mut self, _exit_code: i32) -> Result<()> {
        self.writer = None;
        Ok(())
    }
}

/// One scalar read back from an event file.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    /// Global step.
    pub step: u64,
    /// Seconds since the Unix epoch.
    pub wall_time: f64,
    /// Metric name.
    pub tag: String,
    /// The value.
    pub value: f32,
}

/// What [`read_dir`] found.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    /// `file_version` of each file, in read order.
    pub file_versions: Vec<String>,
    /// Scalars in file order, after applying `session_log START` purges like TensorBoard.
    pub scalars: Vec<Scalar>,
}

/// Reads every `*tfevents*` file of `dir` (in name order), checking both CRCs of every record.
pub fn read_dir(dir: &Path) -> Result<EventLog> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains("tfevents"))
        })
        .collect();
    files.sort();
    let mut log = EventLog::default();
    for f in files {
        let data = std::fs::read(&f).map_err(|e| Error::io(&f, e))?;
        for event in records(&data).map_err(|m| Error::model(&f, m))? {
            parse_event(event, &mut log).map_err(|m| Error::model(&f, m))?;
        }
    }
    Ok(log)
}

/// Splits TFRecord framing, verifying the CRCs.
fn records(mut data: &[u8]) -> std::result::Result<Vec<&[u8]>, String> {
    let mut out = vec![];
    while !data.is_empty() {
        let head = data.get(..12).ok_or("truncated record header")?;
        let (len_bytes, crc) = head.split_at(8);
        if masked_crc(len_bytes).to_le_bytes() != crc {
            return Err(format!("record {}: length CRC mismatch", out.len()));
        }
        let len = u64::from_le_bytes(len_bytes.try_into().map_err(|_| "bad length")?) as usize;
        let body = data.get(12..12 + len).ok_or("truncated record")?;
        let crc = data.get(12 + len..16 + len).ok_or("truncated record CRC")?;
        if masked_crc(body).to_le_bytes() != crc {
            return Err(format!("record {}: data CRC mismatch", out.len()));
        }
        out.push(body);
        data = &data[16 + len..];
    }
    Ok(out)
}

/// One protobuf field: its number, wire type, and payload (length-delimited and fixed fields)
/// or value (varint and fixed fields).
struct Field<'a> {
    num: u32,
    wire: u8,
    payload: &'a [u8],
    value: u64,
}

/// The fields of one protobuf message, in order.
fn fields(mut b: &[u8]) -> std::result::Result<Vec<Field<'_>>, String> {
    let mut out = vec![];
    while !b.is_empty() {
        let (k, rest) = read_varint(b)?;
        b = rest;
        let (num, wire) = ((k >> 3) as u32, (k & 7) as u8);
        let (payload, value, rest) = match wire {
            0 => {
                let (v, rest) = read_varint(b)?;
                (&b[..0], v, rest)
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if b.len() < n {
                    return Err("truncated fixed field".into());
                }
                let (v, rest) = b.split_at(n);
                let mut raw = [0u8; 8];
                raw[..n].copy_from_slice(v);
                (v, u64::from_le_bytes(raw), rest)
            }
            2 => {
                let (n, rest) = read_varint(b)?;
                let n = n as usize;
                if rest.len() < n {
                    return Err("truncated length-delimited field".into());
                }
                let (v, rest) = rest.split_at(n);
                (v, 0, rest)
            }
            w => return Err(format!("unsupported protobuf wire type {w}")),
        };
        out.push(Field {
            num,
            wire,
            payload,
            value,
        });
        b = rest;
    }
    Ok(out)
}

fn read_varint(b: &[u8]) -> std::result::Result<(u64, &[u8]), String> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((v, &b[i + 1..]));
        }
    }
    Err("bad varint".into())
}

fn parse_event(event: &[u8], log: &mut EventLog) -> std::result::Result<(), String> {
    let (mut wall_time, mut step) = (0.0, 0u64);
    let mut summary = None;
    let mut restart = false;
    for f in fields(event)? {
        match (f.num, f.wire) {
            (field::WALL_TIME, 1) => wall_time = f64::from_bits(f.value),
            (field::STEP, 0) => step = f.value,
            (field::FILE_VERSION, 2) => log
                .file_versions
                .push(String::from_utf8_lossy(f.payload).into_owned()),
            (field::SUMMARY, 2) => summary = Some(f.payload),
            (field::SESSION_LOG, 2) => {
                restart = fields(f.payload)?
                    .iter()
                    .any(|s| (s.num, s.wire, s.value) == (field::SESSION_STATUS, 0, 1))
            }
            _ => {}
        }
    }
    if restart {
        log.scalars.retain(|s| s.step < step);
    }
    let Some(summary) = summary else {
        return Ok(());
    };
    for v in fields(summary)? {
        if (v.num, v.wire) != (field::SUMMARY_VALUE, 2) {
            continue;
        }
        let (mut tag, mut simple) = (None, None);
        for f in fields(v.payload)? {
            match (f.num, f.wire) {
                (field::VALUE_TAG, 2) => {
                    tag = Some(String::from_utf8_lossy(f.payload).into_owned())
                }
                (field::VALUE_SIMPLE, 5) => simple = Some(f32::from_bits(f.value as u32)),
                _ => {}
            }
        }
        if let (Some(tag), Some(value)) = (tag, simple) {
            log.scalars.push(Scalar {
                step,
                wall_time,
                tag,
                value,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_and_mask_match_the_reference_values() {
        // CRC-32C check value (RFC 3720) and TensorFlow's masking of it.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        // ((c >> 15) | (c << 17)) + 0xa282ead8 with c = 0xE3069283.
        assert_eq!(masked_crc(b"123456789"), 0xC78A_B0E5);
    }

    #[test]
    fn written_events_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        let vals = vec![
            ("reward_mean".to_string(), 1.25),
            ("agent_0/loss".to_string(), -0.5),
        ];
        w.write_event(&scalars_event(10.0, 2, &vals)).unwrap();
        w.write_event(&scalars_event(11.0, 300, &vals[..1]))
            .unwrap();
        let log = read_dir(dir.path()).unwrap();
        assert_eq!(log.file_versions, vec![FILE_VERSION.to_string()]);
        let got: Vec<(u64, &str, f32)> = log
            .scalars
            .iter()
            .map(|s| (s.step, s.tag.as_str(), s.value))
            .collect();
        assert_eq!(
            got,
            [
                (2, "reward_mean", 1.25),
                (2, "agent_0/loss", -0.5),
                (300, "reward_mean", 1.25)
            ]
        );
        assert_eq!(log.scalars[2].wall_time, 11.0);
    }

    #[test]
    fn a_restart_drops_later_steps_and_a_bad_crc_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let v = vec![("x".to_string(), 1.0)];
        let mut w = EventWriter::create(dir.path()).unwrap();
        for s in [1, 2, 3] {
            w.write_event(&scalars_event(0.0, s, &v)).unwrap();
        }
        w.write_restart(0.0, 2).unwrap();
        w.write_event(&scalars_event(0.0, 2, &v)).unwrap();
        let steps: Vec<u64> = read_dir(dir.path())
            .unwrap()
            .scalars
            .iter()
            .map(|s| s.step)
            .collect();
        assert_eq!(steps, [1, 2]);
        // A second file (a resumed run, same second) sorts after the first.
        let w2 = EventWriter::create(dir.path()).unwrap();
        assert!(w2.path() > w.path());
        drop(w2);
        let path = w.path().to_path_buf();
        drop(w);
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 6] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let err = read_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("CRC mismatch"), "{err}");
    }
}
