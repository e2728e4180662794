//! Batch layout helpers: HF position ids from an attention mask, and the additive causal+padding
//! mask over past and new positions (finite negative, so fully masked pad rows stay finite).
use candle_core::{Device, Result, Tensor};

/// Additive value for a hidden key. Finite: a pad query row that sees no key averages
/// uniformly, as transformers' finite-min mask does, instead of producing NaN.
pub const MASKED: f32 = -1e9;

/// Position ids `(cumsum(valid) - 1).clamp(0)` of every column of each row of `valid`,
/// returning only the last `s` columns as (b, s) u32.
pub fn position_ids(valid: &[Vec<bool>], s: usize, dev: &Device) -> Result<Tensor> {
    let b = valid.len();
    let mut out = Vec::with_capacity(b * s);
    for row in valid {
        let t = row.len();
        let mut c: i64 = -1;
        let all: Vec<u32> = row
            .iter()
            .map(|&v| {
                c += v as i64;
                c.max(0) as u32
            })
            .collect();
        out.extend_from_slice(&all[t - s..]);
    }
    Tensor::from_vec(out, (b, s), dev)
}

/// Mask (b, 1, s, t) where t = `valid[r].len()` = past + s: query i (absolute index past + i)
/// sees key j iff j ≤ past + i and key j is a real token.
pub fn causal_mask(valid: &[Vec<bool>], s: usize, dev: &Device) -> Result<Tensor> {
    let b = valid.len();
    let t = valid.first().map(|r| r.len()).unwrap_or(0);
    let past = t - s;
    let mut m = vec![0f32; b * s * t];
    for (r, row) in valid.iter().enumerate() {
        for i in 0..s {
            let base = (r * s + i) * t;
            for (j, &ok) in row.iter().enumerate() {
                if j > past + i || !ok {
                    m[base + j] = MASKED;
                }
            }
        }
    }
    Tensor::from_vec(m, (b, 1, s, t), dev)
}
