//! `agents.adapter`: a LoRA adapter on the agent's frozen base (the model's `decoder::lora`),
//! its defaults (PEFT's `LoraConfig` where it has one) and checks. With `init` the rank, α,
//! targets and rsLoRA come from that PEFT directory's `adapter_config.json` (read when the model
//! loads, checked against the base there), so setting them as well is an error; `dropout` may
//! be set next to `init` (it overrides the directory's `lora_dropout`: a training setting, not
//! a property of the weights).
use crate::collect::Diags;
use crate::paths;
use crate::plan::{AdapterPlan, BaseDtype};
use crate::positions::KeyPath;
use crate::raw::RawAdapter;
use std::path::Path;

/// The seven projections of a decoder layer (PEFT's module names): the default targets.
pub const PROJECTIONS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// The largest rank accepted (the model's `lora::MAX_RANK`; a rank sizes A and B).
pub const MAX_RANK: usize = 4096;

/// PEFT's `LoraConfig` defaults: r 8, α 8, dropout 0 (unset `dropout` is 0, or with `init`
/// the directory's `lora_dropout`).
pub const DEFAULT_RANK: usize = 8;
/// See [`DEFAULT_RANK`].
pub const DEFAULT_ALPHA: f64 = 8.0;

/// The adapter an agent's `adapter:` mapping asks for (`None`: full fine-tuning).
pub(crate) fn resolve(
    d: &mut Diags,
    p: &KeyPath,
    raw: Option<&RawAdapter>,
    base: &Path,
    base_dtype: BaseDtype,
) -> Option<AdapterPlan> {
    if raw.is_none() && base_dtype != BaseDtype::F32 {
        // Only a frozen base can be held in another dtype: AdamW updates f32 weights.
        d.invalid(
            &p.key("base_dtype"),
            format!(
                "base_dtype {} needs an `adapter`: full fine-tuning trains f32 weights",
                crate::keys::shown(&base_dtype)
            ),
            "add e.g. `adapter: {rank: 16, alpha: 32}`, or remove `base_dtype` (f32)",
        );
    }
    let raw = raw?;
    let p = p.key("adapter");
    if let Some(r) = raw.rank {
        if r == 0 || r > MAX_RANK {
            d.invalid(
                &p.key("rank"),
                format!("rank {r} is outside 1..={MAX_RANK}"),
                "use e.g. `rank: 16`",
            );
        }
    }
    if let Some(a) = raw.alpha {
        if !(a.is_finite() && a > 0.0) {
            d.invalid(
                &p.key("alpha"),
                format!("alpha {a} must be a positive number"),
                "use e.g. `alpha: 32` (the term is scaled by alpha / rank)",
            );
        }
    }
    if let Some(q) = raw.dropout {
        // 1 would drop every input of the branch (and scale by 1 / 0).
        if !(0.0..1.0).contains(&q) {
            d.invalid(
                &p.key("dropout"),
                format!("dropout {q} is outside [0, 1)"),
                "use e.g. `dropout: 0.05` (PEFT's lora_dropout), or 0 for none",
            );
        }
    }
    // Without `init` unset is PEFT's default 0; with it, the directory's `lora_dropout`.
    let dropout = match raw.init {
        None => Some(raw.dropout.unwrap_or(0.0)),
        Some(_) => raw.dropout,
    };
    let targets: Vec<String> = match &raw.targets {
        None => PROJECTIONS.iter().map(|s| s.to_string()).collect(),
        Some(t) => {
            if t.is_empty() {
                d.invalid(
                    &p.key("targets"),
                    "targets is empty",
                    "name projections, e.g. `targets: [q_proj, v_proj]`, or leave it out for all seven",
                );
            }
            for (i, name) in t.iter().enumerate() {
                if !PROJECTIONS.contains(&name.as_str()) {
                    d.invalid(
                        &p.key("targets"),
                        format!("`{name}` is not a projection"),
                        format!("use any of {}", PROJECTIONS.join(", ")),
                    );
                } else if t[..i].contains(name) {
                    d.invalid(
                        &p.key("targets"),
                        format!("`{name}` is named twice"),
                        "name each once",
                    );
                }
            }
            // The decoder's order, whatever order the scenario lists them in.
            PROJECTIONS
                .iter()
                .filter(|x| t.iter().any(|n| n == *x))
                .map(|s| s.to_string())
                .collect()
        }
    };
    let init = raw.init.as_ref().map(|dir| {
        let abs = paths::resolve(base, dir);
        if !abs.join("adapter_config.json").is_file() {
            d.invalid(
                &p.key("init"),
                format!("{} is not a PEFT adapter directory (no adapter_config.json)", abs.display()),
                format!("a relative `init` is relative to {}", base.display()),
            );
        }
        if raw.rank.is_some() || raw.alpha.is_some() || raw.targets.is_some() || raw.rslora.is_some() {
            d.invalid(
                &p,
                "rank, alpha, targets and rslora come from the `init` directory's adapter_config.json",
                "leave them out next to `init`",
            );
        }
        abs
    });
    Some(AdapterPlan {
        rank: raw.rank.unwrap_or(DEFAULT_RANK),
        alpha: raw.alpha.unwrap_or(DEFAULT_ALPHA),
        dropout,
        targets,
        init,
        rslora: raw.rslora.unwrap_or(false),
    })
}

/// The resolved scenario's `adapter:` (every value written out; with `init` only the directory).
pub(crate) fn emit(a: &Option<AdapterPlan>) -> Option<RawAdapter> {
    let a = a.as_ref()?;
    Some(match &a.init {
        Some(dir) => RawAdapter {
            init: Some(dir.clone()),
            dropout: a.dropout,
            ..RawAdapter::default()
        },
        None => RawAdapter {
            rank: Some(a.rank),
            alpha: Some(a.alpha),
            dropout: a.dropout,
            targets: Some(a.targets.clone()),
            init: None,
            rslora: Some(a.rslora),
        },
    })
}
