//! Storage of AdamW's two moments: plain f32, or bf16 (half the bytes) written with stochastic
//! rounding. A bf16 moment is read exactly as f32, updated in f32 and rounded back by adding a
//! random 16-bit value to the low half of the f32 bit pattern and truncating, so it rounds up
//! with probability equal to its distance from the lower neighbour: unbiased on average, where
//! round-to-nearest would let small updates vanish (β2 = 0.999 changes `v` by 0.1% a step,
//! below bf16's 0.4% resolution). The random bits come from a counter-based generator keyed by
//! (seed, optimizer step, parameter index, chunk index), so a run, its resume and any thread
//! count round identically.

/// Numeric type of the optimizer's moment buffers (`trainer.optimizer_state_dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateDtype {
    /// 4 bytes per moment: torch's AdamW exactly.
    #[default]
    F32,
    /// 2 bytes per moment, stochastic rounding on every write.
    Bf16,
}

/// One moment buffer, one entry per parameter element.
#[derive(Debug, Clone, PartialEq)]
pub enum Moments {
    /// f32 values.
    F32(Vec<f32>),
    /// bf16 bit patterns (the high 16 bits of an f32).
    Bf16(Vec<u16>),
}

impl Moments {
    /// `n` zeros of `dtype`, written now (see [`zeroed`]).
    pub fn zeros(n: usize, dtype: StateDtype) -> Self {
        match dtype {
            StateDtype::F32 => Moments::F32(zeroed(n)),
            StateDtype::Bf16 => Moments::Bf16(zeroed(n)),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Moments::F32(v) => v.len(),
            Moments::Bf16(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The storage type.
    pub fn dtype(&self) -> StateDtype {
        match self {
            Moments::F32(_) => StateDtype::F32,
            Moments::Bf16(_) => StateDtype::Bf16,
        }
    }

    /// The values as f32 (exact for both storages).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            Moments::F32(v) => v.clone(),
            Moments::Bf16(v) => v.iter().map(|&b| bf16_to_f32(b)).collect(),
        }
    }

    /// The values converted to `dtype`: bf16 → f32 is exact, f32 → bf16 rounds to nearest
    /// (even), which is deterministic.
    pub fn converted(self, dtype: StateDtype) -> Self {
        match (self, dtype) {
            (Moments::F32(v), StateDtype::Bf16) => Moments::Bf16(
                v.iter()
                    .map(|&x| half::bf16::from_f32(x).to_bits())
                    .collect(),
            ),
            (m @ Moments::Bf16(_), StateDtype::F32) => Moments::F32(m.to_f32()),
            (m, _) => m,
        }
    }
}

/// `n` zeros, written now. `vec![0; n]` would calloc untouched pages that the first step reads
/// (mapping the shared zero page) and then writes: a second, copy-on-write fault per page with
/// a TLB flush across cores, all in the first optimizer step. Written by the pool's threads, so
/// the kernel clears the fresh pages of a large model's moments on every core at once rather
/// than one fault at a time on one thread.
fn zeroed<T: Copy + Default + Send>(n: usize) -> Vec<T> {
    use rayon::prelude::*;
    let mut v: Vec<T> = Vec::with_capacity(n);
    v.spare_capacity_mut()[..n]
        .par_chunks_mut(1 << 20)
        .for_each(|c| {
            for x in c {
                x.write(T::default());
            }
        });
    // SAFETY: the capacity is at least n, and each of the first n elements was written above.
    unsafe { v.set_len(n) };
    v
}

/// A bf16 bit pattern as f32 (exact).
#[inline(always)]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// `x` rounded to bf16 stochastically with the random bits `r`: up (in magnitude) with
/// probability (low 16 bits of `x`) / 65536. NaN stays a quiet NaN; a value within one bf16
/// step of the largest finite value may round to infinity, as it would to nearest.
#[inline(always)]
pub fn round_bf16(x: f32, r: u16) -> u16 {
    let bits = x.to_bits();
    // ±infinity (and NaN) get nothing added: it would carry into a NaN pattern. Selects, not
    // branches, so the optimizer's loops vectorise.
    let add = if bits & 0x7f80_0000 == 0x7f80_0000 {
        0
    } else {
        r as u32
    };
    let rounded = (bits.wrapping_add(add) >> 16) as u16;
    if x.is_nan() {
        0x7fc0
    } else {
        rounded
    }
}

/// SplitMix64's finaliser: a bijective mix of 64 bits.
#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64's increment.
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// The random stream of one chunk of one parameter at one optimizer step (SplitMix64).
pub struct ChunkRng(u64);

impl ChunkRng {
    /// The stream keyed by `(seed, step, param, chunk)`.
    pub fn new(seed: u64, step: u64, param: usize, chunk: usize) -> Self {
        let k = mix(seed ^ 0x5851_f42d_4c95_7f2d);
        let k = mix(k ^ step);
        let k = mix(k ^ param as u64);
        Self(mix(k ^ chunk as u64))
    }

    /// The next 64 random bits.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix(self.0)
    }

    /// The stream's output number `i` (from 0) without advancing it: what the (i + 1)-th call
    /// of [`ChunkRng::next_u64`] on a fresh stream returns.
    #[inline(always)]
    pub fn at(&self, i: usize) -> u64 {
        mix(self
            .0
            .wrapping_add((i as u64).wrapping_add(1).wrapping_mul(GAMMA)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by the pool in chunks: every element zero, whatever the length (a partial last
    /// chunk, more than one chunk, none).
    #[test]
    fn zeros_are_zero_and_of_the_length_asked() {
        for n in [0, 1, (1 << 20) + 3, 3 << 20] {
            match Moments::zeros(n, StateDtype::F32) {
                Moments::F32(v) => assert!(v.len() == n && v.iter().all(|&x| x == 0.0)),
                m => panic!("f32 asked, {:?} given", m.dtype()),
            }
            match Moments::zeros(n, StateDtype::Bf16) {
                Moments::Bf16(v) => assert!(v.len() == n && v.iter().all(|&x| x == 0)),
                m => panic!("bf16 asked, {:?} given", m.dtype()),
            }
        }
    }

    #[test]
    fn stochastic_rounding_is_unbiased_and_hits_both_neighbours() {
        // 1 + 0.3 bf16 steps above 1.0 (a bf16 step at 1.0 is 2^-7).
        let lo = 1.0f32;
        let hi = bf16_to_f32(half::bf16::from_f32(lo).to_bits() + 1);
        for (x, sign) in [
            (lo + 0.3 * (hi - lo), 1.0f32),
            (-(lo + 0.7 * (hi - lo)), -1.0),
        ] {
            let mut rng = ChunkRng::new(7, 1, 0, 0);
            let n = 200_000;
            let (mut sum, mut ups, mut downs) = (0f64, 0, 0);
            for _ in 0..n {
                let y = bf16_to_f32(round_bf16(x, rng.next_u64() as u16));
                if y.abs() == hi {
                    ups += 1;
                } else if y.abs() == lo {
                    downs += 1;
                } else {
                    panic!("{x} rounded to {y}, not a neighbour");
                }
                sum += y as f64;
            }
            let mean = sum / n as f64;
            // Bernoulli(p) over 200k draws: sd of the mean is < 0.0012 steps; allow 5 sd.
            let tol = 0.006 * (hi - lo) as f64;
            assert!((mean - x as f64).abs() < tol, "mean {mean} vs {x}");
            assert!(ups > 0 && downs > 0, "{ups} up, {downs} down");
            assert_eq!(mean.signum() as f32, sign);
        }
    }

    #[test]
    fn exact_values_and_specials_are_kept() {
        // A value bf16 holds exactly (low 16 bits zero) never moves, whatever the random bits.
        let mut rng = ChunkRng::new(1, 2, 3, 4);
        for x in [
            0.0f32,
            -0.0,
            1.0,
            -2.5,
            2f32.powi(-100), // exact in bf16, far below 1
            f32::INFINITY,
            f32::NEG_INFINITY,
        ] {
            let b = round_bf16(x, rng.next_u64() as u16);
            assert_eq!(bf16_to_f32(b).to_bits(), x.to_bits(), "{x}");
        }
        assert!(bf16_to_f32(round_bf16(f32::NAN, 0xffff)).is_nan());
    }

    #[test]
    fn streams_are_deterministic_and_keyed() {
        let draw = |s, t, p, c| {
            let mut r = ChunkRng::new(s, t, p, c);
            (0..4).map(|_| r.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(1, 2, 3, 4), draw(1, 2, 3, 4));
        let base = draw(1, 2, 3, 4);
        for other in [
            draw(2, 2, 3, 4),
            draw(1, 3, 3, 4),
            draw(1, 2, 4, 4),
            draw(1, 2, 3, 5),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn conversion_round_trips() {
        let m = Moments::F32(vec![1.0, 0.1, -3.0e-5]);
        let b = m.clone().converted(StateDtype::Bf16);
        assert_eq!(b.dtype(), StateDtype::Bf16);
        let back = b.converted(StateDtype::F32).to_f32();
        for (x, y) in [1.0f32, 0.1, -3.0e-5].iter().zip(back) {
            assert!((x - y).abs() <= x.abs() / 256.0, "{x} vs {y}");
        }
    }
}
