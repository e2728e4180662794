//! AdamW moments in checkpoint files: a moment buffer written as a safetensors tensor without a
//! copy (F32, or BF16 for bf16 state), and a stored tensor read back into a buffer of the run's
//! `optimizer_state_dtype`, converting when the checkpoint was written with the other one.
use crate::train::optim::moments::{Moments, StateDtype};
use candle_core::{DType, Tensor};

/// A borrowed moment buffer as a safetensors tensor (written without a copy on little-endian
/// machines, as safetensors stores little-endian).
pub(crate) struct MomentView<'a> {
    data: &'a Moments,
    shape: Vec<usize>,
}

impl<'a> MomentView<'a> {
    pub(crate) fn new(data: &'a Moments, shape: Vec<usize>) -> Self {
        Self { data, shape }
    }
}

impl safetensors::View for MomentView<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        match self.data {
            Moments::F32(_) => safetensors::Dtype::F32,
            Moments::Bf16(_) => safetensors::Dtype::BF16,
        }
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        use std::borrow::Cow;
        match (self.data, cfg!(target_endian = "little")) {
            (Moments::F32(v), true) => Cow::Borrowed(bytemuck::cast_slice(v)),
            (Moments::Bf16(v), true) => Cow::Borrowed(bytemuck::cast_slice(v)),
            (Moments::F32(v), false) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            (Moments::Bf16(v), false) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    fn data_len(&self) -> usize {
        match self.data {
            Moments::F32(v) => std::mem::size_of_val(v.as_slice()),
            Moments::Bf16(v) => std::mem::size_of_val(v.as_slice()),
        }
    }
}

/// The name of a state dtype as the scenario and the checkpoint notes write it.
pub(crate) fn dtype_name(d: StateDtype) -> &'static str {
    match d {
        StateDtype::F32 => "f32",
        StateDtype::Bf16 => "bf16",
    }
}

/// The stored moments `t` (F32 or BF16; `None` for another dtype) as they were written.
pub(crate) fn read(t: &Tensor) -> candle_core::Result<Option<Moments>> {
    let flat = t.flatten_all()?;
    Ok(match t.dtype() {
        DType::F32 => Some(Moments::F32(flat.to_vec1::<f32>()?)),
        DType::BF16 => Some(Moments::Bf16(
            flat.to_vec1::<half::bf16>()?
                .into_iter()
                .map(half::bf16::to_bits)
                .collect(),
        )),
        _ => None,
    })
}
