//! Test-only transition plugin: each agent's next prompt is `Revise (turn N): <its completion>`.
//! With params `{"panic": true}` it panics, to test that the host reports it.
use comlrl_plugin_api::transition::Transition;

struct Revise {
    panic: bool,
}

impl Transition for Revise {
    const NAME: &'static str = "revise";

    fn create(params_json: &str) -> Result<Self, String> {
        let v: serde_json::Value = serde_json::from_str(params_json).map_err(|e| e.to_string())?;
        Ok(Revise {
            panic: v.get("panic").and_then(|p| p.as_bool()).unwrap_or(false),
        })
    }

    fn next_prompts(&self, ctx_json: &str) -> Result<Vec<String>, String> {
        if self.panic {
            panic!("asked to panic");
        }
        let ctx: serde_json::Value = serde_json::from_str(ctx_json).map_err(|e| e.to_string())?;
        let turn = ctx["turn"].as_u64().ok_or("ctx.turn missing")?;
        let comps = ctx["completions"]
            .as_array()
            .ok_or("ctx.completions missing")?;
        Ok(comps
            .iter()
            .map(|c| format!("Revise (turn {turn}): {}", c.as_str().unwrap_or_default()))
            .collect())
    }
}

comlrl_plugin_api::export_transition!(Revise);
