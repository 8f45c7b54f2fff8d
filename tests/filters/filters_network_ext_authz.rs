//! `envoy.filters.network.ext_authz` side by side with Envoy 1.40: a TCP proxy chain whose
//! connections are checked by a gRPC Authorization service in this process. A denied
//! connection is closed and its bytes never reach the backend; an allowed one is proxied;
//! the `ext_authz.<prefix>.*` stats agree.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::WAIT;
use common::differential::Pair;
use outrider::pb::envoy::service::auth::v3::authorization_server::{Authorization, AuthorizationServer};
use outrider::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse};
use outrider::pb::google::rpc::Status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Allows every connection or none.
#[derive(Clone)]
struct Verdict {
    allow: bool,
}

#[tonic::async_trait]
impl Authorization for Verdict {
    async fn check(&self, _: tonic::Request<CheckRequest>) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let code = if self.allow { 0 } else { 7 };
        let status = Some(Status { code, message: String::new(), details: Vec::new() });
        Ok(tonic::Response::new(CheckResponse { status, ..CheckResponse::default() }))
    }
}

async fn authz(allow: bool) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let service = AuthorizationServer::new(Verdict { allow });
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    port
}

/// An echo backend that counts the bytes it received.
async fn echo() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = Arc::new(AtomicUsize::new(0));
    let counts = received.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut buffer = [0u8; 1024];
                while let Ok(n @ 1..) = stream.read(&mut buffer).await {
                    counts.fetch_add(n, Ordering::SeqCst);
                    if stream.write_all(&buffer[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, received)
}

fn bootstrap(port: u16, backend: u16, authz: u16) -> String {
    format!(
        r#"
static_resources:
  listeners:
  - name: tcp
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.ext_authz
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.ext_authz.v3.ExtAuthz
          stat_prefix: tcp_authz
          transport_api_version: V3
          grpc_service: {{ envoy_grpc: {{ cluster_name: authz }}, timeout: 2s }}
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: tcp
          cluster: backend
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {backend} }} }} }}
  - name: authz
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: authz
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {authz} }} }} }}
"#
    )
}

/// Sends a line and returns what came back before the connection closed (or the echo).
async fn exchange(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let _ = stream.write_all(b"ping\n").await;
    let mut answer = vec![0u8; 5];
    match tokio::time::timeout(WAIT, stream.read_exact(&mut answer)).await.unwrap() {
        Ok(_) => String::from_utf8_lossy(&answer).into_owned(),
        Err(_) => "closed".to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn denied_connections_close_and_allowed_ones_proxy_like_envoy() {
    for (allow, want, stat) in [(true, "ping\n", "ok"), (false, "closed", "denied")] {
        let (backend, received) = echo().await;
        let authz_port = authz(allow).await;
        let pair = Pair::start(|port| bootstrap(port, backend, authz_port)).await;
        for (name, port) in pair.ports() {
            assert_eq!(exchange(port).await, want, "{name}: allow={allow}");
        }
        let proxies = pair.ports().len();
        assert_eq!(received.load(Ordering::SeqCst), if allow { 5 * proxies } else { 0 }, "allow={allow}");
        let name = format!("ext_authz.tcp_authz.{stat}");
        assert_eq!(pair.outrider_stat(&name).await, 1, "{name}");
        if let Some(envoy) = &pair.envoy {
            assert_eq!(envoy.stat(&name).await, 1, "envoy {name}");
        }
    }
}
