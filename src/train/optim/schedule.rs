//! Learning-rate schedule: linear warm-up, then constant, linear decay or cosine decay to 0
//! over the run's optimizer steps.
use comlrl_scenario::plan::LrScheduler;

/// Learning rate for optimizer step `step` (0-based) of `total`.
pub fn lr_at(base: f64, step: usize, total: usize, warmup: usize, kind: LrScheduler) -> f64 {
    if warmup > 0 && step < warmup {
        return base * (step + 1) as f64 / warmup as f64;
    }
    let span = total.saturating_sub(warmup).max(1) as f64;
    let progress = ((step - warmup.min(step)) as f64 / span).min(1.0);
    match kind {
        LrScheduler::Constant => base,
        LrScheduler::Linear => base * (1.0 - progress),
        LrScheduler::Cosine => base * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_decay() {
        assert_eq!(lr_at(1.0, 0, 10, 2, LrScheduler::Constant), 0.5);
        assert_eq!(lr_at(1.0, 1, 10, 2, LrScheduler::Constant), 1.0);
        assert_eq!(lr_at(1.0, 5, 10, 0, LrScheduler::Constant), 1.0);
        assert!((lr_at(1.0, 5, 10, 0, LrScheduler::Linear) - 0.5).abs() < 1e-12);
        assert!((lr_at(1.0, 0, 10, 0, LrScheduler::Cosine) - 1.0).abs() < 1e-12);
        assert!((lr_at(1.0, 5, 10, 0, LrScheduler::Cosine) - 0.5).abs() < 1e-12);
    }
}
