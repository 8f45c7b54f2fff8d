//! The adaptive policy chosen for a whole sidecar with Istio's own configuration: a real
//! istiod renders a ServiceEntry's cluster with its default `LEAST_REQUEST`, and the pod's
//! proxy metadata (`ISTIO_META_OUTRIDER_LB: adaptive`, node metadata `OUTRIDER_LB`) has
//! Outrider serve it with the adaptive policy. One of the two endpoints is slow; traffic
//! leaves it, where least request (without the metadata) splits evenly.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;

use super::istiod_file_mode::{Agent, mesh_loop_configs, service_entry, sidecar_bootstrap_with, spread};
use crate::common;
use common::istiod::Istiod;
use common::{admin_get, backends, wait};
use outrider::app;

const HOST: &str = "ratings.default.svc.cluster.local";

/// How long the slow endpoint takes to answer.
const SLOW: Duration = Duration::from_millis(50);

/// A backend answering `name`, after `delay`.
async fn backend(name: &'static str, delay: Duration) -> backends::Backend {
    backends::http(move |_request: http::Request<hyper::body::Incoming>| async move {
        tokio::time::sleep(delay).await;
        http::Response::new(Full::new(Bytes::from_static(name.as_bytes())))
    })
    .await
}

/// The requests each backend answered of `requests` sent one after the other, with the
/// policy `/clusters` says runs and the one `/config_dump` shows received.
async fn run(metadata: &str, requests: usize) -> (BTreeMap<String, usize>, String, String) {
    let binary = Istiod::binary("istiod_adaptive").expect("checked by the caller");
    let (fast, slow) = (backend("fast", Duration::ZERO).await, backend("slow", SLOW).await);
    let port = common::lab::free_port();
    let se = service_entry("ratings", HOST, port, &[(fast.port, "v1"), (slow.port, "v2")]);
    let istiod = Istiod::start(&binary, &[("ratings.yaml", se.as_str())]).await;
    let agent = Agent::start().await;
    let outrider = app::start(sidecar_bootstrap_with(&istiod, &agent, "GRPC", metadata)).await.unwrap();
    wait::until_true("the generated listener serves", async || {
        super::istiod_file_mode::get(port, HOST, "/").await.0 == 200
    })
    .await;
    let cluster = format!("outbound|{port}||{HOST}");
    let (_, clusters) = admin_get(outrider.admin_address, "/clusters").await;
    let running = clusters
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{cluster}::lb_policy::")))
        .unwrap_or_default()
        .to_owned();
    let (_, dump) = admin_get(outrider.admin_address, "/config_dump").await;
    let received = received_policy(&dump, &cluster);
    let seen = spread(port, HOST, "/", requests).await;
    outrider.stop();
    (seen, running, received)
}

/// The `lb_policy` of `cluster` in a config dump (`ROUND_ROBIN`, Envoy's default, when the
/// field is absent).
fn received_policy(dump: &str, cluster: &str) -> String {
    let dump: serde_json::Value = serde_json::from_str(dump).unwrap();
    let found = dump["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|section| section["dynamic_active_clusters"].as_array().into_iter().flatten())
        .find(|c| c["cluster"]["name"] == cluster);
    let found = found.unwrap_or_else(|| panic!("{cluster} is not in the dump"));
    found["cluster"]["lb_policy"].as_str().unwrap_or("ROUND_ROBIN").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_metadata_serves_istios_least_request_with_the_adaptive_policy() {
    if Istiod::binary("istiod_adaptive").is_none() {
        return;
    }
    const REQUESTS: usize = 60;
    let (seen, running, received) = run("    OUTRIDER_LB: adaptive\n", REQUESTS).await;
    println!("adaptive: {seen:?}");
    assert_eq!((received.as_str(), running.as_str()), ("LEAST_REQUEST", "ADAPTIVE"));
    let slow = seen.get("200 slow").copied().unwrap_or(0);
    assert_eq!(seen.get("200 fast").copied().unwrap_or(0) + slow, REQUESTS, "{seen:?}");
    // The adaptive policy tries the slow endpoint again only as its latency estimate fades
    // (about e-fold a second): a handful of the 60, where an even split gives 30.
    assert!(slow <= 8, "the slow endpoint took {slow} of {REQUESTS}: {seen:?}");

    // Without the metadata, Istio's LEAST_REQUEST runs: with one request at a time every
    // pick is a tie, so the split is even (binomial, σ ≈ 3.9; the bound is 3.8σ below 30).
    let (seen, running, received) = run("", REQUESTS).await;
    println!("least request: {seen:?}");
    assert_eq!((received.as_str(), running.as_str()), ("LEAST_REQUEST", "LEAST_REQUEST"));
    let slow = seen.get("200 slow").copied().unwrap_or(0);
    assert!(slow >= 15, "the slow endpoint took {slow} of {REQUESTS}: {seen:?}");
}

/// Under istiod and STRICT mutual TLS: the sidecar calls its own inbound port through the
/// mesh (istiod's auto mTLS to a `tlsMode: istio` endpoint), the inbound side reports the
/// application's load (it sends none), and the outbound side's endpoint carries that
/// report, which neither the calling client nor the application sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_istiod_the_servers_sidecar_reports_over_strict_mtls() {
    let Some(binary) = Istiod::binary("under_istiod_the_servers_sidecar_reports_over_strict_mtls") else { return };
    let app = backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let asked = request.headers().contains_key("x-outrider-load-report");
        http::Response::new(Full::new(Bytes::from_static(if asked { b"asked" } else { b"app" })))
    })
    .await;
    let (outbound, inbound) = (common::lab::free_port(), common::lab::free_port());
    let istiod = Istiod::start(&binary, &[("mesh.yaml", &mesh_loop_configs(outbound, inbound, app.port))]).await;
    let agent = Agent::start().await;
    let host = "app.default.svc.cluster.local";
    let metadata = "    OUTRIDER_LB: adaptive\n";
    let outrider = app::start(sidecar_bootstrap_with(&istiod, &agent, "GRPC", metadata)).await.unwrap();
    let cluster = format!("outbound|{outbound}||{host}");
    let prefix = format!("{cluster}::127.0.0.1:{inbound}::last_orca_report::");
    let report = wait::until("the inbound side's report at the outbound side", async || {
        for _ in 0..5 {
            let (status, headers, body) = super::istiod_file_mode::get(outbound, host, "/").await;
            if status == 200 {
                assert_eq!(body, "app", "the application never sees the ask");
                assert!(!headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("endpoint-load-metrics")), "{headers:?}");
            }
        }
        let (_, clusters) = admin_get(outrider.admin_address, "/clusters").await;
        clusters.lines().find_map(|l| l.strip_prefix(&prefix)).map(str::to_owned)
    })
    .await;
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert!(report["rps_fractional"].as_f64().unwrap() > 0.0, "{report}");
    let (_, clusters) = admin_get(outrider.admin_address, "/clusters").await;
    assert!(clusters.contains(&format!("{cluster}::lb_policy::ADAPTIVE")), "{clusters}");
    assert!(outrider.tls.upstream.handshakes() >= 1, "the hop is mutual TLS");
    outrider.stop();
}

#[tokio::test]
async fn an_unknown_proxy_wide_policy_is_refused_at_start_up() {
    let bootstrap = "node: { id: sidecar, cluster: app, metadata: { OUTRIDER_LB: fastest } }\n\
        admin: { address: { socket_address: { address: 127.0.0.1, port_value: 0 } } }\n";
    let error = outrider::config::bootstrap::Bootstrap::parse(bootstrap).unwrap_err().to_string();
    assert!(error.contains("node.metadata.OUTRIDER_LB") && error.contains("fastest"), "{error}");
}
