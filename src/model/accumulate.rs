//! In-place gradient accumulation: `acc += g` into the accumulator's own buffer, so adding a
//! pass's gradients allocates nothing.
use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, Layout, Result, Tensor, Var};
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
        let (Some((a0, a1)), Some((b0, b1))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            candle_core::bail!("add-assign: both tensors must be contiguous")
        };
        if a1 - a0 != b1 - b0 {
            candle_core::bail!("add-assign: {} vs {} elements", a1 - a0, b1 - b0)
        }
        match (s1, s2) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => add(&mut a[a0..a1], &b[b0..b1]),
            (CpuStorage::F64(a), CpuStorage::F64(b)) => add(&mut a[a0..a1], &b[b0..b1]),
            _ => candle_core::bail!("add-assign: only f32 and f64 gradients are accumulated"),
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

/// Moves the gradient of each of `vars` out of `grads` into the matching slot of `acc`: added
/// in place when the slot holds one, else a private copy (a gradient may share storage with
/// another's, so it is never written to in place).
pub fn take_grads(grads: &mut GradStore, vars: &[Var], acc: &mut [Option<Tensor>]) -> Result<()> {
    for (slot, var) in acc.iter_mut().zip(vars) {
        if let Some(g) = grads.remove(var.as_tensor()) {
            match slot {
                Some(prev) => add_into(prev, &g)?,
                None => *slot = Some(g.copy()?),
            }
        }
    }
    Ok(())
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
}
