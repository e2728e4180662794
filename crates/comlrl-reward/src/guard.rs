//! Host buffers a plugin writes into, with guard space: scores and error text are written
//! into host memory whose tail (past what the plugin was given) holds canary values, checked
//! after every call. A plugin that writes past its share is reported instead of silently
//! corrupting the trainer's heap (writes further out than the guard cannot be seen: run such
//! plugins with `isolate: true`).
use comlrl_plugin_api::ErrBuf;

/// Floats of guard space after the `n` scores.
const SCORE_GUARD: usize = 64;
/// Bytes of guard space after the error buffer.
const ERR_GUARD: usize = 256;
/// Bit pattern of a score slot the plugin has not written (a quiet NaN with a payload).
const UNWRITTEN: u32 = 0x7FC1_5EED;
/// Bit pattern of the guard space after the scores.
const SCORE_CANARY: u32 = 0x7FC0_CA4A;
/// Byte of the guard space after the error text.
const ERR_CANARY: u8 = 0xA5;

/// A score buffer for `n` samples plus guard space.
pub(crate) struct GuardedScores {
    buf: Vec<f32>,
    n: usize,
}

impl GuardedScores {
    pub(crate) fn new(n: usize) -> Self {
        let mut buf = vec![f32::from_bits(UNWRITTEN); n + SCORE_GUARD];
        for slot in &mut buf[n..] {
            *slot = f32::from_bits(SCORE_CANARY);
        }
        GuardedScores { buf, n }
    }

    /// Where the plugin writes its `n` scores.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut f32 {
        self.buf.as_mut_ptr()
    }

    /// The scores, once the plugin said it wrote them: an error if it wrote into the guard
    /// space, left a slot unwritten, or wrote a non-finite value.
    pub(crate) fn finish(mut self) -> Result<Vec<f32>, String> {
        let n = self.n;
        if let Some(i) = self.buf[n..]
            .iter()
            .position(|v| v.to_bits() != SCORE_CANARY)
        {
            return Err(format!(
                "the plugin wrote past the {n} scores it was asked for (at least into slot #{}); it must write exactly one score per sample",
                n + i
            ));
        }
        self.buf.truncate(n);
        if let Some(i) = self.buf.iter().position(|v| v.to_bits() == UNWRITTEN) {
            return Err(format!(
                "the plugin reported success but did not write score #{i} of {n}"
            ));
        }
        if let Some((i, v)) = self.buf.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(format!("score #{i} is {v}"));
        }
        Ok(self.buf)
    }
}

/// Capacity of the host-owned error buffer handed to the plugin.
const ERR_CAPACITY: usize = 4096;

/// A host-owned error buffer with guard space.
pub(crate) struct HostErr {
    bytes: Vec<u8>,
    pub(crate) raw: ErrBuf,
}

impl HostErr {
    pub(crate) fn new() -> Self {
        let mut bytes = vec![0u8; ERR_CAPACITY + ERR_GUARD];
        bytes[ERR_CAPACITY..].fill(ERR_CANARY);
        let raw = ErrBuf {
            ptr: bytes.as_mut_ptr(),
            cap: ERR_CAPACITY,
            len: 0,
        };
        HostErr { bytes, raw }
    }

    /// The outcome of a plugin call that returned `status` with this buffer: an overrun is a
    /// memory failure, `STATUS_PANIC` a panic, any other status but `STATUS_OK` a failure of
    /// the call (`PluginFailure::Score`); each error names the plugin at `path`.
    pub(crate) fn check_call(
        &self,
        path: &std::path::Path,
        status: i32,
    ) -> Result<(), crate::error::RewardError> {
        use crate::error::{PluginFailure, RewardError};
        if self.overrun() {
            return Err(RewardError::plugin(
                path,
                PluginFailure::Memory,
                self.message(),
            ));
        }
        if status != comlrl_plugin_api::STATUS_OK {
            let kind = if status == comlrl_plugin_api::STATUS_PANIC {
                PluginFailure::Panic
            } else {
                PluginFailure::Score
            };
            return Err(RewardError::plugin(path, kind, self.message()));
        }
        Ok(())
    }

    /// Whether the plugin wrote past the buffer's capacity.
    pub(crate) fn overrun(&self) -> bool {
        self.bytes[ERR_CAPACITY..].iter().any(|&b| b != ERR_CANARY)
    }

    /// The plugin's message, checked: UTF-8 (else shown lossily and said so), within capacity.
    pub(crate) fn message(&self) -> String {
        if self.overrun() {
            return format!(
                "the plugin wrote past the {ERR_CAPACITY}-byte error buffer it was given"
            );
        }
        let len = self.raw.len.min(ERR_CAPACITY);
        let text = match std::str::from_utf8(&self.bytes[..len]) {
            Ok(s) => s.to_string(),
            Err(e) => format!(
                "{} [the plugin's message is not valid UTF-8 ({e}); shown lossily]",
                String::from_utf8_lossy(&self.bytes[..len])
            ),
        };
        if text.is_empty() {
            "(the plugin gave no message)".to_string()
        } else {
            text
        }
    }
}
