//! One safetensors file opened for reading tensor by tensor: its header is parsed and checked
//! against the file's length up front, and each tensor is read from the file straight into the
//! buffer the model keeps (a variable tensor), converted on the way where its dtype differs.
//!
//! Reading the whole file into memory first (candle's `safetensors::load`) and then copying each
//! tensor into a variable touches three times a model's size of fresh memory; on a VM, where
//! the kernel clears every fresh page, that dominates loading.
use crate::model::error::{Error, Result};
use candle_core::{DType, Device, Tensor, Var};
use rayon::prelude::*;
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::Dtype;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Largest header accepted (safetensors' own limit).
const MAX_HEADER: u64 = 100_000_000;

/// An open safetensors file with its parsed header.
pub struct Shard {
    path: PathBuf,
    file: File,
    /// Offset of the data section (after the 8-byte length and the header).
    data_start: u64,
    meta: Metadata,
}

impl Shard {
    /// Opens `path` and parses its header; fails, naming the file, where the header is
    /// malformed or a tensor's bytes do not match its shape or lie outside the file.
    pub fn open(path: &Path) -> Result<Self> {
        let bad =
            |msg: String| Error::file(path, format!("not a readable safetensors file: {msg}"));
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut n = [0u8; 8];
        file.read_exact(&mut n).map_err(|_| {
            bad(format!(
                "{len} bytes, shorter than the 8-byte header length"
            ))
        })?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER || n > len - 8 {
            return Err(bad(format!(
                "header length {n} does not fit the file ({len} bytes)"
            )));
        }
        let mut header = vec![0u8; n as usize];
        file.read_exact(&mut header)
            .map_err(|e| Error::io(path, e))?;
        let meta: Metadata =
            serde_json::from_slice(&header).map_err(|e| bad(format!("header: {e}")))?;
        let data_start = 8 + n;
        // The header's own checks (safetensors' `Metadata`) have made the tensors' byte ranges
        // follow one another and match their shapes; they must also lie inside the file.
        let end = meta.data_len() as u64;
        if data_start.saturating_add(end) > len {
            return Err(bad(format!(
                "its tensors end at byte {} of a {len}-byte file (truncated?)",
                data_start.saturating_add(end)
            )));
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            data_start,
            meta,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tensors in the file, by name.
    pub fn tensors(&self) -> Vec<(String, &TensorInfo)> {
        self.meta.tensors().into_iter().collect()
    }

    /// Reads tensor `name` as a variable of `dtype` (f32 from f32, bf16 or f16 without a
    /// second copy; other pairs through candle's conversion). The caller has checked the name.
    pub fn read_var(&self, name: &str, dtype: DType, dev: &Device) -> Result<Tensor> {
        let info = self
            .meta
            .info(name)
            .ok_or_else(|| Error::Internal(format!("tensor {name} not in {:?}", self.path)))?;
        let shape = info.shape.clone();
        let var = match (info.dtype, dtype) {
            (Dtype::F32, DType::F32) => Var::from_vec(self.read::<f32>(info)?, shape, dev)?,
            (Dtype::BF16, DType::F32) => {
                let v = widen(&self.read::<half::bf16>(info)?, f32::from);
                Var::from_vec(v, shape, dev)?
            }
            (Dtype::F16, DType::F32) => {
                let v = widen(&self.read::<half::f16>(info)?, f32::from);
                Var::from_vec(v, shape, dev)?
            }
            (Dtype::F64, DType::F64) => Var::from_vec(self.read::<f64>(info)?, shape, dev)?,
            (src, _) => {
                let t = match src {
                    Dtype::F32 => Tensor::from_vec(self.read::<f32>(info)?, shape, dev)?,
                    Dtype::BF16 => Tensor::from_vec(self.read::<half::bf16>(info)?, shape, dev)?,
                    Dtype::F16 => Tensor::from_vec(self.read::<half::f16>(info)?, shape, dev)?,
                    Dtype::F64 => Tensor::from_vec(self.read::<f64>(info)?, shape, dev)?,
                    other => return Err(unsupported(&self.path, name, other)),
                };
                Var::from_tensor(&t.to_dtype(dtype)?)?
            }
        };
        Ok(var.into_inner())
    }

    /// The tensor's bytes as elements of `T` (little-endian, as safetensors stores them).
    fn read<T: bytemuck::Pod>(&self, info: &TensorInfo) -> Result<Vec<T>> {
        let (s, e) = info.data_offsets;
        let mut v = vec![T::zeroed(); (e - s) / std::mem::size_of::<T>()];
        let mut f = &self.file;
        f.seek(SeekFrom::Start(self.data_start + s as u64))
            .and_then(|_| f.read_exact(bytemuck::cast_slice_mut(&mut v)))
            .map_err(|e| Error::io(&self.path, e))?;
        Ok(v)
    }
}

/// Whether tensors of `dtype` load (float dtypes candle converts).
pub fn loadable(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::F32 | Dtype::BF16 | Dtype::F16 | Dtype::F64)
}

/// The error for a tensor whose dtype does not load, naming its file.
pub fn unsupported(path: &Path, name: &str, dtype: Dtype) -> Error {
    Error::file(
        path,
        format!("tensor `{name}` has dtype {dtype:?}; only f32, bf16, f16 and f64 weights load"),
    )
}

/// `src` converted element by element, on the pool's threads.
fn widen<S: Copy + Sync>(src: &[S], f: impl Fn(S) -> f32 + Sync) -> Vec<f32> {
    src.par_iter().map(|&x| f(x)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn write(path: &Path, tensors: &HashMap<&str, Tensor>) {
        candle_core::safetensors::save(tensors, path).unwrap();
    }

    #[test]
    fn reads_what_candle_reads_in_every_float_dtype() {
        let dir = tempfile::tempdir().unwrap();
        let dev = Device::Cpu;
        let base = Tensor::randn(0f32, 1.0, (3, 5), &dev).unwrap();
        let mut ts = HashMap::new();
        ts.insert("a", base.clone());
        ts.insert("b", base.to_dtype(DType::BF16).unwrap());
        ts.insert("c", base.to_dtype(DType::F16).unwrap());
        ts.insert("d", base.to_dtype(DType::F64).unwrap());
        let p = dir.path().join("m.safetensors");
        write(&p, &ts);
        let shard = Shard::open(&p).unwrap();
        let want = candle_core::safetensors::load(&p, &dev).unwrap();
        for target in [DType::F32, DType::F64, DType::BF16] {
            for name in ["a", "b", "c", "d"] {
                let got = shard.read_var(name, target, &dev).unwrap();
                assert!(got.is_variable());
                assert_eq!(got.dims(), &[3, 5]);
                let w = want[name].to_dtype(target).unwrap();
                let (g, w) = (
                    got.to_dtype(DType::F64).unwrap().flatten_all().unwrap(),
                    w.to_dtype(DType::F64).unwrap().flatten_all().unwrap(),
                );
                assert_eq!(
                    g.to_vec1::<f64>().unwrap(),
                    w.to_vec1::<f64>().unwrap(),
                    "{name} as {target:?}"
                );
            }
        }
    }

    #[test]
    fn refuses_truncated_and_inconsistent_files_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let dev = Device::Cpu;
        let mut ts = HashMap::new();
        ts.insert("w", Tensor::ones((4, 4), DType::F32, &dev).unwrap());
        let p = dir.path().join("m.safetensors");
        write(&p, &ts);
        let bytes = std::fs::read(&p).unwrap();
        let cut = dir.path().join("cut.safetensors");
        std::fs::write(&cut, &bytes[..bytes.len() - 4]).unwrap();
        let e = Shard::open(&cut).err().unwrap().to_string();
        assert!(
            e.contains("cut.safetensors") && e.contains("truncated"),
            "{e}"
        );
        let tiny = dir.path().join("tiny.safetensors");
        std::fs::write(&tiny, b"abc").unwrap();
        let e = Shard::open(&tiny).err().unwrap().to_string();
        assert!(
            e.contains("tiny.safetensors") && e.contains("header"),
            "{e}"
        );
        let huge = dir.path().join("huge.safetensors");
        let mut b = u64::MAX.to_le_bytes().to_vec();
        b.extend_from_slice(b"{}");
        std::fs::write(&huge, &b).unwrap();
        let e = Shard::open(&huge).err().unwrap().to_string();
        assert!(e.contains("does not fit"), "{e}");
        // A shape that claims more bytes than its offsets hold.
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
        let lying = header.replace("[4,4]", "[4,5]");
        assert_ne!(lying, header);
        let mut b = (lying.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(lying.as_bytes());
        b.extend_from_slice(&bytes[8 + n..]);
        let bad = dir.path().join("bad.safetensors");
        std::fs::write(&bad, &b).unwrap();
        let e = Shard::open(&bad).err().unwrap().to_string();
        assert!(e.contains("bad.safetensors") && e.contains("header"), "{e}");
    }
}
