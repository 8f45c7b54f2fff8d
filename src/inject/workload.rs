//! Finding the pod template in a Kubernetes object and adding the sidecar to it. Kinds
//! that hold no pod pass through unchanged; so do pods that opt out
//! (`sidecar.istio.io/inject: "false"`), use the host's network, or already have a proxy.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::sidecar::{self, INIT_NAME, SIDECAR_NAME, Settings, Workload};
use super::{app_cpu, probes};

/// Containers that mean the pod already has a proxy (Outrider's, or Istio's own).
const PROXY_NAMES: &[&str] = &[INIT_NAME, SIDECAR_NAME, "istio-proxy", "istio-init"];
const INJECT_KEY: &str = "sidecar.istio.io/inject";

/// What happened to one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Injected,
    /// A pod (template) left alone, and why.
    Skipped(String),
    /// Not a kind that holds a pod.
    NotAWorkload,
}

/// Injects the sidecar into `object`'s pod template(s), in place.
pub fn inject(object: &mut Value, settings: &Settings) -> Result<Vec<Outcome>, String> {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
    if kind == "List" {
        let mut outcomes = Vec::new();
        if let Some(items) = object.get_mut("items").and_then(Value::as_array_mut) {
            for item in items {
                outcomes.extend(inject(item, settings)?);
            }
        }
        return Ok(outcomes);
    }
    let name = workload_name(object);
    let (template, owner_kind) = match kind.as_str() {
        "Pod" => (Some(&mut *object), None),
        "Deployment" => (object.pointer_mut("/spec/template"), Some(("apps/v1", "deployments"))),
        "StatefulSet" => (object.pointer_mut("/spec/template"), Some(("apps/v1", "statefulsets"))),
        "DaemonSet" => (object.pointer_mut("/spec/template"), Some(("apps/v1", "daemonsets"))),
        "ReplicaSet" => (object.pointer_mut("/spec/template"), Some(("apps/v1", "replicasets"))),
        "Job" => (object.pointer_mut("/spec/template"), Some(("batch/v1", "jobs"))),
        "CronJob" => (object.pointer_mut("/spec/jobTemplate/spec/template"), Some(("batch/v1", "cronjobs"))),
        _ => return Ok(vec![Outcome::NotAWorkload]),
    };
    let Some(template) = template else {
        return Err(format!("{kind} {name:?} has no pod template"));
    };
    inject_pod(template, settings, &name, owner_kind).map(|outcome| vec![outcome])
}

/// The workload's name (a bare pod's `generateName` without its trailing `-`).
fn workload_name(object: &Value) -> String {
    let metadata = object.get("metadata");
    let name = metadata.and_then(|m| m.get("name")).and_then(Value::as_str);
    let generated = metadata.and_then(|m| m.get("generateName")).and_then(Value::as_str);
    name.or(generated.map(|g| g.trim_end_matches('-'))).unwrap_or_default().to_owned()
}

/// Injects into one pod (or pod template): `metadata` and `spec`.
fn inject_pod(
    pod: &mut Value,
    settings: &Settings,
    name: &str,
    owner_kind: Option<(&str, &str)>,
) -> Result<Outcome, String> {
    let Some(pod) = pod.as_object_mut() else { return Err(format!("the pod of {name:?} is not a mapping")) };
    if let Some(why) = opted_out(pod) {
        return Ok(Outcome::Skipped(why));
    }
    let spec = pod.get("spec").and_then(Value::as_object).ok_or_else(|| format!("the pod of {name:?} has no spec"))?;
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        return Ok(Outcome::Skipped("hostNetwork: the pod's traffic cannot be captured".into()));
    }
    let containers = spec
        .get("containers")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("the pod of {name:?} has no containers"))?;
    let has_proxy = |list: Option<&Value>| {
        list.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c.get("name").and_then(Value::as_str).is_some_and(|n| PROXY_NAMES.contains(&n)))
    };
    if has_proxy(spec.get("initContainers")) || has_proxy(spec.get("containers")) {
        return Ok(Outcome::Skipped("already has a proxy".into()));
    }
    if settings.agent {
        let metadata = object_at(pod, "metadata")?;
        let annotations = object_at(metadata, "annotations")?;
        annotations.insert(sidecar::PROXY_IMAGE_ANNOTATION.into(), Value::String(settings.image.clone()));
        return Ok(Outcome::Injected);
    }
    let app_containers =
        containers.iter().filter_map(|c| c.get("name").and_then(Value::as_str)).map(str::to_owned).collect();
    let ports = containers.iter().filter_map(|c| c.get("ports").and_then(Value::as_array)).flatten().cloned().collect();
    let in_process_agent = settings.xds_address.is_none();

    let metadata = object_at(pod, "metadata")?;
    let labels = object_at(metadata, "labels")?;
    add_mesh_labels(labels, name);
    let labels = labels.clone();
    let annotations = object_at(metadata, "annotations")?;
    let rewrite_probes = in_process_agent
        && annotations.get(probes::REWRITE_ANNOTATION).and_then(Value::as_str).is_none_or(|v| v != "false");
    // The application's own scrape annotations move to the sidecar, which merges them in.
    let app_metrics = in_process_agent.then(|| app_prometheus(annotations)).flatten();
    let mut proxy_metadata = proxy_metadata(settings, annotations).map_err(|why| format!("{name:?}: {why}"))?;
    for (key, value) in sidecar::annotations(settings) {
        if in_process_agent {
            annotations.insert(key.into(), Value::String(value));
        } else {
            annotations.entry(key).or_insert(Value::String(value));
        }
    }

    let spec = object_at(pod, "spec")?;
    let app_container_specs = spec.get("containers").and_then(Value::as_array).cloned().unwrap_or_default();
    app_cpu::prepare(spec, &app_container_specs, &mut proxy_metadata).map_err(|why| format!("{name:?}: {why}"))?;
    let app_probers = match spec.get_mut("containers").and_then(Value::as_array_mut) {
        Some(containers) if rewrite_probes => probes::rewrite(containers).map_err(|why| format!("{name:?}: {why}"))?,
        _ => Map::new(),
    };
    let workload =
        Workload { owner_kind, name, labels: &labels, app_containers, ports, app_probers, app_metrics, proxy_metadata };
    let mut init = vec![sidecar::init_container(settings, &workload), sidecar::sidecar_container(settings, &workload)];
    if let Some(Value::Array(existing)) = spec.remove("initContainers") {
        init.extend(existing);
    }
    spec.insert("initContainers".into(), Value::Array(init));
    let volumes = spec.entry("volumes").or_insert_with(|| Value::Array(Vec::new()));
    let Some(volumes) = volumes.as_array_mut() else {
        return Err(format!("the pod of {name:?}: volumes is not a list"));
    };
    for volume in sidecar::volumes() {
        let taken = volumes.iter().any(|v| v.get("name") == volume.get("name"));
        if !taken {
            volumes.push(volume);
        }
    }
    Ok(Outcome::Injected)
}

/// The pod's own `prometheus.io/{scrape,port,path}` when it asks to be scraped, for
/// `ISTIO_PROMETHEUS_ANNOTATIONS`.
fn app_prometheus(annotations: &Map<String, Value>) -> Option<Map<String, Value>> {
    let get = |key: &str| annotations.get(&format!("prometheus.io/{key}")).and_then(Value::as_str);
    if get("scrape") != Some("true") {
        return None;
    }
    let mut metrics = Map::new();
    for key in ["scrape", "port", "path"] {
        if let Some(value) = get(key) {
            metrics.insert(key.into(), Value::String(value.into()));
        }
    }
    Some(metrics)
}

/// `sidecar.istio.io/inject: "false"` as a label (Istio's current form) or annotation.
fn opted_out(pod: &Map<String, Value>) -> Option<String> {
    for place in ["labels", "annotations"] {
        let value = pod.get("metadata").and_then(|m| m.get(place)).and_then(|p| p.get(INJECT_KEY));
        let off = match value {
            Some(Value::String(s)) => matches!(s.to_ascii_lowercase().as_str(), "false" | "n" | "no" | "off"),
            Some(Value::Bool(b)) => !b,
            _ => false,
        };
        if off {
            return Some(format!("{INJECT_KEY}: \"false\" ({place})"));
        }
    }
    None
}

/// The labels istiod reads from a meshed pod: mTLS to it (`tlsMode`) and its canonical
/// service, from the `app` / `version` labels as Istio's injector derives them.
fn add_mesh_labels(labels: &mut Map<String, Value>, workload: &str) {
    let get = |key: &str| labels.get(key).and_then(Value::as_str).map(str::to_owned);
    let canonical_name = get("service.istio.io/canonical-name")
        .or_else(|| get("app.kubernetes.io/name"))
        .or_else(|| get("app"))
        .unwrap_or_else(|| workload.to_owned());
    let canonical_revision = get("service.istio.io/canonical-revision")
        .or_else(|| get("app.kubernetes.io/version"))
        .or_else(|| get("version"))
        .unwrap_or_else(|| "latest".to_owned());
    labels.insert("security.istio.io/tlsMode".into(), Value::String("istio".into()));
    labels.insert("service.istio.io/canonical-name".into(), Value::String(canonical_name));
    labels.insert("service.istio.io/canonical-revision".into(), Value::String(canonical_revision));
}

/// The mapping at `key`, created if absent or `null`; anything else is a broken manifest.
fn object_at<'a>(parent: &'a mut Map<String, Value>, key: &str) -> Result<&'a mut Map<String, Value>, String> {
    let slot = parent.entry(key).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut().ok_or_else(|| format!("{key} is not a mapping"))
}

/// ProxyConfig's `proxyMetadata` for this pod: the mesh-wide entries, then the pod's own
/// from its `proxy.istio.io/config` annotation (YAML or JSON), which win, as Istio merges
/// them. An annotation that does not parse, or whose entries are not strings, is an error:
/// the sidecar would run without what the pod asked for.
fn proxy_metadata(settings: &Settings, annotations: &Map<String, Value>) -> Result<BTreeMap<String, String>, String> {
    let mut merged = settings.proxy_metadata.clone();
    let Some(config) = annotations.get(sidecar::PROXY_CONFIG_ANNOTATION) else { return Ok(merged) };
    let annotation = sidecar::PROXY_CONFIG_ANNOTATION;
    let text = config.as_str().ok_or_else(|| format!("{annotation} is not a string"))?;
    let config: Value = serde_saphyr::from_str(text).map_err(|e| format!("{annotation}: {e}"))?;
    let entries = match config.get("proxyMetadata") {
        None | Some(Value::Null) => return Ok(merged),
        Some(Value::Object(entries)) => entries,
        Some(_) => return Err(format!("{annotation}: proxyMetadata is not a mapping")),
    };
    for (key, value) in entries {
        let value = value.as_str().ok_or_else(|| format!("{annotation}: proxyMetadata.{key} is not a string"))?;
        merged.insert(key.clone(), value.to_owned());
    }
    Ok(merged)
}
