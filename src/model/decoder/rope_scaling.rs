//! RoPE frequencies as `config.json` sets them: the base `rope_theta` and the scaling types this
//! crate implements (`default`, `linear`, `llama3`), read from transformers 4's `rope_theta` +
//! `rope_scaling` or transformers 5's `rope_parameters`. Every other type (yarn, dynamic,
//! longrope, …) is refused by name. Scaling only changes the inverse frequencies, so the RoPE
//! tables, the fused kernel and its backward are the same for every type.
use serde_json::Value;

/// The RoPE scaling types implemented here.
pub const SUPPORTED_ROPE_TYPES: &[&str] = &["default", "linear", "llama3"];

/// How the inverse frequencies are rescaled (transformers' `rope_type`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// `default`: inv_freq_i = θ^(−2i/d).
    None,
    /// `linear`: every inverse frequency divided by `factor` (positions divided by it).
    Linear {
        /// Context-length multiplier.
        factor: f64,
    },
    /// `llama3`: long wavelengths divided by `factor`, short ones kept, a smooth blend between.
    Llama3 {
        /// Divisor of the long wavelengths.
        factor: f64,
        /// Wavelengths above `original_max_position_embeddings / low_freq_factor` are divided.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_position_embeddings / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// Context length the model was pre-trained with.
        original_max_position_embeddings: f64,
    },
}

/// The base and the scaling: everything RoPE reads from the config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeSpec {
    /// The base θ (`rope_theta`).
    pub theta: f64,
    /// The frequency rescaling.
    pub scaling: RopeScaling,
}

impl Default for RopeSpec {
    fn default() -> Self {
        Self {
            theta: 10_000.0,
            scaling: RopeScaling::None,
        }
    }
}

/// One RoPE parameter object (`rope_parameters` or `rope_scaling`) with its key for messages.
struct Params<'a> {
    key: &'static str,
    map: &'a serde_json::Map<String, Value>,
}

impl Params<'_> {
    fn rope_type(&self) -> Result<String, String> {
        match self.map.get("rope_type").or_else(|| self.map.get("type")) {
            None | Some(Value::Null) => Ok("default".into()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(format!("{}.rope_type must be a string, not {v}", self.key)),
        }
    }

    /// A required positive number.
    fn number(&self, field: &str, rope_type: &str) -> Result<f64, String> {
        match self.map.get(field).and_then(Value::as_f64) {
            Some(x) if x > 0.0 && x.is_finite() => Ok(x),
            Some(x) => Err(format!("{}.{field} must be > 0, not {x}", self.key)),
            None => Err(format!(
                "{}.{field} is missing or not a number; `{rope_type}` RoPE scaling needs it",
                self.key
            )),
        }
    }

    fn scaling(&self) -> Result<RopeScaling, String> {
        let t = self.rope_type()?;
        if let Some(f) = self
            .map
            .get("partial_rotary_factor")
            .and_then(Value::as_f64)
        {
            if f != 1.0 {
                return Err(format!(
                    "{}.partial_rotary_factor = {f} is not supported (only full rotary embeddings)",
                    self.key
                ));
            }
        }
        match t.as_str() {
            "default" => Ok(RopeScaling::None),
            "linear" => Ok(RopeScaling::Linear {
                factor: self.number("factor", &t)?,
            }),
            "llama3" => {
                let s = RopeScaling::Llama3 {
                    factor: self.number("factor", &t)?,
                    low_freq_factor: self.number("low_freq_factor", &t)?,
                    high_freq_factor: self.number("high_freq_factor", &t)?,
                    original_max_position_embeddings: self
                        .number("original_max_position_embeddings", &t)?,
                };
                if let RopeScaling::Llama3 {
                    low_freq_factor: lo,
                    high_freq_factor: hi,
                    ..
                } = s
                {
                    if lo >= hi {
                        return Err(format!(
                            "{}: low_freq_factor {lo} must be below high_freq_factor {hi}",
                            self.key
                        ));
                    }
                }
                Ok(s)
            }
            other => Err(format!(
                "{}.rope_type `{other}` is not supported; supported RoPE types: {}",
                self.key,
                SUPPORTED_ROPE_TYPES.join(", ")
            )),
        }
    }
}

fn object<'a>(key: &'static str, v: Option<&'a Value>) -> Result<Option<Params<'a>>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(Params { key, map })),
        Some(v) => Err(format!("{key} must be an object, not {v}")),
    }
}

impl RopeSpec {
    /// Reads the RoPE settings: transformers 5's `rope_parameters` (θ, type and scaling fields
    /// in one object) when present, else transformers 4's `rope_theta` and `rope_scaling`.
    /// Files that carry both (a v5 file with v4 keys added) must agree on the type.
    pub fn from_config(
        rope_theta: Option<f64>,
        rope_scaling: Option<&Value>,
        rope_parameters: Option<&Value>,
    ) -> Result<Self, String> {
        let v5 = object("rope_parameters", rope_parameters)?;
        let v4 = object("rope_scaling", rope_scaling)?;
        let theta = match v5.as_ref().and_then(|p| p.map.get("rope_theta")) {
            Some(v) => v
                .as_f64()
                .ok_or_else(|| format!("rope_parameters.rope_theta must be a number, not {v}"))?,
            None => rope_theta.unwrap_or(10_000.0),
        };
        if !(theta > 0.0 && theta.is_finite()) {
            return Err(format!("rope_theta must be > 0, not {theta}"));
        }
        let scaling = match (&v5, &v4) {
            (Some(p5), Some(p4)) => {
                let (s5, s4) = (p5.scaling()?, p4.scaling()?);
                if s4 != RopeScaling::None && s5 != s4 {
                    return Err(format!(
                        "rope_parameters ({}) and rope_scaling ({}) disagree; keep one of them",
                        p5.rope_type()?,
                        p4.rope_type()?
                    ));
                }
                s5
            }
            (Some(p), None) | (None, Some(p)) => p.scaling()?,
            (None, None) => RopeScaling::None,
        };
        Ok(Self { theta, scaling })
    }

    /// The inverse frequencies (head_dim / 2 of them), in f32 as transformers computes them.
    pub fn inv_freq(&self, head_dim: usize) -> Vec<f32> {
        let base: Vec<f32> = (0..head_dim)
            .step_by(2)
            .map(|i| 1f32 / (self.theta.powf(i as f64 / head_dim as f64) as f32))
            .collect();
        match self.scaling {
            RopeScaling::None => base,
            RopeScaling::Linear { factor } => base.iter().map(|&f| f / factor as f32).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                let (factor, lo, hi, old) = (
                    factor as f32,
                    low_freq_factor as f32,
                    high_freq_factor as f32,
                    old as f32,
                );
                let (low_wavelen, high_wavelen) = (old / lo, old / hi);
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (old / wavelen - lo) / (hi - lo);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v4_and_v5_spellings_read_the_same() {
        let fields = json!({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192, "rope_type": "llama3"});
        let v4 = RopeSpec::from_config(Some(5e5), Some(&fields), None).unwrap();
        let mut p = fields.clone();
        p["rope_theta"] = json!(5e5);
        let v5 = RopeSpec::from_config(None, None, Some(&p)).unwrap();
        assert_eq!(v4, v5);
        assert_eq!(v4.theta, 5e5);
        assert!(matches!(v4.scaling, RopeScaling::Llama3 { factor, .. } if factor == 8.0));
        let old = json!({"type": "linear", "factor": 2.0});
        let lin = RopeSpec::from_config(None, Some(&old), None).unwrap();
        assert_eq!(lin.scaling, RopeScaling::Linear { factor: 2.0 });
        assert_eq!(lin.theta, 10_000.0);
        let none = RopeSpec::from_config(Some(1e6), Some(&Value::Null), None).unwrap();
        assert_eq!(none.scaling, RopeScaling::None);
    }

    #[test]
    fn unsupported_types_and_missing_fields_are_named() {
        let yarn = json!({"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6});
        let e = RopeSpec::from_config(None, None, Some(&yarn)).unwrap_err();
        assert!(
            e.contains("rope_parameters.rope_type `yarn`") && e.contains("llama3"),
            "{e}"
        );
        let dynamic = json!({"type": "dynamic", "factor": 2.0});
        let e = RopeSpec::from_config(None, Some(&dynamic), None).unwrap_err();
        assert!(e.contains("rope_scaling.rope_type `dynamic`"), "{e}");
        let partial = json!({"rope_type": "llama3", "factor": 8.0});
        let e = RopeSpec::from_config(None, Some(&partial), None).unwrap_err();
        assert!(e.contains("rope_scaling.low_freq_factor is missing"), "{e}");
        let e = RopeSpec::from_config(None, Some(&json!(3)), None).unwrap_err();
        assert!(e.contains("rope_scaling must be an object"), "{e}");
    }

    /// transformers' `_compute_llama3_parameters`, written out in f64 for d = 128, θ = 5e5.
    #[test]
    fn llama3_frequencies_follow_the_three_bands() {
        let s = RopeSpec {
            theta: 5e5,
            scaling: RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192.0,
            },
        };
        let got = s.inv_freq(128);
        let plain = RopeSpec {
            theta: 5e5,
            scaling: RopeScaling::None,
        }
        .inv_freq(128);
        let (mut kept, mut divided, mut blended) = (0, 0, 0);
        for (g, f) in got.iter().zip(&plain) {
            let f = *f as f64;
            let wl = 2.0 * std::f64::consts::PI / f;
            let want = if wl < 8192.0 / 4.0 {
                kept += 1;
                f
            } else if wl > 8192.0 {
                divided += 1;
                f / 8.0
            } else {
                blended += 1;
                let sm = (8192.0 / wl - 1.0) / 3.0;
                (1.0 - sm) * f / 8.0 + sm * f
            };
            assert!(((*g as f64) - want).abs() <= 1e-6 * want, "{g} vs {want}");
        }
        assert!(kept > 0 && divided > 0 && blended > 0);
    }
}
