//! A proxy lab: a control plane serving one listener, one route and the `backend`
//! cluster over the given loopback ports, Outrider with one worker, and the helpers the
//! fault and circuit-breaker tests share (requests that report failures instead of
//! panicking, waiting on the balancer, reading stats and the access log).

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use outrider::config::ResourceType;
use outrider::store::Snapshot;

use super::{CLUSTER, ControlPlane, LISTENER, ROUTE, WAIT, bootstrap, endpoints, wait, wait_snapshot};

pub struct Lab {
    pub control_plane: ControlPlane,
    pub outrider: outrider::app::Running,
    pub proxy_port: u16,
}

/// A free loopback port for a listener a test configures by number (bound and released:
/// the proxy's listener uses SO_REUSEPORT). Taken below the kernel's ephemeral range
/// (`ip_local_port_range`): a port the kernel handed out for a port-0 bind and took back
/// could be handed out again — to Envoy's admin server, to a client's source port — before
/// the proxy binds it (seen: Envoy's admin on the port chosen for its listener). Probed from
/// a start that differs per process and per call, so parallel tests rarely try the same one.
/// Above 20 000, clear of the fixed ports of the demo and of Istio's (10 000, 15 0xx, 18 0xx).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CALLS: AtomicU32 = AtomicU32::new(0);
    const FLOOR: u32 = 20_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768)
        .min(u32::from(u16::MAX));
    let span = ephemeral_low.saturating_sub(FLOOR);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let start = std::process::id().wrapping_mul(7_919).wrapping_add(call.wrapping_mul(104_729));
    for i in 0..span.min(4_096) {
        let port = FLOOR + start.wrapping_add(i) % span;
        if let Ok(port) = u16::try_from(port)
            && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
        {
            return port;
        }
    }
    // No room below the ephemeral range on this machine: the kernel's choice.
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The listener of the lab, on `port`, with its `stat_prefix`; `hcm_extra` is YAML added
/// to the connection manager (six spaces deep, e.g. [`access_log`]).
pub fn listener(port: u16, stat_prefix: &str, hcm_extra: &str) -> String {
    LISTENER
        .replace("port_value: 0 ", &format!("port_value: {port} "))
        .replace("      stat_prefix: http\n", &format!("      stat_prefix: {stat_prefix}\n{hcm_extra}"))
}

/// A file access log at `path`, for [`listener`]'s `hcm_extra`.
pub fn access_log(path: &std::path::Path) -> String {
    format!(
        "      access_log:\n      - name: envoy.access_loggers.file\n        typed_config: {{ \"@type\": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog, path: {} }}\n",
        path.display()
    )
}

/// Waits until the file at `path` has at least `n` lines, and returns them (polled: the
/// log is written by its own thread).
pub async fn log_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    wait::until(&format!("{n} lines in {}", path.display()), async || {
        let lines: Vec<String> = std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect();
        (lines.len() >= n).then_some(lines)
    })
    .await
}

/// Starts a lab whose `backend` cluster (with `cluster_extra` YAML appended) has `ports`
/// as endpoints and whose route is `route` (e.g. [`ROUTE`]), over ADS of `api_type`.
pub async fn start(ports: &[u16], cluster_extra: &str, route: &str, api_type: &str) -> Lab {
    start_logged(ports, cluster_extra, route, api_type, "").await
}

/// [`start`] with `hcm_extra` in the connection manager (see [`listener`]).
pub async fn start_logged(ports: &[u16], cluster_extra: &str, route: &str, api_type: &str, hcm_extra: &str) -> Lab {
    let proxy_port = free_port();
    let control_plane = ControlPlane::start().await;
    let ports: Vec<u32> = ports.iter().map(|p| u32::from(*p)).collect();
    control_plane.set(ResourceType::Cluster, &[&format!("{CLUSTER}{cluster_extra}")]);
    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &ports)]);
    control_plane.set(ResourceType::Listener, &[&listener(proxy_port, "http", hcm_extra)]);
    control_plane.set(ResourceType::RouteConfiguration, &[route]);
    let outrider = outrider::app::start_with(bootstrap(control_plane.port, api_type), 1).await.unwrap();
    wait_snapshot(&outrider.store, |s| s.ready).await;
    wait_balancer(&outrider, |lb| lb.hosts().len() == ports.len()).await;
    outrider.listeners_ready().await;
    Lab { control_plane, outrider, proxy_port }
}

/// [`start`] with the default route, over Delta ADS.
pub async fn start_default(ports: &[u16], cluster_extra: &str) -> Lab {
    start(ports, cluster_extra, ROUTE, "DELTA_GRPC").await
}

/// Waits until the published balancer of `backend` satisfies `done`.
pub async fn wait_balancer(outrider: &outrider::app::Running, mut done: impl FnMut(&outrider::lb::ClusterLb) -> bool) {
    let mut published = outrider.balancers.subscribe();
    let wait = async {
        while !outrider.balancers.get("backend").is_some_and(|lb| done(&lb)) {
            published.changed().await.unwrap();
        }
    };
    tokio::time::timeout(WAIT, wait).await.expect("balancer condition not reached");
}

/// A response as the client saw it, or why it did not come whole.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body, or the error that cut it short (a reset, an incomplete message).
    pub body: Result<Bytes, String>,
}

impl Answer {
    pub fn text(&self) -> String {
        match &self.body {
            Ok(body) => String::from_utf8_lossy(body).into_owned(),
            Err(error) => format!("<body cut: {error}>"),
        }
    }

    pub fn ok(&self) -> bool {
        self.status == StatusCode::OK && self.body.is_ok()
    }
}

/// One HTTP/1.1 GET through the proxy on a new connection. `Err` when no response head
/// came (connection refused or reset); a body cut short is in [`Answer::body`].
pub async fn get(port: u16, path: &str) -> Result<Answer, String> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let request = http::Request::get(path).header("host", "example.com").body(Full::new(Bytes::new())).unwrap();
    let response = tokio::time::timeout(WAIT, sender.send_request(request))
        .await
        .map_err(|_| "no response head in time".to_owned())?
        .map_err(|e| e.to_string())?;
    let (parts, body) = response.into_parts();
    let body = match tokio::time::timeout(WAIT, body.collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("body not ended in time".to_owned()),
    };
    Ok(Answer { status: parts.status, headers: parts.headers, body })
}

/// An HTTP/2 (prior knowledge) client connection to the proxy.
pub async fn h2_client(port: u16) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    sender
}

/// What a snapshot serves, resource by resource (name, version and the bytes received),
/// to tell that a configuration is the same one.
pub fn served_config(snapshot: &Snapshot) -> Vec<(String, String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut add = |kind: &str, name: &str, version: &str, raw: &outrider::store::Raw| {
        out.push((format!("{kind}/{name}"), version.to_owned(), raw.bytes()));
    };
    for (name, v) in &snapshot.listeners {
        add("listener", name, &v.version, &v.raw);
    }
    for (name, v) in &snapshot.routes {
        add("route", name, &v.version, &v.raw);
    }
    for (name, v) in &snapshot.clusters {
        add("cluster", name, &v.version, &v.raw);
    }
    for (name, v) in &snapshot.endpoints {
        add("endpoints", name, &v.version, &v.raw);
    }
    out
}

/// The value of a counter or gauge in Outrider's stats, by its flat name.
pub fn stat(outrider: &outrider::app::Running, name: &str) -> Option<f64> {
    use outrider::telemetry::stats::Value;
    outrider.stats.samples().into_iter().find(|(n, _)| n.flat == name).and_then(|(_, value)| match value {
        Value::Counter(n) => Some(n as f64),
        Value::Gauge(g) => Some(g),
        _ => None,
    })
}
