//! Istio's own filter configurations as JSON: istiod sends most of them wrapped in a
//! `TypedStruct` (the config as a `google.protobuf.Struct`, its type in `type_url`), some
//! as the typed message. Both are read here into the same JSON document, so each filter
//! has one reader, with the field paths of the configuration.

use super::super::common::{struct_to_json, type_name};
use crate::config::error::{ConfigError, Result};
use crate::pb::google::protobuf::{Any, Struct};

/// `udpa.type.v1.TypedStruct` / `xds.type.v3.TypedStruct`, both fields.
#[derive(Clone, PartialEq, prost::Message)]
struct TypedStruct {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(message, optional, tag = "2")]
    value: Option<Struct>,
}

/// The configuration `any` holds for the message `full_name`, as a JSON object with the
/// proto's field names. A `TypedStruct`'s fields keep the names istiod wrote, so
/// `lowerCamelCase` names are also accepted by [`field`].
pub fn config_object(any: &Any, full_name: &str) -> Result<serde_json::Map<String, serde_json::Value>> {
    let outer = type_name(&any.type_url);
    let value = if matches!(outer, "udpa.type.v1.TypedStruct" | "xds.type.v3.TypedStruct") {
        let wrapped = <TypedStruct as prost::Message>::decode(any.value.as_slice())
            .map_err(|e| ConfigError::new("", format!("cannot decode {outer}: {e}")))?;
        match wrapped.value {
            None => serde_json::Value::Object(serde_json::Map::new()),
            Some(value) => struct_to_json(&value).map_err(|e| ConfigError::new("value", e.reason))?,
        }
    } else if outer == full_name {
        crate::pb::json::to_value(full_name, &any.value)
            .map_err(|e| ConfigError::new(e.path, format!("cannot decode {full_name}: {}", e.reason)))?
    } else {
        return Err(ConfigError::new("", format!("expected {full_name}, got {outer}")));
    };
    match value {
        serde_json::Value::Object(map) => Ok(map),
        _ => Err(ConfigError::new("", "the configuration is not an object")),
    }
}

/// A field's name as the proto spells it: `downstreamDiscovery` → `downstream_discovery`.
pub fn field(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A boolean field (`false` when null).
pub fn boolean(value: &serde_json::Value, at: &str) -> Result<bool> {
    match value {
        serde_json::Value::Bool(b) => Ok(*b),
        serde_json::Value::Null => Ok(false),
        // Istio's Wasm plugins read their JSON leniently: `"debug": "false"`.
        serde_json::Value::String(s) if s == "true" || s == "false" => Ok(s == "true"),
        _ => Err(ConfigError::new(at, "expected a boolean")),
    }
}

/// A string field (empty when null).
pub fn string<'a>(value: &'a serde_json::Value, at: &str) -> Result<&'a str> {
    match value {
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Null => Ok(""),
        _ => Err(ConfigError::new(at, "expected a string")),
    }
}

/// A list field (empty when null).
pub fn list<'a>(value: &'a serde_json::Value, at: &str) -> Result<&'a [serde_json::Value]> {
    match value {
        serde_json::Value::Array(items) => Ok(items),
        serde_json::Value::Null => Ok(&[]),
        _ => Err(ConfigError::new(at, "expected a list")),
    }
}

/// An object field (empty when null).
pub fn object<'a>(
    value: &'a serde_json::Value,
    at: &str,
) -> Result<std::borrow::Cow<'a, serde_json::Map<String, serde_json::Value>>> {
    match value {
        serde_json::Value::Object(map) => Ok(std::borrow::Cow::Borrowed(map)),
        serde_json::Value::Null => Ok(std::borrow::Cow::Owned(serde_json::Map::new())),
        _ => Err(ConfigError::new(at, "expected an object")),
    }
}

/// A `google.protobuf.Duration` in its JSON form (`"5s"`, `"0.250s"`).
pub fn duration(value: &serde_json::Value, at: &str) -> Result<Option<std::time::Duration>> {
    let text = match value {
        serde_json::Value::Null => return Ok(None),
        serde_json::Value::String(s) => s,
        _ => return Err(ConfigError::new(at, "expected a duration such as \"5s\"")),
    };
    let seconds = text
        .strip_suffix('s')
        .and_then(|s| s.parse::<f64>().ok())
        // Envoy's largest duration, as for every other duration (`common::duration`).
        .filter(|s| s.is_finite() && *s >= 0.0 && *s < (super::super::common::MAX_DURATION_SECONDS + 1) as f64)
        .ok_or_else(|| ConfigError::new(at, format!("{text:?} is not a duration")))?;
    Ok(Some(std::time::Duration::from_secs_f64(seconds)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_durations_read_as_protobuf_json_writes_them() {
        assert_eq!(field("downstreamDiscovery"), "downstream_discovery");
        assert_eq!(field("istio_headers"), "istio_headers");
        assert_eq!(duration(&serde_json::json!("0.250s"), "d").unwrap(), Some(std::time::Duration::from_millis(250)));
        assert!(duration(&serde_json::json!("5m"), "d").unwrap_err().to_string().contains('d'));
        // Up to Envoy's largest duration, and not beyond.
        assert!(duration(&serde_json::json!("9223372035s"), "d").unwrap().is_some());
        for beyond in ["9223372037s", "315576000000s", "1e300s"] {
            assert!(duration(&serde_json::json!(beyond), "d").is_err(), "{beyond}");
        }
    }
}
