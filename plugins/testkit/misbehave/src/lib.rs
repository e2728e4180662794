//! Test-only plugin that misbehaves on purpose, chosen by `params.mode`: `panic_create`,
//! `error_create`, `panic_score`, `error_score`, `nan`, or `ok` (scores 1.0).
use comlrl_plugin_api::{export_reward, Reward, Sample};

/// The selected misbehaviour.
pub struct Misbehave {
    mode: String,
}

impl Reward for Misbehave {
    const NAME: &'static str = "misbehave";

    fn create(params_json: &str) -> Result<Self, String> {
        let mode = params_json
            .split('"')
            .skip_while(|s| *s != "mode")
            .nth(2)
            .unwrap_or("ok")
            .to_string();
        match mode.as_str() {
            "panic_create" => panic!("misbehave: panic in create as asked"),
            "error_create" => Err("misbehave: create refused as asked".to_string()),
            _ => Ok(Misbehave { mode }),
        }
    }

    fn score(&self, _sample: &Sample<'_>) -> Result<f32, String> {
        match self.mode.as_str() {
            "panic_score" => panic!("misbehave: panic in score as asked"),
            "error_score" => Err("misbehave: score refused as asked".to_string()),
            "nan" => Ok(f32::NAN),
            _ => Ok(1.0),
        }
    }
}

export_reward!(Misbehave);
