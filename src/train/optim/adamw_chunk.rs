//! AdamW's arithmetic over one chunk of a parameter, compiled for AVX-512 and AVX2 next to the
//! baseline and picked at run time. Every element's result depends on that element alone (no
//! fused multiply-adds, no reordered sums), so the wide versions give the baseline's bits; the
//! bf16-moment chunk draws element i's random bits from its stream's i-th output
//! ([`ChunkRng::at`]) rather than in sequence, which keeps the loop free of a carried state.
use crate::train::optim::moments::{bf16_to_f32, round_bf16, ChunkRng};
use multiversion::multiversion;

/// The step's per-element constants.
#[derive(Debug, Clone, Copy)]
pub(super) struct Coeffs {
    /// 1 − lr · weight_decay (decoupled decay, applied first).
    pub decay: f32,
    /// β1.
    pub b1: f32,
    /// β2.
    pub b2: f32,
    /// lr / (1 − β1^t).
    pub step_size: f32,
    /// √(1 − β2^t).
    pub bc2_sqrt: f32,
    /// Added to the denominator.
    pub eps: f32,
    /// Gradient clipping factor (1 when not clipped).
    pub gscale: f32,
}

/// torch's AdamW on f32 moments over one chunk.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
pub(super) fn f32_moments(c: &Coeffs, th: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    let n = th.len();
    let (g, m, v) = (&g[..n], &mut m[..n], &mut v[..n]);
    for i in 0..n {
        let gi = g[i] * c.gscale;
        th[i] *= c.decay;
        // torch: exp_avg.lerp_(g, 1 - b1); exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)
        m[i] += (1.0 - c.b1) * (gi - m[i]);
        v[i] = v[i] * c.b2 + (1.0 - c.b2) * gi * gi;
        let denom = v[i].sqrt() / c.bc2_sqrt + c.eps;
        th[i] += -c.step_size * m[i] / denom;
    }
}

/// The same arithmetic on bf16 moments: read exactly, updated in f32, the step taken with the
/// f32 values, written back with stochastic rounding from `rng` (element i: its i-th output,
/// the low 16 bits for m, the next 16 for v).
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx2+fma", "x86_64+avx2+fma"))]
pub(super) fn bf16_moments(
    c: &Coeffs,
    rng: &ChunkRng,
    th: &mut [f32],
    g: &[f32],
    m: &mut [u16],
    v: &mut [u16],
) {
    let n = th.len();
    let (g, m, v) = (&g[..n], &mut m[..n], &mut v[..n]);
    for i in 0..n {
        let gi = g[i] * c.gscale;
        th[i] *= c.decay;
        let mut mi = bf16_to_f32(m[i]);
        let mut vi = bf16_to_f32(v[i]);
        mi += (1.0 - c.b1) * (gi - mi);
        vi = vi * c.b2 + (1.0 - c.b2) * gi * gi;
        let r = rng.at(i);
        m[i] = round_bf16(mi, r as u16);
        v[i] = round_bf16(vi, (r >> 16) as u16);
        let denom = vi.sqrt() / c.bc2_sqrt + c.eps;
        th[i] += -c.step_size * mi / denom;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The previous, sequential form of the bf16 chunk: the wide one must give its bits.
    fn sequential(
        c: &Coeffs,
        mut rng: ChunkRng,
        th: &mut [f32],
        g: &[f32],
        m: &mut [u16],
        v: &mut [u16],
    ) {
        for i in 0..th.len() {
            let gi = g[i] * c.gscale;
            th[i] *= c.decay;
            let mut mi = bf16_to_f32(m[i]);
            let mut vi = bf16_to_f32(v[i]);
            mi += (1.0 - c.b1) * (gi - mi);
            vi = vi * c.b2 + (1.0 - c.b2) * gi * gi;
            let r = rng.next_u64();
            m[i] = round_bf16(mi, r as u16);
            v[i] = round_bf16(vi, (r >> 16) as u16);
            let denom = vi.sqrt() / c.bc2_sqrt + c.eps;
            th[i] += -c.step_size * mi / denom;
        }
    }

    fn data(n: usize, salt: u64) -> Vec<f32> {
        let mut r = ChunkRng::new(salt, 0, 0, 0);
        (0..n)
            .map(|_| {
                let u = r.next_u64();
                // Magnitudes over many binades, both signs, and a few specials.
                match u % 97 {
                    0 => f32::INFINITY,
                    1 => f32::NAN,
                    2 => 0.0,
                    _ => {
                        ((u >> 11) as f32 / (1u64 << 53) as f32 - 0.5)
                            * 2f32.powi((u % 40) as i32 - 30)
                    }
                }
            })
            .collect()
    }

    #[test]
    fn wide_chunks_give_the_sequential_bits() {
        let c = Coeffs {
            decay: 1.0 - 5e-5 * 0.01,
            b1: 0.9,
            b2: 0.999,
            step_size: 5e-5 / (1.0 - 0.9f32.powi(3)),
            bc2_sqrt: (1.0 - 0.999f32.powi(3)).sqrt(),
            eps: 1e-8,
            gscale: 0.37,
        };
        let n = 1003; // not a multiple of any vector width
        let g = data(n, 1);
        let to_bf16 =
            |x: &Vec<f32>| -> Vec<u16> { x.iter().map(|&y| round_bf16(y.abs(), 0)).collect() };
        let (m0, v0) = (to_bf16(&data(n, 2)), to_bf16(&data(n, 3)));
        let th0: Vec<f32> = data(n, 4)
            .iter()
            .map(|x| if x.is_finite() { *x } else { 0.5 })
            .collect();
        let rng = || ChunkRng::new(11, 3, 7, 2);

        let (mut th_a, mut m_a, mut v_a) = (th0.clone(), m0.clone(), v0.clone());
        sequential(&c, rng(), &mut th_a, &g, &mut m_a, &mut v_a);
        let (mut th_b, mut m_b, mut v_b) = (th0.clone(), m0.clone(), v0.clone());
        bf16_moments(&c, &rng(), &mut th_b, &g, &mut m_b, &mut v_b);
        assert_eq!(m_a, m_b);
        assert_eq!(v_a, v_b);
        let bits = |x: &[f32]| x.iter().map(|y| y.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&th_a), bits(&th_b));
        assert!(
            th_a.iter().zip(&th0).filter(|(a, b)| a != b).count() > n / 2,
            "the step must move the weights"
        );
    }
}
