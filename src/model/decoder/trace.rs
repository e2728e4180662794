//! The op sequence of a forward or a backward, recorded where the code runs each op: what the
//! check of the hand-written backward (`model::grad`) against this decoder's definition reads.
//! The layer is defined once, in `layer.rs`, `attention.rs` and `mlp.rs`; the backward's
//! forward pass must run exactly the ops the definition runs, and its backward exactly their
//! reverse, for every architecture's switches (`grad::trace_check`). Recording exists only in
//! the library's own tests: elsewhere [`forward`], [`backward`] and [`paused`] compile to
//! nothing.
use candle_core::TensorId;

/// One op of the model, named by the weights it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The embedding lookup.
    Embed(TensorId),
    /// An RMSNorm over whole rows (a layer's two norms, the final norm).
    Norm(TensorId),
    /// An RMSNorm over each head of q or k (Qwen3's `q_norm` / `k_norm`).
    HeadNorm(TensorId),
    /// A projection x·Wᵀ (+ b).
    Linear {
        /// W.
        weight: TensorId,
        /// b, where the projection has one.
        bias: Option<TensorId>,
    },
    /// RoPE on q and k, the scaled and masked softmax of q·kᵀ, the weighted sum of v.
    Attention,
    /// A residual add.
    Residual,
    /// silu(gate) · up.
    SwiGlu,
    /// The LM head's logits.
    Head(TensorId),
}

/// Which way an op ran.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// The op itself.
    Forward,
    /// Its backward.
    Backward,
}

/// Records that the op `op()` ran (only in the library's tests, while [`record`] runs).
#[inline(always)]
pub fn forward(op: impl FnOnce() -> Op) {
    #[cfg(test)]
    recorder::push(Dir::Forward, op);
    #[cfg(not(test))]
    let _ = op;
}

/// Records that the backward of `op()` ran.
#[inline(always)]
pub fn backward(op: impl FnOnce() -> Op) {
    #[cfg(test)]
    recorder::push(Dir::Backward, op);
    #[cfg(not(test))]
    let _ = op;
}

/// Runs `f` without recording: a recomputation repeats ops of the forward that are not new
/// ops of the sequence.
#[inline(always)]
pub fn paused<T>(f: impl FnOnce() -> T) -> T {
    #[cfg(test)]
    return recorder::paused(f);
    #[cfg(not(test))]
    f()
}

/// Runs `f` and returns the ops it ran, in order.
#[cfg(test)]
pub fn record<T>(f: impl FnOnce() -> T) -> (T, Vec<(Dir, Op)>) {
    recorder::record(f)
}

#[cfg(test)]
mod recorder {
    use super::{Dir, Op};
    use std::cell::RefCell;

    thread_local! {
        /// The ops recorded on this thread, while [`record`] runs and nothing is paused.
        static TRACE: RefCell<Option<Vec<(Dir, Op)>>> = const { RefCell::new(None) };
    }

    pub fn push(dir: Dir, op: impl FnOnce() -> Op) {
        TRACE.with(|t| {
            if let Some(v) = t.borrow_mut().as_mut() {
                v.push((dir, op()));
            }
        });
    }

    pub fn record<T>(f: impl FnOnce() -> T) -> (T, Vec<(Dir, Op)>) {
        let outer = TRACE.with(|t| t.borrow_mut().replace(vec![]));
        let out = f();
        let ops = TRACE.with(|t| std::mem::replace(&mut *t.borrow_mut(), outer));
        (out, ops.unwrap_or_default())
    }

    pub fn paused<T>(f: impl FnOnce() -> T) -> T {
        let outer = TRACE.with(|t| t.borrow_mut().take());
        let out = f();
        TRACE.with(|t| *t.borrow_mut() = outer);
        out
    }
}
