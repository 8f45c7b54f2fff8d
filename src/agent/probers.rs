//! The application's probes, run by the sidecar on the kubelet's behalf. Istio's injection
//! rewrites each container's probes to `GET :15020/app-health/<container>/<livez|readyz|startupz>`
//! and hands the originals to the agent in `ISTIO_KUBE_APP_PROBERS` (JSON: path → prober),
//! so that the kubelet's plaintext probe still works when inbound traffic is captured and
//! mTLS is STRICT. Each prober is `httpGet`, `tcpSocket` or `grpc`, with `timeoutSeconds`
//! (default 1), judged as the kubelet judges it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// The variable Istio's injection writes the probers into.
pub const APP_PROBERS_ENV: &str = "ISTIO_KUBE_APP_PROBERS";

/// One prober, as Istio writes it (Kubernetes' probe actions).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Prober {
    #[serde(default)]
    pub http_get: Option<HttpGet>,
    #[serde(default)]
    pub tcp_socket: Option<TcpSocket>,
    #[serde(default)]
    pub grpc: Option<GrpcProbe>,
    #[serde(default)]
    pub timeout_seconds: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpGet {
    #[serde(default)]
    pub path: Option<String>,
    pub port: Port,
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub scheme: Option<String>,
    #[serde(default)]
    pub http_headers: Vec<Header>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpSocket {
    pub port: Port,
    #[serde(default)]
    pub host: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcProbe {
    pub port: u16,
    #[serde(default)]
    pub service: Option<String>,
}

/// A Kubernetes IntOrString port; Istio's injection resolves named ports to numbers, so a
/// name left here is refused.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Port {
    Number(u16),
    Text(String),
}

impl Port {
    fn number(&self) -> Option<u16> {
        match self {
            Port::Number(n) => Some(*n),
            Port::Text(t) => t.parse().ok(),
        }
    }
}

/// A probe the agent can run: where and how.
#[derive(Debug, Clone, PartialEq)]
pub enum Probe {
    Http { https: bool, host: String, port: u16, path: String, headers: Vec<(String, String)>, timeout: Duration },
    Tcp { host: String, port: u16, timeout: Duration },
    Grpc { port: u16, service: String, timeout: Duration },
}

/// Reads `ISTIO_KUBE_APP_PROBERS`. Anything the agent could not run faithfully (an unknown
/// scheme, a named port, no action or two) is refused with its path, so a probe is never
/// answered by something other than what it asks.
pub fn parse(text: &str) -> Result<BTreeMap<String, Probe>, String> {
    let probers: BTreeMap<String, Prober> =
        serde_json::from_str(text).map_err(|e| format!("{APP_PROBERS_ENV}: {e}"))?;
    probers
        .into_iter()
        .map(|(path, prober)| {
            let at = |field: &str| format!("{APP_PROBERS_ENV}[{path:?}].{field}");
            if !path.starts_with("/app-health/") {
                return Err(format!("{APP_PROBERS_ENV}: {path:?} is not under /app-health/"));
            }
            let timeout = Duration::from_secs(u64::from(prober.timeout_seconds.unwrap_or(1).max(1)));
            let probe = match (prober.http_get, prober.tcp_socket, prober.grpc) {
                (Some(get), None, None) => {
                    let port = get
                        .port
                        .number()
                        .ok_or_else(|| format!("{}: {:?} is not a number", at("httpGet.port"), get.port))?;
                    let https = match get.scheme.as_deref() {
                        None | Some("HTTP" | "http") => false,
                        Some("HTTPS" | "https") => true,
                        Some(other) => return Err(format!("{}: {other:?} is not HTTP or HTTPS", at("httpGet.scheme"))),
                    };
                    let path = get.path.filter(|p| !p.is_empty()).unwrap_or_else(|| "/".into());
                    let path = if path.starts_with('/') { path } else { format!("/{path}") };
                    let headers = get.http_headers.into_iter().map(|h| (h.name, h.value)).collect();
                    Probe::Http { https, host: local(get.host), port, path, headers, timeout }
                }
                (None, Some(tcp), None) => {
                    let port = tcp
                        .port
                        .number()
                        .ok_or_else(|| format!("{}: {:?} is not a number", at("tcpSocket.port"), tcp.port))?;
                    Probe::Tcp { host: local(tcp.host), port, timeout }
                }
                (None, None, Some(grpc)) => {
                    Probe::Grpc { port: grpc.port, service: grpc.service.unwrap_or_default(), timeout }
                }
                _ => return Err(format!("{}: exactly one of httpGet, tcpSocket, grpc", at(""))),
            };
            Ok((path, probe))
        })
        .collect()
}

/// The application is probed on loopback unless the probe names a host.
fn local(host: Option<String>) -> String {
    host.filter(|h| !h.is_empty()).unwrap_or_else(|| "127.0.0.1".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn istios_three_kinds_are_read() {
        let probes = parse(
            r#"{
              "/app-health/app/readyz": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP",
                                          "httpHeaders": [{"name": "x-probe", "value": "1"}]}, "timeoutSeconds": 3},
              "/app-health/app/livez": {"tcpSocket": {"port": "8081"}},
              "/app-health/app/startupz": {"grpc": {"port": 9090, "service": "app"}}
            }"#,
        )
        .unwrap();
        assert_eq!(
            probes["/app-health/app/readyz"],
            Probe::Http {
                https: false,
                host: "127.0.0.1".into(),
                port: 8080,
                path: "/ready".into(),
                headers: vec![("x-probe".into(), "1".into())],
                timeout: Duration::from_secs(3)
            }
        );
        assert_eq!(
            probes["/app-health/app/livez"],
            Probe::Tcp { host: "127.0.0.1".into(), port: 8081, timeout: Duration::from_secs(1) }
        );
        assert_eq!(
            probes["/app-health/app/startupz"],
            Probe::Grpc { port: 9090, service: "app".into(), timeout: Duration::from_secs(1) }
        );
    }

    #[test]
    fn what_cannot_be_run_faithfully_is_refused_with_its_path() {
        let err = parse(r#"{"/app-health/a/readyz": {"httpGet": {"port": 8443, "scheme": "GOPHER"}}}"#).unwrap_err();
        assert!(err.contains(r#"["/app-health/a/readyz"].httpGet.scheme"#), "{err}");
        let https = parse(r#"{"/app-health/a/readyz": {"httpGet": {"port": 8443, "scheme": "HTTPS"}}}"#).unwrap();
        assert!(matches!(https["/app-health/a/readyz"], Probe::Http { https: true, port: 8443, .. }));
        let err = parse(r#"{"/app-health/a/readyz": {"httpGet": {"port": "http"}}}"#).unwrap_err();
        assert!(err.contains("httpGet.port"), "{err}");
        let err = parse(r#"{"/app-health/a/readyz": {}}"#).unwrap_err();
        assert!(err.contains("exactly one"), "{err}");
        let err = parse(r#"{"/app-health/a/readyz": {"exec": {"command": ["true"]}}}"#).unwrap_err();
        assert!(err.contains("exec"), "{err}");
        let err = parse(r#"{"/elsewhere": {"tcpSocket": {"port": 1}}}"#).unwrap_err();
        assert!(err.contains("/app-health/"), "{err}");
    }
}
