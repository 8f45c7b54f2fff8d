//! The `JSON` form of `endpoint-load-metrics`: the proto3 JSON mapping of
//! `OrcaLoadReport`, mapped by hand because `prost-reflect` has no descriptors for
//! Outrider's own protos. Field names may be the proto names or the lowerCamelCase JSON
//! names; numbers may be JSON numbers or strings, as proto3 JSON allows. Unknown fields
//! refuse the report, as in Envoy.

use std::collections::HashMap;

use serde_json::Value;

use crate::pb::orca::OrcaLoadReport;

use super::error::OrcaError;

/// Parses the part after `JSON `.
#[allow(deprecated)]
pub fn parse(text: &str) -> Result<OrcaLoadReport, OrcaError> {
    let value: Value = serde_json::from_str(text).map_err(|e| OrcaError::Json(e.to_string()))?;
    let Value::Object(object) = value else {
        return Err(OrcaError::Json("not an object".into()));
    };
    let mut report = OrcaLoadReport::default();
    let mut seen = Vec::new();
    for (key, value) in object {
        let field = canonical(&key).ok_or_else(|| OrcaError::UnknownField(key.clone()))?;
        // `cpuUtilization` and `cpu_utilization` together name one field twice.
        if seen.contains(&field) {
            return Err(OrcaError::Json(format!("field {field} given twice")));
        }
        seen.push(field);
        if value.is_null() {
            continue; // proto3 JSON: null means the default.
        }
        match field {
            "cpu_utilization" => report.cpu_utilization = double(field, &value)?,
            "mem_utilization" => report.mem_utilization = double(field, &value)?,
            "application_utilization" => report.application_utilization = double(field, &value)?,
            "rps_fractional" => report.rps_fractional = double(field, &value)?,
            "eps" => report.eps = double(field, &value)?,
            "rps" => report.rps = unsigned(field, &value)?,
            "request_cost" => report.request_cost = map(field, value)?,
            "utilization" => report.utilization = map(field, value)?,
            _ => report.named_metrics = map(field, value)?,
        }
    }
    Ok(report)
}

/// The proto field name for a JSON key, or `None` for an unknown field.
fn canonical(key: &str) -> Option<&'static str> {
    Some(match key {
        "cpu_utilization" | "cpuUtilization" => "cpu_utilization",
        "mem_utilization" | "memUtilization" => "mem_utilization",
        "application_utilization" | "applicationUtilization" => "application_utilization",
        "rps_fractional" | "rpsFractional" => "rps_fractional",
        "eps" => "eps",
        "rps" => "rps",
        "request_cost" | "requestCost" => "request_cost",
        "utilization" => "utilization",
        "named_metrics" | "namedMetrics" => "named_metrics",
        _ => return None,
    })
}

/// A proto3 JSON `double`: a number, or a string holding one or `NaN`/`Infinity`/
/// `-Infinity` (those are then refused by validation, with the field's name).
fn double(name: &str, value: &Value) -> Result<f64, OrcaError> {
    let wrong = || OrcaError::Json(format!("{name}: expected a number, got {value}"));
    match value {
        Value::Number(number) => number.as_f64().ok_or_else(wrong),
        Value::String(text) => match text.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            // Rust also reads "inf" and "nan"; proto3 JSON does not.
            other => other.parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(wrong),
        },
        _ => Err(wrong()),
    }
}

/// A proto3 JSON `uint64`: a number or a decimal string.
fn unsigned(name: &str, value: &Value) -> Result<u64, OrcaError> {
    let parsed = match value {
        Value::Number(number) => number.as_u64(),
        Value::String(text) => text.parse().ok(),
        _ => None,
    };
    parsed.ok_or_else(|| OrcaError::Json(format!("{name}: expected an unsigned integer, got {value}")))
}

fn map(name: &str, value: Value) -> Result<HashMap<String, f64>, OrcaError> {
    let Value::Object(object) = value else {
        return Err(OrcaError::Json(format!("{name}: expected an object")));
    };
    object
        .into_iter()
        .map(|(key, value)| {
            let number = double(&format!("{name}.{key}"), &value)?;
            Ok((key, number))
        })
        .collect()
}
