//! Stats, admin views and access logs of a running Outrider: Envoy's stat names in
//! `/stats`, a valid Prometheus exposition in `/stats/prometheus`, per-endpoint detail in
//! `/clusters`, `/server_info`, `/logging`, and one access log line per request with
//! Envoy's response flags.

use crate::common;

use std::collections::HashMap;

use crate::common::lab::free_port;
use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use outrider::config::ResourceType;
use outrider::core::shutdown;
use outrider::testkit::backends::{BackendBehaviour, OrcaMode, serve_backend};

struct Lab {
    _control_plane: ControlPlane,
    outrider: outrider::app::Running,
    proxy_port: u16,
    _backends: shutdown::Trigger,
}

/// Outrider in front of `backends` (and of `dead` closed ports), with `hcm_extra` added to
/// the connection manager and `route_extra` to the route action.
async fn lab(backends: Vec<BackendBehaviour>, dead: &[u32], hcm_extra: &str, route_extra: &str) -> Lab {
    let (trigger, signal) = shutdown::channel();
    let mut ports = Vec::new();
    for behaviour in backends {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        ports.push(listener.local_addr().unwrap().port() as u32);
        tokio::spawn(serve_backend(listener, behaviour, signal.clone()));
    }
    ports.extend_from_slice(dead);
    let proxy_port = free_port();
    let control_plane = ControlPlane::start().await;
    // Per-endpoint series are exported only when the cluster asks, as in Envoy.
    let cluster = format!("{CLUSTER}track_cluster_stats: {{ per_endpoint_stats: true }}\n");
    control_plane.set(ResourceType::Cluster, &[&cluster]);
    control_plane.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &ports)]);
    let listener = LISTENER
        .replace("port_value: 0 ", &format!("port_value: {proxy_port} "))
        .replace("stat_prefix: http\n", &format!("stat_prefix: http\n{hcm_extra}"));
    control_plane.set(ResourceType::Listener, &[&listener]);
    let route = ROUTE.replace("route: { cluster: backend }", &format!("route: {{ cluster: backend{route_extra} }}"));
    control_plane.set(ResourceType::RouteConfiguration, &[&route]);
    let outrider = outrider::app::start_with(bootstrap(control_plane.port, "GRPC"), 1).await.unwrap();
    wait_snapshot(&outrider.store, |s| s.ready).await;
    let mut published = outrider.balancers.subscribe();
    while outrider.balancers.get("backend").is_none_or(|lb| lb.hosts().len() != ports.len()) {
        published.changed().await.unwrap();
    }
    outrider.listeners_ready().await;
    Lab { _control_plane: control_plane, outrider, proxy_port, _backends: trigger }
}

async fn get(port: u16, path: &str) -> u16 {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::get(path)
        .header("host", "example.com")
        .header("user-agent", "observability-test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = tokio::time::timeout(WAIT, sender.send_request(request)).await.unwrap().unwrap();
    let status = response.status().as_u16();
    response.into_body().collect().await.unwrap();
    status
}

async fn post(address: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("POST {path} HTTP/1.1\r\nhost: admin\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(WAIT, stream.read_to_string(&mut response)).await.unwrap().unwrap();
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
}

/// `/stats` as a map from flat name to value text.
fn stats_map(text: &str) -> HashMap<String, String> {
    text.lines().filter_map(|l| l.split_once(": ")).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

/// The text exposition format, line by line: `# TYPE` lines, then samples of that family
/// only (a family's samples are contiguous), names and labels well-formed, values floats.
fn check_exposition(text: &str) {
    let name = regex::Regex::new(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$").unwrap();
    let sample = regex::Regex::new(
        r#"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})? (?P<value>\S+)$"#,
    )
    .unwrap();
    let mut family: Option<(String, String)> = None;
    let mut seen = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (metric, kind) = rest.split_once(' ').unwrap();
            assert!(name.is_match(metric), "bad family name: {line}");
            assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "{line}");
            assert!(seen.insert(metric.to_owned()), "family {metric} appears twice");
            family = Some((metric.to_owned(), kind.to_owned()));
            continue;
        }
        let caps = sample.captures(line).unwrap_or_else(|| panic!("malformed sample line: {line:?}"));
        let metric = &caps[1];
        let value = &caps["value"];
        assert!(value == "+Inf" || value == "-Inf" || value == "NaN" || value.parse::<f64>().is_ok(), "{line}");
        let (family, kind) = family.as_ref().expect("a sample before any # TYPE");
        let ok = match kind.as_str() {
            "histogram" => [format!("{family}_bucket"), format!("{family}_sum"), format!("{family}_count")]
                .contains(&metric.to_owned()),
            _ => metric == family,
        };
        assert!(ok, "sample {metric} outside its family {family}");
    }
}

#[tokio::test]
async fn stats_use_envoys_names_and_prometheus_exposition_is_valid() {
    let backend = BackendBehaviour { orca: Some(OrcaMode::TextHeader), ..BackendBehaviour::new("a") };
    let lab = lab(vec![backend, BackendBehaviour::new("b")], &[], "", "").await;
    for _ in 0..6 {
        assert_eq!(get(lab.proxy_port, "/").await, 200);
    }
    let admin = lab.outrider.admin_address;

    let (status, text) = admin_get(admin, "/stats").await;
    assert_eq!(status, 200);
    let stats = stats_map(&text);
    let stat = |name: &str| stats.get(name).unwrap_or_else(|| panic!("no {name} in\n{text}")).clone();
    assert_eq!(stat("cluster.backend.upstream_rq_total"), "6");
    assert_eq!(stat("cluster.backend.upstream_rq_2xx"), "6");
    assert_eq!(stat("cluster.backend.upstream_rq_completed"), "6");
    assert_eq!(stat("cluster.backend.upstream_rq_active"), "0");
    assert_eq!(stat("cluster.backend.membership_healthy"), "2");
    assert_eq!(stat("cluster.backend.membership_total"), "2");
    assert_eq!(stat("cluster.backend.lb_healthy_panic"), "0");
    assert!(stat("cluster.backend.upstream_cx_total").parse::<u64>().unwrap() >= 1);
    assert!(stat("cluster.backend.upstream_rq_time").starts_with("P0(nan,"), "{text}");
    assert_eq!(stat("cluster.backend.update_success"), "1");
    assert_eq!(stat("http.http.downstream_rq_total"), "6");
    assert_eq!(stat("http.http.downstream_rq_2xx"), "6");
    let listener = format!("listener.127.0.0.1_{}.downstream_cx_total", lab.proxy_port);
    assert_eq!(stat(&listener), "6");
    assert_eq!(stat("cluster_manager.cds.update_success"), "1");
    assert_eq!(stat("listener_manager.lds.update_success"), "1");
    assert!(stat("cluster_manager.cds.version_text").starts_with('"'));
    assert_eq!(stat("control_plane.connected_state"), "1");
    assert_eq!(stat("server.state"), "0");
    let endpoint = |port: &str, name: &str| format!("outrider.cluster.backend.endpoint.127.0.0.1:{port}.{name}");
    let hosts = lab.outrider.balancers.get("backend").unwrap();
    let ports: Vec<String> =
        hosts.hosts().iter().map(|h| h.address().to_string().rsplit(':').next().unwrap().to_owned()).collect();
    assert_eq!(stat(&endpoint(&ports[0], "in_flight")), "0");
    assert_eq!(stat(&endpoint(&ports[0], "rq_success")), "3");
    assert!(stats.contains_key(&endpoint(&ports[0], "ewma_latency_seconds")), "{text}");
    assert!(stats.contains_key(&endpoint(&ports[0], "utilization")), "backend a reports ORCA: {text}");

    let (_, filtered) = admin_get(admin, "/stats?filter=backend%5C.upstream_rq_total").await;
    assert_eq!(filtered.trim(), "cluster.backend.upstream_rq_total: 6");

    let (status, exposition) = admin_get(admin, "/stats/prometheus").await;
    assert_eq!(status, 200);
    check_exposition(&exposition);
    let scrape = prometheus_parse::Scrape::parse(exposition.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let find = |metric: &str, labels: &[(&str, &str)]| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
            .unwrap_or_else(|| panic!("no {metric} {labels:?} in\n{exposition}"))
            .value
            .clone()
    };
    let cluster = ("envoy_cluster_name", "backend");
    assert_eq!(find("envoy_cluster_upstream_rq_total", &[cluster]), prometheus_parse::Value::Counter(6.0));
    assert_eq!(
        find("envoy_cluster_upstream_rq_xx", &[cluster, ("envoy_response_code_class", "2")]),
        prometheus_parse::Value::Counter(6.0)
    );
    match find("envoy_cluster_upstream_rq_time", &[cluster]) {
        prometheus_parse::Value::Histogram(buckets) => {
            assert_eq!(buckets.last().map(|b| b.count), Some(6.0), "{buckets:?}");
        }
        other => panic!("upstream_rq_time is not a histogram: {other:?}"),
    }
    assert_eq!(find("envoy_cluster_membership_healthy", &[cluster]), prometheus_parse::Value::Gauge(2.0));
    assert_eq!(find("envoy_control_plane_connected_state", &[]), prometheus_parse::Value::Gauge(1.0));
    assert!(
        exposition.contains(
            "outrider_cluster_endpoint_in_flight{envoy_cluster_name=\"backend\",outrider_endpoint=\"127.0.0.1:"
        )
    );
    lab.outrider.stop();
}

#[tokio::test]
async fn admin_views_show_endpoints_server_and_logging() {
    let backend = BackendBehaviour { orca: Some(OrcaMode::TextHeader), ..BackendBehaviour::new("a") };
    let lab = lab(vec![backend], &[], "", "").await;
    for _ in 0..3 {
        assert_eq!(get(lab.proxy_port, "/").await, 200);
    }
    let admin = lab.outrider.admin_address;
    let (_, text) = admin_get(admin, "/clusters").await;
    assert!(text.contains("::rq_success::3"), "{text}");
    assert!(text.contains("::rq_active::0"), "{text}");
    assert!(text.contains("::ewma_latency_ms::"), "{text}");
    assert!(text.contains("::last_orca_report::{"), "{text}");
    let (_, json) = admin_get(admin, "/clusters?format=json").await;
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let backend = json["cluster_statuses"].as_array().unwrap().iter().find(|c| c["name"] == "backend").unwrap().clone();
    let host = &backend["host_statuses"][0];
    assert_eq!(host["outrider"]["in_flight"], 0);
    assert_eq!(host["health_status"]["failed_outlier_check"], false);
    assert!(host["outrider"]["utilization"].as_f64().is_some(), "{host}");
    assert!(host["outrider"]["last_orca_report"]["application_utilization"].is_number(), "{host}");

    let (status, info) = admin_get(admin, "/server_info").await;
    assert_eq!(status, 200);
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["state"], "LIVE");
    assert_eq!(info["command_line_options"]["concurrency"], 1);
    assert!(info["version"].as_str().unwrap().starts_with("outrider/"));

    // In-process, the logger belongs to the test harness: `/logging` says so.
    assert_eq!(post(admin, "/logging?level=debug").await.0, 404);
    lab.outrider.stop();
}

#[tokio::test]
async fn access_log_lines_carry_envoys_fields_and_response_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let access_log = format!(
        "      access_log:\n      - name: envoy.access_loggers.file\n        typed_config: {{ \"@type\": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog, path: {} }}\n",
        path.display()
    );
    // One live backend and one closed port; the route retries connect failures once.
    let dead = free_port() as u32;
    let retry = ", retry_policy: { retry_on: connect-failure, num_retries: 1 }";
    let lab = lab(vec![BackendBehaviour::new("a")], &[dead], &access_log, retry).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(get(lab.proxy_port, "/logged").await);
    }
    assert!(statuses.iter().all(|s| *s == 200), "a retry reaches the live backend: {statuses:?}");

    let lines = common::lab::log_lines(&path, 4).await;
    let re = regex::Regex::new(
        r#"^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] "GET /logged HTTP/1\.1" 200 - 0 \d+ \d+ \d+ "-" "observability-test" "[0-9a-f-]{36}" "example\.com" "127\.0\.0\.1:\d+"$"#,
    )
    .unwrap();
    for line in &lines {
        assert!(re.is_match(line), "{line}");
    }
    let (_, text) = admin_get(lab.outrider.admin_address, "/stats").await;
    let stats = stats_map(&text);
    // Every pick of the dead endpoint failed to connect and was retried on the live one.
    let retries: u64 = stats["cluster.backend.upstream_rq_retry"].parse().unwrap();
    assert!(retries >= 1, "{text}");
    assert_eq!(stats["cluster.backend.upstream_cx_connect_fail"], retries.to_string(), "{text}");
    assert_eq!(stats["cluster.backend.upstream_rq_total"], (4 + retries).to_string(), "{text}");
    assert_eq!(stats["cluster.backend.upstream_rq_5xx"], retries.to_string(), "{text}");
    assert_eq!(stats["cluster.backend.upstream_rq_2xx"], "4", "{text}");
    lab.outrider.stop();

    // Only the dead endpoint and no retries: 503 with UF; with a retry left over the same
    // dead host, UF,URX.
    let path2 = dir.path().join("access2.log");
    let access_log = access_log.replace(&path.display().to_string(), &path2.display().to_string());
    let lab = lab_dead_only(dead, &access_log, retry).await;
    assert_eq!(get(lab.proxy_port, "/down").await, 503);
    let lines = common::lab::log_lines(&path2, 1).await;
    assert!(lines[0].contains("\"GET /down HTTP/1.1\" 503 UF,URX "), "{}", lines[0]);
    lab.outrider.stop();
}

async fn lab_dead_only(dead: u32, hcm_extra: &str, route_extra: &str) -> Lab {
    lab(Vec::new(), &[dead], hcm_extra, route_extra).await
}
