//! WebSocket (HTTP/1.1 `Upgrade`) through the connection manager, side by side with Envoy
//! 1.40: an allowed upgrade gets the upstream's `101` and a working byte tunnel; one the
//! connection manager or the route does not allow gets 403 and never reaches the backend.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::WAIT;
use common::differential::{Pair, parse_response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A backend that answers any request head with a `101` and then echoes bytes; counts the
/// requests it saw.
async fn echo_upgrade_backend() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counts = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                counts.fetch_add(1, Ordering::SeqCst);
                let reply = "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
                             sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
                stream.write_all(reply.as_bytes()).await.unwrap();
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    (port, seen)
}

fn bootstrap(port: u16, backend: u16, hcm_upgrades: &str, route_upgrades: &str) -> String {
    format!(
        r#"
static_resources:
  listeners:
  - name: http
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          upgrade_configs: [{hcm_upgrades}]
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/off" }}
                route: {{ cluster: backend, upgrade_configs: [{{ upgrade_type: websocket, enabled: false }}] }}
              - match: {{ prefix: "/" }}
                route: {{ cluster: backend, upgrade_configs: [{route_upgrades}] }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {backend} }} }} }}
"#
    )
}

/// What a client sees of one upgrade attempt: status, the `upgrade` and `connection`
/// headers, and (after a 101) what came back for a message sent through the tunnel.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: u16,
    upgrade: String,
    connection: String,
    accept: String,
    echo: String,
}

async fn attempt(port: u16, path: &str, kind: &str) -> Seen {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nhost: example.com\r\nupgrade: {kind}\r\nconnection: Upgrade\r\n\
         sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let read_head = async {
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                break;
            }
            head.push(byte[0]);
        }
    };
    tokio::time::timeout(WAIT, read_head).await.unwrap();
    let (status, headers, _) = parse_response(&String::from_utf8_lossy(&head));
    let header =
        |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.to_ascii_lowercase()).unwrap_or_default();
    let mut echo = String::new();
    if status == 101 {
        stream.write_all(b"ping through the tunnel").await.unwrap();
        let mut buffer = vec![0u8; 23];
        tokio::time::timeout(WAIT, stream.read_exact(&mut buffer)).await.unwrap().unwrap();
        echo = String::from_utf8_lossy(&buffer).into_owned();
    }
    Seen {
        status,
        upgrade: header("upgrade"),
        connection: header("connection"),
        accept: header("sec-websocket-accept"),
        echo,
    }
}

async fn run(hcm: &str, route: &str, cases: &[(&str, &str, u16)]) {
    let (backend, seen) = echo_upgrade_backend().await;
    let pair = Pair::start(|port| bootstrap(port, backend, hcm, route)).await;
    for (name, port) in pair.ports() {
        for (path, kind, want) in cases {
            let before = seen.load(Ordering::SeqCst);
            let got = attempt(port, path, kind).await;
            assert_eq!(got.status, *want, "{name}: {path} upgrade {kind}: {got:?}");
            if *want == 101 {
                assert_eq!(got.upgrade, "websocket", "{name}: {got:?}");
                assert_eq!(got.connection, "upgrade", "{name}: {got:?}");
                assert_eq!(got.accept, "s3pplmbitxaq9kygzzhzrbk+xoo=", "{name}: {got:?}");
                assert_eq!(got.echo, "ping through the tunnel", "{name}");
            } else {
                assert_eq!(seen.load(Ordering::SeqCst), before, "{name}: a refused upgrade reached the backend");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn websocket_allowed_by_the_connection_manager_tunnels_on_both() {
    run(
        "{ upgrade_type: websocket }",
        "",
        &[
            ("/chat", "websocket", 101),
            ("/chat", "WebSocket", 101),
            ("/off", "websocket", 403),
            ("/chat", "spdy/3.1", 403),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn upgrades_nobody_allowed_are_refused_with_403_on_both() {
    run("", "", &[("/chat", "websocket", 403)]).await;
    run("{ upgrade_type: websocket, enabled: false }", "", &[("/chat", "websocket", 403)]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_route_can_enable_what_the_connection_manager_disables() {
    run(
        "{ upgrade_type: websocket, enabled: false }",
        "{ upgrade_type: websocket, enabled: true }",
        &[("/chat", "websocket", 101), ("/off", "websocket", 403)],
    )
    .await;
}

/// A CONNECT request, which no route here matches (no `connect_matcher`), gets Envoy's 404
/// from both proxies and never reaches the backend.
#[tokio::test(flavor = "multi_thread")]
async fn connect_requests_are_refused_like_envoy() {
    let (backend, seen) = echo_upgrade_backend().await;
    let pair = Pair::start(|port| bootstrap(port, backend, "{ upgrade_type: websocket }", "")).await;
    let mut statuses = Vec::new();
    for (name, port) in pair.ports() {
        let request = "CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\nconnection: close\r\n\r\n";
        let (status, _, _) = common::differential::raw_http1(port, request).await;
        statuses.push((name, status));
    }
    let outrider = statuses.iter().find(|(n, _)| *n == "outrider").unwrap().1;
    assert_eq!(outrider, 404);
    if let Some((_, envoy)) = statuses.iter().find(|(n, _)| *n == "envoy") {
        assert_eq!(*envoy, outrider, "{statuses:?}");
    }
    assert_eq!(seen.load(Ordering::SeqCst), 0);
}
