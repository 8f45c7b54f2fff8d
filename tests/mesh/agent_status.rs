//! The status port pilot-agent serves (15020), served by Outrider's agent
//! (`outrider::agent::status`) for a running Outrider: its readiness, the application's
//! probes as Istio's injection hands them over (`ISTIO_KUBE_APP_PROBERS`: HTTP, HTTPS, TCP,
//! gRPC against real servers on loopback, grpc-go's health service for gRPC), metrics merged
//! with the application's (`ISTIO_PROMETHEUS_ANNOTATIONS`), and `/quitquitquit`.

use crate::common;

use bytes::Bytes;
use common::{ControlPlane, backends};
use http_body_util::Full;
use outrider::agent::probers;
use outrider::agent::status::{self, AppMetrics, StatusConfig};

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
