//! The decoder itself, one definition for every architecture: its config and architectures,
//! the tensors a config implies, RoPE, the layers (norms, projections, attention, MLP), the
//! causal LM, a critic's value head, the strategies a forward is handed ([`forward`]) and the op trace the
//! hand-written backward is checked against ([`trace`]).
pub mod adapted;
pub(crate) mod arch;
pub(crate) mod attention;
pub mod batch;
pub(crate) mod causal_lm;
pub(crate) mod config;
pub(crate) mod flops;
pub(crate) mod forward;
pub(crate) mod layer;
pub(crate) mod linear;
pub mod lora;
pub mod lora_dropout;
pub(crate) mod mlp;
pub(crate) mod norm;
pub(crate) mod rope;
pub(crate) mod rope_scaling;
pub mod tensors;
pub(crate) mod trace;
pub mod value_head;
