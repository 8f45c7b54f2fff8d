//! Envoy's bootstrap file, read into Outrider's domain types ([`Bootstrap`]; reading and
//! validating it is `convert::bootstrap`'s, which builds them).
//!
//! The file is Envoy's own format (YAML or JSON, protobuf JSON field names), so one file
//! can start either Envoy or Outrider. Fields Outrider has no use for are ignored with one
//! warning each; fields whose absence of support would change behaviour are refused with
//! their path.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::address::Address;
use super::endpoint::Locality;
use super::error::{ConfigError, Ignored};
use super::{Cluster, Listener, Secret};

/// The bootstrap's tracer (`tracing.http`) is of the type a connection manager's
/// `provider` is too.
pub use super::tracing::{TraceCollector, TracingConfig};

/// Envoy's default admin address is unset; Istio's sidecars use 127.0.0.1:15000, and so
/// does Outrider when the bootstrap has no `admin` block.
pub const DEFAULT_ADMIN_ADDRESS: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 15000);

/// Envoy's default `initial_fetch_timeout`.
pub const DEFAULT_INITIAL_FETCH_TIMEOUT: Duration = Duration::from_secs(15);

/// A loaded, validated bootstrap.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    pub node: Node,
    pub admin_address: Address,
    /// `admin.allow_paths`: when not empty, the only paths the admin server answers.
    pub admin_allow_paths: Vec<super::secret::StringMatcher>,
    pub ads: Option<AdsConfig>,
    pub static_listeners: Vec<Listener>,
    pub static_clusters: Vec<Cluster>,
    pub static_secrets: Vec<Secret>,
    /// `tracing.http`: where spans are exported.
    pub tracing: Option<TracingConfig>,
    /// `stats_config`: which stats exist.
    pub stats: super::stats::StatsConfig,
    /// `overload_manager`: resource monitors and what their pressure sets in force.
    pub overload: super::overload::OverloadConfig,
    /// `bootstrap_extensions` has Istio's `istio.workload.BootstrapExtension`: the ADS
    /// stream also subscribes to istiod's workload metadata (WDS, Delta only), which names
    /// a peer that sent no metadata headers (`workload_discovery` in Istio's peer metadata
    /// filter).
    pub workload_discovery: bool,
    /// The internal listener extension's `buffer_size_kb`: what each direction of an
    /// internal connection buffers (1 MiB when unset, as Envoy).
    pub internal_listener_buffer_kb: Option<u32>,
    /// Everything that was set but is ignored, with its path: shown by `outrider validate`
    /// and logged once at start-up.
    pub ignored: Vec<Ignored>,
    /// The document as read (protobuf JSON, as compact text), for `/config_dump`.
    pub document: String,
}

/// This proxy's identity towards the control plane.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub id: String,
    pub cluster: String,
    pub locality: Locality,
    /// `node.metadata`, a protobuf Struct in its JSON form. Istio keys pod facts here.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The balancing policy chosen for the whole proxy (`node.metadata.OUTRIDER_LB`).
    pub lb_policy: Option<super::cluster::ProxyLbPolicy>,
    /// Load reports for mesh callers about the application behind this sidecar
    /// (`node.metadata.OUTRIDER_LOAD_REPORT`: `on`, the default, or `off`).
    pub load_reports: bool,
    /// Where those reports read the application's CPU use from
    /// (`node.metadata.OUTRIDER_APP_CPU` and `OUTRIDER_APP_CPU_LIMIT`).
    pub app_cpu: crate::core::cpu_usage::CpuSource,
}

impl Default for Node {
    fn default() -> Self {
        Self {
            id: String::new(),
            cluster: String::new(),
            locality: Locality::default(),
            metadata: serde_json::Map::new(),
            lb_policy: None,
            load_reports: true,
            app_cpu: crate::core::cpu_usage::CpuSource::Auto,
        }
    }
}

/// The node metadata key that turns the sidecar's load reports off.
pub const LOAD_REPORT_METADATA_KEY: &str = "OUTRIDER_LOAD_REPORT";
/// The node metadata key naming where the application's CPU use is read: `auto` (the
/// default), `cgroup`, `processes` or `off`.
pub const APP_CPU_METADATA_KEY: &str = "OUTRIDER_APP_CPU";
/// The application containers' CPU limit in millicores, for `OUTRIDER_APP_CPU: processes`
/// (what Kubernetes' downward API gives for `limits.cpu` with divisor `1m`).
pub const APP_CPU_LIMIT_METADATA_KEY: &str = "OUTRIDER_APP_CPU_LIMIT";

/// `dynamic_resources`: one ADS stream to a static cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct AdsConfig {
    pub api_type: ApiType,
    /// The static cluster the control plane is reached through.
    pub cluster_name: String,
    pub set_node_on_first_message_only: bool,
    /// `lds_config` (over ADS), if listeners are dynamic.
    pub lds: Option<SourceSettings>,
    /// `cds_config` (over ADS), if clusters are dynamic.
    pub cds: Option<SourceSettings>,
}

/// The ADS flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiType {
    /// State of the world (`GRPC`).
    Sotw,
    /// Incremental (`DELTA_GRPC`), istiod's default.
    Delta,
}

/// Settings of one `ConfigSource` that points at ADS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceSettings {
    /// How long start-up waits for the first response; `None` waits forever (`0s`).
    pub initial_fetch_timeout: Option<Duration>,
}

/// Why a bootstrap could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} is not valid YAML or JSON: {reason}")]
    Syntax { path: String, reason: String },
    #[error("{0}")]
    Invalid(ConfigError),
}

/// YAML or JSON text → a JSON value. JSON goes through serde_json for exact numbers and
/// clearer errors; everything else through the YAML parser.
pub fn parse_document(text: &str) -> Result<serde_json::Value, String> {
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| e.to_string())
    } else {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }
}

/// Merges `overlay` into `base` as Envoy merges `--config-yaml` over the `-c` file
/// (protobuf's `MergeFrom`): fields set in `overlay` replace scalars, messages merge field
/// by field, repeated fields are appended.
///
/// On the JSON form this differs from `MergeFrom` in one place: setting one member of a
/// `oneof` in `overlay` does not clear another member set in `base`; the bootstrap then
/// names both and is refused where the converter checks the `oneof`.
pub fn merge_document(base: &mut serde_json::Value, overlay: serde_json::Value) {
    use serde_json::Value;
    match (base, overlay) {
        (Value::Object(base), Value::Object(overlay)) => {
            for (key, value) in overlay {
                match base.get_mut(&key) {
                    Some(existing) => merge_document(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (Value::Array(base), Value::Array(overlay)) => base.extend(overlay),
        (base, overlay) => *base = overlay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_yaml_merges_as_envoy_merges_it() {
        let mut base = serde_json::json!({
            "node": { "id": "a", "cluster": "c" },
            "static_resources": { "clusters": [{ "name": "one" }] },
        });
        let overlay = serde_json::json!({
            "node": { "id": "b" },
            "static_resources": { "clusters": [{ "name": "two" }] },
            "admin": { "address": { "pipe": { "path": "/a" } } },
        });
        merge_document(&mut base, overlay);
        assert_eq!(
            base,
            serde_json::json!({
                "node": { "id": "b", "cluster": "c" },
                "static_resources": { "clusters": [{ "name": "one" }, { "name": "two" }] },
                "admin": { "address": { "pipe": { "path": "/a" } } },
            })
        );
    }

    /// Istio's ambient-enabled bootstrap: its metadata discovery extension over ADS turns
    /// WDS on; the internal listener extension needs nothing; any other source is refused.
    #[test]
    fn bootstrap_extensions_turn_workload_discovery_on() {
        let with = |extension: &str| {
            Bootstrap::parse(&format!(
                r#"
bootstrap_extensions:
- name: envoy.bootstrap.internal_listener
  typed_config: {{ "@type": type.googleapis.com/envoy.extensions.bootstrap.internal_listener.v3.InternalListener }}
- name: metadata_discovery
  typed_config:
    "@type": type.googleapis.com/udpa.type.v1.TypedStruct
    type_url: type.googleapis.com/istio.workload.BootstrapExtension
    value: {extension}
"#
            ))
        };
        let bootstrap = with("{ config_source: { ads: {} } }").unwrap();
        assert!(bootstrap.workload_discovery);
        assert_eq!(bootstrap.internal_listener_buffer_kb, None, "1 MiB, Envoy's default");
        assert!(
            !bootstrap.ignored.iter().any(|i| i.path.starts_with("bootstrap_extensions")),
            "{:?}",
            bootstrap.ignored
        );
        let error = with("{ config_source: { path_config_source: { path: /w } } }").unwrap_err().to_string();
        assert!(error.contains("bootstrap_extensions[1].typed_config.config_source"), "{error}");
        assert!(!Bootstrap::parse("node: { id: a }").unwrap().workload_discovery);
    }
}
