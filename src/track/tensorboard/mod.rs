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
mod event;
mod read;

pub use event::{scalars_event, texts_event, EventWriter};
pub use read::{read_dir, EventLog, Scalar, Text};

use super::{track_error, Record, Tracker};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The TensorBoard directory inside the output directory.
pub const DIR: &str = "tb";

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
            let mut events = vec![scalars_event(r.timestamp, r.step, &r.values)];
            if !r.texts.is_empty() {
                events.push(texts_event(r.timestamp, r.step, &r.texts));
            }
            for event in events {
                w.write_event(&event).map_err(|e| {
                    track_error(format!(
                        "TensorBoard: {}; no further events are written (training goes on)",
                        e.chain()
                    ))
                })?;
            }
        }
        Ok(())
    }

    fn finish(&mut self, _exit_code: i32) -> Result<()> {
        self.writer = None;
        Ok(())
    }
}
