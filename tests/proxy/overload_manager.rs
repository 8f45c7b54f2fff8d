//! The bootstrap's overload manager, side by side with Envoy 1.40: the same bootstrap
//! through both, the same requests, the answers and stats compared.
//!
//! A `fixed_heap` monitor whose limit is 1 byte is saturated from its first sample, which
//! puts its actions in force deterministically; a proxy applies them only after its first
//! refresh, so each test waits (bounded) until the action is seen to hold.

use crate::common;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use common::backends;
use common::differential::{HttpListenerExtra, Pair, ROUTE_TO_BACKEND, http_listener, raw_http1, static_cluster};
use common::lab::free_port;
use common::wait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HEAP: &str = "envoy.resource_monitors.fixed_heap";

fn listener(name: &str, port: u16, extra: &str) -> String {
    let extra = HttpListenerExtra { listener: extra, hcm: "\n          append_local_overload: true" };
    http_listener(name, port, name, extra, ROUTE_TO_BACKEND)
}

/// A bootstrap with the listener `p` on the proxy's port, a second listener `x` (with
/// `x_extra`, e.g. a bypass) on a port of its own per proxy, and `overload`.
struct Setup {
    second_ports: Mutex<HashMap<u16, u16>>,
}

impl Setup {
    fn new() -> Self {
        Self { second_ports: Mutex::default() }
    }

    fn bootstrap(&self, port: u16, backend: u16, x_extra: &str, overload: &str) -> String {
        let second = *self.second_ports.lock().unwrap().entry(port).or_insert_with(free_port);
        format!(
            "admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }}, ignore_global_conn_limit: true }}\n\
             static_resources:\n  listeners:{}{}\n  clusters:{}\noverload_manager:\n{overload}",
            listener("p", port, ""),
            listener("x", second, x_extra),
            static_cluster("backend", backend),
        )
    }

    fn second(&self, port: u16) -> u16 {
        self.second_ports.lock().unwrap()[&port]
    }
}

fn heap_action(action: &str) -> String {
    format!(
        r#"  refresh_interval: 0.05s
  resource_monitors:
  - name: {HEAP}
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig
      max_heap_size_bytes: 1
  actions:
  - name: {action}
    triggers: [{{ name: {HEAP}, threshold: {{ value: 0.5 }} }}]
"#
    )
}

async fn stat(pair: &Pair, proxy: &str, name: &str) -> u64 {
    match (proxy, &pair.envoy) {
        ("envoy", Some(envoy)) => envoy.stat(name).await,
        _ => pair.outrider_stat(name).await,
    }
}

/// `name` once it reaches `want`, or its last value after a bounded wait (the caller
/// asserts on it). Envoy may close a refused connection before its worker counts it, so
/// the counter can trail the close that the test observed.
async fn stat_reaching(pair: &Pair, proxy: &str, name: &str, want: u64) -> u64 {
    let mut value = 0;
    wait::within(async || {
        value = stat(pair, proxy, name).await;
        (value >= want).then_some(())
    })
    .await;
    value
}

const GET_CLOSE: &str = "GET / HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_accepting_requests_answers_503_envoy_overloaded_except_on_a_bypassing_listener() {
    let backend = backends::healthy("backend").await;
    let setup = Setup::new();
    let overload = heap_action("envoy.overload_actions.stop_accepting_requests");
    let pair =
        Pair::start(|port| setup.bootstrap(port, backend.port, "\n    bypass_overload_manager: true", &overload)).await;
    let mut answers = Vec::new();
    for (proxy, port) in pair.ports() {
        let (status, headers, body) = wait::until(&format!("{proxy}: stop_accepting_requests in force"), async || {
            let answer = raw_http1(port, GET_CLOSE).await;
            (answer.0 == 503).then_some(answer)
        })
        .await;
        let content_type = headers.iter().find(|(k, _)| k == "content-type").map(|(_, v)| v.clone());
        let local_overloaded = headers.iter().any(|(k, v)| k == "x-envoy-local-overloaded" && v == "true");
        assert!(local_overloaded, "{proxy}: append_local_overload adds x-envoy-local-overloaded: {headers:?}");
        answers.push((proxy, status, body, content_type));
        let (bypassed, _, _) = raw_http1(setup.second(port), GET_CLOSE).await;
        assert_eq!(bypassed, 200, "{proxy}: a listener that bypasses the overload manager still serves");
        assert!(stat(&pair, proxy, "http.p.downstream_rq_overload_close").await >= 1, "{proxy}");
        assert_eq!(stat(&pair, proxy, "http.x.downstream_rq_overload_close").await, 0, "{proxy}");
        let active = "overload.envoy.overload_actions.stop_accepting_requests.active";
        wait::until_true(&format!("{proxy}: {active}"), async || stat(&pair, proxy, active).await == 1).await;
    }
    for (proxy, status, body, content_type) in &answers {
        assert_eq!(*status, 503, "{proxy}");
        assert_eq!(body, "envoy overloaded", "{proxy}");
        assert_eq!(content_type.as_deref(), Some("text/plain"), "{proxy}");
    }
    if let [envoy, outrider] = answers.as_slice() {
        assert_eq!((envoy.1, &envoy.2, &envoy.3), (outrider.1, &outrider.2, &outrider.3));
    }
}

/// Sends a keep-alive GET on `stream` and reads its response head and body (by
/// Content-Length); `None` if the connection closed before any byte came back.
async fn keep_alive_get(stream: &mut TcpStream) -> Option<String> {
    stream.write_all(b"GET / HTTP/1.1\r\nhost: h\r\n\r\n").await.ok()?;
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer)).await.ok()?.ok()?;
        if n == 0 {
            return (!response.is_empty()).then(|| String::from_utf8_lossy(&response).into_owned());
        }
        response.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&response).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return Some(text);
            }
        }
    }
}

/// Whether the proxy closes a new connection at once, without answering its request.
async fn closed_unanswered(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else { return true };
    keep_alive_get(&mut stream).await.is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_connection_limit_closes_connections_beyond_it_and_counts_them() {
    let backend = backends::healthy("backend").await;
    let setup = Setup::new();
    let overload = r#"  resource_monitors:
  - name: envoy.resource_monitors.global_downstream_max_connections
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig
      max_active_downstream_connections: 2
"#;
    let pair =
        Pair::start(|port| setup.bootstrap(port, backend.port, "\n    ignore_global_conn_limit: true", overload)).await;
    for (proxy, port) in pair.ports() {
        let mut first = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut second = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        assert!(keep_alive_get(&mut first).await.is_some_and(|r| r.starts_with("HTTP/1.1 200")), "{proxy}");
        assert!(keep_alive_get(&mut second).await.is_some_and(|r| r.starts_with("HTTP/1.1 200")), "{proxy}");
        assert!(closed_unanswered(port).await, "{proxy}: a third connection is closed unanswered");
        let overflow = format!("listener.127.0.0.1_{port}.downstream_global_cx_overflow");
        assert_eq!(stat_reaching(&pair, proxy, &overflow, 1).await, 1, "{proxy}: {overflow}");
        // A listener that ignores the limit still takes connections (and they count).
        let mut exempt = TcpStream::connect(("127.0.0.1", setup.second(port))).await.unwrap();
        assert!(keep_alive_get(&mut exempt).await.is_some_and(|r| r.starts_with("HTTP/1.1 200")), "{proxy}");
        drop(exempt);
        // Closing one makes room again, once the proxy has seen the close.
        drop(first);
        wait::until_true(&format!("{proxy}: room after a close"), async || {
            let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else { return false };
            keep_alive_get(&mut stream).await.is_some()
        })
        .await;
        drop(second);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_http_keepalive_makes_each_http1_response_the_connections_last() {
    let backend = backends::healthy("backend").await;
    let setup = Setup::new();
    let overload = heap_action("envoy.overload_actions.disable_http_keepalive");
    let pair = Pair::start(|port| setup.bootstrap(port, backend.port, "", &overload)).await;
    for (proxy, port) in pair.ports() {
        let counter = "http.p.downstream_cx_overload_disable_keepalive";
        wait::until_true(&format!("{proxy}: disable_http_keepalive in force"), async || {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let Some(response) = keep_alive_get(&mut stream).await else { return false };
            let closes = response.to_ascii_lowercase().contains("\r\nconnection: close\r\n");
            // After a `connection: close` response, the proxy closes the connection.
            closes && stream.read(&mut [0u8; 16]).await.is_ok_and(|n| n == 0)
        })
        .await;
        assert!(stat(&pair, proxy, counter).await >= 1, "{proxy}: {counter}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_accepting_connections_leaves_new_connections_in_the_backlog() {
    let backend = backends::healthy("backend").await;
    let setup = Setup::new();
    let overload = heap_action("envoy.overload_actions.stop_accepting_connections");
    let pair =
        Pair::start(|port| setup.bootstrap(port, backend.port, "\n    bypass_overload_manager: true", &overload)).await;
    for (proxy, port) in pair.ports() {
        let active = "overload.envoy.overload_actions.stop_accepting_connections.active";
        wait::until_true(&format!("{proxy}: {active}"), async || stat(&pair, proxy, active).await == 1).await;
        let total = format!("listener.127.0.0.1_{port}.downstream_cx_total");
        let before = stat(&pair, proxy, &total).await;
        // The kernel completes the handshake; the proxy does not take the connection.
        let mut waiting = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        waiting.write_all(b"GET / HTTP/1.1\r\nhost: h\r\n\r\n").await.unwrap();
        // A request through the bypassing listener, served after the one above was queued.
        let (status, _, _) = raw_http1(setup.second(port), GET_CLOSE).await;
        assert_eq!(status, 200, "{proxy}: a bypassing listener keeps accepting");
        assert_eq!(stat(&pair, proxy, &total).await, before, "{proxy}: nothing accepted on {port}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_incoming_connections_closes_new_connections_unanswered() {
    let backend = backends::healthy("backend").await;
    let setup = Setup::new();
    let overload = heap_action("envoy.overload_actions.reject_incoming_connections");
    let pair = Pair::start(|port| setup.bootstrap(port, backend.port, "", &overload)).await;
    for (proxy, port) in pair.ports() {
        wait::until_true(&format!("{proxy}: reject_incoming_connections in force"), || closed_unanswered(port)).await;
        let rejected = format!("listener.127.0.0.1_{port}.downstream_cx_overload_reject");
        assert!(stat(&pair, proxy, &rejected).await >= 1, "{proxy}: {rejected}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_shed_points_shed_connections_and_requests() {
    let backend = backends::healthy("backend").await;
    let setup = Setup::new();
    let shed = |point: &str| {
        format!(
            r#"  refresh_interval: 0.05s
  resource_monitors:
  - name: {HEAP}
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig
      max_heap_size_bytes: 1
  loadshed_points:
  - name: {point}
    triggers: [{{ name: {HEAP}, threshold: {{ value: 0.5 }} }}]
"#
        )
    };
    let requests = shed("envoy.load_shed_points.http_connection_manager_decode_headers");
    let pair = Pair::start(|port| setup.bootstrap(port, backend.port, "", &requests)).await;
    let mut answers = Vec::new();
    for (proxy, port) in pair.ports() {
        let shed = wait::until(&format!("{proxy}: requests shed"), async || {
            let (status, _, body) = raw_http1(port, GET_CLOSE).await;
            (status == 503).then_some((status, body))
        })
        .await;
        answers.push(shed);
        let count = "overload.envoy.load_shed_points.http_connection_manager_decode_headers.shed_load_count";
        assert!(stat(&pair, proxy, count).await >= 1, "{proxy}: {count}");
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "{answers:?}");
    assert_eq!(answers[0], (503, "envoy overloaded".to_owned()));

    let connections = shed("envoy.load_shed_points.tcp_listener_accept");
    let setup = Setup::new();
    let pair = Pair::start(|port| setup.bootstrap(port, backend.port, "", &connections)).await;
    for (proxy, port) in pair.ports() {
        wait::until_true(&format!("{proxy}: connections shed"), || closed_unanswered(port)).await;
        let rejected = format!("listener.127.0.0.1_{port}.downstream_cx_overload_reject");
        assert!(stat(&pair, proxy, &rejected).await >= 1, "{proxy}: {rejected}");
    }
}
