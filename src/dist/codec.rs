//! A small exact binary encoding for what crosses ranks (token ids, texts, f32 rewards): f32
//! values travel as their bits, so every rank sees exactly the numbers the sender had.
use crate::error::{Error, Result};

/// Appends values to a byte buffer.
#[derive(Debug, Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    /// A `u64`, little-endian.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A length or index.
    pub fn usize(&mut self, v: usize) -> &mut Self {
        self.u64(v as u64)
    }
    /// An `f32`, by its bits.
    pub fn f32(&mut self, v: f32) -> &mut Self {
        self.0.extend_from_slice(&v.to_bits().to_le_bytes());
        self
    }
    /// An `f64`, by its bits.
    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.u64(v.to_bits())
    }
    /// Bytes, length first.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.usize(v.len());
        self.0.extend_from_slice(v);
        self
    }
    /// A UTF-8 string.
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    /// `u32`s, length first.
    pub fn u32s(&mut self, v: &[u32]) -> &mut Self {
        self.usize(v.len());
        for x in v {
            self.0.extend_from_slice(&x.to_le_bytes());
        }
        self
    }
    /// `f32`s, length first.
    pub fn f32s(&mut self, v: &[f32]) -> &mut Self {
        self.usize(v.len());
        for &x in v {
            self.f32(x);
        }
        self
    }
}

/// Reads values back in the order they were written; running out is an error naming `what`.
#[derive(Debug)]
pub struct Dec<'a> {
    buf: &'a [u8],
    at: usize,
    what: &'a str,
}

impl<'a> Dec<'a> {
    /// Reads `buf`, a message described by `what` in errors.
    pub fn new(buf: &'a [u8], what: &'a str) -> Self {
        Self { buf, at: 0, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(Error::Distributed(format!(
                "{}: message truncated at byte {} of {} (ranks running different comlrl builds?)",
                self.what,
                self.at,
                self.buf.len()
            )));
        };
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    /// A `u64`.
    pub fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    /// A length or index.
    pub fn usize(&mut self) -> Result<usize> {
        let v = self.u64()?;
        usize::try_from(v)
            .map_err(|_| Error::Distributed(format!("{}: length {v} too large", self.what)))
    }
    /// An `f32`.
    pub fn f32(&mut self) -> Result<f32> {
        let b = self.take(4)?;
        Ok(f32::from_bits(u32::from_le_bytes(
            b.try_into().expect("4 bytes"),
        )))
    }
    /// An `f64`.
    pub fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_bits(self.u64()?))
    }
    /// Bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.usize()?;
        self.take(n)
    }
    /// A UTF-8 string.
    pub fn string(&mut self) -> Result<String> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec())
            .map_err(|e| Error::Distributed(format!("{}: a text is not UTF-8: {e}", self.what)))
    }
    /// `u32`s.
    pub fn u32s(&mut self) -> Result<Vec<u32>> {
        let n = self.usize()?;
        let b = self.take(n.saturating_mul(4))?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }
    /// `f32`s.
    pub fn f32s(&mut self) -> Result<Vec<f32>> {
        let n = self.usize()?;
        let b = self.take(n.saturating_mul(4))?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_bits(u32::from_le_bytes(c.try_into().expect("4 bytes"))))
            .collect())
    }
    /// Fails unless every byte was read.
    pub fn end(&self) -> Result<()> {
        if self.at != self.buf.len() {
            return Err(Error::Distributed(format!(
                "{}: {} trailing bytes (ranks running different comlrl builds?)",
                self.what,
                self.buf.len() - self.at
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_exactly_and_rejects_truncation() {
        let mut e = Enc::default();
        e.u32s(&[1, 2, 3])
            .str("héllo")
            .f32s(&[0.1, f32::NAN, -0.0])
            .f64(1e-300);
        let mut d = Dec::new(&e.0, "test");
        assert_eq!(d.u32s().unwrap(), vec![1, 2, 3]);
        assert_eq!(d.string().unwrap(), "héllo");
        let f = d.f32s().unwrap();
        assert_eq!(f[0].to_bits(), 0.1f32.to_bits());
        assert!(f[1].is_nan());
        assert_eq!(f[2].to_bits(), (-0.0f32).to_bits());
        assert_eq!(d.f64().unwrap(), 1e-300);
        d.end().unwrap();
        let mut d = Dec::new(&e.0[..5], "test");
        let err = d.u32s().unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
    }
}
