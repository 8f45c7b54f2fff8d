//! What injection adds to a pod: the `outrider-init` container that installs capture, the
//! `outrider` native sidecar (an init container with `restartPolicy: Always`, Kubernetes
//! 1.29+), and the volumes Istio's injection gives its proxy (the agent's sockets, the
//! istio-token, the mesh's root certificate). Shapes follow Istio's injection template.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::bootstrap::{PROMETHEUS_PORT, STATUS_PORT};

/// Names of the two containers injection adds (also how it recognises an injected pod).
pub const INIT_NAME: &str = "outrider-init";
pub const SIDECAR_NAME: &str = "outrider";
/// The proxy's user and group: capture leaves their traffic alone.
pub const PROXY_UID: u64 = 1337;
/// Where the sidecar writes the bootstrap it builds from the environment.
pub const BOOTSTRAP_PATH: &str = "/etc/istio/proxy/outrider-bootstrap.json";

/// Injection settings (from the command line).
#[derive(Debug, Clone)]
pub struct Settings {
    pub image: String,
    /// The capture init container's image (it needs iptables).
    pub init_image: String,
    /// `OUTRIDER_XDS_ADDRESS` for the sidecar; `None`: the sidecar does istio-agent's job
    /// (`--istio-agent`) against `discovery_address`.
    pub xds_address: Option<String>,
    /// istiod's TLS address (`PROXY_CONFIG`'s `discoveryAddress`) for `--istio-agent`.
    pub discovery_address: String,
    pub cluster_id: String,
    pub mesh_id: String,
    /// Leave the proxy to Istio's injection (pilot-agent runs Outrider as its `envoy`).
    pub agent: bool,
    /// Environment variables for every sidecar (ProxyConfig's `proxyMetadata`, mesh-wide).
    pub proxy_metadata: BTreeMap<String, String>,
}

/// The pod annotation holding a ProxyConfig for its sidecar (Istio's).
pub const PROXY_CONFIG_ANNOTATION: &str = "proxy.istio.io/config";

/// The annotation that picks the image of Istio's injected `istio-proxy` container.
pub const PROXY_IMAGE_ANNOTATION: &str = "sidecar.istio.io/proxyImage";

/// What the sidecar's metadata needs to know about the workload.
pub struct Workload<'a> {
    /// `deployments`, `statefulsets`, … (Istio's `OWNER` URL segment), with its API group.
    pub owner_kind: Option<(&'a str, &'a str)>,
    pub name: &'a str,
    pub labels: &'a Map<String, Value>,
    pub app_containers: Vec<String>,
    pub ports: Vec<Value>,
    /// The application's rewritten probes (`ISTIO_KUBE_APP_PROBERS`), when any.
    pub app_probers: Map<String, Value>,
    /// The application's own Prometheus annotations, merged on 15020
    /// (`ISTIO_PROMETHEUS_ANNOTATIONS`).
    pub app_metrics: Option<Map<String, Value>>,
    /// ProxyConfig's `proxyMetadata`: the mesh-wide entries with the pod's own over them.
    pub proxy_metadata: BTreeMap<String, String>,
}

/// The init container that installs the capture rules, with Istio's `istio-iptables` flags
/// and, as Istio's template gives it, ProxyConfig's `proxyMetadata` as its environment
/// (`ISTIO_META_DNS_CAPTURE` there turns DNS capture on).
pub fn init_container(settings: &Settings, workload: &Workload) -> Value {
    let mut container = json!({
        "name": INIT_NAME,
        "image": settings.init_image,
        "args": ["capture", "-p", "15001", "-z", "15006", "-u", "1337", "-g", "1337", "-m", "REDIRECT",
                 "-i", "*", "-x", "", "-b", "*", "-d", "15090,15021,15020"],
        "resources": resources(),
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "capabilities": { "add": ["NET_ADMIN", "NET_RAW"], "drop": ["ALL"] },
            "privileged": false,
            "readOnlyRootFilesystem": false,
            "runAsGroup": 0,
            "runAsNonRoot": false,
            "runAsUser": 0,
        },
    });
    if !workload.proxy_metadata.is_empty() {
        let env: Vec<Value> =
            workload.proxy_metadata.iter().map(|(name, value)| json!({ "name": name, "value": value })).collect();
        container["env"] = Value::Array(env);
    }
    container
}

/// The proxy, as a native sidecar: started before the application's containers, ready
/// before they start (startup probe), stopped after them.
pub fn sidecar_container(settings: &Settings, workload: &Workload) -> Value {
    let probe = |period: u64, failures: u64| {
        json!({
            "httpGet": { "path": "/healthz/ready", "port": STATUS_PORT },
            "periodSeconds": period,
            "timeoutSeconds": 3,
            "failureThreshold": failures,
        })
    };
    json!({
        "name": SIDECAR_NAME,
        "image": settings.image,
        "restartPolicy": "Always",
        "args": args(settings),
        "workingDir": "/",
        "ports": [
            { "containerPort": PROMETHEUS_PORT, "name": "http-envoy-prom", "protocol": "TCP" },
            { "containerPort": super::probes::STATUS_PORT, "name": "http-status", "protocol": "TCP" },
        ],
        "env": env(settings, workload),
        "startupProbe": probe(1, 600),
        "readinessProbe": probe(15, 4),
        "resources": resources(),
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "capabilities": { "drop": ["ALL"] },
            "privileged": false,
            "readOnlyRootFilesystem": true,
            "runAsGroup": PROXY_UID,
            "runAsNonRoot": true,
            "runAsUser": PROXY_UID,
        },
        "volumeMounts": [
            { "name": "workload-socket", "mountPath": "/var/run/secrets/workload-spiffe-uds" },
            { "name": "credential-socket", "mountPath": "/var/run/secrets/credential-uds" },
            { "name": "workload-certs", "mountPath": "/var/run/secrets/workload-spiffe-credentials" },
            { "name": "istiod-ca-cert", "mountPath": "/var/run/secrets/istio" },
            { "name": "istio-data", "mountPath": "/var/lib/istio/data" },
            { "name": "istio-envoy", "mountPath": "/etc/istio/proxy" },
            { "name": "istio-token", "mountPath": "/var/run/secrets/tokens" },
            { "name": "istio-podinfo", "mountPath": "/etc/istio/pod" },
        ],
    })
}

/// `outrider sidecar`, doing istio-agent's job unless a control plane address is given.
fn args(settings: &Settings) -> Value {
    if settings.xds_address.is_some() {
        json!(["sidecar", "--bootstrap", BOOTSTRAP_PATH])
    } else {
        json!(["sidecar", "--bootstrap", BOOTSTRAP_PATH, "--istio-agent"])
    }
}

/// Istio's default proxy resources.
fn resources() -> Value {
    json!({ "limits": { "cpu": "2", "memory": "1Gi" }, "requests": { "cpu": "100m", "memory": "128Mi" } })
}

fn field(name: &str, path: &str) -> Value {
    json!({ "name": name, "valueFrom": { "fieldRef": { "apiVersion": "v1", "fieldPath": path } } })
}

fn value(name: &str, value: impl Into<String>) -> Value {
    json!({ "name": name, "value": value.into() })
}

/// The downward-API variables `outrider sidecar` builds its bootstrap from.
fn env(settings: &Settings, workload: &Workload) -> Value {
    let mut env = vec![
        field("POD_NAME", "metadata.name"),
        field("POD_NAMESPACE", "metadata.namespace"),
        field("INSTANCE_IP", "status.podIP"),
        field("SERVICE_ACCOUNT", "spec.serviceAccountName"),
        field("HOST_IP", "status.hostIP"),
        field("ISTIO_META_NODE_NAME", "spec.nodeName"),
        value("ISTIO_META_CLUSTER_ID", settings.cluster_id.clone()),
        value("ISTIO_META_MESH_ID", settings.mesh_id.clone()),
        value("ISTIO_META_INTERCEPTION_MODE", "REDIRECT"),
        value("ISTIO_META_WORKLOAD_NAME", workload.name),
        value("ISTIO_META_APP_CONTAINERS", workload.app_containers.join(",")),
        value("ISTIO_METAJSON_LABELS", Value::Object(workload.labels.clone()).to_string()),
        value("ISTIO_META_POD_PORTS", Value::Array(workload.ports.clone()).to_string()),
    ];
    if let Some((group, kind)) = workload.owner_kind {
        // `$(POD_NAMESPACE)` is expanded by the kubelet from the variable above.
        let owner = format!("kubernetes://apis/{group}/namespaces/$(POD_NAMESPACE)/{kind}/{}", workload.name);
        env.push(value("ISTIO_META_OWNER", owner));
    }
    // Last, as Istio's injector adds them: an entry replaces a variable of its name.
    for (name, text) in &workload.proxy_metadata {
        env.retain(|v| v.get("name").and_then(Value::as_str) != Some(name.as_str()));
        env.push(value(name, text.clone()));
    }
    match &settings.xds_address {
        Some(address) => env.push(value("OUTRIDER_XDS_ADDRESS", address.clone())),
        None => {
            env.push(value("PROXY_CONFIG", json!({ "discoveryAddress": settings.discovery_address }).to_string()));
            if !workload.app_probers.is_empty() {
                env.push(value("ISTIO_KUBE_APP_PROBERS", Value::Object(workload.app_probers.clone()).to_string()));
            }
            if let Some(metrics) = &workload.app_metrics {
                env.push(value("ISTIO_PROMETHEUS_ANNOTATIONS", Value::Object(metrics.clone()).to_string()));
            }
        }
    }
    Value::Array(env)
}

/// The pod volumes the sidecar mounts, as Istio's injection declares them.
pub fn volumes() -> Vec<Value> {
    vec![
        json!({ "name": "workload-socket", "emptyDir": {} }),
        json!({ "name": "credential-socket", "emptyDir": {} }),
        json!({ "name": "workload-certs", "emptyDir": {} }),
        json!({ "name": "istio-envoy", "emptyDir": { "medium": "Memory" } }),
        json!({ "name": "istio-data", "emptyDir": {} }),
        json!({ "name": "istio-podinfo", "downwardAPI": { "items": [
            { "path": "labels", "fieldRef": { "fieldPath": "metadata.labels" } },
            { "path": "annotations", "fieldRef": { "fieldPath": "metadata.annotations" } },
        ] } }),
        json!({ "name": "istio-token", "projected": { "sources": [{ "serviceAccountToken": {
            "audience": "istio-ca", "expirationSeconds": 43200, "path": "istio-token",
        } }] } }),
        json!({ "name": "istiod-ca-cert", "configMap": { "name": "istio-ca-root-cert" } }),
    ]
}

/// Pod annotations: Prometheus scrapes the sidecar's 15090, or, when it does
/// istio-agent's job, the merged metrics on its status port.
pub fn annotations(settings: &Settings) -> [(&'static str, String); 3] {
    let port = if settings.xds_address.is_some() { PROMETHEUS_PORT } else { super::probes::STATUS_PORT };
    [
        ("prometheus.io/scrape", "true".to_owned()),
        ("prometheus.io/port", port.to_string()),
        ("prometheus.io/path", "/stats/prometheus".to_owned()),
    ]
}
