//! The reward processor chain (CoMLRL's `RewardProcessors` plus `shift`): validated once from
//! `ProcessorSpec`s, then applied in order to each weighted reward.
use crate::error::RewardError;
use crate::spec::{ExpScaleSpec, ProcessorSpec};

/// One validated processor. Formulas are documented on [`ProcessorSpec`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Processor {
    /// `x * factor`.
    Scale(f64),
    /// `x + offset`.
    Shift(f64),
    /// `max(min, min(max, x))`.
    Clamp {
        /// Lower bound.
        min: f64,
        /// Upper bound.
        max: f64,
    },
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `exp(f x) - 1` for `x > 0`, else `1 - exp(-f x)`.
    ExpScale(f64),
}

impl Processor {
    /// Validate a spec: parameters must be finite and `clamp` needs `min <= max`.
    pub fn from_spec(spec: &ProcessorSpec) -> Result<Self, RewardError> {
        let finite = |what: &str, v: f64| {
            if v.is_finite() {
                Ok(v)
            } else {
                Err(RewardError::Config(format!(
                    "processor `{what}` needs a finite number, got {v}"
                )))
            }
        };
        Ok(match spec {
            ProcessorSpec::Scale(f) => Processor::Scale(finite("scale", *f)?),
            ProcessorSpec::Shift(o) => Processor::Shift(finite("shift", *o)?),
            ProcessorSpec::Clamp { min, max } => {
                let (min, max) = (finite("clamp.min", *min)?, finite("clamp.max", *max)?);
                if min > max {
                    return Err(RewardError::Config(format!(
                        "processor `clamp` needs min <= max, got min {min} > max {max}"
                    )));
                }
                Processor::Clamp { min, max }
            }
            ProcessorSpec::Sigmoid => Processor::Sigmoid,
            ProcessorSpec::ExpScale(ExpScaleSpec { factor }) => {
                Processor::ExpScale(finite("exp_scale.factor", *factor)?)
            }
        })
    }

    /// Short name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Processor::Scale(_) => "scale",
            Processor::Shift(_) => "shift",
            Processor::Clamp { .. } => "clamp",
            Processor::Sigmoid => "sigmoid",
            Processor::ExpScale(_) => "exp_scale",
        }
    }

    /// Apply to one value.
    pub fn apply(&self, x: f64) -> f64 {
        match *self {
            Processor::Scale(f) => x * f,
            Processor::Shift(o) => x + o,
            Processor::Clamp { min, max } => x.clamp(min, max),
            Processor::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Processor::ExpScale(f) => {
                if x > 0.0 {
                    (f * x).exp() - 1.0
                } else {
                    1.0 - (-f * x).exp()
                }
            }
        }
    }
}

/// Validate a whole chain.
pub fn build_chain(specs: &[ProcessorSpec]) -> Result<Vec<Processor>, RewardError> {
    specs.iter().map(Processor::from_spec).collect()
}

/// Apply a chain in order; an infinite or NaN result is an error naming the processor.
pub fn apply_chain(chain: &[Processor], mut x: f64) -> Result<f64, RewardError> {
    for (i, p) in chain.iter().enumerate() {
        let y = p.apply(x);
        if !y.is_finite() {
            return Err(RewardError::Config(format!(
                "processor #{} (`{}`) turned {x} into {y}; use smaller factors or put a `clamp` before it",
                i + 1,
                p.name()
            )));
        }
        x = y;
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(spec: ProcessorSpec) -> Processor {
        Processor::from_spec(&spec).expect("valid spec")
    }

    #[test]
    fn formulas() {
        assert_eq!(p(ProcessorSpec::Scale(100.0)).apply(0.5), 50.0);
        assert_eq!(p(ProcessorSpec::Shift(-1.0)).apply(0.5), -0.5);
        let c = p(ProcessorSpec::Clamp { min: 0.0, max: 1.0 });
        assert_eq!(
            (c.apply(-3.0), c.apply(0.25), c.apply(7.0)),
            (0.0, 0.25, 1.0)
        );
        assert_eq!(p(ProcessorSpec::Sigmoid).apply(0.0), 0.5);
        assert!((p(ProcessorSpec::Sigmoid).apply(2.0) - 0.880_797_077_977_882_3).abs() < 1e-15);
        let e = p(ProcessorSpec::ExpScale(ExpScaleSpec { factor: 2.0 }));
        assert!((e.apply(1.0) - (2f64.exp() - 1.0)).abs() < 1e-15);
        assert!((e.apply(-1.0) - (1.0 - 2f64.exp())).abs() < 1e-15);
        assert_eq!(e.apply(0.0), 0.0);
    }

    #[test]
    fn validation_and_overflow() {
        let err = Processor::from_spec(&ProcessorSpec::Clamp { min: 2.0, max: 1.0 });
        assert!(err.is_err_and(|e| e.to_string().contains("min <= max")));
        assert!(Processor::from_spec(&ProcessorSpec::Scale(f64::NAN)).is_err());
        let chain = build_chain(&[ProcessorSpec::ExpScale(ExpScaleSpec { factor: 1000.0 })])
            .expect("valid");
        let err = apply_chain(&chain, 1.0).expect_err("overflow");
        assert!(err.to_string().contains("exp_scale"), "{err}");
    }
}
