//! The length-ratio joint reward (CoMLRL's seed task) as a native comlrl plugin: 1 when
//! agent 1's answer is `target_min`..`target_max` times as long as agent 0's (in characters),
//! decaying as `exp(-distance)` outside, 0 when agent 0's answer is empty.
//!
//! Params (`params:` in the scenario): `target_min` (default 2.0), `target_max` (default 3.0).
use comlrl_plugin_api::{export_reward, Reward, Sample};

/// Default `target_min`.
pub const DEFAULT_TARGET_MIN: f64 = 2.0;
/// Default `target_max`.
pub const DEFAULT_TARGET_MAX: f64 = 3.0;

/// The reward with its parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LenRatio {
    /// Lower bound of the target ratio `len2 / len1` (inclusive).
    pub target_min: f64,
    /// Upper bound of the target ratio (inclusive).
    pub target_max: f64,
}

impl LenRatio {
    /// The reward for character counts `len1` (agent 0) and `len2` (agent 1).
    pub fn of_counts(&self, len1: usize, len2: usize) -> f64 {
        if len1 == 0 {
            return 0.0;
        }
        let ratio = len2 as f64 / len1 as f64;
        if ratio < self.target_min {
            (-(self.target_min - ratio)).exp()
        } else if ratio > self.target_max {
            (-(ratio - self.target_max)).exp()
        } else {
            1.0
        }
    }
}

/// Read an optional finite number from the params object.
fn number(
    params: &serde_json::Map<String, serde_json::Value>,
    key: &str,
    default: f64,
) -> Result<f64, String> {
    match params.get(key) {
        None => Ok(default),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() => Ok(x),
            _ => Err(format!("params.{key} must be a finite number, got {v}")),
        },
    }
}

impl Reward for LenRatio {
    const NAME: &'static str = "len_ratio";

    fn create(params_json: &str) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_str(params_json)
            .map_err(|e| format!("params are not valid JSON: {e}"))?;
        let empty = serde_json::Map::new();
        let params = match &value {
            serde_json::Value::Object(m) => m,
            serde_json::Value::Null => &empty,
            other => return Err(format!("params must be a map, got {other}")),
        };
        if let Some(unknown) = params
            .keys()
            .find(|k| *k != "target_min" && *k != "target_max")
        {
            return Err(format!(
                "unknown param `{unknown}`; expected target_min, target_max"
            ));
        }
        let target_min = number(params, "target_min", DEFAULT_TARGET_MIN)?;
        let target_max = number(params, "target_max", DEFAULT_TARGET_MAX)?;
        if target_min > target_max {
            return Err(format!(
                "target_min ({target_min}) must not exceed target_max ({target_max})"
            ));
        }
        Ok(LenRatio {
            target_min,
            target_max,
        })
    }

    fn score(&self, sample: &Sample<'_>) -> Result<f32, String> {
        match (sample.completion(0), sample.completion(1)) {
            (Some(c1), Some(c2)) => {
                Ok(self.of_counts(c1.chars().count(), c2.chars().count()) as f32)
            }
            _ => Err(format!(
                "len_ratio needs 2 agents, got {}",
                sample.agent_count()
            )),
        }
    }
}

export_reward!(LenRatio);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_and_formula() {
        let r = LenRatio::create("{}").expect("defaults");
        assert_eq!(
            r,
            LenRatio {
                target_min: 2.0,
                target_max: 3.0
            }
        );
        assert_eq!(r.of_counts(0, 5), 0.0);
        assert_eq!(r.of_counts(2, 4), 1.0);
        assert_eq!(r.of_counts(2, 6), 1.0);
        assert!((r.of_counts(1, 1) - (-1f64).exp()).abs() < 1e-15);
        let r = LenRatio::create(r#"{"target_min": 1, "target_max": 1.5}"#).expect("ints ok");
        assert_eq!(r.target_min, 1.0);
        assert!(LenRatio::create(r#"{"target_min": 4}"#).is_err_and(|e| e.contains("exceed")));
        assert!(LenRatio::create(r#"{"min": 4}"#).is_err_and(|e| e.contains("unknown param")));
        assert!(LenRatio::create(r#"{"target_min": "x"}"#).is_err());
    }
}
