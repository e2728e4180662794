//! In-place AdamW (torch semantics: decoupled weight decay applied first, bias-corrected moments)
//! with global-norm gradient clipping folded into the same pass. Moments live in plain vectors
//! (f32, or bf16 with stochastic rounding: see `moments`) so an update allocates nothing and
//! the state serialises into checkpoints.
use crate::error::{Error, Result};
use crate::model::kernels::cpu_slices::{f32s, f32s_mut};
use crate::train::optim::adamw_chunk::{self, Coeffs};
use crate::train::optim::moments::{ChunkRng, Moments, StateDtype};
use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, Layout, Storage, Tensor, Var};
use rayon::prelude::*;
use std::sync::Mutex;

/// AdamW hyper-parameters (torch defaults except the learning rate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first-moment estimate.
    pub beta1: f64,
    /// Decay of the second-moment estimate.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

/// One parameter's optimizer state.
pub struct ParamState {
    /// The variable's checkpoint name.
    pub name: String,
    /// The variable.
    pub var: Var,
    /// First-moment estimate, one entry per element.
    pub m: Mutex<Moments>,
    /// Second-moment estimate, one entry per element.
    pub v: Mutex<Moments>,
}

/// AdamW over a set of variables, with its state in f32 or bf16.
pub struct AdamW {
    /// Each variable's state.
    pub params: Vec<ParamState>,
    /// Number of updates taken.
    pub step: u64,
    /// Hyper-parameters.
    pub cfg: AdamWConfig,
    /// Storage type of the moments.
    pub state_dtype: StateDtype,
    /// Seed of the stochastic rounding of bf16 moments (unused with f32).
    pub seed: u64,
}

const CHUNK: usize = 1 << 14;

struct Kernel<'a> {
    m: &'a Mutex<Moments>,
    v: &'a Mutex<Moments>,
    /// (seed, optimizer step, parameter index): the key of the bf16 rounding streams.
    key: (u64, u64, usize),
    /// The step's per-element constants.
    c: Coeffs,
}

impl candle_core::InplaceOp2 for Kernel<'_> {
    fn name(&self) -> &'static str {
        "adamw"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        let theta = f32s_mut(s1, l1, "adamw")?;
        let g = f32s(s2, l2, "adamw")?;
        if theta.len() != g.len() {
            candle_core::bail!("adamw: {} parameters, {} gradients", theta.len(), g.len())
        }
        let mut m = self
            .m
            .lock()
            .map_err(|_| candle_core::Error::Msg("adamw state poisoned".into()))?;
        let mut v = self
            .v
            .lock()
            .map_err(|_| candle_core::Error::Msg("adamw state poisoned".into()))?;
        if m.len() != theta.len() || v.len() != theta.len() {
            candle_core::bail!("adamw: {} parameters, {} moments", theta.len(), m.len())
        }
        match (&mut *m, &mut *v) {
            (Moments::F32(m), Moments::F32(v)) => self.f32_state(theta, g, m, v),
            (Moments::Bf16(m), Moments::Bf16(v)) => self.bf16_state(theta, g, m, v),
            _ => candle_core::bail!("adamw: the two moments are stored in different dtypes"),
        }
        Ok(())
    }
}

impl Kernel<'_> {
    /// torch's AdamW on f32 moments.
    fn f32_state(&self, theta: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
        let c = &self.c;
        theta
            .par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK))
            .zip(m.par_chunks_mut(CHUNK))
            .zip(v.par_chunks_mut(CHUNK))
            .for_each(|(((th, g), m), v)| adamw_chunk::f32_moments(c, th, g, m, v));
    }

    /// The same arithmetic on bf16 moments: read exactly, updated in f32, the step taken with
    /// the f32 values, written back with stochastic rounding. Each chunk draws from its own
    /// stream, so the result does not depend on the thread count.
    fn bf16_state(&self, theta: &mut [f32], g: &[f32], m: &mut [u16], v: &mut [u16]) {
        let c = &self.c;
        let (seed, step, param) = self.key;
        theta
            .par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK))
            .zip(m.par_chunks_mut(CHUNK))
            .zip(v.par_chunks_mut(CHUNK))
            .enumerate()
            .for_each(|(i, (((th, g), m), v))| {
                let rng = ChunkRng::new(seed, step, param, i);
                adamw_chunk::bf16_moments(c, &rng, th, g, m, v)
            });
    }
}

impl AdamW {
    /// Fresh (zero) f32 state for `vars`: torch's AdamW.
    pub fn new(vars: Vec<(String, Var)>, cfg: AdamWConfig) -> Self {
        Self::with_state(vars, cfg, StateDtype::F32, 0)
    }

    /// Fresh (zero) state for `vars` stored as `state_dtype`; `seed` keys the stochastic
    /// rounding of bf16 moments (give every replica of an agent the same one).
    pub fn with_state(
        vars: Vec<(String, Var)>,
        cfg: AdamWConfig,
        state_dtype: StateDtype,
        seed: u64,
    ) -> Self {
        let params = vars
            .into_iter()
            .map(|(name, var)| {
                let n = var.elem_count();
                ParamState {
                    name,
                    var,
                    m: Mutex::new(Moments::zeros(n, state_dtype)),
                    v: Mutex::new(Moments::zeros(n, state_dtype)),
                }
            })
            .collect();
        Self {
            params,
            step: 0,
            cfg,
            state_dtype,
            seed,
        }
    }

    /// The gradient of each parameter in `grads`, in parameter order.
    pub fn collect(&self, grads: &GradStore) -> Vec<Option<Tensor>> {
        self.params
            .iter()
            .map(|p| grads.get(p.var.as_tensor()).cloned())
            .collect()
    }

    /// Global L2 norm of the gradients (accumulated in f64).
    pub fn grad_norm(grads: &[Option<Tensor>]) -> Result<f64> {
        let mut sq = 0f64;
        for g in grads.iter().flatten() {
            let g = g.contiguous()?;
            let (st, l) = g.storage_and_layout();
            let Storage::Cpu(cs) = &*st else {
                return Err(Error::Internal(
                    "adamw: gradients must be on the CPU".into(),
                ));
            };
            let (a, b) = l
                .contiguous_offsets()
                .ok_or_else(|| Error::Internal("adamw: non-contiguous gradient".into()))?;
            let s = &cs.as_slice::<f32>()?[a..b];
            // Chunk sums added in chunk order: the same bits whatever the thread count or
            // rayon's splitting (a distributed run matches the one-process run exactly).
            let parts: Vec<f64> = s
                .par_chunks(CHUNK)
                .map(|c| c.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>())
                .collect();
            sq += parts.iter().sum::<f64>();
        }
        Ok(sq.sqrt())
    }

    /// One step from a backward pass's gradient store; see [`AdamW::step_grads`].
    pub fn step(&mut self, grads: &GradStore, lr: f64, max_norm: Option<f64>) -> Result<f64> {
        let g = self.collect(grads);
        self.step_grads(&g, lr, max_norm)
    }

    /// Clips to `max_norm` (when set) and takes one step at learning rate `lr` with gradients
    /// given in parameter order (`None`: no gradient, the parameter is left untouched).
    /// Returns the gradient norm before clipping.
    pub fn step_grads(
        &mut self,
        grads: &[Option<Tensor>],
        lr: f64,
        max_norm: Option<f64>,
    ) -> Result<f64> {
        if grads.len() != self.params.len() {
            return Err(Error::Internal(format!(
                "adamw: {} gradients for {} parameters",
                grads.len(),
                self.params.len()
            )));
        }
        let norm = Self::grad_norm(grads)?;
        if !norm.is_finite() {
            return Err(Error::Diverged(format!(
                "gradient norm is {norm}: the loss produced non-finite gradients (lower the learning rate or set max_grad_norm)"
            )));
        }
        let gscale = match max_norm {
            Some(mx) if norm > mx => mx / (norm + 1e-6),
            _ => 1.0,
        };
        self.step += 1;
        let t = self.step as i32;
        let c = self.cfg;
        let bc1 = 1.0 - c.beta1.powi(t);
        let bc2 = 1.0 - c.beta2.powi(t);
        for (i, (p, g)) in self.params.iter().zip(grads).enumerate() {
            if let Some(g) = g {
                let k = Kernel {
                    m: &p.m,
                    v: &p.v,
                    key: (self.seed, self.step, i),
                    c: Coeffs {
                        decay: (1.0 - lr * c.weight_decay) as f32,
                        b1: c.beta1 as f32,
                        b2: c.beta2 as f32,
                        step_size: (lr / bc1) as f32,
                        bc2_sqrt: bc2.sqrt() as f32,
                        eps: c.eps as f32,
                        gscale: gscale as f32,
                    },
                };
                p.var.as_tensor().inplace_op2(&g.contiguous()?, &k)?;
            }
        }
        Ok(norm)
    }
}
