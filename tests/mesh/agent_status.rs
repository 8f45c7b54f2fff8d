//! The status port pilot-agent serves (15020), served by Outrider's agent
//! (`outrider::agent::status`) for a running Outrider: its readiness, the application's
//! probes as Istio's injection hands them over (`ISTIO_KUBE_APP_PROBERS`: HTTP, HTTPS, TCP,
//! gRPC against real servers on loopback, grpc-go's health service for gRPC), metrics merged
//! with the application's (`ISTIO_PROMETHEUS_ANNOTATIONS`), and `/quitquitquit`, which
//! only a caller on loopback may send (pilot-agent's 403 to any other); slow clients and
//! connections over the cap are closed.

use crate::common;

use bytes::Bytes;
use common::{ControlPlane, backends};
use http_body_util::Full;
use outrider::agent::probers;
use outrider::agent::status::{self, AppMetrics, StatusConfig};
use outrider::core::control_server::ServerLimits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// grpc-go's health service (`grpc-orca-backend` registers `health.NewServer()`, which
/// answers SERVING), killed when dropped.
struct GrpcGo {
    _child: tokio::process::Child,
    port: u16,
}

impl GrpcGo {
    async fn start(binary: &std::path::Path) -> GrpcGo {
        let port = common::lab::free_port();
        let child = tokio::process::Command::new(binary)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        common::wait::until("grpc-orca-backend listening", async || {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()
        })
        .await;
        GrpcGo { _child: child, port }
    }
}

/// An HTTPS application port with a certificate nobody trusts (as probe ports often have):
/// answers every request with 200 and closes.
async fn https_app() -> u16 {
    let ca = crate::tls_support::pki::Ca::new("an application's own CA");
    let leaf = ca.dns_leaf("app.test");
    let config = rustls::ServerConfig::builder_with_provider(outrider::tls::provider::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der()], leaf.key_der())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut buf = [0u8; 1024];
                let _ = tls.read(&mut buf).await;
                let _ = tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok").await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

/// One GET (or POST) to the status server; (status, body).
async fn call(port: u16, method: &str, path: &str) -> (u16, String) {
    let request = format!("{method} {path} HTTP/1.1\r\nhost: status\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let (status, _, body) = common::differential::raw_http1(port, &request).await;
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_application_probes_merged_metrics_and_quit() {
    let control_plane = ControlPlane::start().await;
    let outrider = outrider::app::start(common::bootstrap(control_plane.port, "DELTA_GRPC")).await.unwrap();

    let app = backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let (status, body) = match request.uri().path() {
            "/ready" => (200, "ok"),
            "/moved" => (302, ""),
            "/metrics" => (200, "# TYPE app_requests_total counter\napp_requests_total 7\n"),
            _ => (503, "sick"),
        };
        let mut response = http::Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
        response
    })
    .await;
    let open = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open_port = open.local_addr().unwrap().port();
    let closed_port = common::lab::free_port();
    let https_port = https_app().await;
    let grpc = match common::peers::peer("grpc-orca-backend", "agent_status gRPC probe") {
        Some(binary) => Some(GrpcGo::start(&binary).await),
        None => None,
    };
    let mut probers = serde_json::json!({
        "/app-health/app/readyz": { "httpGet": { "path": "/ready", "port": app.port } },
        "/app-health/app/startupz": { "httpGet": { "path": "/moved", "port": app.port } },
        "/app-health/sick/readyz": { "httpGet": { "path": "/other", "port": app.port, "scheme": "HTTP" } },
        "/app-health/app/livez": { "tcpSocket": { "port": open_port } },
        "/app-health/secure/readyz": { "httpGet": { "path": "/ready", "port": https_port, "scheme": "HTTPS" } },
        "/app-health/plain-to-tls/readyz": { "httpGet": { "path": "/ready", "port": https_port } },
        "/app-health/gone/livez": { "tcpSocket": { "port": closed_port } },
        "/app-health/rpc/readyz": { "grpc": { "port": closed_port } },
    });
    if let Some(server) = &grpc {
        probers["/app-health/rpc/livez"] = serde_json::json!({ "grpc": { "port": server.port } });
    }
    let config = StatusConfig {
        admin: outrider.admin_address,
        probes: probers::parse(&probers.to_string()).unwrap(),
        app_metrics: Some(AppMetrics { port: app.port, path: "/metrics".into() }),
        limits: ServerLimits::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, signal) = outrider::core::shutdown::channel();
    let serving = tokio::spawn(status::serve(listener, config, signal));

    // Ready once the proxy is (its admin /ready): the bootstrap's control plane serves
    // nothing to wait for.
    common::wait::until_true("the proxy is ready", async || call(port, "GET", "/healthz/ready").await.0 == 200).await;

    assert_eq!(call(port, "GET", "/app-health/app/readyz").await.0, 200, "HTTP 200");
    assert_eq!(call(port, "GET", "/app-health/app/startupz").await.0, 200, "HTTP 3xx passes, as for the kubelet");
    let (status, body) = call(port, "GET", "/app-health/sick/readyz").await;
    assert_eq!((status, body.trim()), (500, "HTTP probe answered 503 Service Unavailable"));
    assert_eq!(call(port, "GET", "/app-health/app/livez").await.0, 200, "TCP connects");
    assert_eq!(
        call(port, "GET", "/app-health/secure/readyz").await.0,
        200,
        "HTTPS, the certificate not verified (kubelet)"
    );
    assert_eq!(call(port, "GET", "/app-health/plain-to-tls/readyz").await.0, 500, "plaintext to a TLS port fails");
    assert_eq!(call(port, "GET", "/app-health/gone/livez").await.0, 500, "TCP refused");
    assert_eq!(call(port, "GET", "/app-health/rpc/readyz").await.0, 500, "no gRPC server");
    if grpc.is_some() {
        assert_eq!(call(port, "GET", "/app-health/rpc/livez").await.0, 200, "grpc-go's health service: SERVING");
    }
    assert_eq!(call(port, "GET", "/app-health/never/readyz").await.0, 404, "a probe never handed over");

    let (status, metrics) = call(port, "GET", "/stats/prometheus").await;
    assert_eq!(status, 200);
    assert!(metrics.contains("envoy_server_live"), "the proxy's own metrics: {}", &metrics[..metrics.len().min(400)]);
    assert!(metrics.contains("app_requests_total 7"), "merged with the application's");

    // /quitquitquit is the proxy's: it asks the process to drain and stop.
    let quit = outrider.quit.clone();
    let notified = quit.notified();
    assert_eq!(call(port, "POST", "/quitquitquit").await.0, 200);
    tokio::time::timeout(common::WAIT, notified).await.expect("the proxy was told to quit");

    stop.trigger();
    serving.await.unwrap();
    drop(open);
    outrider.stop();
}

/// This machine's address towards its default route, if it has one that is not loopback.
/// Connecting a UDP socket sends nothing; it only picks the source address.
fn non_loopback_address() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// One request from a socket bound to `from`, to `to`; (status, headers, body).
async fn call_from(
    from: std::net::IpAddr,
    to: std::net::SocketAddr,
    method: &str,
    path: &str,
) -> (u16, Vec<(String, String)>, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::new(from, 0)).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    let request = format!("{method} {path} HTTP/1.1\r\nhost: status\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(common::WAIT, stream.read_to_end(&mut response)).await.unwrap().unwrap();
    common::differential::parse_response(&String::from_utf8_lossy(&response))
}

fn status_config(admin: std::net::SocketAddr, limits: ServerLimits) -> StatusConfig {
    StatusConfig { admin, probes: Default::default(), app_metrics: None, limits }
}

/// The status port listens on every address and is not captured: a caller from another
/// pod must not stop the sidecar. Sent from a non-loopback address of this machine (the
/// traffic stays on it), `/quitquitquit` gets pilot-agent's 403 and the proxy is not
/// told to quit; from loopback it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quitquitquit_only_from_loopback() {
    let Some(outside) = non_loopback_address() else {
        common::skip::skipped(
            common::skip::Tool::Netns,
            "quitquitquit_only_from_loopback",
            "this machine has no non-loopback address",
        );
        return;
    };
    let control_plane = ControlPlane::start().await;
    let outrider = outrider::app::start(common::bootstrap(control_plane.port, "DELTA_GRPC")).await.unwrap();
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, signal) = outrider::core::shutdown::channel();
    let serving =
        tokio::spawn(status::serve(listener, status_config(outrider.admin_address, ServerLimits::default()), signal));
    let from_outside = std::net::SocketAddr::new(outside, port);
    let quit = outrider.quit.clone();
    let told_to_quit = async || {
        // `notify_one` with nobody waiting keeps a permit: a quit already asked for is
        // seen at once, and none asked for is not waited for.
        tokio::select! { biased; () = quit.notified() => true, () = std::future::ready(()) => false }
    };

    for method in ["POST", "GET", "PUT"] {
        let (status, headers, body) = call_from(outside, from_outside, method, "/quitquitquit").await;
        assert_eq!(
            (status, body.as_str()),
            (403, "Only requests from localhost are allowed\n"),
            "{method} from {outside}"
        );
        assert!(headers.contains(&("content-type".into(), "text/plain; charset=utf-8".into())), "{headers:?}");
        assert!(headers.contains(&("x-content-type-options".into(), "nosniff".into())), "{headers:?}");
    }
    assert!(!told_to_quit().await, "the proxy was told to quit by a caller not on loopback");
    // The sidecar keeps serving, the caller from outside included (probes come from the node).
    common::wait::until_true("the proxy is ready", async || {
        call_from(outside, from_outside, "GET", "/healthz/ready").await.0 == 200
    })
    .await;
    assert_eq!(common::admin_get(outrider.admin_address, "/ready").await.0, 200);

    // From loopback: pilot-agent's 405 for another method, and POST quits.
    let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
    let to_loopback = std::net::SocketAddr::new(loopback, port);
    let (status, _, body) = call_from(loopback, to_loopback, "GET", "/quitquitquit").await;
    assert_eq!((status, body.as_str()), (405, "Method Not Allowed\n"));
    assert!(!told_to_quit().await);
    assert_eq!(call_from(loopback, to_loopback, "POST", "/quitquitquit").await.0, 200);
    assert!(told_to_quit().await, "POST /quitquitquit from loopback asks the proxy to quit");

    stop.trigger();
    serving.await.unwrap();
    outrider.stop();
}

/// Whether the server closed `stream` (end of stream or reset) within the tests' wait,
/// with what it sent before.
async fn closed_by_server(stream: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    match tokio::time::timeout(common::WAIT, stream.read_to_end(&mut received)).await {
        Ok(_) => Some(received),
        Err(_) => None,
    }
}

/// A client that never finishes its request head is cut off after the header-read
/// timeout, and so is one that sends nothing; the server still answers the next client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_is_cut_off() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let limits = ServerLimits { header_read_timeout: std::time::Duration::from_millis(300), ..ServerLimits::default() };
    let (stop, signal) = outrider::core::shutdown::channel();
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], common::lab::free_port()));
    let serving = tokio::spawn(status::serve(listener, status_config(admin, limits), signal));

    let mut slow = common::wait::connect(port).await;
    slow.write_all(b"GET /app-health/x/readyz HTTP/1.1\r\nhost: st").await.unwrap();
    let mut silent = common::wait::connect(port).await;
    assert!(closed_by_server(&mut slow).await.is_some(), "a half-sent head holds its connection");
    assert!(closed_by_server(&mut silent).await.is_some(), "a connection that sends nothing is held");
    assert_eq!(call(port, "GET", "/app-health/never/readyz").await.0, 404, "the next client is served");

    stop.trigger();
    serving.await.unwrap();
}

/// Connections over the cap are closed as soon as they are accepted, unanswered; when one
/// of those held closes, a normal request is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_closed() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // A header timeout far longer than the test: the held connections stay held.
    let limits = ServerLimits { max_connections: 2, header_read_timeout: std::time::Duration::from_secs(600) };
    let (stop, signal) = outrider::core::shutdown::channel();
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], common::lab::free_port()));
    let serving = tokio::spawn(status::serve(listener, status_config(admin, limits), signal));

    // Accepted in the order they connected: the first two take the places.
    let first = common::wait::connect(port).await;
    let mut second = common::wait::connect(port).await;
    second.write_all(b"GET /app-health/x/readyz HTTP/1.1\r\n").await.unwrap();
    let mut third = common::wait::connect(port).await;
    third.write_all(b"GET /app-health/never/readyz HTTP/1.1\r\nhost: s\r\n\r\n").await.unwrap();
    let answer = closed_by_server(&mut third).await.expect("the third connection is closed");
    assert!(answer.is_empty(), "and not answered: {:?}", String::from_utf8_lossy(&answer));

    drop(first);
    // The place frees when the server sees the close: asked again until then.
    common::wait::until_true("a place is free again", async || {
        call(port, "GET", "/app-health/never/readyz").await.0 == 404
    })
    .await;

    drop(second);
    stop.trigger();
    serving.await.unwrap();
}
