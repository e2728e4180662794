//! Reading the YAML document into a JSON tree (the form every later stage works on) and applying
//! `--set key.path=value` overrides to it before anything is validated.
use crate::collect::Diags;
use crate::error::ErrorKind;
use crate::positions::{KeyPath, Seg};
use serde_json::{Map, Value as Json};
use serde_norway::Value as Yaml;

/// Converts a YAML value to JSON. YAML-only shapes are mapped: a tagged value `!scale 100` becomes
/// `{scale: 100}`, number and boolean keys become strings; non-finite floats and complex keys
/// are reported and dropped.
pub(crate) fn yaml_to_json(v: Yaml, path: &KeyPath, d: &mut Diags) -> Json {
    match v {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(b),
        Yaml::Number(n) => {
            if let Some(u) = n.as_u64() {
                Json::from(u)
            } else if let Some(i) = n.as_i64() {
                Json::from(i)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                match serde_json::Number::from_f64(f) {
                    Some(num) => Json::Number(num),
                    None => {
                        d.invalid(
                            path,
                            format!("`{f}` is not a finite number"),
                            "use a finite number (.inf and .nan are not accepted)",
                        );
                        Json::Null
                    }
                }
            }
        }
        Yaml::String(s) => Json::String(s),
        Yaml::Sequence(items) => Json::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, x)| yaml_to_json(x, &path.index(i), d))
                .collect(),
        ),
        Yaml::Mapping(m) => {
            let mut out = Map::new();
            for (k, val) in m {
                let key = match k {
                    Yaml::String(s) => s,
                    Yaml::Number(n) => n.to_string(),
                    Yaml::Bool(b) => b.to_string(),
                    Yaml::Null => "null".to_string(),
                    _ => {
                        d.error(
                            ErrorKind::Syntax,
                            path,
                            "a mapping key must be a plain scalar",
                            Some("write keys as plain words, e.g. `num_generations: 8`".into()),
                        );
                        continue;
                    }
                };
                let child = yaml_to_json(val, &path.key(&key), d);
                out.insert(key, child);
            }
            Json::Object(out)
        }
        Yaml::Tagged(t) => {
            let tag = t.tag.to_string();
            let name = tag.trim_start_matches('!').to_string();
            let inner = yaml_to_json(t.value, &path.key(&name), d);
            let mut out = Map::new();
            out.insert(name, inner);
            Json::Object(out)
        }
    }
}

/// A parsed `--set key.path=value` argument.
pub(crate) struct Override {
    pub arg: String,
    pub path: KeyPath,
    pub value: Json,
}

/// Parses one override; the value is read as a YAML scalar or flow collection (`8`, `5e-5`,
/// `cross`, `[a, b]`, `{rhai: t.rhai}`); an empty value is `null`.
pub(crate) fn parse(arg: &str, d: &mut Diags) -> Option<Override> {
    let key_text = arg.split_once('=').map_or(arg, |(k, _)| k).trim();
    let fail = |d: &mut Diags, msg: String, hint: &str| {
        d.override_error(
            arg,
            key_text,
            format!("bad override `--set {arg}`: {msg}"),
            hint.to_string(),
        );
        None
    };
    let Some((key, value)) = arg.split_once('=') else {
        return fail(
            d,
            "no `=`".into(),
            "write `--set key.path=value`, e.g. `--set trainer.num_generations=4`",
        );
    };
    if key.trim().is_empty() {
        return fail(d, "empty key path".into(), "write `--set key.path=value`");
    }
    let path = match KeyPath::parse(key.trim()) {
        Ok(p) => p,
        Err(e) => {
            return fail(
                d,
                e,
                "key paths look like `trainer.num_generations` or `agents[1].model`",
            )
        }
    };
    if path.0.len() > crate::positions::MAX_NESTING {
        return fail(
            d,
            format!(
                "the key path has {} parts, more than the {} levels a scenario may nest",
                path.0.len(),
                crate::positions::MAX_NESTING
            ),
            "key paths look like `trainer.num_generations` or `agents[1].model`",
        );
    }
    // The same depth limit as the file's, checked before serde_norway (slow on deep values).
    if crate::positions::PositionIndex::build(value)
        .too_deep()
        .is_some()
    {
        return fail(
            d,
            format!(
                "the value nests deeper than {} levels",
                crate::positions::MAX_NESTING
            ),
            "write a flat value, e.g. `[a, b]` or `{rhai: t.rhai}`",
        );
    }
    let yaml: Yaml = if value.trim().is_empty() {
        Yaml::Null
    } else {
        match serde_norway::from_str(value) {
            Ok(v) => v,
            Err(e) => {
                return fail(
                    d,
                    format!("the value is not valid YAML ({e})"),
                    "quote values that contain `: `, `#`, `{` or `[`, e.g. --set 'agents.template=\"Q: {prompt}\"'",
                )
            }
        }
    };
    let value = yaml_to_json(yaml, &path, d);
    Some(Override {
        arg: arg.to_string(),
        path,
        value,
    })
}

/// Sets `ov.path` in `root`, creating missing mappings on the way. Whether the key is *valid* is
/// decided later by deserialization (an unknown key is reported with its suggestion there).
pub(crate) fn apply(root: &mut Json, ov: &Override, d: &mut Diags) -> bool {
    let mut cur = root;
    let mut walked = KeyPath::root();
    for (i, seg) in ov.path.0.iter().enumerate() {
        let last = i + 1 == ov.path.0.len();
        if cur.is_null() {
            *cur = Json::Object(Map::new());
        }
        let next = match (seg, cur) {
            (Seg::Key(k), Json::Object(m)) => {
                if last {
                    m.insert(k.clone(), ov.value.clone());
                    return true;
                }
                m.entry(k.clone()).or_insert(Json::Null)
            }
            (Seg::Index(n), Json::Array(items)) => {
                let len = items.len();
                if *n < len {
                    if last {
                        items[*n] = ov.value.clone();
                        return true;
                    }
                    &mut items[*n]
                } else if *n == len && last {
                    items.push(ov.value.clone());
                    return true;
                } else {
                    d.override_error(
                        &ov.arg,
                        &ov.path.to_string(),
                        format!(
                            "bad override `--set {}`: `{walked}` has {len} item(s), no index {n}",
                            ov.arg
                        ),
                        format!("use an index below {len} (or {len} to append)"),
                    );
                    return false;
                }
            }
            (seg, other) => {
                let what = match other {
                    Json::Array(_) => "a list",
                    Json::Object(_) => "a mapping",
                    Json::String(_) => "a string",
                    Json::Number(_) => "a number",
                    Json::Bool(_) => "a boolean",
                    Json::Null => "null",
                };
                let hint = match seg {
                    Seg::Key(_) if other.is_array() => {
                        format!("`{walked}` is a list: address an item, e.g. `{walked}[0]`")
                    }
                    Seg::Index(_) => match other.as_object().and_then(|m| m.keys().next()) {
                        Some(k) => format!(
                            "`{walked}` is a mapping, not a list: address its keys, e.g. `{walked}.{k}`"
                        ),
                        None => format!("`{walked}` is an empty mapping, not a list"),
                    },
                    _ => format!("`{walked}` holds a single value; set `{walked}` itself"),
                };
                d.override_error(
                    &ov.arg,
                    &ov.path.to_string(),
                    format!(
                        "bad override `--set {}`: cannot go into `{walked}`, which is {what}",
                        ov.arg
                    ),
                    hint,
                );
                return false;
            }
        };
        walked = match seg {
            Seg::Key(k) => walked.key(k),
            Seg::Index(n) => walked.index(*n),
        };
        cur = next;
    }
    false
}
