//! `stats_config.stats_matcher`: a stat the matcher rejects is never created. Istio's
//! default inclusion list (its bootstrap template's prefixes, suffixes and regex) is the
//! reference, and the same bootstrap runs in Envoy 1.40 to show both keep the same stats;
//! per-endpoint series exist only where `track_cluster_stats.per_endpoint_stats` asks.

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;

use crate::common::skip::{Tool, skipped};
use bytes::Bytes;
use common::WAIT;
use common::backends;
use common::differential::{Pair, raw_http1, static_cluster};
use http_body_util::Full;
use outrider::config::bootstrap::{Bootstrap, BootstrapError};
use outrider::config::stats::StatsMatcher;
use outrider::telemetry::{Scope, Stats};

/// Istio's sidecar inclusion list as its bootstrap template renders it by default
/// (`requiredEnvoyStatsMatcherInclusionPrefixes`, the RBAC suffixes, the route regex, and
/// the template's own `reporter=`, `component` and `istio` prefixes), with its tag setup.
const ISTIO_STATS_CONFIG: &str = r#"
stats_config:
  use_all_default_tags: false
  stats_tags:
  - { tag_name: cluster_name, regex: "^cluster\\.((.+?(\\..+?\\.svc\\.cluster\\.local)?)\\.)" }
  - { tag_name: response_code, regex: "_rq(_(\\d{3}))$" }
  stats_matcher:
    inclusion_list:
      patterns:
      - prefix: "reporter="
      - prefix: cluster_manager
      - prefix: listener_manager
      - prefix: server
      - prefix: cluster.xds-grpc
      - prefix: wasm
      - suffix: rbac.allowed
      - suffix: rbac.denied
      - suffix: shadow_allowed
      - suffix: shadow_denied
      - safe_regex: { regex: "vhost\\..*\\.route\\..*" }
      - prefix: component
      - prefix: istio
"#;

fn bootstrap(port: u16, backend: u16, stats_config: &str, cluster_extra: &str) -> String {
    format!(
        r#"{stats_config}
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
            virtual_hosts: [{{ name: all, domains: ["*"], routes: [{{ match: {{ prefix: "/" }}, route: {{ cluster: backend }} }}] }}]
          http_filters:
          - name: envoy.filters.http.rbac
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
              rules: {{ action: ALLOW, policies: {{ all: {{ permissions: [{{ any: true }}], principals: [{{ any: true }}] }} }} }}
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:{backend_cluster}{cluster_extra}{xds}
"#,
        backend_cluster = static_cluster("backend", backend),
        xds = static_cluster("xds-grpc", backend),
    )
}

async fn stat_names(admin: SocketAddr) -> BTreeSet<String> {
    let (status, body) = admin_get(admin, "/stats").await;
    assert_eq!(status, 200);
    body.lines().filter_map(|l| l.split_once(": ")).map(|(name, _)| name.to_owned()).collect()
}

/// One admin GET over HTTP/1.1 (Envoy answers with chunked bodies): (status, body).
async fn admin_get(address: SocketAddr, path: &str) -> (u16, String) {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::get(path).header("host", "admin").body(Full::new(Bytes::new())).unwrap();
    let response = tokio::time::timeout(WAIT, sender.send_request(request)).await.unwrap().unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn traffic(port: u16) {
    for _ in 0..3 {
        let (status, _, _) = raw_http1(port, "GET / HTTP/1.1\r\nhost: app\r\nconnection: close\r\n\r\n").await;
        assert_eq!(status, 200);
    }
}

#[tokio::test]
async fn istios_inclusion_list_keeps_the_same_stats_as_envoy() {
    let backend = backends::healthy("backend").await;
    let pair = Pair::start(|port| bootstrap(port, backend.port, ISTIO_STATS_CONFIG, "")).await;
    let mut admins = vec![("outrider", pair.outrider.admin_address, pair.outrider_port)];
    if let Some(envoy) = &pair.envoy {
        admins.insert(0, ("envoy", envoy.admin, pair.envoy_port));
    }
    let mut kept = Vec::new();
    for (who, admin, port) in &admins {
        traffic(*port).await;
        let names = stat_names(*admin).await;
        for name in
            ["server.live", "server.state", "server.uptime", "server.memory_allocated", "http.ingress.rbac.allowed"]
        {
            assert!(names.contains(name), "{who}: {name} missing from {names:#?}");
        }
        assert!(names.iter().any(|n| n.starts_with("cluster.xds-grpc.")), "{who}: {names:#?}");
        let rejected: Vec<&String> = names
            .iter()
            .filter(|n| {
                n.starts_with("cluster.backend.")
                    || n.starts_with("http.ingress.downstream")
                    || n.starts_with("listener.127")
            })
            .collect();
        assert!(rejected.is_empty(), "{who} kept stats the inclusion list rejects: {rejected:?}");
        let (_, prometheus) = admin_get(*admin, "/stats/prometheus").await;
        assert!(!prometheus.contains("envoy_cluster_name=\"backend\""), "{who}: {prometheus}");
        kept.push(names);
    }
    let outrider = kept.last().unwrap();
    let matcher = Bootstrap::parse(&bootstrap(1, 2, ISTIO_STATS_CONFIG, "")).unwrap().stats.matcher;
    let outside: Vec<&String> = outrider.iter().filter(|n| matcher.rejects(n)).collect();
    assert!(outside.is_empty(), "Outrider created stats its matcher rejects: {outside:?}");
    if let [envoy, outrider] = kept.as_slice() {
        // Every Envoy stat Outrider has, it has under the same matcher; and the stats
        // Outrider kept are all stats Envoy kept (Outrider has fewer stats overall).
        let only_outrider: Vec<&String> = outrider.difference(envoy).collect();
        assert!(only_outrider.is_empty(), "kept by Outrider, not by Envoy: {only_outrider:?}");
    } else {
        skipped(Tool::Envoy, "the comparison with Envoy", "envoy not found");
    }
}

#[tokio::test]
async fn exclusion_list_and_reject_all() {
    let backend = backends::healthy("backend").await;
    let excluding = r#"
stats_config:
  stats_matcher: { exclusion_list: { patterns: [{ prefix: "cluster.backend." }, { suffix: "_bytes_total" }] } }"#;
    let pair = Pair::start(|port| bootstrap(port, backend.port, excluding, "")).await;
    traffic(pair.outrider_port).await;
    let names = stat_names(pair.outrider.admin_address).await;
    assert!(names.contains("http.ingress.downstream_rq_total"), "{names:#?}");
    assert!(names.contains("cluster.xds-grpc.upstream_rq_total"), "{names:#?}");
    assert!(!names.iter().any(|n| n.starts_with("cluster.backend.") || n.ends_with("_bytes_total")), "{names:#?}");

    let rejecting = "\nstats_config: { stats_matcher: { reject_all: true } }";
    let pair = Pair::start(|port| bootstrap(port, backend.port, rejecting, "")).await;
    traffic(pair.outrider_port).await;
    let (status, body) = admin_get(pair.outrider.admin_address, "/stats").await;
    assert_eq!((status, body.as_str()), (200, ""), "no stat exists");
    let (_, prometheus) = admin_get(pair.outrider.admin_address, "/stats/prometheus").await;
    assert_eq!(prometheus, "");
}

#[test]
fn an_invalid_pattern_is_refused_with_its_path() {
    let config = r#"
stats_config:
  stats_matcher: { inclusion_list: { patterns: [{ prefix: server }, { safe_regex: { regex: "(" } }] } }"#;
    match Bootstrap::parse(&bootstrap(1, 2, config, "")) {
        Err(BootstrapError::Invalid(error)) => {
            assert_eq!(
                error.path(),
                "stats_config.stats_matcher.inclusion_list.patterns[1].safe_regex.regex",
                "{error}"
            );
        }
        other => panic!("accepted: {other:?}"),
    }
    let warned = Bootstrap::parse(&bootstrap(1, 2, ISTIO_STATS_CONFIG, "")).unwrap();
    let paths: Vec<&str> = warned.ignored.iter().map(|i| i.path.as_str()).collect();
    assert!(paths.contains(&"stats_config.stats_tags"), "{paths:?}");
}

#[test]
fn istios_own_metric_names_pass_its_inclusion_list() {
    let matcher = Bootstrap::parse(&bootstrap(1, 2, ISTIO_STATS_CONFIG, "")).unwrap().stats.matcher;
    let stats = Stats::with_matcher(move |flat| matcher.rejects(flat));
    let istio = "reporter=.=destination;.;source_workload=.=a;.;istio_requests_total";
    let name = outrider::telemetry::StatName {
        flat: istio.to_owned(),
        family: "istio_requests_total".to_owned(),
        labels: Vec::new(),
    };
    let kept = stats.counter(name);
    let dropped =
        stats.counter(Scope::envoy().child("cluster").tagged("envoy_cluster_name", "a").name("upstream_rq_total"));
    kept.inc();
    dropped.inc();
    let names: Vec<String> = stats.samples().into_iter().map(|(n, _)| n.flat).collect();
    assert_eq!(names, [istio]);
    assert!(!matches!(StatsMatcher::AcceptAll, StatsMatcher::RejectAll));
}

#[tokio::test]
async fn per_endpoint_series_only_where_the_cluster_asks() {
    let backend = backends::healthy("backend").await;
    let tracked =
        format!("{}\n    track_cluster_stats: {{ per_endpoint_stats: true }}", static_cluster("tracked", backend.port));
    let pair = Pair::start(|port| bootstrap(port, backend.port, "", &tracked)).await;
    traffic(pair.outrider_port).await;
    let admin = pair.outrider.admin_address;
    let names = stat_names(admin).await;
    let endpoint = |cluster: &str| format!("outrider.cluster.{cluster}.endpoint.127.0.0.1:{}.", backend.port);
    assert!(names.iter().any(|n| n.starts_with(&endpoint("tracked"))), "{names:#?}");
    assert!(!names.iter().any(|n| n.starts_with(&endpoint("backend"))), "{names:#?}");
    let (_, prometheus) = admin_get(admin, "/stats/prometheus").await;
    assert!(!prometheus.contains("envoy_cluster_name=\"backend\",outrider_endpoint"), "{prometheus}");
    // `/clusters` shows every endpoint whatever the cluster exports.
    let (_, clusters) = admin_get(admin, "/clusters").await;
    assert!(clusters.contains(&format!("backend::127.0.0.1:{}::rq_success::3", backend.port)), "{clusters}");
}

/// The `le` bounds (without `+Inf`) of `family` for the cluster or prefix `scope`, as
/// numbers.
fn bucket_bounds(prometheus: &str, family: &str, label: &str) -> Vec<f64> {
    let line = regex::Regex::new(&format!(r#"^{family}_bucket\{{(.*)\}} "#)).unwrap();
    let le = regex::Regex::new(r#"le="([^"]+)""#).unwrap();
    prometheus
        .lines()
        .filter_map(|l| line.captures(l))
        .filter(|c| c[1].contains(label))
        .filter_map(|c| le.captures(&c[1]).map(|l| l[1].to_owned()))
        .filter(|le| le != "+Inf")
        .map(|le| le.parse().unwrap())
        .collect()
}

#[tokio::test]
async fn histogram_bucket_settings_as_envoy() {
    let backend = backends::healthy("backend").await;
    let settings = r#"
stats_config:
  histogram_bucket_settings:
  - { match: { prefix: "cluster.backend.upstream_rq_time" }, buckets: [1000, 1, 5] }
  - { match: { suffix: "_time" }, buckets: [2, 20] }"#;
    let pair = Pair::start(|port| bootstrap(port, backend.port, settings, "")).await;
    let mut admins = vec![("outrider", pair.outrider.admin_address, pair.outrider_port)];
    if let Some(envoy) = &pair.envoy {
        admins.insert(0, ("envoy", envoy.admin, pair.envoy_port));
    }
    let mut seen = Vec::new();
    for (who, admin, port) in admins {
        traffic(port).await;
        let (_, prometheus) = admin_get(admin, "/stats/prometheus").await;
        let rq_time = bucket_bounds(&prometheus, "envoy_cluster_upstream_rq_time", "envoy_cluster_name=\"backend\"");
        assert_eq!(rq_time, [1.0, 5.0, 1000.0], "{who}: the first matching setting, sorted");
        let downstream =
            bucket_bounds(&prometheus, "envoy_http_downstream_rq_time", "envoy_http_conn_manager_prefix=\"ingress\"");
        assert_eq!(downstream, [2.0, 20.0], "{who}: the second setting");
        let length =
            bucket_bounds(&prometheus, "envoy_cluster_upstream_cx_length_ms", "envoy_cluster_name=\"backend\"");
        seen.push(length);
    }
    let outrider_default = seen.last().unwrap();
    assert_eq!(outrider_default.len(), 19, "Envoy's default buckets where no setting matches");
    if let [envoy, outrider] = seen.as_slice() {
        assert_eq!(envoy, outrider, "the same default buckets");
    }
}
