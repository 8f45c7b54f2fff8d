//! `random_subsetting` through the proxy: a cluster of 20 loopback backends, subsets of 4.
//! Outrider reaches 4 of them — the same 4 for the same node id, never opening a connection
//! to the others — and another node id reaches its own 4. (Envoy 1.40 has no side here: it
//! does not carry the `RandomSubsetting` message, so it cannot even parse this bootstrap.)

use std::collections::BTreeSet;

use bytes::Bytes;
use http_body_util::Full;

use crate::common::backends::{self, Backend};
use outrider::config::bootstrap::Bootstrap;

use crate::common::differential::{HttpListenerExtra, ROUTE_TO_BACKEND, free_port, http_listener, raw_http1};

const BACKENDS: usize = 20;
const SUBSET: usize = 4;
const REQUESTS: usize = 80;

async fn backends() -> Vec<Backend> {
    let mut started = Vec::new();
    for i in 0..BACKENDS {
        let body = Bytes::from(format!("b{i}"));
        started.push(backends::http(move |_| std::future::ready(http::Response::new(Full::new(body.clone())))).await);
    }
    started
}

fn bootstrap(port: u16, node: &str, backends: &[Backend]) -> String {
    let endpoints: String = backends
        .iter()
        .map(|b| {
            format!(
                "\n        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}",
                b.port
            )
        })
        .collect();
    let listener = http_listener("l", port, "ingress", HttpListenerExtra::default(), ROUTE_TO_BACKEND);
    let lbp = "type.googleapis.com/envoy.extensions.load_balancing_policies";
    format!(
        r#"node: {{ id: "{node}", cluster: client }}
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
static_resources:
  listeners:{listener}
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_balancing_policy:
      policies:
      - typed_extension_config:
          name: envoy.load_balancing_policies.random_subsetting
          typed_config:
            "@type": {lbp}.random_subsetting.v3.RandomSubsetting
            subset_size: {SUBSET}
            child_policy:
              policies:
              - typed_extension_config:
                  name: envoy.load_balancing_policies.round_robin
                  typed_config: {{ "@type": {lbp}.round_robin.v3.RoundRobin }}
      - typed_extension_config:
          name: envoy.load_balancing_policies.round_robin
          typed_config: {{ "@type": {lbp}.round_robin.v3.RoundRobin }}
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:{endpoints}
"#
    )
}

async fn start(port: u16, node: &str, backends: &[Backend]) -> outrider::app::Running {
    let running =
        outrider::app::start_with(Bootstrap::parse(&bootstrap(port, node, backends)).unwrap(), 1).await.unwrap();
    running.listeners_ready().await;
    running
}

/// The backends that answered [`REQUESTS`] requests through `port`.
async fn reached(port: u16) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for _ in 0..REQUESTS {
        let (status, _, body) = raw_http1(port, "GET / HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n").await;
        assert_eq!(status, 200);
        seen.insert(body);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_uses_only_its_subset() {
    let backends = backends().await;
    let node = "sidecar~10.2.0.7~client-7.default~default.svc.cluster.local";
    let port = free_port();
    let _first = start(port, node, &backends).await;
    let mine = reached(port).await;
    assert_eq!(mine.len(), SUBSET, "{mine:?}");
    for (i, backend) in backends.iter().enumerate() {
        let member = mine.contains(&format!("b{i}"));
        assert_eq!(member, backend.seen.connections() > 0, "b{i}: {} connections", backend.seen.connections());
    }

    // The same node id chooses the same subset again; another node id its own.
    for (other, same) in [(node, true), ("sidecar~10.2.0.8~client-8.default~default.svc.cluster.local", false)] {
        let port = free_port();
        let _running = start(port, other, &backends).await;
        let theirs = reached(port).await;
        assert_eq!(theirs.len(), SUBSET);
        assert_eq!(theirs == mine, same, "{other}: {theirs:?} against {mine:?}");
    }
}
