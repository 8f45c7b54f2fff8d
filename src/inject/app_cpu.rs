//! The application's CPU for the sidecar's load reports. In a Kubernetes pod each
//! container has a cgroup of its own, so the sidecar cannot read the application's CPU
//! from its cgroup; with `ISTIO_META_OUTRIDER_APP_CPU: processes` in the pod's proxy
//! metadata it reads it from the application's processes instead, which needs the pod's
//! process namespace shared, and divides by the application containers' CPU limit. A pod
//! that does not ask is left as it is: its sidecar then reports no utilization.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

const SOURCE: &str = "ISTIO_META_OUTRIDER_APP_CPU";
const LIMIT: &str = "ISTIO_META_OUTRIDER_APP_CPU_LIMIT";

/// For a pod whose proxy metadata asks for `processes`: shares its process namespace and,
/// unless the metadata gives one, sets the limit to the sum of its containers' CPU limits
/// (in millicores) when every container has one.
pub fn prepare(
    spec: &mut Map<String, Value>,
    containers: &[Value],
    proxy_metadata: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    if proxy_metadata.get(SOURCE).map(String::as_str) != Some("processes") {
        return Ok(());
    }
    if spec.get("shareProcessNamespace").and_then(Value::as_bool) == Some(false) {
        return Err(format!("{SOURCE}: processes needs the pod's shareProcessNamespace, which the pod sets to false"));
    }
    spec.insert("shareProcessNamespace".into(), Value::Bool(true));
    if !proxy_metadata.contains_key(LIMIT) {
        let limits: Option<Vec<f64>> =
            containers.iter().map(|c| c.pointer("/resources/limits/cpu").and_then(millicores)).collect();
        if let Some(limits) = limits.filter(|l| !l.is_empty()) {
            proxy_metadata.insert(LIMIT.into(), format!("{}", limits.iter().sum::<f64>().round()));
        }
    }
    Ok(())
}

/// A Kubernetes CPU quantity (`500m`, `2`, `1.5`, or a number) in millicores; `None` for
/// anything else (other suffixes are not used for CPU).
fn millicores(quantity: &Value) -> Option<f64> {
    let value = match quantity {
        Value::Number(n) => n.as_f64()? * 1000.0,
        Value::String(text) => match text.trim().strip_suffix('m') {
            Some(milli) => milli.parse::<f64>().ok()?,
            None => text.trim().parse::<f64>().ok()? * 1000.0,
        },
        _ => return None,
    };
    (value.is_finite() && value > 0.0).then_some(value)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn prepared(spec: Value, metadata: &[(&str, &str)]) -> (Result<(), String>, Value, BTreeMap<String, String>) {
        let mut spec = spec.as_object().cloned().unwrap_or_default();
        let containers = spec.get("containers").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut metadata = metadata.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let result = prepare(&mut spec, &containers, &mut metadata);
        (result, Value::Object(spec), metadata)
    }

    #[test]
    fn a_pod_that_asks_shares_its_processes_and_gets_its_limits_summed() {
        let spec = json!({ "containers": [
            { "name": "app", "resources": { "limits": { "cpu": "500m" } } },
            { "name": "helper", "resources": { "limits": { "cpu": 1.5 } } },
        ]});
        let (result, spec, metadata) = prepared(spec, &[(SOURCE, "processes")]);
        assert_eq!(result, Ok(()));
        assert_eq!(spec["shareProcessNamespace"], json!(true));
        assert_eq!(metadata.get(LIMIT).map(String::as_str), Some("2000"));
    }

    #[test]
    fn a_container_without_a_limit_leaves_the_limit_unset_and_a_given_one_wins() {
        let spec =
            json!({ "containers": [{ "name": "app" }, { "name": "b", "resources": { "limits": { "cpu": "1" } } }]});
        let (_, _, metadata) = prepared(spec.clone(), &[(SOURCE, "processes")]);
        assert_eq!(metadata.get(LIMIT), None);
        let (_, _, metadata) = prepared(spec, &[(SOURCE, "processes"), (LIMIT, "250")]);
        assert_eq!(metadata.get(LIMIT).map(String::as_str), Some("250"));
    }

    #[test]
    fn a_pod_that_does_not_ask_is_untouched_and_one_that_refuses_sharing_is_an_error() {
        let spec = json!({ "containers": [{ "name": "app", "resources": { "limits": { "cpu": "1" } } }]});
        let (result, out, metadata) = prepared(spec.clone(), &[]);
        assert_eq!((result, out.get("shareProcessNamespace"), metadata.len()), (Ok(()), None, 0));
        let refusing = json!({ "shareProcessNamespace": false, "containers": [] });
        let (result, _, _) = prepared(refusing, &[(SOURCE, "processes")]);
        assert!(result.unwrap_err().contains("shareProcessNamespace"));
    }

    #[test]
    fn quantities() {
        assert_eq!(millicores(&json!("250m")), Some(250.0));
        assert_eq!(millicores(&json!("2")), Some(2000.0));
        assert_eq!(millicores(&json!(0.5)), Some(500.0));
        assert_eq!(millicores(&json!("1k")), None);
        assert_eq!(millicores(&json!("0")), None);
        assert_eq!(millicores(&json!("-1")), None);
    }
}
