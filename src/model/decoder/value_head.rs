//! A critic's value head on the final (normed) hidden state, as CoMLRL 1.4.3's `ValueHead`
//! (`comlrl/models/actor_critic.py`): `Linear(H → 1)`, or `Linear(H → d) → tanh → Linear(d → 1)`
//! when a hidden width d is set; weights N(0, 0.02²), biases zero. Its tensors carry CoMLRL's
//! state-dict names (`pre_projection.0.*`, `value_projection.*`), so a `value_head.safetensors`
//! reads in both. The backward is `grad::value_backward`'s.
use super::tensors::normal as standard_normal;
use crate::model::error::{Error, Result};
use candle_core::{DType, Device, Tensor, Var};
use rand::SeedableRng;
use std::collections::HashMap;

/// The first linear layer's weight (d, H), with a hidden width.
pub const PRE_WEIGHT: &str = "pre_projection.0.weight";
/// The first linear layer's bias (d).
pub const PRE_BIAS: &str = "pre_projection.0.bias";
/// The value projection's weight (1, d) (d = H without a hidden width).
pub const VALUE_WEIGHT: &str = "value_projection.weight";
/// The value projection's bias (1).
pub const VALUE_BIAS: &str = "value_projection.bias";

/// Linear(H → 1), or Linear(H → d) → tanh → Linear(d → 1); the parameters are `Var`s so an
/// optimizer steps them in place.
#[derive(Debug, Clone)]
pub struct ValueHead {
    /// (W₁ (d, H), b₁ (d)) when the head has a hidden layer.
    pub(crate) pre: Option<(Var, Var)>,
    /// W (1, d or H).
    pub(crate) weight: Var,
    /// b (1).
    pub(crate) bias: Var,
}

impl ValueHead {
    /// A fresh head over hidden size `hidden` (with `hidden_dim` d > 0: the tanh layer), its
    /// weights N(0, 0.02²) drawn from a ChaCha8 stream seeded with `seed` (W₁ then W, row-major),
    /// biases zero, as CoMLRL initialises it (its draws come from torch's generator, so the
    /// numbers differ; a fixture gives its head as tensors instead).
    pub fn init(
        hidden: usize,
        hidden_dim: Option<usize>,
        seed: u64,
        dtype: DType,
        dev: &Device,
    ) -> Result<Self> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut normal = |rows: usize, cols: usize| -> Result<Tensor> {
            let data: Vec<f32> = (0..rows * cols)
                .map(|_| (standard_normal(&mut rng) * 0.02) as f32)
                .collect();
            Ok(Tensor::from_vec(data, (rows, cols), dev)?.to_dtype(dtype)?)
        };
        let mut t = HashMap::new();
        let last = match hidden_dim.filter(|&d| d > 0) {
            Some(d) => {
                t.insert(PRE_WEIGHT.to_string(), normal(d, hidden)?);
                t.insert(PRE_BIAS.to_string(), Tensor::zeros(d, dtype, dev)?);
                d
            }
            None => hidden,
        };
        t.insert(VALUE_WEIGHT.to_string(), normal(1, last)?);
        t.insert(VALUE_BIAS.to_string(), Tensor::zeros(1, dtype, dev)?);
        Self::from_tensors(t, hidden)
    }

    /// The head whose tensors (by their CoMLRL names) are `t`, over hidden size `hidden`:
    /// `value_projection.*`, plus both `pre_projection.0.*` or neither; shapes checked.
    pub fn from_tensors(mut t: HashMap<String, Tensor>, hidden: usize) -> Result<Self> {
        let mut take = |name: &str| {
            t.remove(name)
                .ok_or_else(|| Error::Invalid(format!("value head: no tensor `{name}`")))
        };
        let weight = take(VALUE_WEIGHT)?;
        let bias = take(VALUE_BIAS)?;
        let pre = match (t.remove(PRE_WEIGHT), t.remove(PRE_BIAS)) {
            (Some(w), Some(b)) => Some((w, b)),
            (None, None) => None,
            _ => {
                return Err(Error::Invalid(format!(
                    "value head: `{PRE_WEIGHT}` and `{PRE_BIAS}` come together"
                )))
            }
        };
        if let Some(extra) = t.keys().next() {
            return Err(Error::Invalid(format!(
                "value head: unexpected tensor `{extra}`"
            )));
        }
        let shape = |name: &str, x: &Tensor, want: &[usize]| -> Result<()> {
            if x.dims() != want {
                return Err(Error::Invalid(format!(
                    "value head: `{name}` has shape {:?}, expected {want:?}",
                    x.dims()
                )));
            }
            Ok(())
        };
        let last = match &pre {
            Some((w, b)) => {
                let d = w.dim(0)?;
                if d == 0 {
                    return Err(Error::Invalid(format!(
                        "value head: `{PRE_WEIGHT}` has no rows"
                    )));
                }
                shape(PRE_WEIGHT, w, &[d, hidden])?;
                shape(PRE_BIAS, b, &[d])?;
                d
            }
            None => hidden,
        };
        shape(VALUE_WEIGHT, &weight, &[1, last])?;
        shape(VALUE_BIAS, &bias, &[1])?;
        let var = |x: Tensor| Var::from_tensor(&x.contiguous()?);
        Ok(Self {
            pre: match pre {
                Some((w, b)) => Some((var(w)?, var(b)?)),
                None => None,
            },
            weight: var(weight)?,
            bias: var(bias)?,
        })
    }

    /// The hidden width d of the tanh layer, if any.
    pub fn hidden_dim(&self) -> Option<usize> {
        self.pre.as_ref().map(|(w, _)| w.dims()[0])
    }

    /// The trainable tensors under their CoMLRL names, in state-dict order.
    pub fn vars(&self) -> Vec<(String, Var)> {
        let mut v = Vec::with_capacity(4);
        if let Some((w, b)) = &self.pre {
            v.push((PRE_WEIGHT.to_string(), w.clone()));
            v.push((PRE_BIAS.to_string(), b.clone()));
        }
        v.push((VALUE_WEIGHT.to_string(), self.weight.clone()));
        v.push((VALUE_BIAS.to_string(), self.bias.clone()));
        v
    }

    /// The tanh layer's output a = tanh(h·W₁ᵀ + b₁) (N, d) of rows h (N, H); `None` without one.
    pub fn pre_activation(&self, h: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let Some((w, b)) = &self.pre else {
            return Ok(None);
        };
        Ok(Some(
            h.matmul(&w.as_tensor().t()?)?
                .broadcast_add(b.as_tensor())?
                .tanh()?,
        ))
    }

    /// Values (N) of final hidden states h (N, H); differentiable through the `Var`s and `h`.
    pub fn forward(&self, h: &Tensor) -> candle_core::Result<Tensor> {
        let a = self.pre_activation(h)?;
        let x = a.as_ref().unwrap_or(h);
        let v = x
            .matmul(&self.weight.as_tensor().t()?)?
            .broadcast_add(self.bias.as_tensor())?;
        v.squeeze(1)
    }
}
