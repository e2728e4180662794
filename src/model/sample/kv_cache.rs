//! A preallocated key/value cache for sampling (no gradients): one buffer per layer of shape
//! (batch, kv_heads, capacity, head_dim) written in place, so a decode step copies only its new
//! token instead of re-concatenating the whole history, and finished rows leave it by moving
//! the rows that go on down in place.
use crate::model::decoder::causal_lm::CausalLm;
use crate::model::decoder::forward::KvStore;
use crate::model::kernels::cpu_slices::f32s_mut;
use candle_core::{CpuStorage, DType, Device, InplaceOp1, Layout, Result, Tensor};

/// The key and value buffers of one layer.
#[derive(Debug, Clone)]
pub struct LayerKv {
    k: Tensor,
    v: Tensor,
}

/// The key/value buffers of every layer and how many positions they hold.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<LayerKv>,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// An empty cache of `capacity` positions per row, zero-filled.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        layers: usize,
        batch: usize,
        kv_heads: usize,
        capacity: usize,
        head_dim: usize,
        dtype: DType,
        dev: &Device,
    ) -> Result<Self> {
        let layers = (0..layers)
            .map(|_| {
                Ok(LayerKv {
                    k: Tensor::zeros((batch, kv_heads, capacity, head_dim), dtype, dev)?,
                    v: Tensor::zeros((batch, kv_heads, capacity, head_dim), dtype, dev)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            layers,
            len: 0,
            capacity,
        })
    }

    /// A cache of `model`'s layers for `batch` rows and up to `capacity` positions.
    pub fn for_model(model: &CausalLm, batch: usize, capacity: usize) -> Result<Self> {
        let cfg = model.config();
        Self::new(
            cfg.num_hidden_layers,
            batch,
            cfg.kv_heads(),
            capacity,
            cfg.head_dim(),
            model.dtype(),
            model.device(),
        )
    }

    /// Number of positions already stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// A new cache whose row i is row `rows[i]` of this one (each prompt repeated K times
    /// after a shared prefill).
    pub fn select_rows(&self, rows: &Tensor) -> Result<Self> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                Ok(LayerKv {
                    k: l.k.index_select(rows, 0)?,
                    v: l.v.index_select(rows, 0)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            layers,
            len: self.len,
            capacity: self.capacity,
        })
    }

    /// Keeps only rows `keep` (strictly increasing), row `keep[i]` becoming row i: the values
    /// of [`KvCache::select_rows`] with those rows. f32 CPU buffers move the kept rows' stored
    /// positions down in place (a decode batch drops rows each time one finishes; a new cache
    /// copied every row's whole capacity each time); other buffers are selected anew.
    pub fn retain_rows(&mut self, keep: &[usize]) -> Result<()> {
        let Some(first) = self.layers.first() else {
            return Ok(());
        };
        let batch = first.k.dim(0)?;
        if keep.windows(2).any(|w| w[0] >= w[1]) || keep.last().is_some_and(|&r| r >= batch) {
            candle_core::bail!("kv cache: rows to keep {keep:?} of {batch} must increase")
        }
        let in_place = self
            .layers
            .iter()
            .all(|l| l.k.dtype() == DType::F32 && l.k.device().is_cpu() && l.k.is_contiguous());
        if !in_place {
            let rows: Vec<u32> = keep.iter().map(|&r| r as u32).collect();
            let rows = Tensor::from_vec(rows, keep.len(), first.k.device())?;
            *self = self.select_rows(&rows)?;
            return Ok(());
        }
        let op = MoveRows {
            keep,
            len: self.len,
        };
        for l in &mut self.layers {
            for t in [&mut l.k, &mut l.v] {
                t.inplace_op1(&op)?;
                *t = t.narrow(0, 0, keep.len())?;
            }
        }
        Ok(())
    }
}

impl KvStore for KvCache {
    /// Appends k, v (b, kv_heads, s, head_dim) for `layer` at the current length and returns the
    /// views of everything stored so far, (b, kv_heads, len + s, head_dim). The length advances
    /// once per forward, in [`KvStore::advance`].
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let s = k.dim(2)?;
        if self.len + s > self.capacity {
            candle_core::bail!(
                "kv cache full: {} + {} positions exceed its capacity {}",
                self.len,
                s,
                self.capacity
            );
        }
        let l = &self.layers[layer];
        l.k.slice_set(&k.contiguous()?, 2, self.len)?;
        l.v.slice_set(&v.contiguous()?, 2, self.len)?;
        Ok((
            l.k.narrow(2, 0, self.len + s)?,
            l.v.narrow(2, 0, self.len + s)?,
        ))
    }

    /// Marks the `s` positions appended by this forward as stored.
    fn advance(&mut self, s: usize) {
        self.len += s;
    }
}

/// Moves rows `keep[i]` to row i of a (batch, heads, capacity, head_dim) f32 buffer, the first
/// `len` positions of each head.
struct MoveRows<'a> {
    keep: &'a [usize],
    len: usize,
}

impl InplaceOp1 for MoveRows<'_> {
    fn name(&self) -> &'static str {
        "kv-cache-move-rows"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        let (_, heads, capacity, head_dim) = layout.shape().dims4()?;
        let data = f32s_mut(storage, layout, self.name())?;
        let (head, row) = (capacity * head_dim, heads * capacity * head_dim);
        let stored = self.len * head_dim;
        for (to, &from) in self.keep.iter().enumerate() {
            if to != from {
                for h in 0..heads {
                    let src = from * row + h * head;
                    data.copy_within(src..src + stored, to * row + h * head);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Retained rows hold exactly what a selection of those rows holds, position for position,
    /// and appends after it land in the right rows.
    #[test]
    fn retained_rows_are_the_selected_rows() -> Result<()> {
        let dev = Device::Cpu;
        let (layers, batch, heads, cap, dim) = (2, 6, 2, 9, 4);
        let mut cache = KvCache::new(layers, batch, heads, cap, dim, DType::F32, &dev)?;
        for layer in 0..layers {
            let k = Tensor::randn(0f32, 1.0, (batch, heads, 5, dim), &dev)?;
            let v = Tensor::randn(0f32, 1.0, (batch, heads, 5, dim), &dev)?;
            cache.append(layer, &k, &v)?;
        }
        cache.advance(5);
        let keep = [1usize, 2, 4];
        let want = cache.select_rows(&Tensor::new(&[1u32, 2, 4], &dev)?)?;
        cache.retain_rows(&keep)?;
        let stored = |t: &Tensor| t.narrow(2, 0, 5)?.flatten_all()?.to_vec1::<f32>();
        for (got, want) in cache.layers.iter().zip(&want.layers) {
            assert_eq!(got.k.dims(), &[3, heads, cap, dim]);
            assert_eq!(stored(&got.k)?, stored(&want.k)?);
            assert_eq!(stored(&got.v)?, stored(&want.v)?);
        }
        let k = Tensor::randn(0f32, 1.0, (3, heads, 1, dim), &dev)?;
        let (all_k, _) = cache.append(0, &k, &k)?;
        assert_eq!(
            all_k.narrow(2, 5, 1)?.flatten_all()?.to_vec1::<f32>()?,
            k.flatten_all()?.to_vec1::<f32>()?
        );
        assert!(cache.retain_rows(&[2, 1]).is_err());
        assert!(cache.retain_rows(&[3]).is_err());
        Ok(())
    }

    /// Buffers that cannot move rows in place (here bf16) are selected anew, to the same rows.
    #[test]
    fn other_dtypes_retain_by_selection() -> Result<()> {
        let dev = Device::Cpu;
        let mut cache = KvCache::new(1, 4, 1, 3, 2, DType::BF16, &dev)?;
        let k = Tensor::arange(0f32, 24.0, &dev)?
            .reshape((4, 1, 3, 2))?
            .to_dtype(DType::BF16)?;
        cache.append(0, &k, &k)?;
        cache.advance(3);
        cache.retain_rows(&[0, 3])?;
        let got = cache.layers[0].k.to_dtype(DType::F32)?.flatten_all()?;
        let want: Vec<f32> = (0..6).chain(18..24).map(|x| x as f32).collect();
        assert_eq!(got.to_vec1::<f32>()?, want);
        Ok(())
    }
}
