//! Llama 3 RoPE scaling as llama.cpp stores it: not as metadata but as a `rope_freqs.weight`
//! tensor of per-frequency factors (convert_hf_to_gguf.py). Computing the factors from an HF
//! config, and recovering config parameters that reproduce a file's factors.
use serde_json::{json, Value as Json};

type R<T> = std::result::Result<T, String>;

/// The Llama 3 scaling parameters of an HF config (`rope_scaling` or `rope_parameters` with
/// `rope_type: llama3`): (factor, low_freq_factor, high_freq_factor, original context).
pub fn llama3_params(cfg: &Json) -> Option<(f64, f64, f64, f64)> {
    let s = [cfg.get("rope_parameters"), cfg.get("rope_scaling")]
        .into_iter()
        .flatten()
        .find(|s| {
            s.get("rope_type")
                .or_else(|| s.get("type"))
                .and_then(|t| t.as_str())
                == Some("llama3")
        })?;
    let f = |k: &str, d: f64| s.get(k).and_then(|v| v.as_f64()).unwrap_or(d);
    Some((
        f("factor", 8.0),
        f("low_freq_factor", 1.0),
        f("high_freq_factor", 4.0),
        f("original_max_position_embeddings", 8192.0),
    ))
}

/// The factors llama.cpp multiplies each rotary wavelength by (`dim / 2` of them).
pub fn factors(
    theta: f64,
    dim: usize,
    (factor, lf, hf, old_ctx): (f64, f64, f64, f64),
) -> Vec<f32> {
    let (low_wl, high_wl) = (old_ctx / lf, old_ctx / hf);
    (0..dim / 2)
        .map(|i| {
            let freq = 1.0 / theta.powf((2 * i) as f64 / dim as f64);
            let wl = 2.0 * std::f64::consts::PI / freq;
            let r = if wl < high_wl {
                1.0
            } else if wl > low_wl {
                factor
            } else {
                let smooth = (old_ctx / wl - lf) / (hf - lf);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            r as f32
        })
        .collect()
}

/// Llama 3 parameters reproducing `stored` (within 1e-3 relative). Only `L/(hf-lf)` and
/// `lf/(hf-lf)` are identifiable from the factors, so `low_freq_factor` is taken as 1 (every
/// Llama 3.x); with fewer than two interpolated factors `high_freq_factor` 4 is assumed too, and
/// with none the original context 8192 — each guess is kept only if it reproduces the file.
pub fn recover(theta: f64, dim: usize, stored: &[f32]) -> R<Json> {
    if stored.len() != dim / 2 {
        return Err(format!(
            "rope_freqs.weight has {} factors but the head size {dim} needs {}",
            stored.len(),
            dim / 2
        ));
    }
    let factor = stored.iter().fold(1f64, |m, &x| m.max(x as f64));
    let wl = |i: usize| 2.0 * std::f64::consts::PI * theta.powf((2 * i) as f64 / dim as f64);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-4 * b.abs().max(1.0);
    let smooth: Vec<(f64, f64)> = stored
        .iter()
        .enumerate()
        .filter(|(_, &f)| !close(f as f64, 1.0) && !close(f as f64, factor))
        .map(|(i, &f)| {
            let s = (1.0 / f as f64 - 1.0 / factor) / (1.0 - 1.0 / factor);
            (1.0 / wl(i), s)
        })
        .collect();
    let (lf, hf, old_ctx) = match smooth.as_slice() {
        [] => (1.0, 4.0, 8192.0),
        [(x, s)] => (1.0, 4.0, ((3.0 * s + 1.0) / x).round()),
        pts => {
            // Least-squares line s = a·x − b through the interpolated points.
            let n = pts.len() as f64;
            let (mx, ms) = pts
                .iter()
                .fold((0.0, 0.0), |(a, b), (x, s)| (a + x / n, b + s / n));
            let (sxy, sxx) = pts.iter().fold((0.0, 0.0), |(p, q), (x, s)| {
                (p + (x - mx) * (s - ms), q + (x - mx) * (x - mx))
            });
            let a = sxy / sxx;
            let b = a * mx - ms;
            if !(a > 0.0 && b > 0.0) {
                return Err(
                    "rope_freqs.weight is not reproduced by Llama 3 scaling (its interpolated factors fit no line)".into(),
                );
            }
            // f32 factors: keep 6 significant digits of the high factor (3.99999997 → 4).
            let hf = 1.0 + 1.0 / b;
            (1.0, (hf * 1e5).round() / 1e5, (a / b).round())
        }
    };
    let params = (factor, lf, hf, old_ctx);
    let again = factors(theta, dim, params);
    if let Some(i) = (0..again.len()).find(|&i| !close(again[i] as f64, stored[i] as f64)) {
        return Err(format!(
            "rope_freqs.weight[{i}] = {} is not reproduced by Llama 3 scaling (factor {factor}, \
             low/high freq factor {lf}/{hf}, original context {old_ctx} give {})",
            stored[i], again[i]
        ));
    }
    Ok(
        json!({"rope_type": "llama3", "factor": factor, "low_freq_factor": lf,
              "high_freq_factor": hf, "original_max_position_embeddings": old_ctx as u64}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(theta: f64, dim: usize, p: (f64, f64, f64, f64)) -> Json {
        let f = factors(theta, dim, p);
        let r = recover(theta, dim, &f).unwrap();
        let back = llama3_params(&json!({ "rope_scaling": r.clone() })).unwrap();
        assert_eq!(
            factors(theta, dim, back),
            f,
            "recovered parameters reproduce the factors"
        );
        r
    }

    #[test]
    fn llama31_parameters_are_recovered_exactly() {
        // Llama 3.1 8B / 3.2: head 128, θ 5e5, factor 8, 1 / 4, 8192 (several interpolated factors).
        let r = round_trip(500000.0, 128, (8.0, 1.0, 4.0, 8192.0));
        assert_eq!(r["factor"], 8.0);
        assert_eq!(r["high_freq_factor"], 4.0);
        assert_eq!(r["original_max_position_embeddings"], 8192);
        // tiny-llama: head 16, one interpolated factor.
        let r = round_trip(500000.0, 16, (8.0, 1.0, 4.0, 8192.0));
        assert_eq!(r["original_max_position_embeddings"], 8192);
        // Llama 3.2 3B uses factor 32.
        assert_eq!(
            round_trip(500000.0, 128, (32.0, 1.0, 4.0, 8192.0))["factor"],
            32.0
        );
        // Other low/high factors: an equivalent parameter set (same factors) comes back.
        round_trip(500000.0, 128, (4.0, 2.0, 8.0, 4096.0));
    }

    #[test]
    fn factors_that_are_not_llama3_are_refused() {
        let mut f = factors(500000.0, 128, (8.0, 1.0, 4.0, 8192.0));
        f[3] = 2.5;
        let e = recover(500000.0, 128, &f).unwrap_err();
        assert!(e.contains("is not reproduced by Llama 3 scaling"), "{e}");
        assert!(recover(500000.0, 64, &f)
            .unwrap_err()
            .contains("head size 64"));
        assert!(llama3_params(&json!({"rope_scaling": {"rope_type": "linear"}})).is_none());
    }
}
