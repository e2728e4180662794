//! Low-rank adapters (LoRA, as PEFT defines them) on a layer's projections: a frozen W (out, in)
//! plus s·B·A with A (r, in), B (out, r) and s = α/r (α/√r with rsLoRA). The product adds
//! s·(x·Aᵀ)·Bᵀ to x·Wᵀ + b, so W + s·B·A is never formed. [`LoraSpec`] says which projections
//! carry one and at what rank; `adapted::attach` gives a model adapters over the same (shared)
//! base tensors; [`init_tensors`] draws PEFT's initialisation (A Kaiming-uniform with a = √5, that is
//! U(±1/√in); B zeros), seeded.
use super::config::ModelConfig;
use super::lora_dropout::{LoraDropout, LoraSite};
use candle_core::{DType, Device, Result, Tensor};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

/// The largest rank an adapter may have: a rank read from a file sizes A and B, so it is
/// bounded here as well as by the projection's own dims.
pub const MAX_RANK: usize = 4096;

/// The seven projections of a decoder layer, by their checkpoint (and PEFT) module names: one
/// list, the scenario's (which checks `agents.adapter.targets` against it).
pub use comlrl_scenario::PROJECTIONS;

/// Which projections carry adapters, their rank and scaling.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraSpec {
    /// r: A is (r, in), B (out, r).
    pub rank: usize,
    /// α: the term is scaled by α/r (α/√r with `rslora`).
    pub alpha: f64,
    /// rsLoRA's scaling α/√r.
    pub rslora: bool,
    /// Module names among [`PROJECTIONS`], in that order, without repeats.
    pub targets: Vec<String>,
}

impl LoraSpec {
    /// The scaling s of the low-rank term.
    pub fn scale(&self) -> f64 {
        match self.rslora {
            true => self.alpha / (self.rank as f64).sqrt(),
            false => self.alpha / self.rank as f64,
        }
    }

    /// Checks rank, α and targets against `cfg` (every target's rank at most min(in, out) and
    /// [`MAX_RANK`]); the message names the field at fault.
    pub fn validate(&self, cfg: &ModelConfig) -> std::result::Result<(), String> {
        if self.rank == 0 || self.rank > MAX_RANK {
            return Err(format!("rank {} is outside 1..={MAX_RANK}", self.rank));
        }
        if !self.alpha.is_finite() || self.alpha <= 0.0 {
            return Err(format!("alpha {} must be a positive number", self.alpha));
        }
        if self.targets.is_empty() {
            return Err("targets is empty: name at least one projection".into());
        }
        for (i, t) in self.targets.iter().enumerate() {
            if !PROJECTIONS.contains(&t.as_str()) {
                return Err(format!(
                    "target `{t}` is not a projection: use any of {}",
                    PROJECTIONS.join(", ")
                ));
            }
            if self.targets[..i].contains(t) {
                return Err(format!("target `{t}` is named twice"));
            }
        }
        for (name, out, inp) in shapes(cfg) {
            if self.targets.iter().any(|t| t == name) && self.rank > out.min(inp) {
                return Err(format!(
                    "rank {} exceeds {name}'s smaller dimension {}",
                    self.rank,
                    out.min(inp)
                ));
            }
        }
        Ok(())
    }

    /// Every adapter tensor of a model with `cfg`: (layer, module, "lora_A" | "lora_B", shape),
    /// layers bottom first, modules in [`PROJECTIONS`] order.
    pub fn tensors(
        &self,
        cfg: &ModelConfig,
    ) -> Vec<(usize, &'static str, &'static str, Vec<usize>)> {
        let mut out = vec![];
        for l in 0..cfg.num_hidden_layers {
            for (name, o, i) in shapes(cfg) {
                if self.targets.iter().any(|t| t == name) {
                    out.push((l, name, "lora_A", vec![self.rank, i]));
                    out.push((l, name, "lora_B", vec![o, self.rank]));
                }
            }
        }
        out
    }

    /// Number of adapter parameters on a model with `cfg`.
    pub fn parameters(&self, cfg: &ModelConfig) -> usize {
        self.tensors(cfg)
            .iter()
            .map(|(_, _, _, s)| s.iter().product::<usize>())
            .sum()
    }
}

/// The (module, out, in) of each projection of a layer of `cfg`.
fn shapes(cfg: &ModelConfig) -> [(&'static str, usize, usize); 7] {
    let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
    let q = cfg.num_attention_heads * cfg.head_dim();
    let kv = cfg.kv_heads() * cfg.head_dim();
    [
        ("q_proj", q, h),
        ("k_proj", kv, h),
        ("v_proj", kv, h),
        ("o_proj", h, q),
        ("gate_proj", i, h),
        ("up_proj", i, h),
        ("down_proj", h, i),
    ]
}

/// The key of one adapter tensor: (layer, module, "lora_A" | "lora_B").
pub type LoraKey = (usize, &'static str, &'static str);

/// PEFT's initialisation for `spec` on `cfg`: A ~ U(±1/√in) (Kaiming-uniform, a = √5), B zero,
/// drawn from `seed` in [`LoraSpec::tensors`] order.
pub fn init_tensors(
    spec: &LoraSpec,
    cfg: &ModelConfig,
    seed: u64,
    dtype: DType,
    dev: &Device,
) -> Result<BTreeMap<LoraKey, Tensor>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut out = BTreeMap::new();
    for (l, m, ab, shape) in spec.tensors(cfg) {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = match ab {
            "lora_A" => {
                let bound = 1.0 / (shape[1] as f64).sqrt();
                (0..n)
                    .map(|_| ((rng.random::<f64>() * 2.0 - 1.0) * bound) as f32)
                    .collect()
            }
            _ => vec![0.0; n],
        };
        let t = Tensor::from_vec(data, shape, dev)?.to_dtype(dtype)?;
        out.insert((l, m, ab), t);
    }
    Ok(out)
}

/// One projection's low-rank term s·(drop(x)·Aᵀ)·Bᵀ.
#[derive(Debug, Clone)]
pub struct Lora {
    /// A (r, in).
    pub(crate) a: Tensor,
    /// B (out, r).
    pub(crate) b: Tensor,
    /// s.
    pub(crate) scale: f64,
    /// PEFT's `lora_dropout` p: drop(x) in a training pass handed a [`LoraDropout`], x itself
    /// in every other.
    pub(crate) dropout: f64,
    /// Where this adapter sits (its dropout masks' key).
    pub(crate) site: LoraSite,
}

impl Lora {
    /// The branch's input for x (rows, in): x ⊙ the mask of `dropout` where this adapter has
    /// a dropout and the pass hands one, else x itself; with the mask used (to scale d x).
    pub(crate) fn branch_input(
        &self,
        x: &Tensor,
        dropout: Option<&LoraDropout>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        match dropout {
            Some(d) if self.dropout > 0.0 => {
                let (rows, in_dim) = x.dims2()?;
                let m = d.mask(self.site, self.dropout, rows, in_dim, x.dtype(), x.device())?;
                Ok(((x * &m)?, Some(m)))
            }
            _ => Ok((x.clone(), None)),
        }
    }

    /// y + s·(drop(x)·Aᵀ)·Bᵀ for x (rows, in), y (rows, out), differentiable in A and B (and
    /// x); drop as [`Lora::branch_input`].
    pub fn add_to(&self, x: &Tensor, y: &Tensor, dropout: Option<&LoraDropout>) -> Result<Tensor> {
        let (x, _) = self.branch_input(x, dropout)?;
        let u = x.matmul(&self.a.t()?)?;
        let d = (u.matmul(&self.b.t()?)? * self.scale)?;
        y + d
    }
}

/// The low-rank terms of a forward whose rows belong to several adapted models on one frozen
/// base: group g is `rows[g]` consecutive rows, which take `adapters[g]` (`None`: that model has
/// no adapter on this projection). Each group's term is computed on its own rows exactly as that
/// model's own forward computes it (the same products over the same rows), so the rows get the
/// bits they would get alone.
#[derive(Debug, Clone, Copy)]
pub struct GroupAdapters<'a> {
    /// Rows per group, in row order.
    pub rows: &'a [usize],
    /// Each group's adapter on this projection.
    pub adapters: &'a [Option<Lora>],
}

impl GroupAdapters<'_> {
    /// y + each group's s·(x·Aᵀ)·Bᵀ on its rows, for x (rows, in) and y (rows, out); no
    /// dropout (decoding is PEFT's eval mode).
    pub fn add_to(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let total: usize = self.rows.iter().sum();
        if self.rows.len() != self.adapters.len() || x.dim(0)? != total || y.dim(0)? != total {
            candle_core::bail!(
                "grouped adapters: {} groups of {:?} rows, {} adapters, for {} rows",
                self.rows.len(),
                self.rows,
                self.adapters.len(),
                x.dim(0)?
            );
        }
        if self.adapters.iter().all(Option::is_none) {
            return Ok(y.clone());
        }
        let mut parts = Vec::with_capacity(self.rows.len());
        let mut r0 = 0;
        for (&n, lora) in self.rows.iter().zip(self.adapters) {
            let yg = y.narrow(0, r0, n)?;
            parts.push(match lora {
                Some(l) => l.add_to(&x.narrow(0, r0, n)?, &yg, None)?,
                None => yg,
            });
            r0 += n;
        }
        Tensor::cat(&parts, 0)
    }
}

/// W + s·B·A for W (out, in), A (r, in), B (out, r): the merged weight an export writes
/// (`comlrl export --merge`), in W's dtype. The product and the sum are formed in f64 and
/// rounded once, so a merged f32 weight is the exact sum rounded to f32 (what a reader that
/// applies the adapter in higher precision computes), independent of the rank's summation order.
pub fn merged_weight(w: &Tensor, a: &Tensor, b: &Tensor, scale: f64) -> Result<Tensor> {
    let (out, inp) = w.dims2()?;
    let (r, a_in) = a.dims2()?;
    let (b_out, b_r) = b.dims2()?;
    if a_in != inp || b_out != out || b_r != r {
        candle_core::bail!(
            "lora_A {:?} / lora_B {:?} do not fit W {:?}",
            a.dims(),
            b.dims(),
            w.dims()
        );
    }
    let delta = (b.to_dtype(DType::F64)?.matmul(&a.to_dtype(DType::F64)?)? * scale)?;
    (w.to_dtype(DType::F64)? + delta)?.to_dtype(w.dtype())
}
