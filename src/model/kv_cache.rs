//! A preallocated key/value cache for sampling (no gradients): one buffer per layer of shape
//! (batch, kv_heads, capacity, head_dim) written in place, so a decode step copies only its new
//! token instead of re-concatenating the whole history.
use candle_core::{DType, Device, Result, Tensor};

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

    /// Number of positions already stored.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is stored yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most positions the cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends k, v (b, kv_heads, s, head_dim) for `layer` at the current length and returns the
    /// views of everything stored so far, (b, kv_heads, len + s, head_dim). The length advances
    /// once per forward, in [`KvCache::advance`].
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
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
    pub fn advance(&mut self, s: usize) {
        self.len += s;
    }

    /// A new cache whose row i is row `rows[i]` of this one (e.g. each prompt repeated K times
    /// after a shared prefill, or finished rows dropped).
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
}
