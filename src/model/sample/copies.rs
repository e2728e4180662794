//! The weight copies sampling decodes with, next to the trained weights: none (products
//! against the checkpoint-layout weight), a contiguous transposed f32 copy, f32 copies of the
//! MLP's weights packed in panels, or a bf16 copy multiplied with f32 accumulation
//! (`agents.sampling_dtype: bf16`; a frozen bf16 base's own storage, read in place, takes the
//! copy's place). Rebuilt after every weight update. A forward reads them
//! through [`CopyProducts`], the decoder's `WeightProducts` strategy: the transposed copies in
//! `Mode::Infer` and `Mode::Sample`, the bf16 copies and the panels in `Mode::Sample` only
//! (scoring stays in the weights' dtype), never in `Mode::Train`.
use crate::model::decoder::causal_lm::CausalLm;
use crate::model::decoder::forward::{sample_row_wise, Mode, WeightProducts};
use crate::model::kernels::bf16_matmul::{Bf16Matrix, Layout};
use crate::model::kernels::cpu_slices::f32s;
use crate::model::kernels::f32_panels::F32Panels;
use crate::model::kernels::transpose::transposed;
use crate::model::kernels::{bf16_weight, q8_weight};
use candle_core::{DType, Result, Storage, Tensor, TensorId};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// The most rows of x a decode product takes through the f32 panels (each block of 16 rows
/// streams W again); a prompt's prefill (more rows) runs on the checkpoint-layout weight.
const PANEL_ROWS: usize = 32;

/// Which copy of the weights sampling uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SamplingWeights {
    /// No copy: decode products run as W · xᵀ on the checkpoint-layout weights.
    #[default]
    Checkpoint,
    /// Contiguous (in, out) f32 copies: faster small-M products, one extra copy of the weights.
    Transposed,
    /// f32 copies of the MLP's weights packed in panels (`kernels::f32_panels`, streamed from
    /// memory faster than the checkpoint layout); attention and the head decode from the
    /// checkpoint layout. The MLP holds most of a layer's weights; its panels are freed
    /// during update rounds.
    MlpPanels,
    /// bf16 copies (half the bytes per decode step, half a copy of the weights), f32 sums.
    Bf16,
}

/// One weight's sampling copy.
#[derive(Debug, Clone)]
pub enum SamplingCopy {
    /// W transposed to (in, out), contiguous.
    Transposed(Tensor),
    /// W in bf16, (out, in): a copy, or a frozen bf16 base's own storage read in place.
    Bf16(Arc<Bf16Matrix>),
    /// W in f32 panels (`kernels::f32_panels`).
    Panels(Arc<F32Panels>),
}

/// A shared, refreshable slot holding one weight's sampling copy.
#[derive(Debug, Clone, Default)]
pub struct SamplingSlot(Arc<RwLock<Option<SamplingCopy>>>);

impl SamplingSlot {
    /// Rebuilds the copy of `weight` (out, in) for `kind` (or drops it).
    pub fn refresh(&self, weight: &Tensor, kind: SamplingWeights) -> Result<()> {
        // A frozen base held in bf16 or Q8_0 (`agents.base_dtype`) is sampled from as it is:
        // any copy would take more memory than the base it saves. With bf16 sampling a bf16
        // base is read in place by the bf16 copies' own kernel (its storage is their rows
        // layout where `in` is a multiple of 32): the same kernel and rounding as a bf16 copy,
        // none of its bytes. Otherwise (f32 sampling, another `in`, a Q8_0 base) no slot is
        // filled and the products read the base through `kernels::bf16_weight` /
        // `kernels::q8_weight`; a Q8_0 base already has its fused decode, and the bf16 kernel
        // would need a bf16 copy of it.
        if bf16_weight::is_bf16_weight(weight) || q8_weight::is_q8_weight(weight) {
            let copy = match kind {
                SamplingWeights::Bf16 => {
                    Bf16Matrix::in_place(weight).map(|m| SamplingCopy::Bf16(Arc::new(m)))
                }
                _ => None,
            };
            if let Ok(mut slot) = self.0.write() {
                *slot = copy;
            }
            return Ok(());
        }
        let copy = match kind {
            SamplingWeights::Checkpoint => None,
            SamplingWeights::Transposed => Some(SamplingCopy::Transposed(transposed(weight)?)),
            // After an optimizer step both overwrite their copy in place (no fresh pages per
            // refresh, no f32 staging copy).
            SamplingWeights::MlpPanels => match self.rebuild(
                weight,
                "f32 panel sampling copy",
                |c, src, rows, cols| match c {
                    SamplingCopy::Panels(p) => {
                        Arc::get_mut(p).is_some_and(|p| p.refill(src, rows, cols))
                    }
                    _ => false,
                },
                |src, rows, cols| {
                    SamplingCopy::Panels(Arc::new(F32Panels::from_f32(src, rows, cols)))
                },
            )? {
                Some(copy) => Some(copy),
                None => return Ok(()),
            },
            SamplingWeights::Bf16 => match self.rebuild(
                weight,
                "bf16 sampling copy",
                |c, src, rows, cols| match c {
                    SamplingCopy::Bf16(m) => {
                        Arc::get_mut(m).is_some_and(|m| m.refill(src, rows, cols))
                    }
                    _ => false,
                },
                |src, rows, cols| {
                    SamplingCopy::Bf16(Arc::new(Bf16Matrix::from_f32(src, rows, cols)))
                },
            )? {
                Some(copy) => Some(copy),
                None => return Ok(()),
            },
        };
        if let Ok(mut slot) = self.0.write() {
            *slot = copy;
        }
        Ok(())
    }

    /// A copy of `weight` (out, in), read as contiguous f32 on the CPU: `None` where `refill`
    /// overwrote the slot's current copy in place (one of its kind and shape that no sampler
    /// holds), else the copy `build` makes.
    fn rebuild(
        &self,
        weight: &Tensor,
        what: &str,
        refill: impl FnOnce(&mut SamplingCopy, &[f32], usize, usize) -> bool,
        build: impl FnOnce(&[f32], usize, usize) -> SamplingCopy,
    ) -> Result<Option<SamplingCopy>> {
        if !weight.device().is_cpu() {
            candle_core::bail!("{what}: sampling weight copies run on the CPU only");
        }
        let (rows, cols) = weight.dims2()?;
        let w = weight.detach().to_dtype(DType::F32)?.contiguous()?;
        let (st, l) = w.storage_and_layout();
        let Storage::Cpu(cs) = &*st else {
            candle_core::bail!("{what}: sampling weight copies run on the CPU only");
        };
        let src = f32s(cs, l, what)?;
        if let Ok(mut slot) = self.0.write() {
            if let Some(current) = slot.as_mut() {
                if refill(current, src, rows, cols) {
                    return Ok(None);
                }
            }
        }
        Ok(Some(build(src, rows, cols)))
    }

    /// The current copy, if any.
    pub fn get(&self) -> Option<SamplingCopy> {
        self.0.read().ok().and_then(|g| g.clone())
    }
}

/// The sampling copies of one model's weights: a slot for each projection's weight and for
/// the LM head, found by the weight's tensor id. A clone shares the slots (policies on one
/// frozen base share its copies).
#[derive(Debug, Default, Clone)]
pub struct SamplingCopies {
    slots: HashMap<TensorId, SamplingSlot>,
}

impl SamplingCopies {
    /// Empty slots for `model`'s projections and LM head.
    pub fn for_model(model: &CausalLm) -> Self {
        let weights = model
            .layers()
            .iter()
            .flat_map(|l| l.linears().map(|l| l.weight()))
            .chain([model.lm_head()]);
        Self {
            slots: weights.map(|w| (w.id(), SamplingSlot::default())).collect(),
        }
    }

    /// Rebuilds (call after every weight update) or drops `model`'s copies: contiguous
    /// transposed ones (M = batch products against a transposed view spend most of their time
    /// packing; one extra copy of the weights) or bf16 ones (half the bytes per decode step;
    /// half a copy), or the MLP's f32 panels, or none.
    pub fn refresh(&self, model: &CausalLm, kind: SamplingWeights) -> Result<()> {
        // Panels are for the MLP only; the rest decodes from the checkpoint layout.
        let rest = match kind {
            SamplingWeights::MlpPanels => SamplingWeights::Checkpoint,
            other => other,
        };
        for l in model.layers() {
            for p in l.self_attn.linears() {
                self.slot(p.weight())?.refresh(p.weight(), rest)?;
            }
            for p in l.mlp.linears() {
                self.slot(p.weight())?.refresh(p.weight(), kind)?;
            }
        }
        self.slot(model.lm_head())?.refresh(model.lm_head(), rest)
    }

    fn slot(&self, w: &Tensor) -> Result<&SamplingSlot> {
        match self.slots.get(&w.id()) {
            Some(s) => Ok(s),
            None => candle_core::bail!("sampling copies: a weight of another model"),
        }
    }

    /// The copy of `w`, if there is one.
    fn get(&self, w: &Tensor) -> Option<SamplingCopy> {
        self.slots.get(&w.id()).and_then(SamplingSlot::get)
    }

    /// Bytes the bf16 copies allocated (a frozen bf16 base read in place allocates none), and
    /// how many weights are read in place: what bf16 sampling costs in memory.
    pub fn bf16_footprint(&self) -> (usize, usize) {
        let (mut bytes, mut in_place) = (0, 0);
        for slot in self.slots.values() {
            if let Some(SamplingCopy::Bf16(m)) = slot.get() {
                bytes += m.owned_bytes();
                in_place += usize::from(m.is_in_place());
            }
        }
        (bytes, in_place)
    }

    /// The products of a forward in `mode` that reads these copies where they serve `mode`.
    pub fn products(&self, mode: Mode) -> CopyProducts<'_> {
        CopyProducts { copies: self, mode }
    }

    /// Whether `other` is these very copies (the same slots: policies on one frozen base share
    /// them), not merely copies of equal weights.
    pub fn same_slots(&self, other: &SamplingCopies) -> bool {
        self.slots.len() == other.slots.len()
            && self
                .slots
                .iter()
                .all(|(id, s)| other.slots.get(id).is_some_and(|o| Arc::ptr_eq(&s.0, &o.0)))
    }
}

/// The decoder's products for a model with sampling copies (see the module doc); a weight
/// without a copy for the mode multiplies as `mode` does on the checkpoint layout.
#[derive(Debug, Clone, Copy)]
pub struct CopyProducts<'a> {
    copies: &'a SamplingCopies,
    mode: Mode,
}

impl WeightProducts for CopyProducts<'_> {
    fn mode(&self) -> Mode {
        self.mode
    }

    fn x_wt(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        if !self.mode.no_grad() {
            return self.mode.x_wt(x, w);
        }
        let sample = self.mode == Mode::Sample;
        match self.copies.get(w) {
            Some(SamplingCopy::Transposed(wt)) => x.matmul(&wt),
            Some(SamplingCopy::Bf16(m)) if sample => matmul_bf16(&x.contiguous()?, &m),
            Some(SamplingCopy::Panels(p)) if sample && x.dim(0)? <= PANEL_ROWS => {
                matmul_panels(x, &p)
            }
            _ => self.mode.x_wt(x, w),
        }
    }
}

impl CopyProducts<'_> {
    /// For a product of `rows` rows by `w` as [`WeightProducts::x_wt`] runs it here: `Some(c)`
    /// where it runs a kernel that computes each row on its own, which every product of at
    /// most `c` rows also runs, so rows of several decodes may share one such product and get
    /// the bits each gets alone; `None` where a row's result may depend on the others (gemm:
    /// the transposed copies, the bf16 GEMM's panels, scoring). The bf16 rows layout (AMX tiles
    /// of 16 W rows, `vdpbf16ps` for the rest, the split fixed by W's rows alone) sums each
    /// (W row, x row) pair over K in one order; the f32 panels take blocks of 16 x rows, each
    /// row its own sums.
    pub fn row_wise(&self, w: &Tensor, rows: usize) -> Option<usize> {
        if self.mode != Mode::Sample {
            return None;
        }
        match self.copies.get(w) {
            Some(SamplingCopy::Transposed(_)) => None,
            Some(SamplingCopy::Bf16(m)) => (m.layout() == Layout::Rows).then_some(usize::MAX),
            Some(SamplingCopy::Panels(_)) if rows <= PANEL_ROWS => Some(PANEL_ROWS),
            // Past the panels' rows: `Mode::Sample` on the checkpoint layout.
            Some(SamplingCopy::Panels(_)) | None => sample_row_wise(w, rows),
        }
    }
}

/// x (rows, in) · Wᵀ with W's bf16 copy, as an f32 (rows, out) tensor in x's dtype.
pub fn matmul_bf16(x: &Tensor, w: &Bf16Matrix) -> Result<Tensor> {
    let (rows, cols) = x.dims2()?;
    if cols != w.cols() {
        candle_core::bail!(
            "bf16 product: x has {cols} features, W expects {}",
            w.cols()
        );
    }
    let xv = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    let y = w.matmul_t(&xv, rows)?;
    Tensor::from_vec(y, (rows, w.rows()), x.device())?.to_dtype(x.dtype())
}

/// x (rows, in) · Wᵀ with W's f32 panels, as an f32 (rows, out) tensor.
pub fn matmul_panels(x: &Tensor, w: &F32Panels) -> Result<Tensor> {
    let (rows, cols) = x.dims2()?;
    if cols != w.cols() || x.dtype() != DType::F32 {
        candle_core::bail!(
            "f32 panel product: x has {cols} {:?} features, W expects {} f32",
            x.dtype(),
            w.cols()
        );
    }
    let xv = x.flatten_all()?.to_vec1::<f32>()?;
    let y = w.matmul_t(&xv, rows);
    Tensor::from_vec(y, (rows, w.rows()), x.device())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernels::bf16_matmul::Layout;
    use candle_core::Device;

    /// A refresh after the weights changed (in place, same shape) serves the new values, and
    /// reuses the copy's buffer rather than allocating another.
    #[test]
    fn a_refresh_overwrites_the_bf16_copy_in_place() -> Result<()> {
        let dev = Device::Cpu;
        let slot = SamplingSlot::default();
        let x = Tensor::randn(0f32, 1.0, (3, 40), &dev)?;
        let (w0, w1) = (
            Tensor::randn(0f32, 1.0, (5, 40), &dev)?,
            Tensor::randn(0f32, 1.0, (5, 40), &dev)?,
        );
        slot.refresh(&w0, SamplingWeights::Bf16)?;
        let Some(SamplingCopy::Bf16(first)) = slot.get() else {
            panic!("no bf16 copy")
        };
        let before = Arc::as_ptr(&first);
        let y0 = matmul_bf16(&x, &first)?;
        drop(first);
        slot.refresh(&w1, SamplingWeights::Bf16)?;
        let Some(SamplingCopy::Bf16(second)) = slot.get() else {
            panic!("no bf16 copy")
        };
        assert_eq!(Arc::as_ptr(&second), before, "the copy was reallocated");
        let y1 = matmul_bf16(&x, &second)?;
        let want = x.matmul(&w1.t()?)?;
        let err = (&y1 - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(err < 0.1, "stale or wrong copy: {err}");
        let moved = (&y1 - &y0)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(moved > 0.5, "the copy did not change: {moved}");
        Ok(())
    }

    /// A frozen bf16 base's slot: with bf16 sampling, its own storage read in place (no bytes
    /// of its own), whose decode and prefill products are a bf16 copy's bit for bit; with any
    /// other kind, or an `in` that is not a multiple of 32, no copy, and the products are
    /// `bf16_weight`'s widening ones, as before. Scoring (`Infer`) never reads the slot.
    #[test]
    fn a_bf16_base_is_read_in_place_only_for_bf16_sampling() -> Result<()> {
        let dev = Device::Cpu;
        for (out, k, in_place) in [(96, 64, true), (40, 896, true), (24, 40, false)] {
            let w = Tensor::randn(0f32, 1.0, (out, k), &dev)?.to_dtype(DType::BF16)?;
            let slot = SamplingSlot::default();
            let copies = SamplingCopies {
                slots: HashMap::from([(w.id(), slot.clone())]),
            };
            for kind in [
                SamplingWeights::Checkpoint,
                SamplingWeights::Transposed,
                SamplingWeights::MlpPanels,
                SamplingWeights::Bf16,
            ] {
                slot.refresh(&w, kind)?;
                let read = match slot.get() {
                    Some(SamplingCopy::Bf16(m)) => {
                        assert!(m.reads_in_place(&w) && m.owned_bytes() == 0);
                        true
                    }
                    Some(other) => panic!("{kind:?}: a copy of the base: {other:?}"),
                    None => false,
                };
                assert_eq!(
                    read,
                    in_place && kind == SamplingWeights::Bf16,
                    "{kind:?} {k}"
                );
                for rows in [1, 8, 32, 40] {
                    let x = Tensor::randn(0f32, 1.0, (rows, k), &dev)?;
                    let got = copies.products(Mode::Sample).x_wt(&x, &w)?;
                    let want = match read {
                        true => {
                            let wf = w.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                            matmul_bf16(&x, &Bf16Matrix::from_f32_in(Layout::Rows, &wf, out, k))?
                        }
                        false => bf16_weight::x_wt(&x, &w)?,
                    };
                    let bits = |t: &Tensor| -> Result<Vec<u32>> {
                        Ok(t.flatten_all()?
                            .to_vec1::<f32>()?
                            .iter()
                            .map(|v| v.to_bits())
                            .collect())
                    };
                    assert_eq!(bits(&got)?, bits(&want)?, "{kind:?} {rows}x{k}");
                    let scored = copies.products(Mode::Infer).x_wt(&x, &w)?;
                    assert_eq!(bits(&scored)?, bits(&bf16_weight::x_wt(&x, &w)?)?);
                }
            }
        }
        Ok(())
    }
}
