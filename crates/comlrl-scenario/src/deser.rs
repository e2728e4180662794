//! Deserializing one section of the JSON tree into its raw type, turning serde's errors into
//! located diagnostics with a fix, and carrying on past a bad key to find the next problem.
use crate::collect::Diags;
use crate::error::ErrorKind;
use crate::positions::{KeyPath, Seg};
use crate::suggest;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;

/// At most this many errors are collected from one section before giving up on it.
const MAX_ERRORS_PER_SECTION: usize = 16;

/// Deserializes `value` (found at `path`) as `T`. On an error at a mapping key, reports it,
/// removes that key (so its default applies) and tries again, collecting further errors; the
/// value returned then lets later stages check the rest. `None` if it cannot be recovered.
pub(crate) fn section<T: DeserializeOwned>(
    d: &mut Diags,
    path: &KeyPath,
    value: Json,
) -> Option<T> {
    let mut value = value;
    let mut removed: Option<(KeyPath, String)> = None;
    for _ in 0..MAX_ERRORS_PER_SECTION {
        let err = match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(t) => return Some(t),
            Err(e) => e,
        };
        let rel: Vec<Seg> = err
            .path()
            .iter()
            .filter_map(|s| match s {
                serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
                serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key.clone())),
                serde_path_to_error::Segment::Enum { variant } => Some(Seg::Key(variant.clone())),
                serde_path_to_error::Segment::Unknown => None,
            })
            .collect();
        let full = path.join(&rel);
        let msg = err.inner().to_string();
        if let Some((parent, key)) = &removed {
            // Removing a wrongly typed required key makes it "missing": already reported.
            if *parent == full && msg == format!("missing field `{key}`") {
                return None;
            }
        }
        report(d, &full, &msg, &value, &rel);
        match rel.last() {
            Some(Seg::Key(k)) if remove(&mut value, &rel) => {
                removed = Some((full.parent().unwrap_or_default(), k.clone()));
            }
            _ => return None,
        }
    }
    None
}

fn remove(root: &mut Json, rel: &[Seg]) -> bool {
    let Some((last, parents)) = rel.split_last() else {
        return false;
    };
    let mut cur = root;
    for s in parents {
        cur = match (s, cur) {
            (Seg::Key(k), Json::Object(m)) => match m.get_mut(k) {
                Some(v) => v,
                None => return false,
            },
            (Seg::Index(i), Json::Array(a)) => match a.get_mut(*i) {
                Some(v) => v,
                None => return false,
            },
            _ => return false,
        };
    }
    match (last, cur) {
        (Seg::Key(k), Json::Object(m)) => m.remove(k).is_some(),
        _ => false,
    }
}

/// The backticked words of a serde message: "unknown field `a`, expected one of `b`, `c`".
fn ticked(msg: &str) -> Vec<&str> {
    msg.split('`').skip(1).step_by(2).collect()
}

fn get<'a>(root: &'a Json, rel: &[Seg]) -> Option<&'a Json> {
    rel.iter().try_fold(root, |cur, s| match (s, cur) {
        (Seg::Key(k), Json::Object(m)) => m.get(k),
        (Seg::Index(i), Json::Array(a)) => a.get(*i),
        _ => None,
    })
}

/// Turns one serde message into a diagnostic.
fn report(d: &mut Diags, full: &KeyPath, msg: &str, root: &Json, rel: &[Seg]) {
    let words = ticked(msg);
    if msg.starts_with("unknown field") {
        let key = words.first().copied().unwrap_or("");
        let valid: Vec<&str> = words.iter().skip(1).copied().collect();
        let parent = full.parent().unwrap_or_default();
        let section = parent.section_name();
        let hint = suggest::moved_key(section, key)
            .map(str::to_string)
            .or_else(|| suggest::closest(key, &valid).map(|g| format!("did you mean `{g}`?")))
            .unwrap_or_else(|| format!("valid keys here: {}", valid.join(", ")));
        d.error(
            ErrorKind::UnknownKey,
            full,
            format!("unknown key `{key}`"),
            Some(hint),
        );
    } else if msg.starts_with("unknown variant") {
        let value = words.first().copied().unwrap_or("");
        let valid: Vec<&str> = words.iter().skip(1).copied().collect();
        let what = match full.last_key() {
            Some(k) => format!("`{k}`"),
            None => format!("value for `{}`", full.section_name()),
        };
        d.error(
            ErrorKind::InvalidValue,
            full,
            format!("`{value}` is not a valid {what}"),
            Some(suggest::did_you_mean(value, &valid)),
        );
    } else if msg.starts_with("missing field") {
        let key = words.first().copied().unwrap_or("");
        d.error(
            ErrorKind::MissingKey,
            full,
            format!("missing required key `{key}`"),
            Some(format!("add `{key}:` under `{full}`")),
        );
    } else {
        let got = get(root, rel);
        let mut hint = format!("write {}", expected_words(msg));
        if matches!(got, Some(Json::Object(_))) && full.to_string().contains("prompts[") {
            hint = "quote prompts that end with `:` — unquoted, `- Tell a joke:` is a mapping; \
                    write `- \"Tell a joke:\"`"
                .into();
        }
        let kind = if msg.starts_with("invalid value") {
            ErrorKind::InvalidValue
        } else {
            ErrorKind::WrongType
        };
        d.error(kind, full, friendly(msg), Some(hint));
    }
}

/// serde's "expected usize" in plain words.
fn expected_words(msg: &str) -> String {
    let tail = msg.rsplit("expected ").next().unwrap_or("").trim();
    match tail {
        "usize" | "u64" | "u32" => "a whole number ≥ 0 (e.g. `8`)".into(),
        "f64" | "f32" => "a number (e.g. `0.5` or `5e-5`)".into(),
        "a boolean" => "`true` or `false`".into(),
        "a string" => "a string (quote it if it looks like a number or ends with `:`)".into(),
        "a sequence" => "a list (`[a, b]` or one `- item` per line)".into(),
        t if t.starts_with("struct") || t.starts_with("a map") => {
            "a mapping (`key: value` pairs)".into()
        }
        "path string" => "a path string".into(),
        t => t.to_string(),
    }
}

fn friendly(msg: &str) -> String {
    msg.replace("invalid type: ", "wrong type: ")
        .replace("expected usize", "expected a whole number ≥ 0")
        .replace("expected u64", "expected a whole number ≥ 0")
        .replace("expected f64", "expected a number")
        .replace("expected a sequence", "expected a list")
        .replace("sequence", "list")
        .replace("map,", "mapping,")
}
