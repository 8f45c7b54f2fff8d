//! The application's probes, handed to the sidecar as Istio's injection hands them to
//! pilot-agent: each container's HTTP, TCP and gRPC probes are rewritten to
//! `GET :15020/app-health/<container>/<livez|readyz|startupz>` and the originals go into the
//! sidecar's `ISTIO_KUBE_APP_PROBERS` (path → probe action, named ports resolved to
//! numbers). The kubelet's plaintext probe then reaches the sidecar's status port, which
//! capture leaves alone, instead of an application port that STRICT mTLS would refuse.
//! `exec` probes run inside the container and stay as they are; so does every probe of a
//! pod annotated `sidecar.istio.io/rewriteAppHTTPProbers: "false"`.

use serde_json::{Map, Value, json};

/// pilot-agent's status port, which the sidecar serves.
pub const STATUS_PORT: u16 = 15020;
/// The pod annotation that keeps the probes as written.
pub const REWRITE_ANNOTATION: &str = "sidecar.istio.io/rewriteAppHTTPProbers";

/// Rewrites the probes of `containers` in place; returns the probers (`/app-health/...` →
/// the original action and timeout) for `ISTIO_KUBE_APP_PROBERS`.
pub fn rewrite(containers: &mut [Value]) -> Result<Map<String, Value>, String> {
    let mut probers = Map::new();
    for container in containers {
        let name = container.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let ports = container.get("ports").cloned().unwrap_or(Value::Null);
        for (field, kind) in [("livenessProbe", "livez"), ("readinessProbe", "readyz"), ("startupProbe", "startupz")] {
            let Some(probe) = container.get_mut(field).and_then(Value::as_object_mut) else { continue };
            let path = format!("/app-health/{name}/{kind}");
            let mut prober = Map::new();
            if let Some(mut get) = probe.remove("httpGet") {
                resolve_port(&mut get, &ports).map_err(|why| format!("container {name:?} {field}.httpGet: {why}"))?;
                prober.insert("httpGet".into(), get);
            } else if let Some(mut tcp) = probe.remove("tcpSocket") {
                resolve_port(&mut tcp, &ports).map_err(|why| format!("container {name:?} {field}.tcpSocket: {why}"))?;
                prober.insert("tcpSocket".into(), tcp);
            } else if let Some(grpc) = probe.remove("grpc") {
                prober.insert("grpc".into(), grpc);
            } else {
                continue;
            }
            if let Some(timeout) = probe.get("timeoutSeconds") {
                prober.insert("timeoutSeconds".into(), timeout.clone());
            }
            probe.insert("httpGet".into(), json!({ "path": path, "port": STATUS_PORT, "scheme": "HTTP" }));
            probers.insert(path, Value::Object(prober));
        }
    }
    Ok(probers)
}

/// A named port becomes the container's number for it (the sidecar cannot see the
/// application container's port names).
fn resolve_port(action: &mut Value, ports: &Value) -> Result<(), String> {
    let Some(port) = action.get("port") else { return Err("no port".into()) };
    let Some(name) = port.as_str().filter(|p| p.parse::<u16>().is_err()) else { return Ok(()) };
    let number = ports
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        .and_then(|p| p.get("containerPort").cloned())
        .ok_or_else(|| format!("port {name:?} is not a port of the container"))?;
    action["port"] = number;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_tcp_and_grpc_probes_go_to_the_status_port_and_exec_stays() {
        let mut containers = vec![
            json!({
                "name": "app",
                "ports": [{ "name": "http", "containerPort": 8080 }],
                "readinessProbe": { "httpGet": { "path": "/ready", "port": "http" }, "timeoutSeconds": 3, "periodSeconds": 5 },
                "livenessProbe": { "tcpSocket": { "port": 8080 } },
                "startupProbe": { "exec": { "command": ["true"] } },
            }),
            json!({
                "name": "rpc",
                "livenessProbe": { "grpc": { "port": 9090 } },
            }),
        ];
        let probers = rewrite(&mut containers).unwrap();
        assert_eq!(
            Value::Object(probers),
            json!({
                "/app-health/app/readyz": { "httpGet": { "path": "/ready", "port": 8080 }, "timeoutSeconds": 3 },
                "/app-health/app/livez": { "tcpSocket": { "port": 8080 } },
                "/app-health/rpc/livez": { "grpc": { "port": 9090 } },
            })
        );
        assert_eq!(
            containers[0]["readinessProbe"],
            json!({ "httpGet": { "path": "/app-health/app/readyz", "port": 15020, "scheme": "HTTP" }, "timeoutSeconds": 3, "periodSeconds": 5 })
        );
        assert_eq!(containers[0]["livenessProbe"]["httpGet"]["path"], "/app-health/app/livez");
        assert_eq!(containers[0]["startupProbe"], json!({ "exec": { "command": ["true"] } }));
        assert_eq!(containers[1]["livenessProbe"]["httpGet"]["port"], 15020);
    }

    #[test]
    fn a_named_port_the_container_does_not_have_is_an_error() {
        let mut containers = vec![json!({ "name": "app", "readinessProbe": { "httpGet": { "port": "web" } } })];
        let err = rewrite(&mut containers).unwrap_err();
        assert!(err.contains("\"web\""), "{err}");
    }
}
