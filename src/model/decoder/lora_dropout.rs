//! PEFT's LoRA dropout (`lora_dropout` > 0): in a training pass the low-rank branch reads
//! drop(x) = x ⊙ m / (1 − p), m ∈ {0, 1} drawn per element with P(m = 1) = 1 − p (torch's
//! inverted `nn.Dropout`), so y = x·Wᵀ + b + s·(drop(x)·Aᵀ)·Bᵀ; the frozen W sees x itself.
//! Every other forward (sampling, scoring, the KL reference, export) is PEFT's eval mode: no
//! dropout. A [`LoraDropout`] is handed to a training pass only (`WeightProducts::lora_dropout`,
//! `grad::packed_weights::Products`), never stored in the model.
//!
//! The mask is not kept: each element's bit is a counter-based hash of (the mini-batch's key,
//! the projection, the sequence, the position, the feature), so a recomputed forward
//! (gradient checkpointing) and the hand-written backward draw exactly the mask the first
//! forward drew, whichever rows share a pass, and a resumed run the one an uninterrupted run
//! drew. A mask tensor exists only while its product runs, the size of the input it masks.
// The scenario's list, as `lora` re-exports it (not through `lora`, which imports this file).
use candle_core::{DType, Device, Result, Tensor};
use comlrl_scenario::PROJECTIONS;
use rayon::prelude::*;
use std::collections::HashMap;

/// Where a projection's adapter sits: (layer, module name).
pub type LoraSite = (usize, &'static str);

/// The masks of one training pass.
#[derive(Debug, Clone)]
pub struct LoraDropout {
    source: Source,
}

#[derive(Debug, Clone)]
enum Source {
    /// Drawn per element from `key`; row r of a projection's input (rows = seqs · width) is
    /// position r mod width of sequence `seqs[r / width]`.
    Hashed {
        key: u64,
        seqs: Vec<u64>,
        width: usize,
    },
    /// Given 0/1 masks (rows, in) per site (tests: PEFT's recorded masks).
    Fixed(HashMap<(usize, String), Tensor>),
}

impl LoraDropout {
    /// Masks drawn from `key` (see [`stream_key`]) for a pass whose rows are the sequences
    /// `seqs` (one stable id each, the same whichever pass computes it), `width` positions each.
    pub fn hashed(key: u64, seqs: Vec<u64>, width: usize) -> Self {
        Self {
            source: Source::Hashed { key, seqs, width },
        }
    }

    /// The given 0/1 masks, one (rows, in) per (layer, module) (a test hook: a recorded mask
    /// replays another implementation's draw).
    pub fn fixed(masks: HashMap<(usize, String), Tensor>) -> Self {
        Self {
            source: Source::Fixed(masks),
        }
    }

    /// drop(x)'s factor for the input x (rows, in) of the adapter at `site` with probability
    /// `p`: (rows, in) in `dtype`, each entry 0 or 1 / (1 − p).
    pub fn mask(
        &self,
        site: LoraSite,
        p: f64,
        rows: usize,
        in_dim: usize,
        dtype: DType,
        dev: &Device,
    ) -> Result<Tensor> {
        if !(0.0..1.0).contains(&p) {
            candle_core::bail!("lora dropout {p} is outside [0, 1)");
        }
        let scale = 1.0 / (1.0 - p);
        match &self.source {
            Source::Fixed(masks) => {
                let m = masks.get(&(site.0, site.1.to_string())).ok_or_else(|| {
                    candle_core::Error::Msg(format!(
                        "no dropout mask for layer {} {}",
                        site.0, site.1
                    ))
                })?;
                if m.dims() != [rows, in_dim] {
                    candle_core::bail!(
                        "dropout mask of layer {} {} is {:?}, the input ({rows}, {in_dim})",
                        site.0,
                        site.1,
                        m.dims()
                    );
                }
                (m.to_dtype(DType::F64)? * scale)?.to_dtype(dtype)
            }
            Source::Hashed { key, seqs, width } => {
                if *width == 0 || rows != seqs.len() * width {
                    candle_core::bail!(
                        "dropout over {rows} rows, but the pass has {} sequences of {width} positions",
                        seqs.len()
                    );
                }
                let module = PROJECTIONS
                    .iter()
                    .position(|m| *m == site.1)
                    .unwrap_or(PROJECTIONS.len());
                let site_key = mix(key ^ mix((site.0 as u64) << 8 | module as u64));
                let thr = threshold(p);
                let row_key = |r: usize| row_hash(site_key, seqs[r / width], (r % width) as u64);
                // The kept value rounded once in the mask's dtype (as torch scales in the
                // input's dtype).
                match dtype {
                    DType::F64 => {
                        let mut v = vec![0f64; rows * in_dim];
                        fill(&mut v, in_dim, &row_key, thr, scale);
                        Tensor::from_vec(v, (rows, in_dim), dev)
                    }
                    _ => {
                        let mut v = vec![0f32; rows * in_dim];
                        fill(&mut v, in_dim, &row_key, thr, scale as f32);
                        Tensor::from_vec(v, (rows, in_dim), dev)?.to_dtype(dtype)
                    }
                }
            }
        }
    }
}

/// Writes each row's kept entries as `kept` (the others 0), rows in parallel: features 2k and
/// 2k + 1 take the high and low 32 bits of the row's k-th draw (one hash per two elements).
fn fill<T: Copy + Send + Sync + Default>(
    v: &mut [T],
    in_dim: usize,
    row_key: &(dyn Fn(usize) -> u64 + Sync),
    thr: u64,
    kept: T,
) {
    let pick = |bits: u64| if bits >= thr { kept } else { T::default() };
    v.par_chunks_mut(in_dim.max(1))
        .enumerate()
        .for_each(|(r, row)| {
            let h = row_key(r);
            for (k, pair) in row.chunks_mut(2).enumerate() {
                let d = draw(h, k);
                pair[0] = pick(d >> 32);
                if let Some(e) = pair.get_mut(1) {
                    *e = pick(d & 0xFFFF_FFFF);
                }
            }
        });
}

/// An agent's dropout key: the run's seed and the agent's index.
pub fn agent_key(seed: u64, agent: u64) -> u64 {
    mix(mix(seed ^ 0x4C6F_5241_4472_6F70) ^ agent)
}

/// The key of one mini-batch's masks: the agent's key ([`agent_key`]) and the agent's
/// optimizer step the mini-batch's gradients are for (checkpointed, so a resumed run draws the
/// same).
pub fn stream_key(agent: u64, step: u64) -> u64 {
    mix(agent ^ mix(step))
}

/// The hash of one row of a projection's input: sequence `seq`, position `t`.
fn row_hash(site_key: u64, seq: u64, t: u64) -> u64 {
    mix(mix(site_key ^ seq) ^ t)
}

/// Drop where an element's 32-bit draw falls below this: round(p · 2³²), so the kept fraction
/// is 1 − p within 2⁻³³.
fn threshold(p: f64) -> u64 {
    (p * 4_294_967_296.0).round() as u64
}

/// The k-th 64-bit draw of the row with hash `h` (SplitMix64's stream from `h`).
fn draw(h: u64, k: usize) -> u64 {
    mix(h.wrapping_add((k as u64).wrapping_add(1).wrapping_mul(GOLDEN)))
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser: every input bit reaches every output bit.
fn mix(z: u64) -> u64 {
    let z = z.wrapping_add(GOLDEN);
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over a large input the kept fraction is 1 − p and every kept entry is 1 / (1 − p);
    /// another step's key, another projection or another sequence draw other masks.
    #[test]
    fn kept_fraction_is_one_minus_p() -> Result<()> {
        let dev = Device::Cpu;
        for p in [0.05, 0.1, 0.5, 0.9] {
            let d = LoraDropout::hashed(stream_key(agent_key(7, 1), 3), (0..16).collect(), 64);
            let m = d.mask((2, "up_proj"), p, 16 * 64, 512, DType::F32, &dev)?;
            let v = m.flatten_all()?.to_vec1::<f32>()?;
            let kept = v.iter().filter(|&&x| x != 0.0).count() as f64 / v.len() as f64;
            // 524,288 draws: the standard deviation of the fraction is below 7e-4.
            assert!((kept - (1.0 - p)).abs() < 4e-3, "p {p}: kept {kept}");
            let s = (1.0 / (1.0 - p)) as f32;
            assert!(v.iter().all(|&x| x == 0.0 || x == s));
        }
        let m = |key, site: LoraSite, seqs: Vec<u64>| {
            LoraDropout::hashed(key, seqs, 4)
                .mask(site, 0.5, 8, 256, DType::F32, &dev)?
                .flatten_all()?
                .to_vec1::<f32>()
        };
        let a = m(stream_key(agent_key(7, 1), 3), (0, "q_proj"), vec![0, 1])?;
        assert_eq!(
            a,
            m(stream_key(agent_key(7, 1), 3), (0, "q_proj"), vec![0, 1])?,
            "deterministic"
        );
        assert_ne!(
            a,
            m(stream_key(agent_key(7, 1), 4), (0, "q_proj"), vec![0, 1])?
        );
        assert_ne!(
            a,
            m(stream_key(agent_key(7, 2), 3), (0, "q_proj"), vec![0, 1])?
        );
        assert_ne!(
            a,
            m(stream_key(agent_key(7, 1), 3), (0, "k_proj"), vec![0, 1])?
        );
        assert_ne!(
            a,
            m(stream_key(agent_key(7, 1), 3), (1, "q_proj"), vec![0, 1])?
        );
        // A sequence's rows are its own whichever pass (and row) holds it.
        let b = m(stream_key(agent_key(7, 1), 3), (0, "q_proj"), vec![5, 0])?;
        assert_eq!(a[..4 * 256], b[4 * 256..]);
        assert_ne!(a[4 * 256..], b[..4 * 256]);
        Ok(())
    }

    /// Every feature, the last of an odd width included (half a draw), is kept at 1 − p.
    #[test]
    fn every_column_is_kept_at_one_minus_p() -> Result<()> {
        let (rows, width, p) = (20_000, 7, 0.3);
        let d = LoraDropout::hashed(agent_key(1, 0), (0..rows as u64).collect(), 1);
        let m = d.mask((3, "down_proj"), p, rows, width, DType::F64, &Device::Cpu)?;
        let v = m.to_vec2::<f64>()?;
        for c in 0..width {
            let kept = v.iter().filter(|r| r[c] != 0.0).count() as f64 / rows as f64;
            // 20,000 draws: the standard deviation is 3.2e-3.
            assert!((kept - (1.0 - p)).abs() < 0.016, "column {c}: kept {kept}");
        }
        Ok(())
    }

    #[test]
    fn refuses_rows_that_are_not_the_pass() {
        let d = LoraDropout::hashed(1, vec![0, 1], 4);
        let e = d
            .mask((0, "q_proj"), 0.1, 7, 3, DType::F32, &Device::Cpu)
            .unwrap_err();
        assert!(e.to_string().contains("2 sequences"), "{e}");
        assert!(d
            .mask((0, "q_proj"), 1.0, 8, 3, DType::F32, &Device::Cpu)
            .is_err());
    }
}
