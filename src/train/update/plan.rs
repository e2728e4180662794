//! How the update's passes run, from the trainer settings: the products' operand type
//! (`trainer.compute_dtype`), kept activations, a shared prompt computed once, packed weights.
use crate::model::grad::recompute::PassPlan;
use crate::model::ComputeDtype;
use comlrl_scenario::{Dtype, TrainerPlan};

/// The operand type of the update's products (`trainer.compute_dtype`, checked by the
/// scenario loader to be f32 or bf16).
pub fn compute_dtype(t: &TrainerPlan) -> ComputeDtype {
    match t.compute_dtype {
        Dtype::Bf16 => ComputeDtype::Bf16,
        _ => ComputeDtype::F32,
    }
}

/// A note for a run whose `trainer.compute_dtype: bf16` makes the update slower than f32 would
/// on this CPU (its bf16 GEMM runs on a `vdpbf16ps` that issues at half the FMA's flops).
pub fn compute_dtype_note(t: &TrainerPlan) -> Option<String> {
    (compute_dtype(t) == ComputeDtype::Bf16 && crate::model::kernels::bf16_gemm::slower_than_f32())
        .then(|| {
            "note: trainer.compute_dtype is bf16, but this CPU (no AMX) runs bf16 dot products \
             at half its f32 rate, so the update is slower than with `compute_dtype: f32` \
             (Qwen2.5-0.5B: 55 against 34 s a step); `comlrl bench matmul --dtype bf16` \
             compares the two"
                .to_string()
        })
}

/// How the update's recomputed passes run: products in `trainer.compute_dtype`, up to
/// `trainer.activation_budget_mb` MiB of kept layer activations per pass, a prompt shared by a
/// pass's rows computed once with `trainer.share_prompt`, bf16 weights packed once per
/// mini-batch within `trainer.packed_weights_mb`.
pub fn pass_plan(t: &TrainerPlan) -> PassPlan {
    PassPlan {
        dtype: compute_dtype(t),
        keep_bytes: t.activation_budget_mb.saturating_mul(1 << 20),
        keep_top_bytes: 0,
        share_prompt: t.share_prompt,
        pack_bytes: t.packed_weights_mb.saturating_mul(1 << 20),
        // Per agent: the algorithm sets it from `trainer.logprob_temperature`.
        logit_scale: 1.0,
    }
}
