//! Typed reads of GGUF metadata values with errors that name the key, and a decimal-faithful
//! widening of the f32 values llama.cpp stores (so `1e-6` comes back as `1e-6`, not `9.99e-7`).
use candle_core::quantized::gguf_file::Value;
use std::collections::HashMap;

/// A GGUF file's metadata, by key.
pub type Meta = HashMap<String, Value>;
type R<T> = std::result::Result<T, String>;

/// An integer of any width and signedness (negative values rejected).
pub fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::U8(x) => Some(*x as u64),
        Value::U16(x) => Some(*x as u64),
        Value::U32(x) => Some(*x as u64),
        Value::U64(x) => Some(*x),
        Value::I8(x) => u64::try_from(*x).ok(),
        Value::I16(x) => u64::try_from(*x).ok(),
        Value::I32(x) => u64::try_from(*x).ok(),
        Value::I64(x) => u64::try_from(*x).ok(),
        _ => None,
    }
}

/// A float (f32 widened through its shortest decimal form) or an integer.
pub fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::F32(x) => format!("{x}").parse().ok(),
        Value::F64(x) => Some(*x),
        other => as_u64(other).map(|x| x as f64),
    }
}

/// The non-negative integer at `key`, if present.
pub fn opt_u64(m: &Meta, key: &str) -> R<Option<u64>> {
    match m.get(key) {
        None => Ok(None),
        Some(v) => as_u64(v).map(Some).ok_or_else(|| {
            format!("metadata `{key}` should be a non-negative integer, found {v:?}")
        }),
    }
}

/// The non-negative integer at `key`; an error when missing.
pub fn req_u64(m: &Meta, key: &str) -> R<u64> {
    opt_u64(m, key)?.ok_or_else(|| format!("metadata `{key}` is missing"))
}

/// The number at `key`, if present.
pub fn opt_f64(m: &Meta, key: &str) -> R<Option<f64>> {
    match m.get(key) {
        None => Ok(None),
        Some(v) => as_f64(v)
            .map(Some)
            .ok_or_else(|| format!("metadata `{key}` should be a number, found {v:?}")),
    }
}

/// The string at `key`, if present.
pub fn opt_str<'a>(m: &'a Meta, key: &str) -> R<Option<&'a str>> {
    match m.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(v) => Err(format!(
            "metadata `{key}` should be a string, found {}",
            kind(v)
        )),
    }
}

/// The string at `key`; an error when missing.
pub fn req_str<'a>(m: &'a Meta, key: &str) -> R<&'a str> {
    opt_str(m, key)?.ok_or_else(|| format!("metadata `{key}` is missing"))
}

/// The array at `key`, if present.
pub fn opt_array<'a>(m: &'a Meta, key: &str) -> R<Option<&'a [Value]>> {
    match m.get(key) {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a.as_slice())),
        Some(v) => Err(format!(
            "metadata `{key}` should be an array, found {}",
            kind(v)
        )),
    }
}

/// A string array, every element checked.
pub fn opt_strings<'a>(m: &'a Meta, key: &str) -> R<Option<Vec<&'a str>>> {
    let Some(a) = opt_array(m, key)? else {
        return Ok(None);
    };
    a.iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) => Ok(s.as_str()),
            other => Err(format!(
                "metadata `{key}`[{i}] should be a string, found {}",
                kind(other)
            )),
        })
        .collect::<R<Vec<_>>>()
        .map(Some)
}

/// The value type's name, for messages (never the whole value: arrays can be huge).
pub fn kind(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::String(_) => "a string".into(),
        other => format!("{:?}", other.value_type()),
    }
}
