//! The agent's settings, from the environment pilot-agent reads (Istio's injection sets the
//! same variables on the proxy container), with pilot-agent's defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Where istiod's CA and discovery listen in a default install.
pub const DEFAULT_CA_ADDRESS: &str = "istiod.istio-system.svc:15012";
/// The projected service-account token Istio's injection mounts (audience `istio-ca`).
/// Relative, as pilot-agent's paths are: the proxy runs from `/`.
pub const DEFAULT_TOKEN_PATH: &str = "./var/run/secrets/tokens/istio-token";
/// The mesh root, from the `istio-ca-root-cert` ConfigMap Istio's injection mounts.
pub const DEFAULT_ROOT_CERT_PATH: &str = "./var/run/secrets/istio/root-cert.pem";

/// What the agent needs to get and rotate the workload certificate.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSettings {
    /// `host:port` of istiod's CA (`CA_ADDR`; default: the discovery address).
    pub ca_address: String,
    /// `host:port` of istiod's xDS (`discoveryAddress` of `PROXY_CONFIG`, as Istio's
    /// injection sets it; default `istiod.istio-system.svc:15012`).
    pub discovery_address: String,
    /// The name istiod's serving certificate is checked against: the host of `ca_address`
    /// (`ISTIOD_SAN` overrides, as pilot-agent's).
    pub ca_server_name: String,
    /// The name istiod's certificate is checked against on the discovery address:
    /// `ISTIOD_SAN`, else the host of `discovery_address`.
    pub discovery_server_name: String,
    /// The PEM roots istiod's certificate is verified with.
    pub root_cert: PathBuf,
    /// The bearer token sent with each request, read afresh each time (the kubelet rotates it).
    pub token: PathBuf,
    /// `ClusterID` sent to the CA (`ISTIO_META_CLUSTER_ID`, default `Kubernetes`).
    pub cluster_id: String,
    /// The SPIFFE identity asked for: `spiffe://<TRUST_DOMAIN>/ns/<ns>/sa/<sa>`.
    pub identity: String,
    /// The validity asked for (`SECRET_TTL`, default 24 h).
    pub ttl: Duration,
    /// The certificate is renewed when this fraction of its lifetime is left
    /// (`SECRET_GRACE_PERIOD_RATIO`, default 0.5) …
    pub grace_ratio: f64,
    /// … give or take this much, at random, so that pods do not renew together
    /// (`SECRET_GRACE_PERIOD_RATIO_JITTER`, default 0.01).
    pub grace_jitter: f64,
    /// Where to also write `key.pem`, `cert-chain.pem` and `root-cert.pem` (`OUTPUT_CERTS`);
    /// by default the key never touches the disk.
    pub output_dir: Option<PathBuf>,
    /// The application's probes, rewritten to the status port (`ISTIO_KUBE_APP_PROBERS`).
    pub probes: BTreeMap<String, super::probers::Probe>,
    /// The application's metrics to merge (`ISTIO_PROMETHEUS_ANNOTATIONS`).
    pub app_metrics: Option<super::status::AppMetrics>,
    /// How long a SIGTERM'd sidecar lets connections finish (`PROXY_CONFIG`'s
    /// `terminationDrainDuration`, or `TERMINATION_DRAIN_DURATION_SECONDS`; default 5 s, as
    /// pilot-agent waits before it stops Envoy).
    pub termination_drain: Duration,
    /// The status server's address (pilot-agent's 15020 on every interface: the kubelet
    /// probes it from outside the pod; `STATUS_PORT` overrides the port).
    pub status_address: std::net::SocketAddr,
    /// The DNS proxy, when `ISTIO_META_DNS_CAPTURE` is `true`.
    pub dns: Option<super::dns::DnsSettings>,
}

/// A setting that could not be read, with the variable it came from.
#[derive(Debug, thiserror::Error)]
#[error("{variable}: {why}")]
pub struct SettingsError {
    pub variable: String,
    pub why: String,
}

impl AgentSettings {
    /// Reads the settings from `env` (the process environment, or a test's).
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<Self, SettingsError> {
        let get = |key: &str| env.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let required = |key: &str| {
            get(key).map(str::to_owned).ok_or_else(|| SettingsError { variable: key.into(), why: "is required".into() })
        };
        let fraction = |key: &str, default: f64| -> Result<f64, SettingsError> {
            let Some(text) = get(key) else { return Ok(default) };
            match text.parse::<f64>() {
                Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
                _ => Err(SettingsError { variable: key.into(), why: format!("{text:?} is not a fraction in [0, 1]") }),
            }
        };
        let proxy_config: serde_json::Value = match get("PROXY_CONFIG") {
            None => serde_json::Value::Null,
            Some(text) => serde_json::from_str(text)
                .map_err(|e| SettingsError { variable: "PROXY_CONFIG".into(), why: format!("is not JSON: {e}") })?,
        };
        let discovery_address =
            proxy_config.get("discoveryAddress").and_then(|v| v.as_str()).unwrap_or(DEFAULT_CA_ADDRESS).to_owned();
        let termination_drain =
            match (proxy_config.get("terminationDrainDuration"), get("TERMINATION_DRAIN_DURATION_SECONDS")) {
                (Some(value), _) => {
                    let text = value.as_str().unwrap_or_default();
                    humantime::parse_duration(text).map_err(|e| SettingsError {
                        variable: "PROXY_CONFIG".into(),
                        why: format!("terminationDrainDuration {value}: {e}"),
                    })?
                }
                (None, Some(text)) => Duration::from_secs(text.parse().map_err(|_| SettingsError {
                    variable: "TERMINATION_DRAIN_DURATION_SECONDS".into(),
                    why: format!("{text:?} is not a number of seconds"),
                })?),
                (None, None) => Duration::from_secs(5),
            };
        let ca_address = get("CA_ADDR").unwrap_or(&discovery_address).to_owned();
        let server_name = |address: &str| {
            let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
            get("ISTIOD_SAN").unwrap_or(host).trim_matches(['[', ']']).to_owned()
        };
        let (ca_server_name, discovery_server_name) = (server_name(&ca_address), server_name(&discovery_address));
        let ttl = match get("SECRET_TTL") {
            None => Duration::from_secs(24 * 3600),
            Some(text) => humantime::parse_duration(text)
                .map_err(|e| SettingsError { variable: "SECRET_TTL".into(), why: format!("{text:?}: {e}") })?,
        };
        let trust_domain = get("TRUST_DOMAIN").unwrap_or("cluster.local");
        let namespace = required("POD_NAMESPACE")?;
        let service_account = required("SERVICE_ACCOUNT")?;
        Ok(Self {
            discovery_address,
            ca_address,
            ca_server_name,
            discovery_server_name,
            root_cert: get("OUTRIDER_ROOT_CERT").map_or_else(|| PathBuf::from(DEFAULT_ROOT_CERT_PATH), PathBuf::from),
            token: get("OUTRIDER_TOKEN_PATH").map_or_else(|| PathBuf::from(DEFAULT_TOKEN_PATH), PathBuf::from),
            cluster_id: get("ISTIO_META_CLUSTER_ID").unwrap_or("Kubernetes").to_owned(),
            identity: format!("spiffe://{trust_domain}/ns/{namespace}/sa/{service_account}"),
            ttl,
            grace_ratio: fraction("SECRET_GRACE_PERIOD_RATIO", 0.5)?,
            grace_jitter: fraction("SECRET_GRACE_PERIOD_RATIO_JITTER", 0.01)?,
            output_dir: get("OUTPUT_CERTS").map(PathBuf::from),
            termination_drain,
            probes: match get(super::probers::APP_PROBERS_ENV) {
                Some(text) => super::probers::parse(text)
                    .map_err(|why| SettingsError { variable: super::probers::APP_PROBERS_ENV.into(), why })?,
                None => BTreeMap::new(),
            },
            app_metrics: match get(super::status::PROMETHEUS_ANNOTATIONS_ENV) {
                Some(text) => super::status::AppMetrics::from_annotations(text)
                    .map_err(|why| SettingsError { variable: super::status::PROMETHEUS_ANNOTATIONS_ENV.into(), why })?,
                None => None,
            },
            status_address: std::net::SocketAddr::from((
                [0, 0, 0, 0],
                match get("STATUS_PORT") {
                    None => 15020,
                    Some(text) => text.parse().map_err(|_| SettingsError {
                        variable: "STATUS_PORT".into(),
                        why: format!("{text:?} is not a port"),
                    })?,
                },
            )),
            dns: super::dns::DnsSettings::from_env(env, &namespace)
                .map_err(|why| SettingsError { variable: "ISTIO_META_DNS_CAPTURE".into(), why })?,
        })
    }
}

impl AgentSettings {
    /// `Bearer <token>` for the `authorization` header, the token read afresh (the kubelet
    /// rotates it in place).
    pub fn bearer(&self) -> Result<tonic::metadata::MetadataValue<tonic::metadata::Ascii>, String> {
        let token = std::fs::read_to_string(&self.token).map_err(|e| format!("token {}: {e}", self.token.display()))?;
        format!("Bearer {}", token.trim())
            .parse()
            .map_err(|_| format!("token {}: not a header value", self.token.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn pilot_agents_defaults() {
        let s = AgentSettings::from_env(&env(&[("POD_NAMESPACE", "shop"), ("SERVICE_ACCOUNT", "cart")])).unwrap();
        assert_eq!(s.ca_address, "istiod.istio-system.svc:15012");
        assert_eq!(s.discovery_address, "istiod.istio-system.svc:15012");
        assert_eq!(s.ca_server_name, "istiod.istio-system.svc");
        assert_eq!(s.discovery_server_name, "istiod.istio-system.svc");
        assert_eq!(s.identity, "spiffe://cluster.local/ns/shop/sa/cart");
        assert_eq!(s.ttl, Duration::from_secs(86400));
        assert_eq!((s.grace_ratio, s.grace_jitter), (0.5, 0.01));
        assert_eq!(s.token, PathBuf::from(DEFAULT_TOKEN_PATH));
        assert_eq!(s.output_dir, None);
        assert_eq!(s.termination_drain, Duration::from_secs(5));
    }

    #[test]
    fn overrides_and_refusals_name_the_variable() {
        let s = AgentSettings::from_env(&env(&[
            ("POD_NAMESPACE", "ns"),
            ("SERVICE_ACCOUNT", "sa"),
            ("CA_ADDR", "127.0.0.1:15012"),
            ("ISTIOD_SAN", "istiod.istio-system.svc"),
            ("TRUST_DOMAIN", "example.org"),
            ("SECRET_TTL", "90s"),
            (
                "PROXY_CONFIG",
                r#"{"discoveryAddress":"istiod-1-29.istio-system.svc:15012","terminationDrainDuration":"20s"}"#,
            ),
        ]))
        .unwrap();
        assert_eq!(s.discovery_address, "istiod-1-29.istio-system.svc:15012");
        assert_eq!(s.ca_address, "127.0.0.1:15012", "CA_ADDR wins for the CA");
        assert_eq!(s.termination_drain, Duration::from_secs(20));
        assert_eq!(s.ca_server_name, "istiod.istio-system.svc");
        assert_eq!(s.identity, "spiffe://example.org/ns/ns/sa/sa");
        assert_eq!(s.ttl, Duration::from_secs(90));
        let err = AgentSettings::from_env(&env(&[("SERVICE_ACCOUNT", "sa")])).unwrap_err();
        assert_eq!(err.variable, "POD_NAMESPACE");
        let err = AgentSettings::from_env(&env(&[
            ("POD_NAMESPACE", "ns"),
            ("SERVICE_ACCOUNT", "sa"),
            ("SECRET_GRACE_PERIOD_RATIO", "2"),
        ]))
        .unwrap_err();
        assert_eq!(err.variable, "SECRET_GRACE_PERIOD_RATIO");
    }
}
