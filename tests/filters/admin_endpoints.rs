//! The admin endpoints side by side with Envoy 1.40: the same bootstrap (a listener with a
//! TLS chain and a plaintext chain, a static cluster, a cluster that originates TLS to the
//! proxy's own TLS chain, static secrets) starts both, the same requests go through each,
//! and then
//! - `/stats?format=json`, `/listeners?format=json`, `/memory`, `/certs` and `/runtime`
//!   have Envoy's keys and shapes;
//! - every stat Envoy created in the families tools read (per-code `upstream_rq_<code>`,
//!   byte counters, connection ends and lengths, `server.*`, `ssl.*`) exists in Outrider
//!   too, with the same value where the value is deterministic;
//! - `POST /healthcheck/fail` makes the `health_check` filter answer 503 and `/ready`
//!   DRAINING in both, until `POST /healthcheck/ok`.

use crate::common;
use crate::tls_support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use crate::common::skip::{Tool, skipped};
use bytes::Bytes;
use common::WAIT;
use common::backends::{self, Backend};
use common::differential::{Pair, raw_http1};
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::Value;
use tls_support::pki::{self, Ca, Leaf};

/// 404 for `/missing`, 200 otherwise.
async fn backend() -> Backend {
    backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let status = if request.uri().path() == "/missing" { StatusCode::NOT_FOUND } else { StatusCode::OK };
        let mut response = Response::new(Full::new(Bytes::from_static(b"hello")));
        *response.status_mut() = status;
        response
    })
    .await
}

/// A connection manager routing `routes` (then everything else to `backend`).
fn hcm(routes: &str, filters: &str) -> String {
    format!(
        r#"
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts: [{{ name: all, domains: ["*"], routes: [{routes}{{ match: {{ prefix: "/" }}, route: {{ cluster: backend }} }}] }}]
          http_filters:{filters}
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}"#
    )
}

const HEALTH_CHECK: &str = r#"
          - name: envoy.filters.http.health_check
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck
              pass_through_mode: false
              headers: [{ name: ":path", string_match: { exact: "/healthz" } }]"#;

/// `/tls` on the plaintext chain goes through `loop_tls`, which originates TLS to the
/// listener's own TLS chain, whose manager routes it to `backend`.
const TO_LOOP_TLS: &str = r#"{ match: { prefix: "/tls" }, route: { cluster: loop_tls } }, "#;

fn loop_tls_cluster(port: u16, ca: &Ca) -> String {
    let roots = serde_json::to_string(&ca.pem()).unwrap();
    format!(
        r#"{}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: server.test
        common_tls_context: {{ validation_context: {{ trusted_ca: {{ inline_string: {roots} }} }} }}"#,
        common::differential::static_cluster("loop_tls", port)
    )
}

fn bootstrap(port: u16, backend: u16, leaf: &Leaf, ca: &Ca) -> String {
    let inline = |pem: &str| serde_json::to_string(pem).unwrap();
    format!(
        r#"
static_resources:
  secrets:
  - name: default
    tls_certificate: {{ certificate_chain: {{ inline_string: {chain} }}, private_key: {{ inline_string: {key} }} }}
  - name: ROOTCA
    validation_context: {{ trusted_ca: {{ inline_string: {roots} }} }}
  listeners:
  - name: http
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    listener_filters:
    - name: envoy.filters.listener.tls_inspector
      typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector }}
    filter_chains:
    - filter_chain_match: {{ transport_protocol: tls }}
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificate_sds_secret_configs: [{{ name: default }}]
            validation_context_sds_secret_config: {{ name: ROOTCA }}
      filters:{tls_hcm}
    - filters:{plain_hcm}
  clusters:{cluster}{loop_tls}
"#,
        chain = inline(&leaf.cert_pem),
        key = inline(&leaf.key_pem),
        roots = inline(&ca.pem()),
        tls_hcm = hcm("", ""),
        plain_hcm = hcm(TO_LOOP_TLS, HEALTH_CHECK),
        cluster = common::differential::static_cluster("backend", backend),
        loop_tls = loop_tls_cluster(port, ca),
    )
}

/// One admin request over HTTP/1.1 (Envoy answers with chunked bodies): (status, body).
async fn admin(address: SocketAddr, method: &str, path: &str) -> (u16, String) {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "admin")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = tokio::time::timeout(WAIT, sender.send_request(request)).await.unwrap().unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn admin_get(address: SocketAddr, path: &str) -> (u16, String) {
    admin(address, "GET", path).await
}

async fn admin_post(address: SocketAddr, path: &str) -> u16 {
    admin(address, "POST", path).await.0
}

async fn admin_json(address: SocketAddr, path: &str) -> Value {
    let (status, body) = admin_get(address, path).await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path} is not JSON ({e}): {body}"))
}

fn keys(value: &Value) -> BTreeSet<String> {
    value.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}

/// The stat families of this test, with the listener's port written `PORT`.
fn families(text: &str, port: u16) -> BTreeMap<String, String> {
    let family = regex::Regex::new(concat!(
        r"^(cluster\.(backend|loop_tls)\.(upstream_rq_\d{3}|upstream_cx_(rx|tx)_bytes_total|upstream_cx_destroy|upstream_cx_length_ms)",
        r"|cluster\.loop_tls\.ssl\.(handshake|connection_error|no_certificate)",
        r"|http\.ingress\.downstream_cx_((rx|tx)_bytes_total|destroy|length_ms)",
        r"|listener\.127\.0\.0\.1_PORT\.(downstream_cx_destroy|downstream_cx_length_ms|ssl\.(handshake|connection_error|no_certificate))",
        r"|server\.(state|uptime|memory_allocated|memory_heap_size|memory_physical_size|live|concurrency|total_connections|version|days_until_first_cert_expiring))$",
    ))
    .unwrap();
    text.lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.replace(&format!("_{port}."), "_PORT."), value.to_owned()))
        .filter(|(name, _)| family.is_match(name))
        .collect()
}

async fn traffic(port: u16, ca: &Ca) {
    for path in ["/a", "/b", "/missing", "/tls"] {
        let (status, _, _) =
            raw_http1(port, &format!("GET {path} HTTP/1.1\r\nhost: app\r\nconnection: close\r\n\r\n")).await;
        assert_eq!(status, if path == "/missing" { 404 } else { 200 }, "{path}");
    }
    let (status, _) = tls_support::tls_get(port, tls_support::client_config(ca, None, &["http/1.1"])).await.unwrap();
    assert_eq!(status, 200);
}

async fn health(port: u16) -> u16 {
    raw_http1(port, "GET /healthz HTTP/1.1\r\nhost: app\r\nconnection: close\r\n\r\n").await.0
}

#[tokio::test]
async fn admin_shapes_and_stats_match_envoy() {
    let backend = backend().await;
    let ca = Ca::new("admin-test-ca");
    let leaf = ca.leaf(&pki::spiffe("server"));
    let pair = Pair::start(|port| bootstrap(port, backend.port, &leaf, &ca)).await;
    let mut admins = vec![("outrider", pair.outrider.admin_address, pair.outrider_port)];
    if let Some(envoy) = &pair.envoy {
        admins.insert(0, ("envoy", envoy.admin, pair.envoy_port));
    }
    for (_, _, port) in &admins {
        traffic(*port, &ca).await;
    }

    let mut seen = Vec::new();
    for (who, admin, port) in &admins {
        let stats = admin_json(*admin, "/stats?format=json").await;
        assert_eq!(keys(&stats), BTreeSet::from(["stats".to_owned()]), "{who}");
        let entries = stats["stats"].as_array().unwrap();
        let histograms = entries.iter().find(|e| e.get("histograms").is_some()).expect("a histograms element");
        assert_eq!(
            keys(&histograms["histograms"]),
            ["computed_quantiles", "supported_quantiles"].map(String::from).into()
        );
        let supported = &histograms["histograms"]["supported_quantiles"];
        assert_eq!(supported.as_array().map(Vec::len), Some(10), "{who}: {supported}");
        let computed = &histograms["histograms"]["computed_quantiles"][0];
        assert_eq!(keys(computed), ["name", "values"].map(String::from).into(), "{who}");
        assert_eq!(keys(&computed["values"][0]), ["cumulative", "interval"].map(String::from).into(), "{who}");
        for entry in entries.iter().filter(|e| e.get("histograms").is_none()) {
            assert_eq!(keys(entry), ["name", "value"].map(String::from).into(), "{who}: {entry}");
        }

        let listeners = admin_json(*admin, "/listeners?format=json").await;
        let status = &listeners["listener_statuses"][0];
        assert_eq!(keys(status), ["local_address", "name"].map(String::from).into(), "{who}: {listeners}");
        assert_eq!(status["local_address"]["socket_address"]["port_value"], *port, "{who}");
        let (_, text) = admin_get(*admin, "/listeners").await;
        assert_eq!(text.trim(), format!("http::127.0.0.1:{port}"), "{who}");

        let memory = admin_json(*admin, "/memory").await;
        let expected = [
            "allocated",
            "heap_size",
            "pageheap_free",
            "pageheap_unmapped",
            "total_physical_bytes",
            "total_thread_cache",
        ];
        assert_eq!(keys(&memory), expected.map(String::from).into(), "{who}: {memory}");
        assert!(memory["allocated"].as_str().unwrap().parse::<u64>().unwrap() > 0, "{who}: {memory}");

        let certs = admin_json(*admin, "/certs").await;
        let all: Vec<&Value> = certs["certificates"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| {
                assert_eq!(keys(c), ["ca_cert", "cert_chain"].map(String::from).into(), "{who}: {c}");
                c["ca_cert"].as_array().unwrap().iter().chain(c["cert_chain"].as_array().unwrap())
            })
            .collect();
        let chain = all.iter().find(|c| c["subject_alt_names"].as_array().is_some_and(|s| !s.is_empty())).unwrap();
        let expected =
            ["days_until_expiration", "expiration_time", "path", "serial_number", "subject_alt_names", "valid_from"];
        assert_eq!(keys(chain), expected.map(String::from).into(), "{who}: {chain}");
        assert_eq!(chain["path"], "<inline>", "{who}");
        assert!(chain["subject_alt_names"].as_array().unwrap().contains(&serde_json::json!({ "dns": "server.test" })));
        let mut cert_facts: Vec<(String, String)> =
            all.iter().map(|c| (c["serial_number"].to_string(), c["expiration_time"].to_string())).collect();
        cert_facts.sort();

        let runtime = admin_json(*admin, "/runtime").await;
        assert_eq!(keys(&runtime), ["entries", "layers"].map(String::from).into(), "{who}");

        let (_, text) = admin_get(*admin, "/stats").await;
        seen.push((*who, families(&text, *port), cert_facts));
    }

    let (_, outrider, outrider_certs) = seen.last().unwrap();
    for name in ["cluster.backend.upstream_rq_200", "cluster.backend.upstream_rq_404", "server.total_connections"] {
        assert!(outrider.contains_key(name), "{name} missing in {outrider:#?}");
    }
    assert_eq!(outrider["cluster.backend.upstream_rq_200"], "4", "two plaintext, one looped, one TLS request");
    assert_eq!(outrider["cluster.loop_tls.upstream_rq_200"], "1");
    assert_eq!(outrider["cluster.loop_tls.ssl.handshake"], "1");
    assert_eq!(outrider["listener.127.0.0.1_PORT.ssl.handshake"], "2", "the loop's and the client's");
    assert_eq!(outrider["listener.127.0.0.1_PORT.ssl.no_certificate"], "2");
    if let [(_, envoy, envoy_certs), _] = seen.as_slice() {
        let missing: Vec<&String> = envoy.keys().filter(|name| !outrider.contains_key(*name)).collect();
        assert!(missing.is_empty(), "Envoy has, Outrider lacks: {missing:?}");
        for name in [
            "cluster.backend.upstream_rq_200",
            "cluster.backend.upstream_rq_404",
            "cluster.loop_tls.upstream_rq_200",
            "cluster.loop_tls.ssl.handshake",
            "listener.127.0.0.1_PORT.ssl.handshake",
            "listener.127.0.0.1_PORT.ssl.no_certificate",
            "server.concurrency",
            "server.live",
        ] {
            assert_eq!(envoy.get(name), outrider.get(name), "{name}");
        }
        assert_eq!(envoy_certs, outrider_certs, "the same certificates, serials and expirations");
    } else {
        skipped(Tool::Envoy, "the comparison with Envoy", "envoy not found");
    }
}

#[tokio::test]
async fn healthcheck_fail_and_ok_as_envoy() {
    let backend = backend().await;
    let ca = Ca::new("health-test-ca");
    let leaf = ca.leaf(&pki::spiffe("server"));
    let pair = Pair::start(|port| bootstrap(port, backend.port, &leaf, &ca)).await;
    let mut admins = vec![("outrider", pair.outrider.admin_address, pair.outrider_port)];
    if let Some(envoy) = &pair.envoy {
        admins.insert(0, ("envoy", envoy.admin, pair.envoy_port));
    }
    for (who, admin, port) in admins {
        assert_eq!(health(port).await, 200, "{who}");
        let (status, _) = admin_get(admin, "/healthcheck/fail").await;
        assert_eq!(status, 405, "{who}: POST only");
        assert_eq!(admin_post(admin, "/healthcheck/fail").await, 200, "{who}");
        assert_eq!(health(port).await, 503, "{who}");
        let (status, body) = admin_get(admin, "/ready").await;
        assert_eq!((status, body.trim()), (503, "DRAINING"), "{who}");
        let (_, stats) = admin_get(admin, "/stats?filter=^server%5C.live$").await;
        assert_eq!(stats.trim(), "server.live: 0", "{who}");
        assert_eq!(admin_post(admin, "/healthcheck/ok").await, 200, "{who}");
        assert_eq!(health(port).await, 200, "{who}");
        let (status, _) = admin_get(admin, "/ready").await;
        assert_eq!(status, 200, "{who}");
        assert_eq!(backend.seen.requests(), 0, "{who}: health checks are answered by the proxy");
    }
}

#[tokio::test]
async fn index_help_usedonly_and_reset_counters() {
    let backend = backend().await;
    let ca = Ca::new("index-test-ca");
    let leaf = ca.leaf(&pki::spiffe("server"));
    let pair = Pair::start(|port| bootstrap(port, backend.port, &leaf, &ca)).await;
    let admin = pair.outrider.admin_address;
    traffic(pair.outrider_port, &ca).await;

    let (status, index) = admin_get(admin, "/").await;
    assert_eq!(status, 200);
    let (_, help) = admin_get(admin, "/help").await;
    for endpoint in ["/certs", "/listeners", "/memory", "/reset_counters", "/healthcheck/fail", "/runtime", "/stats"] {
        assert!(index.contains(&format!("href=\"{endpoint}\"")), "{endpoint} not on the index:\n{index}");
        assert!(help.contains(&format!("  {endpoint}: ")), "{endpoint} not in /help:\n{help}");
    }

    let (_, all) = admin_get(admin, "/stats").await;
    let (_, used) = admin_get(admin, "/stats?usedonly").await;
    assert!(all.contains("cluster.backend.upstream_rq_retry: 0"), "{all}");
    assert!(!used.contains("upstream_rq_retry:"), "{used}");
    assert!(used.contains("cluster.backend.upstream_rq_200: 4"), "{used}");
    let (_, filtered) = admin_get(admin, "/stats?usedonly&filter=backend%5C.upstream_rq_2").await;
    assert_eq!(filtered.trim(), "cluster.backend.upstream_rq_200: 4\ncluster.backend.upstream_rq_2xx: 4");
    let (status, _) = admin_get(admin, "/stats?format=xml").await;
    assert_eq!(status, 400);

    assert_eq!(admin_post(admin, "/reset_counters").await, 200);
    let (_, after) = admin_get(admin, "/stats?filter=backend%5C.upstream_rq_200").await;
    assert_eq!(after.trim(), "cluster.backend.upstream_rq_200: 0");
    let (_, gauges) = admin_get(admin, "/stats?filter=^server%5C.concurrency$").await;
    assert_eq!(gauges.trim(), "server.concurrency: 1", "gauges keep their values");
}
