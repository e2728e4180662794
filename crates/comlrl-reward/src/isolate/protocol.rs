//! The plugin-host protocol: length-prefixed JSON frames over the child's stdin (requests)
//! and stdout (responses). A frame is a 4-byte little-endian length, then that many bytes of
//! JSON. The client sends `Create` once, then any number of `Score` (a reward plugin), or
//! `CreateTransition` once, then any number of `Next` (a transition plugin); the child answers
//! each request with exactly one response. Closing the child's stdin ends it (exit code 0).
//! Scores travel as `f32` bit patterns so that non-finite values survive JSON.
use crate::error::PluginFailure;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// Largest frame accepted (a garbage length is an error, not a huge allocation).
pub const MAX_FRAME: usize = 1 << 30;

/// A request from the trainer to the plugin host.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request<S> {
    /// Load the plugin and create its state from the term's params (JSON text).
    Create {
        /// The term's `params`, as JSON text.
        params: String,
    },
    /// Score these joint samples.
    Score {
        /// The batch, in order.
        samples: Vec<S>,
    },
    /// Load the plugin as a transition plugin (`comlrl_transition_v1`) and create its state.
    CreateTransition {
        /// `trainer.external_transition.params`, as JSON text.
        params: String,
    },
    /// Write the next turn's prompts for this context.
    Next {
        /// The transition context as JSON text (what an in-process plugin's `next` gets).
        ctx: String,
    },
}

/// One joint sample as the client sends it (borrowed).
#[derive(Debug, Serialize)]
pub struct SampleOut<'a> {
    /// The prompt.
    pub prompt: &'a str,
    /// One completion per agent.
    pub completions: &'a [String],
    /// The row's other fields.
    pub fields: &'a serde_json::Map<String, serde_json::Value>,
}

/// One joint sample as the host receives it (owned).
#[derive(Debug, Deserialize)]
pub struct SampleIn {
    /// The prompt.
    pub prompt: String,
    /// One completion per agent.
    pub completions: Vec<String>,
    /// The row's other fields.
    pub fields: serde_json::Map<String, serde_json::Value>,
}

/// The plugin host's answer to one request.
#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    /// `Create` worked; the plugin's own name.
    Created {
        /// What the plugin calls itself.
        plugin_name: String,
    },
    /// `Score` worked: one `f32` bit pattern per sample.
    Scores {
        /// `f32::to_bits` of each score, in order.
        bits: Vec<u32>,
    },
    /// `Next` worked: the prompts the plugin wrote, in order (checked as UTF-8 by the host).
    Prompts {
        /// One prompt per agent, if the plugin kept to the contract (the client checks).
        prompts: Vec<String>,
    },
    /// The request failed inside the host (the plugin reported or caused an error).
    Error {
        /// The failure's category.
        kind: PluginFailure,
        /// Its message.
        message: String,
    },
}

/// Write one frame holding `value` as JSON, and flush.
pub fn write_frame<T: Serialize>(w: &mut impl Write, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(io::Error::other)?;
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|&n| n as usize <= MAX_FRAME)
        .ok_or_else(|| io::Error::other(format!("frame of {} bytes is too large", bytes.len())))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(&bytes)?;
    w.flush()
}

/// Read one frame's bytes; `Ok(None)` at a clean end of stream (before a length).
pub fn read_frame_bytes(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::other(format!(
            "frame length {len} exceeds the {MAX_FRAME}-byte limit"
        )));
    }
    let mut bytes = vec![0u8; len];
    r.read_exact(&mut bytes)?;
    Ok(Some(bytes))
}

/// Decode a frame's JSON.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> io::Result<T> {
    serde_json::from_slice(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bits_keep_nan() {
        let mut buf = Vec::new();
        let resp = Response::Scores {
            bits: vec![1.5f32.to_bits(), f32::NAN.to_bits()],
        };
        write_frame(&mut buf, &resp).expect("write");
        write_frame(
            &mut buf,
            &Request::<SampleOut>::Create {
                params: "{}".into(),
            },
        )
        .expect("w");
        let mut r = &buf[..];
        let a: Response = decode(&read_frame_bytes(&mut r).expect("r").expect("frame")).expect("d");
        match a {
            Response::Scores { bits } => {
                assert_eq!(f32::from_bits(bits[0]), 1.5);
                assert!(f32::from_bits(bits[1]).is_nan());
            }
            other => panic!("{other:?}"),
        }
        let b: Request<SampleIn> =
            decode(&read_frame_bytes(&mut r).expect("r").expect("frame")).expect("d");
        assert!(matches!(b, Request::Create { params } if params == "{}"));
        assert!(read_frame_bytes(&mut r).expect("eof").is_none());
        // A truncated frame is an error, not a clean end.
        let mut cut = &buf[..6];
        assert!(read_frame_bytes(&mut cut).is_err());
    }
}
