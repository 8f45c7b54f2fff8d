//! The admin server's edge: `admin.allow_paths` answered as Envoy 1.40 answers it (403,
//! the path named), a client that never finishes its request head cut off, and
//! connections over the cap closed, so that slow clients cannot hold descriptors the data
//! plane needs.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common;
use common::differential::{Envoy, envoy_binary, raw_http1};
use outrider::app::StartOptions;
use outrider::config::bootstrap::Bootstrap;
use outrider::core::control_server::ServerLimits;

/// No listeners, no control plane: only the admin server, whose paths are limited.
const ALLOW_PATHS: &str = r#"
admin:
  address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
  allow_paths:
  - exact: /ready
  - prefix: /stats
  - safe_regex: { regex: "/server_info(\\?.*)?" }
"#;

async fn outrider_with(bootstrap: &str, admin_limits: ServerLimits) -> outrider::app::Running {
    let options = StartOptions { concurrency: 1, admin_limits, ..StartOptions::default() };
    outrider::app::start_with_options(Bootstrap::parse(bootstrap).unwrap(), options).await.unwrap()
}

/// (method, path): allowed, refused, and refused for the query (Envoy matches the path
/// with its query), a lifecycle endpoint that must not run.
const REQUESTS: &[(&str, &str)] = &[
    ("GET", "/ready"),
    ("GET", "/stats/prometheus"),
    ("GET", "/server_info?x=1"),
    ("GET", "/config_dump"),
    ("GET", "/ready?x=1"),
    ("GET", "/READY"),
    ("POST", "/quitquitquit"),
    ("POST", "/healthcheck/fail"),
    ("GET", "/nowhere"),
];

async fn ask(port: u16, method: &str, path: &str) -> (u16, String) {
    let request = format!("{method} {path} HTTP/1.1\r\nhost: admin\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let (status, _, body) = raw_http1(port, &request).await;
    (status, body)
}

/// A body Envoy sends chunked, to compare with one sent whole.
fn dechunked(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { return body.to_owned() };
        if size == 0 || tail.len() < size {
            break;
        }
        out.push_str(&tail[..size]);
        rest = tail[size..].trim_start_matches("\r\n");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_paths_as_envoy() {
    let outrider = outrider_with(ALLOW_PATHS, ServerLimits::default()).await;
    let port = outrider.admin_address.port();
    for (method, path) in REQUESTS {
        let (status, body) = ask(port, method, path).await;
        let allowed = matches!(*path, "/ready" | "/stats/prometheus" | "/server_info?x=1");
        if allowed {
            assert_eq!(status, 200, "{method} {path}: {body}");
        } else {
            assert_eq!((status, body), (403, format!("request to path {path} not allowed")), "{method} {path}");
        }
    }
    assert_eq!(common::admin_get(outrider.admin_address, "/ready").await.0, 200, "not drained by a refused quit");

    let Some(binary) = envoy_binary() else {
        common::skip::skipped(common::skip::Tool::Envoy, "allow_paths_as_envoy (Envoy's side)", "no Envoy binary");
        outrider.stop();
        return;
    };
    let envoy = Envoy::start(&binary, ALLOW_PATHS).await;
    for (method, path) in REQUESTS {
        let (envoy_status, envoy_body) = ask(envoy.admin.port(), method, path).await;
        let (status, body) = ask(port, method, path).await;
        assert_eq!(status, envoy_status, "{method} {path}");
        if envoy_status == 403 {
            assert_eq!(body, dechunked(&envoy_body), "{method} {path}");
        }
    }
    outrider.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_allow_paths_regex_is_refused_with_its_path() {
    let bootstrap = ALLOW_PATHS.replace(r#""/server_info(\\?.*)?""#, r#""(unclosed""#);
    let error = Bootstrap::parse(&bootstrap).unwrap_err().to_string();
    assert!(error.contains("admin.allow_paths[2].safe_regex.regex"), "{error}");
}

const PLAIN: &str = r#"
admin:
  address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
"#;

/// Whether the server closed `stream` within the tests' wait, and what it sent before.
async fn closed_by_server(stream: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    tokio::time::timeout(common::WAIT, stream.read_to_end(&mut received)).await.ok().map(|_| received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_admin_client_is_cut_off() {
    let limits = ServerLimits { header_read_timeout: Duration::from_millis(300), ..ServerLimits::default() };
    let outrider = outrider_with(PLAIN, limits).await;
    let port = outrider.admin_address.port();
    let mut slow = common::wait::connect(port).await;
    slow.write_all(b"GET /ready HTTP/1.1\r\nhost: adm").await.unwrap();
    let mut silent = common::wait::connect(port).await;
    assert!(closed_by_server(&mut slow).await.is_some(), "a half-sent head holds its connection");
    assert!(closed_by_server(&mut silent).await.is_some(), "a connection that sends nothing is held");
    assert_eq!(ask(port, "GET", "/healthz").await.0, 200, "the next client is served");
    outrider.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_connections_over_the_cap_are_closed() {
    // A header timeout far longer than the test: the held connections stay held.
    let limits = ServerLimits { max_connections: 2, header_read_timeout: Duration::from_secs(600) };
    let outrider = outrider_with(PLAIN, limits).await;
    let port = outrider.admin_address.port();
    // Accepted in the order they connected: the first two take the places.
    let first = common::wait::connect(port).await;
    let mut second = common::wait::connect(port).await;
    second.write_all(b"GET /ready HTTP/1.1\r\n").await.unwrap();
    let mut third = common::wait::connect(port).await;
    third.write_all(b"GET /healthz HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    let answer = closed_by_server(&mut third).await.expect("the third connection is closed");
    assert!(answer.is_empty(), "and not answered: {:?}", String::from_utf8_lossy(&answer));

    drop(first);
    // The place frees when the server sees the close: asked again until then.
    common::wait::until_true("a place is free again", async || ask(port, "GET", "/healthz").await.0 == 200).await;
    drop(second);
    outrider.stop();
}
