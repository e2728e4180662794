//! The actor-critic advantages (IAC and MAAC, per agent): Â = (A − mean A) / max(std A, 1e-6)
//! over the agent's whole buffer of A = target − V_old, with the population standard
//! deviation, when normalisation is on and the buffer holds more than one sample (else Â = A);
//! in f32, as CoMLRL computes them (`ActorCriticTrainerBase._prepare_advantages`).

/// (A, Â) of a buffer of `targets` with old values `old_values`.
pub fn advantages(targets: &[f32], old_values: &[f32], normalize: bool) -> (Vec<f32>, Vec<f32>) {
    let a: Vec<f32> = targets.iter().zip(old_values).map(|(t, v)| t - v).collect();
    if !normalize || a.len() < 2 {
        return (a.clone(), a);
    }
    let n = a.len() as f32;
    let mean = a.iter().sum::<f32>() / n;
    let var = a.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n;
    let std = var.sqrt().max(1e-6);
    let norm = a.iter().map(|x| (x - mean) / std).collect();
    (a, norm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z_scores_over_the_buffer_with_the_population_std() {
        let (a, n) = advantages(&[1.0, 0.0, 0.5, 2.0], &[0.5, 0.5, 0.5, 0.5], true);
        assert_eq!(a, [0.5, -0.5, 0.0, 1.5]);
        // mean 0.375, population std sqrt(0.546875).
        let std = 0.546875f32.sqrt();
        for (x, y) in n.iter().zip(&a) {
            assert!((x - (y - 0.375) / std).abs() < 1e-6);
        }
        // One sample, or normalisation off: the raw advantages.
        assert_eq!(advantages(&[2.0], &[0.5], true).1, [1.5]);
        assert_eq!(advantages(&[1.0, 0.0], &[0.0, 0.0], false).1, [1.0, 0.0]);
        // Equal advantages: the clamp keeps them finite (all 0).
        assert_eq!(advantages(&[1.0, 1.0], &[0.0, 0.0], true).1, [0.0, 0.0]);
    }
}
