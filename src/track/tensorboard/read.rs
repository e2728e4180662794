//! Reading TensorBoard event files back (for the tests and for anyone checking a run): TFRecord
//! framing with both CRCs checked, the scalars and the text-plugin texts, and
//! `session_log START` purges as TensorBoard applies them.
use super::event::{field, masked_crc};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

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

/// One text (TensorBoard's text plugin) read back from an event file.
#[derive(Debug, Clone, PartialEq)]
pub struct Text {
    /// Global step.
    pub step: u64,
    /// The text's tag.
    pub tag: String,
    /// The text (markdown).
    pub text: String,
}

/// What [`read_dir`] found.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    /// `file_version` of each file, in read order.
    pub file_versions: Vec<String>,
    /// Scalars in file order, after applying `session_log START` purges like TensorBoard.
    pub scalars: Vec<Scalar>,
    /// Texts in file order, purged like the scalars.
    pub texts: Vec<Text>,
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
        let corrupt = |m: String| Error::tracker(format!("{}: {m}", f.display()));
        for event in records(&data).map_err(corrupt)? {
            parse_event(event, &mut log).map_err(corrupt)?;
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
        log.texts.retain(|t| t.step < step);
    }
    let Some(summary) = summary else {
        return Ok(());
    };
    for v in fields(summary)? {
        if (v.num, v.wire) != (field::SUMMARY_VALUE, 2) {
            continue;
        }
        let (mut tag, mut simple, mut text, mut plugin) = (None, None, None, None);
        for f in fields(v.payload)? {
            match (f.num, f.wire) {
                (field::VALUE_TAG, 2) => {
                    tag = Some(String::from_utf8_lossy(f.payload).into_owned())
                }
                (field::VALUE_SIMPLE, 5) => simple = Some(f32::from_bits(f.value as u32)),
                (field::VALUE_METADATA, 2) => plugin = plugin_name(f.payload)?,
                (field::VALUE_TENSOR, 2) => text = tensor_string(f.payload)?,
                _ => {}
            }
        }
        if let (Some(tag), Some(text), Some("text")) = (&tag, text, plugin.as_deref()) {
            log.texts.push(Text {
                step,
                tag: tag.clone(),
                text,
            });
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

/// `SummaryMetadata.plugin_data.plugin_name`, if any.
fn plugin_name(metadata: &[u8]) -> std::result::Result<Option<String>, String> {
    for f in fields(metadata)? {
        if (f.num, f.wire) == (field::METADATA_PLUGIN, 2) {
            for p in fields(f.payload)? {
                if (p.num, p.wire) == (field::PLUGIN_NAME, 2) {
                    return Ok(Some(String::from_utf8_lossy(p.payload).into_owned()));
                }
            }
        }
    }
    Ok(None)
}

/// The first `string_val` of a `DT_STRING` tensor, if it is one.
fn tensor_string(tensor: &[u8]) -> std::result::Result<Option<String>, String> {
    let fs = fields(tensor)?;
    let is_string = fs
        .iter()
        .any(|f| (f.num, f.wire, f.value) == (field::TENSOR_DTYPE, 0, field::DT_STRING));
    Ok(fs
        .iter()
        .find(|f| is_string && (f.num, f.wire) == (field::TENSOR_STRING, 2))
        .map(|f| String::from_utf8_lossy(f.payload).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::super::event::{masked_crc, scalars_event, EventWriter, FILE_VERSION};
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
