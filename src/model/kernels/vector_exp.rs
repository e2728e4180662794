//! Vectorisable f32 math for the fused kernels: `exp` (and the sigmoid built on it), Cody–Waite
//! range reduction to |r| ≤ ln2/2, a degree-7 Taylor polynomial, and the power of two assembled
//! from the exponent bits; and lane-split sum / dot / max reductions. Inlined into the
//! multiversioned loops so they compile to AVX-512/AVX2 there (libm's `expf` is scalar);
//! relative error ≤ 4 ulp over the whole range (tested against `f32::exp`), exact 0 below −87.

/// e^x for f32, vectorisable. Below −87 returns 0; above 88 returns e^88.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding 1.5·2²³ rounds to an integer in the low mantissa bits.
    const SHIFT: f32 = 12_582_912.0;
    let xc = x.clamp(-87.0, 88.0);
    let t = xc * LOG2E + SHIFT;
    let n = t - SHIFT;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let e = (t.to_bits() as i32 - SHIFT.to_bits() as i32 + 127) << 23;
    let y = p * f32::from_bits(e as u32);
    if x < -87.0 {
        0.0
    } else {
        y
    }
}

/// 1 / (1 + e^−x).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// Lanes of the reductions below: independent partial results, so the loops vectorise (a
/// single running f32 sum or max is a serial dependency LLVM may not reorder).
const LANES: usize = 16;

/// Σ aᵢ·bᵢ, vectorisable.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    acc.iter().sum::<f32>() + tail
}

/// Σ aᵢ·bᵢ·cᵢ, vectorisable.
#[inline(always)]
pub fn dot3(a: &[f32], b: &[f32], c: &[f32]) -> f32 {
    let n = a.len().min(b.len()).min(c.len());
    let mut acc = [0f32; LANES];
    let full = n / LANES * LANES;
    for ((x, y), z) in a[..full]
        .chunks_exact(LANES)
        .zip(b[..full].chunks_exact(LANES))
        .zip(c[..full].chunks_exact(LANES))
    {
        for i in 0..LANES {
            acc[i] += x[i] * y[i] * z[i];
        }
    }
    let tail: f32 = (full..n).map(|j| a[j] * b[j] * c[j]).sum();
    acc.iter().sum::<f32>() + tail
}

/// Σ aᵢ, vectorisable.
#[inline(always)]
pub fn sum(a: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut c = a.chunks_exact(LANES);
    for x in &mut c {
        for i in 0..LANES {
            acc[i] += x[i];
        }
    }
    acc.iter().sum::<f32>() + c.remainder().iter().sum::<f32>()
}

/// max aᵢ (−∞ for an empty slice), vectorisable; NaNs are skipped.
#[inline(always)]
pub fn max(a: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut c = a.chunks_exact(LANES);
    for x in &mut c {
        for i in 0..LANES {
            acc[i] = if x[i] > acc[i] { x[i] } else { acc[i] };
        }
    }
    let m = acc.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    c.remainder().iter().fold(m, |m, &v| m.max(v))
}

/// Σ e^(aᵢ − shift), vectorisable.
#[inline(always)]
pub fn sum_exp(a: &[f32], shift: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let mut c = a.chunks_exact(LANES);
    for x in &mut c {
        for i in 0..LANES {
            acc[i] += exp(x[i] - shift);
        }
    }
    let tail: f32 = c.remainder().iter().map(|&x| exp(x - shift)).sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f32, b: f32) -> i64 {
        (a.to_bits() as i64 - b.to_bits() as i64).abs()
    }

    #[test]
    fn exp_matches_libm_within_a_few_ulp() {
        let mut worst = 0;
        let mut x = -86.9f32;
        while x < 88.0 {
            let (a, b) = (exp(x), x.exp());
            worst = worst.max(ulps(a, b));
            x += 0.000_731;
        }
        assert!(worst <= 4, "worst error {worst} ulp");
    }

    #[test]
    fn exp_edges() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-3.4e38), 0.0);
        assert!(exp(f32::NAN).is_nan());
        assert!(exp(100.0).is_finite());
        assert!((sigmoid(0.0) - 0.5).abs() < 1e-7);
        let v: Vec<f32> = (0..37).map(|i| (i as f32 * 0.7).sin()).collect();
        let w: Vec<f32> = (0..37).map(|i| (i as f32 * 0.3).cos()).collect();
        let d: f32 = v.iter().zip(&w).map(|(a, b)| a * b).sum();
        assert!((dot(&v, &w) - d).abs() < 1e-5);
        assert!((sum(&v) - v.iter().sum::<f32>()).abs() < 1e-5);
        let d3: f32 = v.iter().zip(&w).map(|(a, b)| a * b * b).sum();
        assert!((dot3(&v, &w, &w) - d3).abs() < 1e-5);
        assert_eq!(max(&v), v.iter().fold(f32::MIN, |m, &x| m.max(x)));
        assert_eq!(max(&[]), f32::NEG_INFINITY);
        let se: f32 = v.iter().map(|&x| (x - 0.5).exp()).sum();
        assert!((sum_exp(&v, 0.5) - se).abs() < 1e-5 * se);
        assert!(sigmoid(-1000.0) < 1e-37);
        assert_eq!(sigmoid(1000.0), 1.0);
    }
}
