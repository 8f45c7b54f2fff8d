//! Control-plane faults under load: the control plane killed and restarted, and a storm
//! of xDS updates, while clients send requests through the proxy. Each counts requests
//! sent, succeeded and failed (a bounded number: `OUTRIDER_FAULT_REQUESTS`), and the time
//! to recover; run with `--no-capture` to see them.

use crate::common;

use std::time::Instant;

use common::backends;
use common::lab::{self, Lab, served_config};
use common::load::{Load, fault_requests};
use common::wait;
use common::{CLUSTER, ROUTE, WAIT, endpoints};
use outrider::config::ResourceType;
use outrider::xds::server::Journal;

const TYPES: [ResourceType; 4] = [
    ResourceType::Cluster,
    ResourceType::ClusterLoadAssignment,
    ResourceType::Listener,
    ResourceType::RouteConfiguration,
];

fn connected(lab: &Lab) -> Option<f64> {
    lab::stat(&lab.outrider, "control_plane.connected_state")
}

fn last_stream(journal: &Journal) -> u64 {
    journal.requests.iter().map(|r| r.stream).max().unwrap_or(0)
}

/// Every type was asked for again on a stream after `old`, and every response sent on
/// the new streams was ACKed.
fn resynced(journal: &Journal, old: u64) -> bool {
    let asked = TYPES.iter().all(|t| journal.requests.iter().any(|r| r.stream > old && r.type_url == t.type_url()));
    let acked = journal
        .responses
        .iter()
        .filter(|response| response.stream > old)
        .all(|response| journal.requests.iter().any(|r| r.acks(response)));
    asked && acked
}

async fn control_plane_restart_under_load(api_type: &str) {
    let (a, b) = (backends::healthy("a").await, backends::healthy("b").await);
    let mut lab = lab::start(&[a.port, b.port], "", ROUTE, api_type).await;
    for t in TYPES {
        lab.control_plane.wait_acked(t).await;
    }
    let before = served_config(&lab.outrider.store.load());
    let target = fault_requests(300);
    let load = Load::start(lab.proxy_port, 4, target);
    load.wait_answered(20).await;

    let stopped = Instant::now();
    lab.control_plane.stop().await;
    wait::until_sync("the ADS stream is reported lost", || connected(&lab) == Some(0.0)).await;
    let lost_after = stopped.elapsed();
    // Requests keep flowing on the last good configuration while the control plane is away.
    load.wait_answered(target / 3).await;

    let old = last_stream(&lab.control_plane.server.journal());
    let restarted = Instant::now();
    lab.control_plane.restart().await;
    lab.control_plane.server.wait_until(WAIT, |j| resynced(j, old)).await.expect("no resync in time");
    wait::until_sync("the ADS stream is reported up", || connected(&lab) == Some(1.0)).await;
    let recovered = restarted.elapsed();
    let outage = restarted.duration_since(stopped);
    load.wait_answered(20).await;
    let (sent, succeeded, failed, errors) = load.finish().await;

    eprintln!(
        "fault control plane restart ({api_type}): sent {sent} succeeded {succeeded} failed {failed}; \
         stream reported lost {lost_after:?} after the stop; outage {outage:?}; re-synced and ACKed \
         {recovered:?} after the restart (the reconnect backoff grown during the outage included)"
    );
    assert_eq!(failed, 0, "{failed} of {sent} failed: {errors:?}");
    assert_eq!(succeeded, sent);
    assert_eq!(served_config(&lab.outrider.store.load()), before, "the configuration is the one served before");
    lab.outrider.stop();
}

#[tokio::test]
async fn control_plane_killed_and_restarted_under_load_fails_no_request_sotw() {
    control_plane_restart_under_load("GRPC").await;
}

#[tokio::test]
async fn control_plane_killed_and_restarted_under_load_fails_no_request_delta() {
    control_plane_restart_under_load("DELTA_GRPC").await;
}

/// An unused STATIC cluster, with its endpoint inline.
fn spare_cluster(i: usize, port: u16) -> String {
    format!(
        "name: spare-{i}\ntype: STATIC\nconnect_timeout: 1s\nload_assignment:\n  cluster_name: spare-{i}\n  endpoints:\n  \
         - lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }} }}]\n"
    )
}

/// The route with a different (unused) name for the route entry: new bytes, same routing.
fn renamed_route(round: usize) -> String {
    ROUTE.replace("  - match: { prefix: \"/\" }", &format!("  - name: r{round}\n    match: {{ prefix: \"/\" }}"))
}

async fn xds_churn_under_load(api_type: &str) {
    let backends = [backends::healthy("a").await, backends::healthy("b").await, backends::healthy("c").await];
    let ports: Vec<u16> = backends.iter().map(|b| b.port).collect();
    let lab = lab::start(&ports, "", ROUTE, api_type).await;
    let rounds = (fault_requests(300) / 10).clamp(10, 1000) as usize;
    let load = Load::start(lab.proxy_port, 4, fault_requests(300));
    load.wait_answered(10).await;
    let cp = &lab.control_plane;
    let started = Instant::now();
    let mut pushes = 0;
    for round in 0..rounds {
        // Endpoints: a rotating subset of two of the three, never empty.
        let subset: Vec<u32> =
            ports.iter().enumerate().filter(|(i, _)| (round + i) % 3 != 0).map(|(_, p)| u32::from(*p)).collect();
        cp.set(ResourceType::ClusterLoadAssignment, &[&endpoints("backend", &subset)]);
        // Clusters the route does not use come and go beside the one it does.
        let spares: Vec<String> = (0..round % 3).map(|i| spare_cluster(round * 3 + i, ports[0])).collect();
        let mut clusters = vec![CLUSTER.to_owned()];
        clusters.extend(spares);
        cp.set(ResourceType::Cluster, &clusters.iter().map(String::as_str).collect::<Vec<_>>());
        // The route again, equivalent; the listener with another stat_prefix.
        cp.set(ResourceType::RouteConfiguration, &[&renamed_route(round)]);
        let prefix = format!("http{}", round % 2);
        cp.set(ResourceType::Listener, &[&lab::listener(lab.proxy_port, &prefix, "")]);
        pushes += 4;
        // Bursts of five rounds, faster than the ACKs come back, then settle.
        if round % 5 == 4 || round + 1 == rounds {
            for t in TYPES {
                cp.wait_acked(t).await;
            }
            // Connections of the replaced listener drain after their request in flight;
            // the clients' next connections land on this one. Waiting for that, rather than
            // for any two answers (which the draining connections may still give), makes
            // each settled listener serve before the churn goes on.
            let served = format!("http.{prefix}.downstream_rq_total");
            let answered = || lab::stat(&lab.outrider, &served).unwrap_or(0.0) > 0.0;
            wait::until_sync("a request served by the listener just pushed", answered).await;
        }
        load.wait_answered(2).await;
    }
    let churned = started.elapsed();
    let (sent, succeeded, failed, errors) = load.finish().await;
    eprintln!(
        "fault xDS churn ({api_type}): {rounds} rounds, {pushes} pushes in {churned:?}; \
         sent {sent} succeeded {succeeded} failed {failed}"
    );
    let nacks: usize = TYPES.iter().map(|t| cp.server.journal().nacks(t.type_url()).len()).sum();
    assert_eq!(nacks, 0, "every update was valid");
    assert_eq!(failed, 0, "{failed} of {sent} failed during xDS churn: {errors:?}");
    // Both listener versions served: the listener really changed under the load.
    for prefix in ["http0", "http1"] {
        let served = lab::stat(&lab.outrider, &format!("http.{prefix}.downstream_rq_total")).unwrap_or(0.0);
        assert!(served > 0.0, "no request served under stat_prefix {prefix}");
    }
    lab.outrider.stop();
}

#[tokio::test]
async fn xds_churn_under_load_fails_no_request_delta() {
    xds_churn_under_load("DELTA_GRPC").await;
}

#[tokio::test]
async fn xds_churn_under_load_fails_no_request_sotw() {
    xds_churn_under_load("GRPC").await;
}
