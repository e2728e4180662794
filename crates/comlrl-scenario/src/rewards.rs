//! The `reward` section (one `RewardSpec` or a list of them) and the `reward_processors` chain:
//! shapes accepted, paths resolved, names defaulted to the file stem, values checked.
use crate::code::resolve_code;
use crate::collect::Diags;
use crate::deser::section;
use crate::error::ErrorKind;
use crate::plan::{CodeSource, RewardPlan};
use crate::positions::KeyPath;
use crate::spec::{ProcessorSpec, RewardSpec};
use crate::LoadOptions;
use serde_json::Value as Json;
use std::path::Path;

pub(crate) fn resolve(
    d: &mut Diags,
    reward: Option<Json>,
    processors: Option<Json>,
    base: &Path,
    opts: &LoadOptions,
) -> Option<RewardPlan> {
    let rp = KeyPath::root().key("reward");
    let specs: Vec<(KeyPath, RewardSpec)> = match reward {
        None => {
            d.error(
                ErrorKind::MissingKey,
                &rp,
                "the scenario has no `reward` section",
                Some("add e.g. `reward: {rhai: ../rewards/len_ratio.rhai}`".into()),
            );
            return None;
        }
        Some(v @ Json::Object(_)) => vec![(rp.clone(), section(d, &rp, v)?)],
        Some(Json::Array(items)) if items.is_empty() => {
            d.invalid(
                &rp,
                "the reward list is empty",
                "add at least one `- rhai: ...` or `- plugin: ...` entry",
            );
            return None;
        }
        Some(Json::Array(items)) => {
            let mut out = Vec::new();
            for (i, v) in items.into_iter().enumerate() {
                let p = rp.index(i);
                if let Some(s) = section::<RewardSpec>(d, &p, v) {
                    out.push((p, s));
                }
            }
            out
        }
        Some(_) => {
            d.error(
                ErrorKind::WrongType,
                &rp,
                "wrong type: `reward` must be a mapping or a list of mappings",
                Some("write `reward: {rhai: file.rhai}` or a list of `- rhai: ...` entries".into()),
            );
            return None;
        }
    };

    let mut terms = Vec::new();
    for (p, spec) in specs {
        let Some(source) = resolve_code(
            d,
            &p,
            spec.rhai.as_deref(),
            spec.plugin.as_deref(),
            base,
            opts,
        ) else {
            continue;
        };
        if !spec.weight.is_finite() {
            d.invalid(
                &p.key("weight"),
                format!("weight must be a finite number (got {})", spec.weight),
                "use e.g. `weight: 1.0`",
            );
        }
        if !spec.params.is_object() {
            d.error(
                ErrorKind::WrongType,
                &p.key("params"),
                "params must be a mapping",
                Some("write `params: {target_min: 2, target_max: 3}`".into()),
            );
        }
        let (rhai, plugin, file) = match source {
            CodeSource::Rhai(f) => (Some(f.clone()), None, f),
            CodeSource::Plugin(f) => (None, Some(f.clone()), f),
        };
        let name = spec.name.clone().unwrap_or_else(|| {
            file.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "reward".into())
        });
        if name.trim().is_empty() {
            d.invalid(
                &p.key("name"),
                "the reward name is empty",
                "remove `name` to use the file stem, or give a name",
            );
        }
        if terms
            .iter()
            .any(|t: &RewardSpec| t.name.as_deref() == Some(name.as_str()))
        {
            d.invalid(
                &p,
                format!("two reward terms are named `{name}`; their metrics (`reward/{name}`) would collide"),
                "give one of them a distinct `name:`",
            );
        }
        if spec.time_budget_ms == Some(0) {
            d.invalid(
                &p.key("time_budget_ms"),
                "time_budget_ms must be at least 1",
                "remove it for the default (see docs/rewards.md), or give milliseconds, e.g. `time_budget_ms: 2000`",
            );
        }
        if rhai.is_some() && spec.isolate.is_some() {
            d.invalid(
                &p.key("isolate"),
                "`isolate` applies to plugins only; Rhai scripts always run in the sandbox",
                "remove `isolate` from this term",
            );
        }
        terms.push(RewardSpec {
            rhai,
            plugin,
            name: Some(name),
            weight: spec.weight,
            params: spec.params,
            time_budget_ms: spec.time_budget_ms,
            isolate: spec.isolate,
            on_error: spec.on_error,
        });
    }

    let pp = KeyPath::root().key("reward_processors");
    let processors: Vec<ProcessorSpec> = match processors {
        None => Vec::new(),
        Some(v @ Json::Array(_)) => section(d, &pp, v).unwrap_or_default(),
        Some(_) => {
            d.error(
                ErrorKind::WrongType,
                &pp,
                "wrong type: `reward_processors` must be a list",
                Some("write one step per line: `- scale: 100.0`, `- sigmoid`, ...".into()),
            );
            Vec::new()
        }
    };
    for (i, proc_) in processors.iter().enumerate() {
        check_processor(d, &pp.index(i), proc_);
    }
    Some(RewardPlan { terms, processors })
}

fn check_processor(d: &mut Diags, p: &KeyPath, proc_: &ProcessorSpec) {
    let finite = |x: f64| x.is_finite();
    match proc_ {
        ProcessorSpec::Scale(f) | ProcessorSpec::Shift(f) if !finite(*f) => {
            d.invalid(
                p,
                format!("{f} is not a finite number"),
                "use a finite factor, e.g. `- scale: 100.0`",
            );
        }
        ProcessorSpec::Clamp { min, max } if !(finite(*min) && finite(*max) && min <= max) => {
            d.invalid(
                p,
                format!("clamp needs finite min ≤ max (got min {min}, max {max})"),
                "e.g. `- clamp: {min: -10.0, max: 10.0}`",
            );
        }
        ProcessorSpec::ExpScale(e) if !finite(e.factor) => {
            d.invalid(
                p,
                format!("exp_scale factor {} is not finite", e.factor),
                "e.g. `- exp_scale: {factor: 1.0}`",
            );
        }
        _ => {}
    }
}
