//! Writing TensorBoard event files: protobuf encoding of the few `tensorflow.Event` fields
//! needed, TFRecord framing with masked CRC32C, and the writer of one `events.out.tfevents.*`.
use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

pub(super) const FILE_VERSION: &str = "brain.Event:2";

/// `tensorflow.Event` field numbers (and the nested messages' ones).
/// `tensorflow.Event` field numbers (and the nested messages' ones).
pub(super) mod field {
    pub const WALL_TIME: u32 = 1; // double
    pub const STEP: u32 = 2; // int64
    pub const FILE_VERSION: u32 = 3; // string
    pub const SUMMARY: u32 = 5; // Summary
    pub const SESSION_LOG: u32 = 6; // SessionLog
    pub const SUMMARY_VALUE: u32 = 1; // Summary.value (repeated)
    pub const VALUE_TAG: u32 = 1; // Summary.Value.tag
    pub const VALUE_SIMPLE: u32 = 2; // Summary.Value.simple_value (float)
    pub const VALUE_TENSOR: u32 = 8; // Summary.Value.tensor (TensorProto)
    pub const VALUE_METADATA: u32 = 9; // Summary.Value.metadata (SummaryMetadata)
    pub const METADATA_PLUGIN: u32 = 1; // SummaryMetadata.plugin_data (PluginData)
    pub const PLUGIN_NAME: u32 = 1; // PluginData.plugin_name
    pub const TENSOR_DTYPE: u32 = 1; // TensorProto.dtype (DataType)
    pub const TENSOR_SHAPE: u32 = 2; // TensorProto.tensor_shape (TensorShapeProto)
    pub const TENSOR_STRING: u32 = 8; // TensorProto.string_val (repeated bytes)
    pub const DT_STRING: u64 = 7; // DataType.DT_STRING
    pub const SESSION_STATUS: u32 = 1; // SessionLog.status (START = 1)
}

pub(super) fn masked_crc(data: &[u8]) -> u32 {
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

/// An `Event` with one text summary per `(tag, markdown)`: a scalar string tensor under the
/// text plugin, what `tf.summary.text` writes (TensorBoard's Text tab renders it as markdown).
pub fn texts_event(wall_time: f64, step: u64, texts: &[(String, String)]) -> Vec<u8> {
    let mut summary = vec![];
    for (tag, text) in texts {
        let mut plugin = vec![];
        bytes_field(&mut plugin, field::PLUGIN_NAME, b"text");
        let mut metadata = vec![];
        bytes_field(&mut metadata, field::METADATA_PLUGIN, &plugin);
        let mut tensor = vec![];
        key(&mut tensor, field::TENSOR_DTYPE, 0);
        varint(&mut tensor, field::DT_STRING);
        // A scalar: an empty shape.
        bytes_field(&mut tensor, field::TENSOR_SHAPE, &[]);
        bytes_field(&mut tensor, field::TENSOR_STRING, text.as_bytes());
        let mut val = vec![];
        bytes_field(&mut val, field::VALUE_TAG, tag.as_bytes());
        bytes_field(&mut val, field::VALUE_METADATA, &metadata);
        bytes_field(&mut val, field::VALUE_TENSOR, &tensor);
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
        let now = crate::track::now();
        // TensorBoard reads a directory's files in name order: the new file must sort after
        // the ones already there (a resumed run can start within the same second).
        let secs = (now as u64).max(latest_file_secs(dir).map_or(0, |s| s + 1));
        let path = dir.join(format!(
            "events.out.tfevents.{secs:010}.{}.{}",
            file_host(),
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

/// The host name as it goes into an event file's name: only `[A-Za-z0-9.-]`.
fn file_host() -> String {
    let clean: String = crate::runtime::hostname()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .collect();
    if clean.is_empty() {
        "comlrl".into()
    } else {
        clean
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
