//! Rotary position embeddings, non-interleaved ("rotate_half") as in transformers' Qwen2, Llama
//! and Qwen3, with per-row absolute positions so left-padded batches get HF's positions. The
//! inverse frequencies come from a [`RopeSpec`] (base and scaling).
use super::forward::Mode;
use super::rope_scaling::RopeSpec;
use candle_core::{CpuStorage, DType, Device, Result, Storage, Tensor, D};
use std::sync::{Arc, RwLock};

/// RoPE cosine and sine tables, built for the positions a run reaches rather than for every
/// position the model declares: a config may declare millions (`max_position_embeddings`),
/// whose tables would take gigabytes, while a run uses its prompt plus its new tokens. The
/// tables grow (to the next power of two) when a longer sequence comes; every row is computed
/// as the full-size table computed it, so the values do not depend on how far they were built.
#[derive(Debug, Clone)]
pub struct Rope {
    /// The inverse frequencies (1, head_dim / 2), f32.
    inv: Tensor,
    /// Positions the model declares: the tables never grow beyond them.
    limit: usize,
    dtype: DType,
    /// Shared by clones of the model (the values depend only on the spec).
    built: Arc<RwLock<Option<Tables>>>,
}

/// (positions built, head_dim / 2) cosines and sines, model dtype.
#[derive(Debug)]
struct Tables {
    cos: Tensor,
    sin: Tensor,
}

/// Rows the tables start with: short prompts never grow them.
const FIRST_ROWS: usize = 256;

impl Rope {
    /// Unscaled tables with base `theta` for positions 0..max_positions (for the kernels' tests).
    #[cfg(test)]
    pub fn new(
        head_dim: usize,
        theta: f64,
        max_positions: usize,
        dtype: DType,
        dev: &Device,
    ) -> Result<Self> {
        let spec = RopeSpec {
            theta,
            scaling: super::rope_scaling::RopeScaling::None,
        };
        Self::from_spec(&spec, head_dim, max_positions, dtype, dev)
    }

    /// Tables for positions 0..max_positions, angles computed in f32 as transformers does;
    /// nothing is built until a position is asked for.
    pub fn from_spec(
        spec: &RopeSpec,
        head_dim: usize,
        max_positions: usize,
        dtype: DType,
        dev: &Device,
    ) -> Result<Self> {
        if u32::try_from(max_positions).is_err() {
            candle_core::bail!("{max_positions} RoPE positions do not fit u32 position ids");
        }
        let inv = spec.inv_freq(head_dim);
        let half = inv.len();
        Ok(Self {
            inv: Tensor::from_vec(inv, (1, half), dev)?,
            limit: max_positions,
            dtype,
            built: Arc::new(RwLock::new(None)),
        })
    }

    /// Positions the tables cover (the model's declared maximum).
    pub fn max_positions(&self) -> usize {
        self.limit
    }

    /// Positions built so far.
    #[cfg(test)]
    pub fn built_positions(&self) -> usize {
        self.read().as_ref().map_or(0, |t| t.cos.dims()[0])
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Option<Tables>> {
        // The tables are replaced whole: a panic elsewhere cannot leave them half-written.
        self.built.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The tables for at least positions 0..n.
    fn covering(&self, n: usize) -> Result<(Tensor, Tensor)> {
        if n > self.limit {
            candle_core::bail!(
                "a sequence of {n} positions exceeds the model's {} positions",
                self.limit
            );
        }
        if let Some(t) = self.read().as_ref().filter(|t| t.cos.dims()[0] >= n) {
            return Ok((t.cos.clone(), t.sin.clone()));
        }
        let mut built = self.built.write().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = built.as_ref().filter(|t| t.cos.dims()[0] >= n) {
            return Ok((t.cos.clone(), t.sin.clone()));
        }
        let rows = n.max(FIRST_ROWS).next_power_of_two().min(self.limit);
        let t = self.compute(rows)?;
        let out = (t.cos.clone(), t.sin.clone());
        *built = Some(t);
        Ok(out)
    }

    /// Rows 0..rows, as the full table was computed: a (rows, 1) × (1, half) product in f32.
    fn compute(&self, rows: usize) -> Result<Tables> {
        let pos = Tensor::arange(0u32, rows as u32, self.inv.device())?
            .to_dtype(DType::F32)?
            .reshape((rows, 1))?;
        let angles = pos.matmul(&self.inv)?;
        Ok(Tables {
            cos: angles.cos()?.to_dtype(self.dtype)?,
            sin: angles.sin()?.to_dtype(self.dtype)?,
        })
    }

    /// Gathers (b, s, head_dim/2) cos and sin for the position ids `pos` (b, s) u32, growing
    /// the tables to the largest of them first.
    pub fn tables(&self, pos: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, s) = pos.dims2()?;
        let (cos_all, sin_all) = self.covering(span(pos)?)?;
        let idx = pos.flatten_all()?;
        let half = cos_all.dim(1)?;
        let cos = cos_all.index_select(&idx, 0)?.reshape((b, s, half))?;
        let sin = sin_all.index_select(&idx, 0)?.reshape((b, s, half))?;
        Ok((cos, sin))
    }

    /// Rotates x (b, heads, s, head_dim) with tables from [`Rope::tables`].
    pub fn apply(&self, x: &Tensor, cos: &Tensor, sin: &Tensor, mode: Mode) -> Result<Tensor> {
        match mode {
            Mode::Infer | Mode::Sample => candle_nn::rotary_emb::rope(&x.contiguous()?, cos, sin),
            Mode::Train => {
                if let Some(y) = crate::model::kernels::rope::rope(x, cos, sin)? {
                    return Ok(y);
                }
                let cos = Tensor::cat(&[cos, cos], D::Minus1)?.unsqueeze(1)?;
                let sin = Tensor::cat(&[sin, sin], D::Minus1)?.unsqueeze(1)?;
                x.broadcast_mul(&cos)? + rotate_half(x)?.broadcast_mul(&sin)?
            }
        }
    }
}

/// One past the largest position id in `pos` (0 when empty): read in place from contiguous u32
/// CPU storage (every caller's case: no tensor op per forward), else by a reduction.
fn span(pos: &Tensor) -> Result<usize> {
    if pos.elem_count() == 0 {
        return Ok(0);
    }
    {
        let (storage, layout) = pos.storage_and_layout();
        if let (Storage::Cpu(CpuStorage::U32(v)), Some((a, b))) =
            (&*storage, layout.contiguous_offsets())
        {
            return Ok(v[a..b].iter().max().map_or(0, |&m| m as usize + 1));
        }
    }
    let max = pos.to_dtype(DType::U32)?.flatten_all()?.max(0)?;
    Ok(max.to_scalar::<u32>()? as usize + 1)
}

fn rotate_half(x: &Tensor) -> Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    let x1 = x.narrow(D::Minus1, 0, d / 2)?;
    let x2 = x.narrow(D::Minus1, d / 2, d - d / 2)?;
    Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::decoder::rope_scaling::RopeScaling;

    fn bits(t: &Tensor) -> Vec<u32> {
        t.flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    }

    /// Tables grown step by step hold, at every position, the bits of the table built at once
    /// for all positions (what the model built up front before).
    #[test]
    fn grown_tables_equal_the_full_table_bit_for_bit() -> Result<()> {
        let dev = Device::Cpu;
        let n = 32768;
        for spec in [
            RopeSpec::default(),
            RopeSpec {
                theta: 5e5,
                scaling: RopeScaling::Llama3 {
                    factor: 8.0,
                    low_freq_factor: 1.0,
                    high_freq_factor: 4.0,
                    original_max_position_embeddings: 8192.0,
                },
            },
        ] {
            let rope = Rope::from_spec(&spec, 64, n, DType::F32, &dev)?;
            assert_eq!(rope.built_positions(), 0, "nothing is built up front");
            let full = rope.compute(n)?;
            for want in [3, 300, 257, 5000, n] {
                let pos = Tensor::arange(0u32, want as u32, &dev)?.reshape((1, want))?;
                let (c, s) = rope.tables(&pos)?;
                assert!(rope.built_positions() >= want);
                assert_eq!(bits(&c), bits(&full.cos.narrow(0, 0, want)?));
                assert_eq!(bits(&s), bits(&full.sin.narrow(0, 0, want)?));
            }
        }
        Ok(())
    }

    /// A model declaring 2^24 positions builds tables only for what is used, and refuses a
    /// position beyond its positions with an error.
    #[test]
    fn tables_cover_what_is_used_and_no_more() -> Result<()> {
        let dev = Device::Cpu;
        let rope = Rope::new(128, 1e6, 1 << 24, DType::F32, &dev)?;
        rope.tables(&Tensor::new(&[[0u32, 1, 2, 3]], &dev)?)?;
        assert_eq!(rope.built_positions(), FIRST_ROWS);
        rope.tables(&Tensor::new(&[[3u32], [1000]], &dev)?)?;
        assert_eq!(rope.built_positions(), 1024);
        // A strided view and i64 ids take the reduction.
        let t = Tensor::new(&[[5i64, 2000], [7, 9]], &dev)?.t()?;
        rope.tables(&t)?;
        assert_eq!(rope.built_positions(), 2048);
        let small = Rope::new(8, 1e4, 10, DType::F32, &dev)?;
        let e = small.tables(&Tensor::new(&[[10u32]], &dev)?).unwrap_err();
        assert!(
            e.to_string().contains("exceeds the model's 10 positions"),
            "{e}"
        );
        let (c, _) = small.tables(&Tensor::new(&[[9u32]], &dev)?)?;
        assert_eq!(c.dims(), &[1, 1, 4]);
        Ok(())
    }
}
