//! Conversion of JSON values (scenario params, dataset fields) into Rhai values.
use rhai::{Array, Dynamic, Map, INT};

/// Convert a JSON value: null → `()`, bool, integer (`i64`) or float, string, array, map.
/// Integers that do not fit in `i64` become floats.
pub(crate) fn json_to_dynamic(value: &serde_json::Value) -> Dynamic {
    match value {
        serde_json::Value::Null => Dynamic::UNIT,
        serde_json::Value::Bool(b) => Dynamic::from_bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Dynamic::from_int(i as INT),
            None => Dynamic::from_float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Dynamic::from(s.clone()),
        serde_json::Value::Array(items) => {
            Dynamic::from_array(items.iter().map(json_to_dynamic).collect::<Array>())
        }
        serde_json::Value::Object(map) => Dynamic::from_map(object_to_map(map)),
    }
}

/// Convert a JSON object into a Rhai object map.
pub(crate) fn object_to_map(map: &serde_json::Map<String, serde_json::Value>) -> Map {
    map.iter()
        .map(|(k, v)| (k.as_str().into(), json_to_dynamic(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_nested_values() {
        let v = serde_json::json!({"a": 1, "b": 2.5, "c": [true, null, "日本"], "d": {"e": 18446744073709551615u64}});
        let d = json_to_dynamic(&v);
        let map = d.cast::<Map>();
        assert_eq!(map["a"].as_int(), Ok(1));
        assert_eq!(map["b"].as_float(), Ok(2.5));
        let arr = map["c"].clone().cast::<Array>();
        assert_eq!(arr[0].as_bool(), Ok(true));
        assert!(arr[1].is_unit());
        assert_eq!(arr[2].clone().cast::<String>(), "日本");
        let inner = map["d"].clone().cast::<Map>();
        assert!(inner["e"].is_float());
    }
}
