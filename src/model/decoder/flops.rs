//! Matmul FLOP counts of a decoder forward (any supported architecture), used to report achieved GFLOP/s.
use super::config::ModelConfig;

/// Matmul FLOPs of one forward over `b` rows of `s` tokens, with the LM head applied to
/// `head_positions` positions per row (all of them when scoring every token).
pub fn forward_flops(cfg: &ModelConfig, b: usize, s: usize, head_positions: usize) -> f64 {
    let (h, v) = (cfg.hidden_size as f64, cfg.vocab_size as f64);
    let q = (cfg.num_attention_heads * cfg.head_dim()) as f64;
    let tokens = (b * s) as f64;
    let per_token_layer = layer_flops_per_token(cfg);
    // Scores and weighted values: 2 matmuls of (s × s × head_dim) per head.
    let attn = 2.0 * 2.0 * (b as f64) * (s as f64) * (s as f64) * q;
    let layers = cfg.num_hidden_layers as f64 * (tokens * per_token_layer + attn);
    let head = 2.0 * (b * head_positions) as f64 * h * v;
    layers + head
}

/// Matmul FLOPs of one decoder layer's projections for one position, forward only.
pub fn layer_flops_per_token(cfg: &ModelConfig) -> f64 {
    let (h, i) = (cfg.hidden_size as f64, cfg.intermediate_size as f64);
    let q = (cfg.num_attention_heads * cfg.head_dim()) as f64;
    let kv = (cfg.kv_heads() * cfg.head_dim()) as f64;
    2.0 * (h * q + 2.0 * h * kv + q * h + 3.0 * h * i)
}

/// Forward + backward ≈ 3 × forward (the backward computes two products per forward product).
pub fn train_flops(cfg: &ModelConfig, b: usize, s: usize, head_positions: usize) -> f64 {
    3.0 * forward_flops(cfg, b, s, head_positions)
}

/// [`train_flops`] of a pass whose `b` rows of `s` tokens continue one shared prompt part of
/// `p` tokens computed once (`recompute`'s shared prompt): the layers see p + b·s positions,
/// and each row's queries also score the prompt part's p keys.
pub fn train_flops_shared(
    cfg: &ModelConfig,
    b: usize,
    p: usize,
    s: usize,
    head_positions: usize,
) -> f64 {
    let q = (cfg.num_attention_heads * cfg.head_dim()) as f64;
    let attn_after = 2.0 * 2.0 * (b * s * p) as f64 * q * cfg.num_hidden_layers as f64;
    train_flops(cfg, 1, p, 0) + train_flops(cfg, b, s, head_positions) + 3.0 * attn_after
}
