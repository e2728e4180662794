//! In-place adds into an accumulator's own buffer: `acc += g`, and the embedding lookup's
//! backward `acc[ids[r]] += g[r]`, so adding a pass's gradients allocates nothing.
use super::cpu_slices::{f32s, f32s_mut, slice, slice_mut};
use candle_core::{CpuStorage, Layout, Result, Tensor};
use rayon::prelude::*;

struct AddAssign;

impl candle_core::InplaceOp2 for AddAssign {
    fn name(&self) -> &'static str {
        "add-assign"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        const OP: &str = "add-assign";
        if l1.shape().elem_count() != l2.shape().elem_count() {
            candle_core::bail!("{OP}: {:?} vs {:?}", l1.shape(), l2.shape())
        }
        match (s1, s2) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => {
                add(slice_mut(a, l1, OP)?, slice(b, l2, OP)?)
            }
            (CpuStorage::F64(a), CpuStorage::F64(b)) => {
                add(slice_mut(a, l1, OP)?, slice(b, l2, OP)?)
            }
            _ => candle_core::bail!("{OP}: only f32 and f64 gradients are accumulated"),
        }
        Ok(())
    }
}

fn add<T: Copy + std::ops::AddAssign + Send + Sync>(a: &mut [T], b: &[T]) {
    a.par_chunks_mut(1 << 14)
        .zip(b.par_chunks(1 << 14))
        .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(x, &y)| *x += y));
}

/// `acc += g` in place. `acc` must be contiguous and own its storage (no other tensor sees the
/// change); `g` is made contiguous first if needed.
pub fn add_into(acc: &Tensor, g: &Tensor) -> Result<()> {
    if acc.shape() != g.shape() {
        candle_core::bail!(
            "gradient shapes differ: {:?} vs {:?}",
            acc.shape(),
            g.shape()
        )
    }
    acc.inplace_op2(&g.contiguous()?, &AddAssign)
}

/// `acc[ids[r]] += g[r]` for every row r.
struct ScatterRowsAdd(Vec<usize>);

impl candle_core::InplaceOp2 for ScatterRowsAdd {
    fn name(&self) -> &'static str {
        "scatter-rows-add"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        let (v, h) = l1.shape().dims2()?;
        let (rows, h2) = l2.shape().dims2()?;
        if h != h2 || rows != self.0.len() {
            candle_core::bail!(
                "scatter-rows-add: ({rows}, {h2}) rows with {} ids into ({v}, {h})",
                self.0.len()
            )
        }
        if let Some(&bad) = self.0.iter().find(|&&i| i >= v) {
            candle_core::bail!("scatter-rows-add: id {bad} outside {v} rows")
        }
        let a = f32s_mut(s1, l1, "scatter-rows-add")?;
        let g = f32s(s2, l2, "scatter-rows-add")?;
        for (row, &id) in g.chunks(h).zip(&self.0) {
            a[id * h..(id + 1) * h]
                .iter_mut()
                .zip(row)
                .for_each(|(x, &y)| *x += y);
        }
        Ok(())
    }
}

/// The embedding lookup's backward, in place: `acc[ids[r]] += g[r]` for acc (vocab, hidden),
/// ids (rows) u32 and g (rows, hidden) f32. Candle's own backward builds a zero vocabulary ×
/// hidden tensor, adds into it and returns a new sum: two such buffers per pass.
pub fn scatter_rows_add(acc: &Tensor, ids: &Tensor, g: &Tensor) -> Result<()> {
    let ids = ids
        .flatten_all()?
        .to_vec1::<u32>()?
        .into_iter()
        .map(|i| i as usize)
        .collect();
    acc.inplace_op2(&g.contiguous()?, &ScatterRowsAdd(ids))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn adds_in_place_and_rejects_other_shapes() -> Result<()> {
        let acc = Tensor::new(&[1f32, 2., 3., 4.], &Device::Cpu)?.reshape((2, 2))?;
        let g = Tensor::new(&[[10f32, 20.], [30., 40.]], &Device::Cpu)?.t()?;
        add_into(&acc, &g)?;
        assert_eq!(acc.to_vec2::<f32>()?, vec![vec![11., 32.], vec![23., 44.]]);
        assert!(add_into(
            &acc,
            &Tensor::zeros(3, candle_core::DType::F32, &Device::Cpu)?
        )
        .is_err());
        Ok(())
    }

    #[test]
    fn scatters_rows_with_repeats() -> Result<()> {
        let dev = Device::Cpu;
        let acc = Tensor::ones((4, 2), candle_core::DType::F32, &dev)?.contiguous()?;
        let g = Tensor::new(&[[1f32, 2.], [10., 20.], [100., 200.]], &dev)?;
        scatter_rows_add(&acc, &Tensor::new(&[3u32, 0, 3], &dev)?, &g)?;
        let want = vec![
            vec![11f32, 21.],
            vec![1., 1.],
            vec![1., 1.],
            vec![102., 203.],
        ];
        assert_eq!(acc.to_vec2::<f32>()?, want);
        assert!(scatter_rows_add(&acc, &Tensor::new(&[4u32, 0, 0], &dev)?, &g).is_err());
        Ok(())
    }
}
