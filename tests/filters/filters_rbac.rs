//! RBAC side by side with Envoy 1.40: the same bootstrap (an HTTP listener with RBAC
//! filters before the router, or a TCP proxy chain behind network RBAC) starts both
//! proxies, the same requests and connections go through each, and what comes back — the
//! status, the body, the gRPC status, whether the connection is closed — and the `rbac`
//! counters must agree. The backends count what reaches them: a denied request never does.

use crate::common;
use crate::tls_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::skip::{Tool, skipped};
use common::backends;
use common::differential::{Pair, raw_http1};
use serde_json::json;
use tls_support::pki::{self, Ca};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Three RBAC filters as Istio lays them out, and one that only logs:
/// - `envoy.filters.http.rbac` (DENY): `/admin…` or any request with `x-block`; shadow
///   rules (ALLOW only GET) counted under Istio's dry-run prefix;
/// - `allow-rbac` (ALLOW): GET or POST on `/data…` or `/open` or `/strict…`, from
///   192.0.2.0/24 (after `x-forwarded-for`) or with `x-user: alice`;
/// - `logger` (LOG) on `/data`, counted under `rules_stat_prefix: log`.
///
/// `/open` turns `allow-rbac` off (an `RBACPerRoute` without `rbac`); `/strict` replaces
/// the DENY filter's rules with "deny everything".
const HTTP_FILTERS: &str = r#"
          - name: envoy.filters.http.rbac
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
              shadow_rules_stat_prefix: istio_dry_run_allow_
              rules:
                action: DENY
                policies:
                  "ns[default]-policy[deny-admin]-rule[0]":
                    permissions: [{ url_path: { path: { prefix: /admin } } }]
                    principals: [{ any: true }]
                  "block header":
                    permissions: [{ header: { name: x-block, present_match: true } }]
                    principals: [{ any: true }]
              shadow_rules:
                action: ALLOW
                policies:
                  get-only:
                    permissions: [{ header: { name: ":method", exact_match: GET } }]
                    principals: [{ any: true }]
          - name: allow-rbac
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
              rules:
                action: ALLOW
                policies:
                  "ns[default]-policy[data]-rule[0]":
                    permissions:
                    - and_rules:
                        rules:
                        - or_rules: { rules: [{ header: { name: ":method", exact_match: GET } }, { header: { name: ":method", exact_match: POST } }] }
                        - or_rules: { rules: [{ url_path: { path: { prefix: /data } } }, { url_path: { path: { exact: /open } } }, { url_path: { path: { prefix: /strict } } }] }
                        - not_rule: { url_path: { path: { suffix: .secret, ignore_case: true } } }
                    principals:
                    - remote_ip: { address_prefix: 192.0.2.0, prefix_len: 24 }
                    - header: { name: x-user, string_match: { exact: alice } }
          - name: logger
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
              rules_stat_prefix: log
              rules:
                action: LOG
                policies:
                  data: { permissions: [{ url_path: { path: { prefix: /data } } }], principals: [{ any: true }] }
"#;

fn http_bootstrap(port: u16, backend: u16) -> String {
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
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ path: /open }}
                route: {{ cluster: backend }}
                typed_per_filter_config:
                  allow-rbac:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute
              - match: {{ prefix: /strict }}
                route: {{ cluster: backend }}
                typed_per_filter_config:
                  envoy.filters.http.rbac:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute
                    rbac: {{ rules: {{ action: DENY, policies: {{ all: {{ permissions: [{{ any: true }}], principals: [{{ any: true }}] }} }} }} }}
              - match: {{ prefix: "/" }}
                route: {{ cluster: backend }}
          http_filters:
{HTTP_FILTERS}
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

/// One request of the corpus: method, path, extra header lines, and whether RBAC lets it
/// through to the backend.
struct Case {
    method: &'static str,
    path: &'static str,
    headers: &'static str,
    allowed: bool,
}

const fn case(method: &'static str, path: &'static str, headers: &'static str, allowed: bool) -> Case {
    Case { method, path, headers, allowed }
}

const CORPUS: &[Case] = &[
    case("GET", "/data", "", false),
    case("GET", "/data/x?q=1", "x-user: alice\r\n", true),
    case("POST", "/data", "x-user: alice\r\ncontent-length: 0\r\n", true),
    case("DELETE", "/data", "x-user: alice\r\n", false),
    case("GET", "/data", "x-user: bob\r\n", false),
    case("GET", "/data", "x-forwarded-for: 192.0.2.7\r\n", true),
    case("GET", "/data", "x-forwarded-for: 192.0.2.7, 198.51.100.1\r\n", false),
    case("GET", "/data", "x-forwarded-for: 198.51.100.1\r\n", false),
    case("GET", "/data/KEY.SECRET", "x-user: alice\r\n", false),
    case("GET", "/admin", "x-user: alice\r\n", false),
    case("GET", "/administrator/x", "x-user: alice\r\n", false),
    case("GET", "/data", "x-user: alice\r\nx-block: 1\r\n", false),
    case("GET", "/open", "", true),
    case("GET", "/open", "x-block: yes\r\n", false),
    case("GET", "/strict/a", "x-user: alice\r\n", false),
    case(
        "POST",
        "/pkg.Service/Method",
        "content-type: application/grpc\r\nte: trailers\r\ncontent-length: 0\r\n",
        false,
    ),
];

/// What the client saw of one request, the headers that matter only.
async fn send(port: u16, case: &Case) -> (u16, String, BTreeMap<String, String>) {
    let request = format!(
        "{} {} HTTP/1.1\r\nhost: example.com\r\n{}connection: close\r\n\r\n",
        case.method, case.path, case.headers
    );
    let (status, headers, body) = raw_http1(port, &request).await;
    let kept = ["content-type", "content-length", "grpc-status", "grpc-message"];
    let headers = headers.into_iter().filter(|(n, _)| kept.contains(&n.as_str())).collect();
    (status, body, headers)
}

/// Every `rbac` stat of a `/stats` text body.
fn rbac_stats(body: &str) -> BTreeMap<String, u64> {
    body.lines()
        .filter_map(|line| line.split_once(": "))
        .filter(|(name, _)| name.contains(".rbac."))
        .filter_map(|(name, value)| Some((name.to_owned(), value.trim().parse().ok()?)))
        .collect()
}

async fn envoy_rbac_stats(admin: std::net::SocketAddr) -> BTreeMap<String, u64> {
    rbac_stats(&common::admin_get(admin, "/stats?filter=rbac").await.1)
}

async fn outrider_rbac_stats(pair: &Pair) -> BTreeMap<String, u64> {
    rbac_stats(&common::admin_get(pair.outrider.admin_address, "/stats").await.1)
}

#[tokio::test(flavor = "multi_thread")]
async fn http_rbac_matches_envoy() {
    let backend = backends::healthy("backend").await;
    let pair = Pair::start(|port| http_bootstrap(port, backend.port)).await;
    let mut disagreements = Vec::new();
    for case in CORPUS {
        let before = backend.seen.requests();
        let got = send(pair.outrider_port, case).await;
        let reached = backend.seen.requests() - before;
        let what = format!("{} {} [{}]", case.method, case.path, case.headers.replace("\r\n", "; "));
        assert_eq!(
            reached,
            usize::from(case.allowed),
            "{what}: outrider sent it to the backend {reached} times ({got:?})"
        );
        if !case.allowed && !case.path.starts_with("/pkg") {
            assert_eq!((got.0, got.1.as_str()), (403, "RBAC: access denied"), "{what}");
        }
        if let Some(envoy) = &pair.envoy {
            let before = backend.seen.requests();
            let want = send(pair.envoy_port, case).await;
            let reached = backend.seen.requests() - before;
            assert_eq!(reached, usize::from(case.allowed), "{what}: envoy sent it to the backend {reached} times");
            if want != got {
                disagreements.push(format!("{what}:\n  envoy    {want:?}\n  outrider {got:?}"));
            }
            let _ = envoy;
        }
    }
    let Some(envoy) = &pair.envoy else {
        skipped(
            Tool::Envoy,
            "comparison with Envoy (Outrider checked against the expected verdicts only)",
            "envoy not found",
        );
        return;
    };
    assert!(disagreements.is_empty(), "disagreements:\n{}\nenvoy log:\n{}", disagreements.join("\n"), envoy.log_tail());
    let want = envoy_rbac_stats(envoy.admin).await;
    let got = outrider_rbac_stats(&pair).await;
    assert!(want.contains_key("http.ingress.rbac.istio_dry_run_allow_.shadow_allowed"), "{want:?}");
    assert_eq!(got, want, "rbac stats: outrider (left) and envoy (right)");
}

/// A TCP echo server that counts the bytes it received. (Not connections: Envoy's TCP
/// proxy connects upstream as soon as a connection arrives, before RBAC sees its first
/// byte, and closes that upstream connection on denial; Outrider decides first and never
/// connects. Neither lets a byte through.)
async fn tcp_echo() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = Arc::new(AtomicUsize::new(0));
    let counted = received.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while let Ok(n) = stream.read(&mut buf).await {
                    // Counted before the echo, so a client that got it sees the count.
                    counted.fetch_add(n, Ordering::SeqCst);
                    if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, received)
}

fn tcp_bootstrap(port: u16, backend: u16, action: &str, enforcement: &str) -> String {
    format!(
        r#"
static_resources:
  listeners:
  - name: tcp
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.rbac
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC
          stat_prefix: tcp.
          shadow_rules_stat_prefix: istio_dry_run_allow_
          enforcement_type: {enforcement}
          rules:
            action: {action}
            policies:
              loopback:
                permissions: [{{ destination_port_range: {{ start: 1, end: 65536 }} }}]
                principals: [{{ direct_remote_ip: {{ address_prefix: 127.0.0.1, prefix_len: 32 }} }}]
          shadow_rules:
            action: DENY
            policies:
              everyone: {{ permissions: [{{ any: true }}], principals: [{{ any: true }}] }}
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: backend
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
"#
    )
}

/// Sends a line and reads until the proxy closes or echoes it: what came back.
async fn tcp_exchange(port: u16) -> Vec<u8> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // The write may fail when the proxy has already closed; the read says what happened.
    let _ = stream.write_all(b"ping\n").await;
    let mut got = Vec::new();
    let mut buf = [0u8; 16];
    loop {
        match tokio::time::timeout(common::WAIT, stream.read(&mut buf)).await.expect("the proxy answers or closes") {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.ends_with(b"\n") {
                    break;
                }
            }
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread")]
async fn network_rbac_closes_denied_connections_like_envoy() {
    for (action, enforcement, allowed) in [
        ("DENY", "ONE_TIME_ON_FIRST_BYTE", false),
        ("DENY", "CONTINUOUS", false),
        ("ALLOW", "ONE_TIME_ON_FIRST_BYTE", true),
    ] {
        let (backend, received) = tcp_echo().await;
        let pair = Pair::start(|port| tcp_bootstrap(port, backend, action, enforcement)).await;
        for (name, port) in pair.ports() {
            let before = received.load(Ordering::SeqCst);
            let got = tcp_exchange(port).await;
            let reached = received.load(Ordering::SeqCst) - before;
            let what = format!("{name}, {action} {enforcement}");
            if allowed {
                assert_eq!(got, b"ping\n", "{what}: the echo comes back");
                assert_eq!(reached, 5, "{what}: the backend got the line");
            } else {
                assert!(got.is_empty(), "{what}: the connection is closed, got {got:?}");
                assert_eq!(reached, 0, "{what}: nothing of a denied connection reaches the backend");
            }
        }
        let Some(envoy) = &pair.envoy else {
            skipped(Tool::Envoy, "the Envoy half of the network RBAC comparison", "envoy not found");
            continue;
        };
        let want = envoy_rbac_stats(envoy.admin).await;
        let got = outrider_rbac_stats(&pair).await;
        assert!(want.contains_key("tcp.rbac.denied"), "{want:?}");
        assert_eq!(got, want, "{action} {enforcement}: rbac stats, outrider (left) and envoy (right)");
    }
}

/// A listener that requires a client certificate from `ca`, and an RBAC filter that lets
/// in only `spiffe://cluster.local/ns/default/sa/sleep`.
fn mtls_bootstrap(port: u16, backend: u16, ca: &Ca, server: &pki::Leaf) -> String {
    let transport = json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
            "require_client_certificate": true,
            "common_tls_context": {
                "tls_certificates": [{
                    "certificate_chain": { "inline_string": server.cert_pem },
                    "private_key": { "inline_string": server.key_pem },
                }],
                "validation_context": { "trusted_ca": { "inline_string": ca.pem() } },
            },
        },
    });
    let rbac = json!({
        "name": "envoy.filters.http.rbac",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC",
            "rules": { "action": "ALLOW", "policies": { "sleep": {
                "permissions": [{ "any": true }],
                "principals": [{ "authenticated": { "principal_name": { "exact": pki::spiffe("sleep") } } }],
            } } },
        },
    });
    format!(
        r#"
static_resources:
  listeners:
  - name: mtls
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - transport_socket: {transport}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: inbound
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{{ match: {{ prefix: "/" }}, route: {{ cluster: backend }} }}]
          http_filters:
          - {rbac}
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

#[tokio::test(flavor = "multi_thread")]
async fn authenticated_principal_is_the_spiffe_uri_san_like_envoy() {
    let ca = Ca::new("mesh root");
    let server = ca.leaf(&pki::spiffe("server"));
    let backend = backends::healthy("backend").await;
    let pair = Pair::start(|port| mtls_bootstrap(port, backend.port, &ca, &server)).await;
    let sleep = ca.leaf(&pki::spiffe("sleep"));
    let other = ca.leaf(&pki::spiffe("other"));
    for (name, port) in pair.ports() {
        let before = backend.seen.requests();
        let allowed = tls_support::tls_get(port, tls_support::client_config(&ca, Some(&sleep), &["http/1.1"])).await;
        assert_eq!(allowed, Ok((200, "backend".to_owned())), "{name}: sleep is let in");
        let denied = tls_support::tls_get(port, tls_support::client_config(&ca, Some(&other), &["http/1.1"])).await;
        assert_eq!(denied, Ok((403, "RBAC: access denied".to_owned())), "{name}: other is not");
        assert_eq!(backend.seen.requests() - before, 1, "{name}: only sleep's request reached the backend");
    }
    if let Some(envoy) = &pair.envoy {
        let want = envoy_rbac_stats(envoy.admin).await;
        assert_eq!(outrider_rbac_stats(&pair).await, want);
    } else {
        skipped(Tool::Envoy, "the Envoy half of the mTLS RBAC comparison", "envoy not found");
    }
}
