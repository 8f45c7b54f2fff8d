//! pilot-agent's status server (port 15020), served by the sidecar itself:
//!
//! - `GET /healthz/ready`: the proxy's readiness (its admin `/ready`);
//! - `GET /app-health/<container>/<livez|readyz|startupz>`: the application's own probe,
//!   run now (see [`super::probers`]): 200 when it passes, 500 when it fails, 404 for a
//!   probe that was never handed over;
//! - `GET /stats/prometheus`: the proxy's metrics, followed by the application's when
//!   Istio's injection asks for merged metrics (`ISTIO_PROMETHEUS_ANNOTATIONS`, the pod's
//!   `prometheus.io/{scrape,port,path}` annotations);
//! - `POST /quitquitquit`: the proxy's own, which drains and stops it; from loopback only,
//!   as pilot-agent: the port listens on every address and is not captured, so without
//!   this any pod that reaches this pod's IP could stop its sidecar.
//!
//! HTTP/1.1 only, as pilot-agent's Go server; connections are capped and a request head
//! must arrive in time ([`ServerLimits`]).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::probers::Probe;
use crate::core::control_server::{self, Admission, ServerLimits};
use crate::core::shutdown::Signal;

/// The variable Istio's injection writes the pod's Prometheus annotations into.
pub const PROMETHEUS_ANNOTATIONS_ENV: &str = "ISTIO_PROMETHEUS_ANNOTATIONS";

/// How long the proxy's own admin server may take to answer.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the application serves its metrics, to be merged into `/stats/prometheus`.
#[derive(Debug, Clone, PartialEq)]
pub struct AppMetrics {
    pub port: u16,
    pub path: String,
}

impl AppMetrics {
    /// Reads `ISTIO_PROMETHEUS_ANNOTATIONS` (`{"scrape":"true","port":"8080","path":"/metrics"}`);
    /// `None` unless scraping is asked for.
    pub fn from_annotations(text: &str) -> Result<Option<AppMetrics>, String> {
        let annotations: BTreeMap<String, String> =
            serde_json::from_str(text).map_err(|e| format!("{PROMETHEUS_ANNOTATIONS_ENV}: {e}"))?;
        if annotations.get("scrape").map(String::as_str) != Some("true") {
            return Ok(None);
        }
        let port = annotations
            .get("port")
            .ok_or_else(|| format!("{PROMETHEUS_ANNOTATIONS_ENV}.port: required when scrape is true"))?;
        let port = port.parse().map_err(|_| format!("{PROMETHEUS_ANNOTATIONS_ENV}.port: {port:?} is not a port"))?;
        let path = annotations.get("path").cloned().unwrap_or_else(|| "/metrics".into());
        Ok(Some(AppMetrics { port, path }))
    }
}

/// What the status server answers from.
#[derive(Debug, Clone)]
pub struct StatusConfig {
    /// The proxy's admin server.
    pub admin: SocketAddr,
    /// `/app-health/...` path → the application's probe.
    pub probes: BTreeMap<String, Probe>,
    pub app_metrics: Option<AppMetrics>,
    /// Connections at once and the wait for a request head.
    pub limits: ServerLimits,
}

/// pilot-agent's answer to a caller not on loopback (Go's `http.Error`: the message and a
/// newline, as plain text).
const ONLY_LOCALHOST: &str = "Only requests from localhost are allowed\n";

/// Serves until `shutdown`.
pub async fn serve(listener: TcpListener, config: StatusConfig, shutdown: Signal) {
    let config = Arc::new(config);
    let admission = Admission::new(&config.limits);
    let stop = shutdown.triggered();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::debug!(error = %e, "status server accept");
                    continue;
                }
            },
            () = &mut stop => return,
        };
        let Some(place) = admission.admit() else {
            tracing::debug!(%peer, max = config.limits.max_connections, "status server full; connection closed");
            continue;
        };
        let config = config.clone();
        tokio::spawn(async move {
            let _place = place;
            let builder = control_server::http1(&config.limits);
            let service = hyper::service::service_fn(move |request| {
                let config = config.clone();
                async move { Ok::<_, Infallible>(handle(&config, peer, request).await) }
            });
            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// Whether `peer` is on loopback, as pilot-agent decides it (Go's `IP.IsLoopback`:
/// 127.0.0.0/8, `::1`, and IPv4 loopback mapped into IPv6).
fn from_loopback(peer: SocketAddr) -> bool {
    peer.ip().to_canonical().is_loopback()
}

async fn handle<B>(config: &StatusConfig, peer: SocketAddr, request: Request<B>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    // pilot-agent's order: the caller first, then the method.
    if path == "/quitquitquit" && !from_loopback(peer) {
        tracing::warn!(%peer, "status server: /quitquitquit refused to a caller not on loopback");
        return plain_text(StatusCode::FORBIDDEN, ONLY_LOCALHOST);
    }
    match (request.method(), path) {
        (&Method::GET, "/healthz/ready") => match get(config.admin, "/ready", &[], ADMIN_TIMEOUT).await {
            Ok((StatusCode::OK, _)) => reply(StatusCode::OK, Bytes::new()),
            _ => reply(StatusCode::SERVICE_UNAVAILABLE, Bytes::from_static(b"proxy not ready\n")),
        },
        (&Method::GET, path) if path.starts_with("/app-health/") => match config.probes.get(path) {
            Some(probe) => match run(probe).await {
                Ok(()) => reply(StatusCode::OK, Bytes::new()),
                Err(why) => reply(StatusCode::INTERNAL_SERVER_ERROR, Bytes::from(format!("{why}\n"))),
            },
            None => reply(StatusCode::NOT_FOUND, Bytes::from_static(b"no such probe\n")),
        },
        (&Method::GET, "/stats/prometheus") => metrics(config).await,
        (&Method::POST, "/quitquitquit") => {
            match exchange(config.admin, None, Method::POST, "/quitquitquit", &[], ADMIN_TIMEOUT).await {
                Ok((status, body)) => reply(status, body),
                Err(why) => reply(StatusCode::SERVICE_UNAVAILABLE, Bytes::from(format!("{why}\n"))),
            }
        }
        (_, "/quitquitquit") => plain_text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n"),
        _ => reply(StatusCode::NOT_FOUND, Bytes::new()),
    }
}

/// The proxy's metrics, then the application's (a failed scrape of the application is
/// left out, as pilot-agent leaves it out, and counted in the log).
async fn metrics(config: &StatusConfig) -> Response<Full<Bytes>> {
    let proxy = match get(config.admin, "/stats/prometheus", &[], ADMIN_TIMEOUT).await {
        Ok((StatusCode::OK, body)) => body,
        Ok((status, _)) => {
            return reply(StatusCode::SERVICE_UNAVAILABLE, Bytes::from(format!("proxy metrics: {status}\n")));
        }
        Err(why) => return reply(StatusCode::SERVICE_UNAVAILABLE, Bytes::from(format!("proxy metrics: {why}\n"))),
    };
    let mut merged = proxy.to_vec();
    if let Some(app) = &config.app_metrics {
        let address = SocketAddr::from(([127, 0, 0, 1], app.port));
        match get(address, &app.path, &[], ADMIN_TIMEOUT).await {
            Ok((StatusCode::OK, body)) => {
                if !merged.ends_with(b"\n") {
                    merged.push(b'\n');
                }
                merged.extend_from_slice(&body);
            }
            other => tracing::debug!(?other, port = app.port, "application metrics not merged"),
        }
    }
    let mut response = reply(StatusCode::OK, Bytes::from(merged));
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; version=0.0.4"));
    response
}

/// Runs one probe as the kubelet would: HTTP 200–399 (over HTTPS, the application's
/// certificate not verified, as the kubelet's is not), a TCP connection, or gRPC `SERVING`,
/// within the probe's timeout.
pub async fn run(probe: &Probe) -> Result<(), String> {
    match probe {
        Probe::Http { https, host, port, path, headers, timeout } => {
            let address = resolve(host, *port).await?;
            let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let tls = if *https { Some(host.as_str()) } else { None };
            let (status, _) = exchange(address, tls, Method::GET, path, &headers, *timeout).await?;
            if (200..400).contains(&status.as_u16()) { Ok(()) } else { Err(format!("HTTP probe answered {status}")) }
        }
        Probe::Tcp { host, port, timeout } => {
            let address = resolve(host, *port).await?;
            match tokio::time::timeout(*timeout, tokio::net::TcpStream::connect(address)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("TCP probe: {e}")),
                Err(_) => Err("TCP probe timed out".into()),
            }
        }
        Probe::Grpc { port, service, timeout } => tokio::time::timeout(*timeout, grpc_health(*port, service))
            .await
            .map_err(|_| "gRPC probe timed out".to_owned())?,
    }
}

async fn grpc_health(port: u16, service: &str) -> Result<(), String> {
    use crate::health::{HealthCheckRequest, HealthCheckResponse};
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("gRPC probe: {e}"))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| format!("gRPC probe: {e}"))?;
    let path = http::uri::PathAndQuery::from_static("/grpc.health.v1.Health/Check");
    let request = tonic::Request::new(HealthCheckRequest { service: service.to_owned() });
    let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
    let response = grpc.unary(request, path, codec).await.map_err(|s| format!("gRPC probe: {}", s.code()))?;
    // grpc.health.v1: 1 is SERVING.
    match response.into_inner().status {
        1 => Ok(()),
        other => Err(format!("gRPC probe: status {other}")),
    }
}

async fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))
}

async fn get(
    address: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> Result<(StatusCode, Bytes), String> {
    exchange(address, None, Method::GET, path, headers, timeout).await
}

/// One HTTP/1.1 request on a connection of its own, over TLS (to the server name `tls`)
/// when given.
async fn exchange(
    address: SocketAddr,
    tls: Option<&str>,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> Result<(StatusCode, Bytes), String> {
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(address).await.map_err(|e| e.to_string())?;
        let mut sender = match tls {
            None => handshake(stream).await?,
            Some(name) => {
                let mut config = crate::tls::unverified_client_config().map_err(|e| e.to_string())?;
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                let name = rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|e| e.to_string())?;
                let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
                    .connect(name, stream)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?;
                handshake(stream).await?
            }
        };
        let mut request = Request::builder().method(method).uri(path).header(http::header::HOST, address.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
        let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| format!("{address}{path}: timed out"))?
}

async fn handshake<S>(stream: S) -> Result<hyper::client::conn::http1::SendRequest<Empty<Bytes>>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    Ok(sender)
}

fn reply(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
}

/// Go's `http.Error`: its content type and `nosniff`.
fn plain_text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = reply(status, Bytes::from_static(body.as_bytes()));
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(http::header::X_CONTENT_TYPE_OPTIONS, http::HeaderValue::from_static("nosniff"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_pilot_agents_loopback() {
        for loopback in ["127.0.0.1:1", "127.9.8.7:1", "[::1]:1", "[::ffff:127.0.0.1]:1"] {
            assert!(from_loopback(loopback.parse().unwrap()), "{loopback}");
        }
        for other in ["10.0.0.1:1", "0.0.0.0:1", "[::]:1", "[::ffff:10.0.0.1]:1", "[fe80::1]:1"] {
            assert!(!from_loopback(other.parse().unwrap()), "{other}");
        }
    }

    #[test]
    fn merged_metrics_only_when_scraping_is_asked_for() {
        let on = AppMetrics::from_annotations(r#"{"scrape":"true","port":"9100","path":"/m"}"#).unwrap();
        assert_eq!(on, Some(AppMetrics { port: 9100, path: "/m".into() }));
        let default_path = AppMetrics::from_annotations(r#"{"scrape":"true","port":"9100"}"#).unwrap();
        assert_eq!(default_path.unwrap().path, "/metrics");
        assert_eq!(AppMetrics::from_annotations(r#"{"scrape":"false","port":"9100"}"#).unwrap(), None);
        assert!(AppMetrics::from_annotations(r#"{"scrape":"true"}"#).unwrap_err().contains(".port"));
        assert!(AppMetrics::from_annotations(r#"{"scrape":"true","port":"http"}"#).unwrap_err().contains(".port"));
    }
}
