//! Where a pass's gradients go: one accumulator per trainable tensor, in the caller's order of
//! `vars`. Each gradient is added into its accumulator in place (the first one written), so a
//! pass's gradients never exist twice.
use crate::model::kernels::add_in_place::add_into;
use candle_core::backprop::GradStore;
use candle_core::{Result, Tensor, TensorId, Var};
use std::collections::HashMap;

/// Where each trainable tensor's gradient accumulates: its index in the caller's `vars`/`acc`.
pub struct GradSlots(HashMap<TensorId, usize>);

impl GradSlots {
    /// Slots for `vars`, in their order.
    pub fn new(vars: &[Var]) -> Self {
        Self(
            vars.iter()
                .enumerate()
                .map(|(i, v)| (v.as_tensor().id(), i))
                .collect(),
        )
    }

    /// The accumulator slot of `w` (`None` inside until its first gradient), or `None` when `w`
    /// is frozen.
    pub(crate) fn slot<'a>(
        &self,
        acc: &'a mut [Option<Tensor>],
        w: &Tensor,
    ) -> Option<&'a mut Option<Tensor>> {
        self.0.get(&w.id()).map(|&i| &mut acc[i])
    }

    /// The accumulator of `w` (created as zeros on first use), or `None` when `w` is frozen.
    pub(crate) fn acc<'a>(
        &self,
        acc: &'a mut [Option<Tensor>],
        w: &Tensor,
    ) -> Result<Option<&'a Tensor>> {
        let Some(&i) = self.0.get(&w.id()) else {
            return Ok(None);
        };
        if acc[i].is_none() {
            acc[i] = Some(w.zeros_like()?);
        }
        Ok(acc[i].as_ref())
    }
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
