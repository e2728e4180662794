//! LoRA adapters as PEFT keeps them: an adapter directory with `adapter_config.json` and
//! `adapter_model.safetensors`, tensors named `base_model.model.model.layers.N.<block>.<proj>.
//! lora_{A,B}.weight` (what `peft.PeftModel.save_pretrained` writes and `from_pretrained` reads).
//! [`Adapter`] is one agent's adapter tensors (trainable variables) with their [`LoraSpec`]:
//! freshly initialised, read from such a directory (untrusted: every field, name and shape is
//! checked against the base model's config, the rank bounded before anything is sized by it),
//! or written back as one.
use super::model_dir::{read_json, write_json};
use super::shard::{loadable, unsupported, Shard};
use crate::model::decoder::config::ModelConfig;
use crate::model::decoder::lora::{init_tensors, LoraKey, LoraSpec, PROJECTIONS};
use crate::model::error::{Error, Result};
use candle_core::{DType, Device, Tensor, Var};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The config file of an adapter directory.
pub const CONFIG_FILE: &str = "adapter_config.json";
/// The tensor file of an adapter directory.
pub const WEIGHTS_FILE: &str = "adapter_model.safetensors";

/// PEFT's name of one adapter tensor.
pub fn tensor_name((layer, module, ab): LoraKey) -> String {
    let base = base_weight_name(layer, module);
    let stem = base.strip_suffix(".weight").unwrap_or(&base);
    format!("base_model.model.{stem}.{ab}.weight")
}

/// The checkpoint name of the base weight W a projection's adapter applies to
/// (`model.layers.N.<block>.<proj>.weight`).
pub fn base_weight_name(layer: usize, module: &str) -> String {
    let block = match module {
        "gate_proj" | "up_proj" | "down_proj" => "mlp",
        _ => "self_attn",
    };
    format!("model.layers.{layer}.{block}.{module}.weight")
}

/// One agent's LoRA adapter: its spec, dropout and the A and B of every targeted projection
/// as trainable variables.
#[derive(Debug, Clone)]
pub struct Adapter {
    /// Rank, α, rsLoRA and targets.
    pub spec: LoraSpec,
    /// PEFT's `lora_dropout` p in [0, 1): applied in the update's passes only
    /// (`decoder::lora_dropout`), written back to the directory.
    pub dropout: f64,
    /// Which masks the dropout draws (`lora_dropout::agent_key`: the run's seed and the
    /// agent); 0 until the trainer sets it.
    pub dropout_key: u64,
    /// In [`LoraSpec::tensors`] order.
    vars: Vec<(LoraKey, Var)>,
}

impl Adapter {
    /// PEFT's initialisation (A Kaiming-uniform, B zero) from `seed`, for a base with `cfg`;
    /// `dropout` must be in [0, 1).
    pub fn init(
        spec: LoraSpec,
        dropout: f64,
        cfg: &ModelConfig,
        seed: u64,
        dtype: DType,
        dev: &Device,
    ) -> Result<Self> {
        spec.validate(cfg)
            .map_err(|e| Error::Invalid(format!("adapter: {e}")))?;
        check_dropout(dropout).map_err(|e| Error::Invalid(format!("adapter: {e}")))?;
        let vars = init_tensors(&spec, cfg, seed, dtype, dev)?
            .into_iter()
            .map(|(k, t)| Ok((k, Var::from_tensor(&t)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            spec,
            dropout,
            dropout_key: 0,
            vars,
        })
    }

    /// Reads the adapter directory `dir` for a base with `cfg`, its tensors converted to `dtype`.
    pub fn load(dir: &Path, cfg: &ModelConfig, dtype: DType, dev: &Device) -> Result<Self> {
        let cpath = dir.join(CONFIG_FILE);
        let json = read_json(&cpath)?.ok_or_else(|| {
            Error::file(
                dir,
                format!("no {CONFIG_FILE}: not a PEFT adapter directory"),
            )
        })?;
        let (spec, dropout) = parse_config(&json).map_err(|e| Error::file(&cpath, e))?;
        spec.validate(cfg)
            .map_err(|e| Error::file(&cpath, format!("{e} (for the base model's config)")))?;
        let wpath = dir.join(WEIGHTS_FILE);
        if !wpath.is_file() {
            return Err(Error::file(dir, format!("no {WEIGHTS_FILE}")));
        }
        let shard = Shard::open(&wpath)?;
        let mut found: HashMap<String, (Vec<usize>, safetensors::Dtype)> = shard
            .tensors()
            .into_iter()
            .map(|(n, i)| (n, (i.shape.clone(), i.dtype)))
            .collect();
        let mut wanted = vec![];
        for (l, m, ab, shape) in spec.tensors(cfg) {
            let key = (l, m, ab);
            let name = tensor_name(key);
            let (got, dt) = found.remove(&name).ok_or_else(|| {
                Error::file(
                    &wpath,
                    format!(
                        "tensor `{name}` is missing ({CONFIG_FILE} targets {m} at rank {})",
                        spec.rank
                    ),
                )
            })?;
            if got != shape {
                return Err(Error::file(
                    &wpath,
                    format!("tensor `{name}` has shape {got:?}, but rank {} on the base model implies {shape:?}", spec.rank),
                ));
            }
            if !loadable(dt) {
                return Err(unsupported(&wpath, &name, dt));
            }
            wanted.push((key, name));
        }
        if let Some(extra) = found.keys().min() {
            return Err(Error::file(
                &wpath,
                format!(
                    "tensor `{extra}` is not one of the adapter's ({} unexpected in all): only \
                     lora_A / lora_B of the targeted projections are supported",
                    found.len()
                ),
            ));
        }
        let vars = wanted
            .into_iter()
            .map(|(k, name)| Ok((k, Var::from_tensor(&shard.read_var(&name, dtype, dev)?)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            spec,
            dropout,
            dropout_key: 0,
            vars,
        })
    }

    /// Writes the adapter to `dir` as PEFT does (f32 tensors), naming `base` as
    /// `base_model_name_or_path`.
    pub fn save(&self, dir: &Path, base: &str) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let tensors: BTreeMap<String, Tensor> = self
            .vars
            .iter()
            .map(|(k, v)| {
                Ok((
                    tensor_name(*k),
                    v.as_tensor().detach().to_dtype(DType::F32)?,
                ))
            })
            .collect::<Result<_>>()?;
        super::safetensors::save_tensors(&tensors, &dir.join(WEIGHTS_FILE))?;
        write_json(&dir.join(CONFIG_FILE), &self.config_json(base))
    }

    /// The `adapter_config.json` PEFT 0.21.2 writes for this adapter (every key it writes, the
    /// ones this adapter does not set at PEFT's defaults).
    pub fn config_json(&self, base: &str) -> serde_json::Value {
        let s = &self.spec;
        serde_json::json!({
            "alora_invocation_tokens": null,
            "alpha_pattern": {},
            "arrow_config": null,
            "auto_mapping": null,
            "base_model_name_or_path": base,
            "bias": "none",
            "corda_config": null,
            "ensure_weight_tying": false,
            "eva_config": null,
            "exclude_modules": null,
            "fan_in_fan_out": false,
            "inference_mode": true,
            "init_lora_weights": true,
            "kasa_config": null,
            "layer_replication": null,
            "layers_pattern": null,
            "layers_to_transform": null,
            "loftq_config": {},
            "lora_alpha": s.alpha,
            "lora_bias": false,
            "lora_dropout": self.dropout,
            "lora_ga_config": null,
            "megatron_config": null,
            "megatron_core": "megatron.core",
            "modules_to_save": null,
            "monteclora_config": null,
            "peft_type": "LORA",
            "peft_version": "0.21.2",
            "qalora_group_size": 16,
            "r": s.rank,
            "rank_pattern": {},
            "revision": null,
            "target_modules": s.targets,
            "target_parameters": null,
            "task_type": "CAUSAL_LM",
            "trainable_token_indices": null,
            "use_bdlora": null,
            "use_dora": false,
            "use_qalora": false,
            "use_rslora": s.rslora,
            "velora_config": null
        })
    }

    /// The adapter's variables under PEFT's names, in [`LoraSpec::tensors`] order.
    pub fn vars(&self) -> Vec<(String, Var)> {
        self.vars
            .iter()
            .map(|(k, v)| (tensor_name(*k), v.clone()))
            .collect()
    }

    /// The variables by key, for `adapted::attach`.
    pub fn by_key(&self) -> HashMap<LoraKey, Var> {
        self.vars.iter().cloned().collect()
    }

    /// Number of adapter parameters.
    pub fn parameters(&self) -> usize {
        self.vars.iter().map(|(_, v)| v.elem_count()).sum()
    }
}

/// The spec and dropout an adapter directory's `adapter_config.json` gives (checked as
/// [`Adapter::load`] checks it, except against a base).
pub fn read_spec(dir: &Path) -> Result<(LoraSpec, f64)> {
    let cpath = dir.join(CONFIG_FILE);
    let json = read_json(&cpath)?.ok_or_else(|| {
        Error::file(
            dir,
            format!("no {CONFIG_FILE}: not a PEFT adapter directory"),
        )
    })?;
    parse_config(&json).map_err(|e| Error::file(&cpath, e))
}

/// Dropout must be a probability below 1 (1 would drop every input; see `docs/adapters.md`).
fn check_dropout(p: f64) -> std::result::Result<(), String> {
    if !(0.0..1.0).contains(&p) {
        return Err(format!("dropout {p} is outside [0, 1)"));
    }
    Ok(())
}

/// The spec and dropout of a PEFT `adapter_config.json`, refusing what this reader does not
/// implement (DoRA, per-module ranks, a bias, fan-in-fan-out layouts, other PEFT types); the
/// message names the field.
fn parse_config(j: &serde_json::Value) -> std::result::Result<(LoraSpec, f64), String> {
    let field = |k: &str| j.get(k).filter(|v| !v.is_null());
    match field("peft_type").and_then(|v| v.as_str()) {
        Some("LORA") => {}
        other => return Err(format!("peft_type {other:?}: only \"LORA\" is supported")),
    }
    let rank = field("r")
        .and_then(|v| v.as_u64())
        .ok_or("`r` must be a positive integer")?;
    let rank = usize::try_from(rank).map_err(|_| format!("`r` {rank} is too large"))?;
    let alpha = match field("lora_alpha") {
        None => 8.0, // PEFT's default
        Some(v) => v.as_f64().ok_or("`lora_alpha` must be a number")?,
    };
    let dropout = match field("lora_dropout") {
        None => 0.0,
        Some(v) => v.as_f64().ok_or("`lora_dropout` must be a number")?,
    };
    check_dropout(dropout).map_err(|e| format!("`lora_dropout`: {e}"))?;
    let rslora = match field("use_rslora") {
        None => false,
        Some(v) => v.as_bool().ok_or("`use_rslora` must be true or false")?,
    };
    let targets: Vec<String> = match field("target_modules") {
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .map(|t| t.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or("`target_modules` must be a list of module names")?,
        Some(serde_json::Value::String(s)) => {
            return Err(format!(
                "`target_modules` \"{s}\" is a pattern: only a list of module names is supported"
            ))
        }
        _ => return Err("`target_modules` must be a list of module names".into()),
    };
    if targets.len() > PROJECTIONS.len() {
        return Err(format!(
            "`target_modules` names {} modules: at most the seven projections",
            targets.len()
        ));
    }
    // In the decoder's order, whatever order the file lists them in (PEFT writes a set).
    let mut ordered: Vec<String> = PROJECTIONS
        .iter()
        .filter(|p| targets.iter().any(|t| t == *p))
        .map(|p| p.to_string())
        .collect();
    if let Some(bad) = targets.iter().find(|t| !PROJECTIONS.contains(&t.as_str())) {
        return Err(format!(
            "`target_modules` names `{bad}`: only the projections {} are supported",
            PROJECTIONS.join(", ")
        ));
    }
    if ordered.len() != targets.len() {
        return Err("`target_modules` names a module twice".into());
    }
    let refuse = |k: &str, ok: &dyn Fn(&serde_json::Value) -> bool, what: &str| match field(k) {
        Some(v) if !ok(v) => Err(format!("`{k}` {v}: {what} is not supported")),
        _ => Ok(()),
    };
    let empty = |v: &serde_json::Value| v.as_object().is_some_and(|o| o.is_empty());
    let is_false = |v: &serde_json::Value| v.as_bool() == Some(false);
    refuse("bias", &|v| v.as_str() == Some("none"), "a trained bias")?;
    refuse("use_dora", &is_false, "DoRA")?;
    refuse("fan_in_fan_out", &is_false, "a transposed (Conv1D) layout")?;
    refuse("lora_bias", &is_false, "a bias on lora_B")?;
    refuse("rank_pattern", &empty, "a per-module rank")?;
    refuse("alpha_pattern", &empty, "a per-module alpha")?;
    refuse(
        "layers_to_transform",
        &|_| false,
        "adapting only some layers",
    )?;
    refuse("modules_to_save", &|_| false, "fully trained extra modules")?;
    refuse("layer_replication", &|_| false, "layer replication")?;
    if let Some(t) = field("task_type").and_then(|v| v.as_str()) {
        if t != "CAUSAL_LM" {
            return Err(format!("`task_type` \"{t}\": only CAUSAL_LM is supported"));
        }
    }
    ordered.shrink_to_fit();
    Ok((
        LoraSpec {
            rank,
            alpha,
            rslora,
            targets: ordered,
        },
        dropout,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> serde_json::Value {
        serde_json::json!({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "lora_dropout": 0.0,
            "target_modules": ["v_proj", "q_proj"], "bias": "none", "use_rslora": false,
            "rank_pattern": {}, "alpha_pattern": {}, "use_dora": false, "task_type": "CAUSAL_LM"})
    }

    #[test]
    fn reads_peft_config_in_decoder_order() {
        let (s, d) = parse_config(&cfg()).unwrap();
        assert_eq!(s.targets, ["q_proj", "v_proj"]);
        assert_eq!((s.rank, s.alpha, s.rslora, d), (4, 8.0, false, 0.0));
    }

    #[test]
    fn refuses_what_it_does_not_implement_naming_the_field() {
        for (k, v, want) in [
            ("peft_type", serde_json::json!("IA3"), "peft_type"),
            ("r", serde_json::json!(-1), "`r`"),
            ("r", serde_json::json!(1.5), "`r`"),
            ("use_dora", serde_json::json!(true), "use_dora"),
            ("bias", serde_json::json!("all"), "bias"),
            (
                "target_modules",
                serde_json::json!("q_proj|v_proj"),
                "pattern",
            ),
            ("target_modules", serde_json::json!(["lm_head"]), "lm_head"),
            (
                "target_modules",
                serde_json::json!(["q_proj", "q_proj"]),
                "twice",
            ),
            (
                "rank_pattern",
                serde_json::json!({"q_proj": 8}),
                "rank_pattern",
            ),
            ("lora_dropout", serde_json::json!(1.0), "lora_dropout"),
            (
                "modules_to_save",
                serde_json::json!(["lm_head"]),
                "modules_to_save",
            ),
        ] {
            let mut c = cfg();
            c[k] = v;
            let e = parse_config(&c).unwrap_err();
            assert!(e.contains(want), "{k}: {e}");
        }
    }

    #[test]
    fn rank_is_bounded_by_the_projection_and_the_cap() {
        let mc = ModelConfig::with_shape(50, 32, 48, 1, 4, 2, true);
        let spec = |rank| LoraSpec {
            rank,
            alpha: 1.0,
            rslora: false,
            targets: vec!["k_proj".into()],
        };
        assert!(spec(16).validate(&mc).is_ok());
        // k_proj is (16, 32): rank 17 cannot fit, and a huge rank never sizes anything.
        assert!(spec(17).validate(&mc).unwrap_err().contains("k_proj"));
        assert!(spec(usize::MAX)
            .validate(&mc)
            .unwrap_err()
            .contains("outside"));
        assert!(spec(0).validate(&mc).is_err());
    }
}
