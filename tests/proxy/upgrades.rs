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
    bootstrap_with(port, backend, hcm_upgrades, route_upgrades, "")
}

/// [`bootstrap`] with `extra` among the connection manager's fields (10 spaces deep), and
/// a route for CONNECT requests under `connect.example`.
fn bootstrap_with(port: u16, backend: u16, hcm_upgrades: &str, route_upgrades: &str, extra: &str) -> String {
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
          upgrade_configs: [{hcm_upgrades}]{extra}
          route_config:
            virtual_hosts:
            - name: connect
              domains: ["connect.example:443"]
              routes:
              - match: {{ connect_matcher: {{}} }}
                route: {{ cluster: backend }}
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

/// Sends `request` on a new connection and reads until the proxy closes it (bounded by
/// [`WAIT`]: a proxy that keeps it open fails the test).
pub(crate) async fn until_closed(port: u16, request: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut read = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut read)).await.expect("the connection was kept open").unwrap();
    String::from_utf8_lossy(&read).into_owned()
}

/// A plain request on a new connection is served: the worker is unharmed.
async fn serves(port: u16) {
    let response = until_closed(port, "GET /plain HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\n\r\n").await;
    // The backend switches protocols on any request head it is sent.
    assert!(response.starts_with("HTTP/1.1 101") || response.starts_with("HTTP/1.1 502"), "{response:?}");
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

/// CONNECT, which Outrider never proxies: one that no route matches gets Envoy's 404, one
/// that a `connect_matcher` route matches (with no CONNECT upgrade allowed) Envoy's 403;
/// either way the connection closes after the answer, so what was sent as the tunnel (a
/// request here) is never read as one, and nothing reaches the backend.
#[tokio::test(flavor = "multi_thread")]
async fn connect_requests_are_refused_like_envoy_and_their_connection_closed() {
    let (backend, seen) = echo_upgrade_backend().await;
    let pair = Pair::start(|port| bootstrap(port, backend, "{ upgrade_type: websocket }", "")).await;
    for (name, port) in pair.ports() {
        for (authority, want) in [("example.com:443", 404), ("connect.example:443", 403)] {
            let request = format!(
                "CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n\r\nGET /hidden HTTP/1.1\r\nhost: example.com\r\n\r\n"
            );
            let response = until_closed(port, &request).await;
            let (status, headers, _) = parse_response(&response);
            assert_eq!(status, want, "{name}: {authority}: {response:?}");
            assert!(headers.iter().any(|(n, v)| n == "connection" && v == "close"), "{name}: {response:?}");
            assert_eq!(
                response.matches("HTTP/1.1").count(),
                1,
                "{name}: the tunnel was read as a request: {response:?}"
            );
        }
    }
    assert_eq!(seen.load(Ordering::SeqCst), 0);
}

/// `Upgrade` is checked as Envoy checks it, by its whole value: a list (even of allowed
/// types, even with `h2c` in it, even over two lines) is a type nobody configured, 403 and
/// the connection closed; `h2c` alone is not an upgrade (served as a plain request, its
/// `HTTP2-Settings` never forwarded).
#[tokio::test(flavor = "multi_thread")]
async fn upgrade_lists_are_refused_and_h2c_is_never_an_upgrade() {
    let (backend, seen) = echo_upgrade_backend().await;
    let pair =
        Pair::start(|port| bootstrap(port, backend, "{ upgrade_type: websocket }, { upgrade_type: foo }", "")).await;
    let settings = "connection: Upgrade, HTTP2-Settings\r\nhttp2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n";
    let refused = [
        format!("upgrade: websocket, h2c\r\n{settings}"),
        format!("upgrade: h2c, websocket\r\n{settings}"),
        "upgrade: websocket, foo\r\nconnection: upgrade\r\n".to_owned(),
        "upgrade: websocket\r\nupgrade: foo\r\nconnection: upgrade\r\n".to_owned(),
    ];
    for (name, port) in pair.ports() {
        for headers in &refused {
            let before = seen.load(Ordering::SeqCst);
            let request = format!(
                "GET /chat HTTP/1.1\r\nhost: example.com\r\n{headers}\r\nGET /hidden HTTP/1.1\r\nhost: h\r\n\r\n"
            );
            let response = until_closed(port, &request).await;
            let (status, response_headers, _) = parse_response(&response);
            assert_eq!(status, 403, "{name}: {headers:?}: {response:?}");
            assert!(response_headers.iter().any(|(n, v)| n == "connection" && v == "close"), "{name}: {response:?}");
            assert_eq!(seen.load(Ordering::SeqCst), before, "{name}: {headers:?} reached the backend");
        }
        let got = attempt(port, "/chat", "foo").await;
        assert_eq!((got.status, got.echo.as_str()), (101, "ping through the tunnel"), "{name}: {got:?}");
    }
}

/// A backend that records each request head it gets and answers `200`.
pub(crate) async fn head_recording_backend() -> (u16, Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let log = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                log.lock().unwrap().push(String::from_utf8_lossy(&head).to_ascii_lowercase());
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok").await;
            });
        }
    });
    (port, heads)
}

/// `h2c` on HTTP/1.1 (and on HTTP/1.0 when it is accepted) is forwarded as a plain request,
/// without `upgrade`, `connection` or `HTTP2-Settings`, as Envoy forwards it.
#[tokio::test(flavor = "multi_thread")]
async fn h2c_reaches_the_backend_as_a_plain_request_on_both() {
    let (backend, heads) = head_recording_backend().await;
    let extra = "\n          http_protocol_options: { accept_http_10: true }";
    let pair = Pair::start(|port| bootstrap_with(port, backend, "{ upgrade_type: websocket }", "", extra)).await;
    for (name, port) in pair.ports() {
        for version in ["1.1", "1.0"] {
            let request = format!(
                "GET /h2c HTTP/{version}\r\nhost: example.com\r\nupgrade: h2c\r\nconnection: Upgrade, HTTP2-Settings, close\r\nhttp2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"
            );
            let response = until_closed(port, &request).await;
            let (status, _, body) = parse_response(&response);
            assert_eq!((status, body.as_str()), (200, "ok"), "{name}: HTTP/{version}: {response:?}");
            let head = heads.lock().unwrap().pop().unwrap_or_default();
            assert!(head.starts_with("get /h2c http/1.1\r\n"), "{name}: {head:?}");
            for header in ["upgrade:", "http2-settings:", "connection: upgrade"] {
                assert!(!head.contains(header), "{name}: HTTP/{version}: {header} was forwarded: {head:?}");
            }
        }
    }
}

/// An upgrade on HTTP/1.0 never gets a tunnel: refused with 403 even where the type is
/// allowed (Envoy, taking HTTP/1.0, tunnels it: the difference is in the README), and an
/// upstream that switches protocols on a plain request gets Envoy's 502, never a tunnel.
#[tokio::test(flavor = "multi_thread")]
async fn an_http10_upgrade_never_gets_a_tunnel() {
    let (backend, seen) = echo_upgrade_backend().await;
    let extra = "\n          http_protocol_options: { accept_http_10: true }";
    let pair = Pair::start(|port| bootstrap_with(port, backend, "{ upgrade_type: websocket }", "", extra)).await;
    let port = pair.ports().into_iter().find(|(name, _)| *name == "outrider").unwrap().1;
    let request = "GET /chat HTTP/1.0\r\nhost: example.com\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\nping";
    let response = until_closed(port, request).await;
    assert_eq!(parse_response(&response).0, 403, "{response:?}");
    assert_eq!(seen.load(Ordering::SeqCst), 0);
    // h2c is made a plain request, but this backend answers 101 to anything.
    let request =
        "GET /h2c HTTP/1.0\r\nhost: example.com\r\nupgrade: h2c\r\nconnection: upgrade\r\n\r\nPRI * HTTP/2.0\r\n\r\n";
    let response = until_closed(port, request).await;
    let (status, _, body) = parse_response(&response);
    assert_eq!(status, 502, "{response:?}");
    assert!(body.ends_with("reset reason: protocol error"), "{response:?}");
    assert!(!response.contains("PRI"), "{response:?}");
    serves(port).await;
}
