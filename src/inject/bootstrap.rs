//! `outrider bootstrap`: the Envoy-format bootstrap of an Istio sidecar, built from the
//! pod facts the downward API puts in the environment, as Istio's `pilot-agent` builds
//! Envoy's. istiod recognises the proxy by its node id and reads the pod's identity,
//! labels and version from the node metadata, so both follow pilot-agent's format.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::error::InjectError;

/// Where Istio's agent serves xDS (relative to `/`, as in Istio's own bootstrap).
pub const AGENT_XDS_SOCKET: &str = "./etc/istio/proxy/XDS";
/// Where Istio's agent serves certificates (SDS names `default` and `ROOTCA`).
pub const AGENT_SDS_SOCKET: &str = "./var/run/secrets/workload-spiffe-uds/socket";
/// Istio's readiness port (`/healthz/ready`) and Prometheus port (`/stats/prometheus`).
pub const STATUS_PORT: u16 = 15021;
pub const PROMETHEUS_PORT: u16 = 15090;
/// The admin server, loopback only, which both static listeners forward to.
pub const ADMIN_PORT: u16 = 15000;
/// The Istio release whose generated configuration Outrider is tested against; sent as
/// `ISTIO_VERSION` when the environment names none, because istiod gates features on it.
pub const DEFAULT_ISTIO_VERSION: &str = "1.28.0";

/// Environment variables pilot-agent turns into node metadata: `ISTIO_META_X=v` becomes
/// `X: "v"`, `ISTIO_METAJSON_X={...}` becomes `X: {...}`.
const META_PREFIX: &str = "ISTIO_META_";
const META_JSON_PREFIX: &str = "ISTIO_METAJSON_";
/// The pod's labels as the downward API writes them (`key="value"` lines), in the volume
/// Istio's injection mounts at `/etc/istio/pod`; relative, as the proxy runs from `/`.
pub const POD_LABELS_PATH: &str = "./etc/istio/pod/labels";
/// The Deployment controller's label, which pilot-agent leaves out of the node's labels.
const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The variable naming the cluster's DNS domain (default `cluster.local`).
pub const DNS_DOMAIN_VARIABLE: &str = "OUTRIDER_DNS_DOMAIN";
/// The variable naming the proxy type (pilot-agent takes it as `proxy <type>`).
pub const PROXY_TYPE_VARIABLE: &str = "OUTRIDER_PROXY_TYPE";

/// The pod facts a sidecar bootstrap is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    pub name: String,
    pub namespace: String,
    pub ip: String,
    pub service_account: String,
    /// The cluster's DNS domain (`cluster.local`).
    pub dns_domain: String,
    /// `host:port` of a control plane reached directly (plaintext gRPC, e.g. istiod's
    /// 15010); `None` means the agent's Unix socket.
    pub xds_address: Option<String>,
    /// Node metadata from `ISTIO_META_*` / `ISTIO_METAJSON_*`.
    pub metadata: Map<String, Value>,
    /// What istiod configures the proxy as: the node id's first field.
    pub proxy_type: ProxyType,
}

/// The proxy types pilot-agent's `proxy <type>` starts, as the node id names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProxyType {
    /// Beside an application, its traffic captured (`sidecar~…`).
    #[default]
    Sidecar,
    /// An ambient mesh's waypoint: the L7 proxy of the services bound to its Gateway, reached
    /// over HBONE only (`waypoint~…`).
    Waypoint,
}

impl ProxyType {
    pub fn name(self) -> &'static str {
        match self {
            Self::Sidecar => "sidecar",
            Self::Waypoint => "waypoint",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        [Self::Sidecar, Self::Waypoint].into_iter().find(|t| t.name() == value)
    }
}

impl PodInfo {
    /// Reads the pod facts from `env` (the downward API's variables, as Istio's injector
    /// sets them: `POD_NAME`, `POD_NAMESPACE`, `INSTANCE_IP`, `SERVICE_ACCOUNT`, plus
    /// `ISTIO_META_*`, `ISTIO_METAJSON_*`, `OUTRIDER_XDS_ADDRESS`, `OUTRIDER_DNS_DOMAIN`, and
    /// `OUTRIDER_PROXY_TYPE`: `sidecar` or `waypoint`, what pilot-agent's `proxy <type>` says).
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<Self, InjectError> {
        let required = |key: &str| match env.get(key).map(|v| v.trim()) {
            Some(v) if !v.is_empty() => Ok(v.to_owned()),
            _ => Err(InjectError::Env { variable: key.to_owned(), why: "is required (downward API)".into() }),
        };
        let mut metadata = Map::new();
        for (key, value) in env {
            if let Some(name) = key.strip_prefix(META_JSON_PREFIX) {
                let parsed: Value = serde_json::from_str(value)
                    .map_err(|e| InjectError::Env { variable: key.clone(), why: format!("is not JSON: {e}") })?;
                metadata.insert(name.to_owned(), parsed);
            } else if let Some(name) = key.strip_prefix(META_PREFIX) {
                metadata.insert(name.to_owned(), Value::String(value.clone()));
            }
        }
        let optional = |key: &str| env.get(key).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let proxy_type = match optional(PROXY_TYPE_VARIABLE) {
            None => ProxyType::Sidecar,
            Some(value) => ProxyType::parse(&value).ok_or_else(|| InjectError::Env {
                variable: PROXY_TYPE_VARIABLE.into(),
                why: format!("is {value:?}, not sidecar or waypoint"),
            })?,
        };
        Ok(Self {
            name: required("POD_NAME")?,
            namespace: required("POD_NAMESPACE")?,
            ip: required("INSTANCE_IP")?,
            service_account: optional("SERVICE_ACCOUNT").unwrap_or_else(|| "default".into()),
            dns_domain: optional(DNS_DOMAIN_VARIABLE).unwrap_or_else(|| "cluster.local".into()),
            xds_address: optional("OUTRIDER_XDS_ADDRESS"),
            metadata,
            proxy_type,
        })
    }

    /// Istio's node id: `<type>~<ip>~<pod>.<ns>~<ns>.svc.<domain>`.
    pub fn node_id(&self) -> String {
        let kind = self.proxy_type.name();
        format!("{kind}~{}~{}.{}~{}.svc.{}", self.ip, self.name, self.namespace, self.namespace, self.dns_domain)
    }

    /// `node.cluster`: Istio's default service cluster, `<app or workload>.<namespace>`.
    fn service_cluster(&self) -> String {
        let app = self.metadata.get("LABELS").and_then(|l| l.get("app")).and_then(Value::as_str);
        let workload = self.metadata.get("WORKLOAD_NAME").and_then(Value::as_str);
        format!("{}.{}", app.or(workload).unwrap_or("istio-proxy"), self.namespace)
    }

    /// The pod's labels from the downward API's file (`text`, `key="value"` lines with the
    /// value Go-quoted), which replace `ISTIO_METAJSON_LABELS`, as pilot-agent's do: Istio's
    /// injection template sets no labels variable and mounts the file instead.
    pub fn with_downward_labels(mut self, text: &str) -> Result<Self, InjectError> {
        let mut labels = Map::new();
        for line in text.lines() {
            let Some((key, quoted)) = line.split_once('=') else { continue };
            // Label values are letters, digits, `-`, `_` and `.`: Go's quoting of them is JSON's.
            let value: String = serde_json::from_str(quoted).map_err(|e| InjectError::Env {
                variable: POD_LABELS_PATH.into(),
                why: format!("line {line:?} is not key=\"value\": {e}"),
            })?;
            if key != POD_TEMPLATE_HASH {
                labels.insert(key.to_owned(), Value::String(value));
            }
        }
        self.metadata.insert("LABELS".into(), Value::Object(labels));
        Ok(self)
    }

    /// The node metadata istiod reads; what the environment says wins over the defaults.
    fn node_metadata(&self) -> Map<String, Value> {
        let mut metadata = Map::new();
        let mut set = |key: &str, value: Value| {
            metadata.insert(key.to_owned(), value);
        };
        set("NAME", json!(self.name));
        set("NAMESPACE", json!(self.namespace));
        set("INSTANCE_IPS", json!(self.ip));
        set("SERVICE_ACCOUNT", json!(self.service_account));
        set("CLUSTER_ID", json!("Kubernetes"));
        set("MESH_ID", json!(self.dns_domain));
        set("ISTIO_VERSION", json!(DEFAULT_ISTIO_VERSION));
        set("LABELS", json!({}));
        set("INTERCEPTION_MODE", json!("REDIRECT"));
        set("ENVOY_STATUS_PORT", json!(STATUS_PORT));
        set("ENVOY_PROMETHEUS_PORT", json!(PROMETHEUS_PORT));
        for (key, value) in &self.metadata {
            metadata.insert(key.clone(), value.clone());
        }
        metadata
    }

    /// The bootstrap document (protobuf JSON, Envoy's field names).
    pub fn bootstrap(&self) -> Value {
        json!({
            "node": {
                "id": self.node_id(),
                "cluster": self.service_cluster(),
                "locality": {},
                "metadata": self.node_metadata(),
            },
            "admin": { "address": socket_address("127.0.0.1", ADMIN_PORT) },
            "dynamic_resources": {
                "lds_config": { "ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3" },
                "cds_config": { "ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3" },
                "ads_config": {
                    "api_type": "DELTA_GRPC",
                    "set_node_on_first_message_only": true,
                    "transport_api_version": "V3",
                    "grpc_services": [{ "envoy_grpc": { "cluster_name": "xds-grpc" } }],
                },
            },
            "static_resources": {
                "clusters": [
                    static_cluster("prometheus_stats", socket_address("127.0.0.1", ADMIN_PORT), false),
                    grpc_cluster("sds-grpc", None),
                    grpc_cluster("xds-grpc", self.xds_address.as_deref()),
                ],
                "listeners": [
                    // As Istio's: Prometheus scrapes the admin server's /stats/prometheus.
                    status_listener("0.0.0.0_15090", PROMETHEUS_PORT, "/stats/prometheus", None),
                    // Istio sends /healthz/ready to its agent, which asks Envoy's /ready;
                    // Outrider answers it itself, from the admin server's /ready.
                    status_listener("0.0.0.0_15021", STATUS_PORT, "/healthz/ready", Some("/ready")),
                ],
            },
        })
    }
}

fn socket_address(address: &str, port: u16) -> Value {
    json!({ "socket_address": { "protocol": "TCP", "address": address, "port_value": port } })
}

/// A cluster with one static endpoint; `http2` for gRPC services.
fn static_cluster(name: &str, address: Value, http2: bool) -> Value {
    let mut cluster = json!({
        "name": name,
        "type": "STATIC",
        "connect_timeout": if http2 { "1s" } else { "0.250s" },
        "lb_policy": "ROUND_ROBIN",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": address } }] }],
        },
    });
    if http2 {
        cluster["typed_extension_protocol_options"] = json!({
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": { "http2_protocol_options": {} },
            }
        });
    }
    cluster
}

/// `sds-grpc` / `xds-grpc`: the agent's Unix socket, or a control plane at `host:port`
/// (resolved by DNS, as a Kubernetes service name must be).
fn grpc_cluster(name: &str, remote: Option<&str>) -> Value {
    let Some((host, port)) = remote.and_then(|r| r.rsplit_once(':')).and_then(|(h, p)| Some((h, p.parse().ok()?)))
    else {
        let path = if name == "xds-grpc" { AGENT_XDS_SOCKET } else { AGENT_SDS_SOCKET };
        return static_cluster(name, json!({ "pipe": { "path": path } }), true);
    };
    let mut cluster = static_cluster(name, socket_address(host.trim_matches(['[', ']']), port), true);
    cluster["type"] = json!("STRICT_DNS");
    cluster
}

/// Connections at once on the Prometheus (15090) and health (15021) listeners.
const STATUS_LISTENER_MAX_CONNECTIONS: u64 = 64;
/// How long those listeners wait for a request head (and a kept-alive connection for its
/// next one) before closing the connection.
const STATUS_LISTENER_HEADER_TIMEOUT: &str = "10s";

/// A listener on all addresses at `port` sending `prefix` to the admin server, with the
/// path rewritten when the admin server names it differently.
fn status_listener(name: &str, port: u16, prefix: &str, rewrite: Option<&str>) -> Value {
    let mut route = json!({ "cluster": "prometheus_stats" });
    if let Some(rewrite) = rewrite {
        route["prefix_rewrite"] = json!(rewrite);
    }
    json!({
        "name": name,
        "address": socket_address("0.0.0.0", port),
        "filter_chains": [{
            // Istio's bootstrap has neither of these limits. These ports listen on every
            // address and are not captured: a cap on connections and a header-read timeout
            // keep slow clients from holding descriptors the data plane needs.
            "filters": [{
                "name": "envoy.filters.network.connection_limit",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit",
                    "stat_prefix": name,
                    "max_connections": STATUS_LISTENER_MAX_CONNECTIONS,
                },
            }, {
                "name": "envoy.filters.network.http_connection_manager",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    "codec_type": "AUTO",
                    "request_headers_timeout": STATUS_LISTENER_HEADER_TIMEOUT,
                    "stat_prefix": if port == STATUS_PORT { "agent" } else { "stats" },
                    "route_config": {
                        "virtual_hosts": [{
                            "name": "backend",
                            "domains": ["*"],
                            "routes": [{ "match": { "prefix": prefix }, "route": route }],
                        }],
                    },
                    "http_filters": [{
                        "name": "envoy.filters.http.router",
                        "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" },
                    }],
                },
            }],
        }],
    })
}
