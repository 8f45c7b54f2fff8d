//! Certificate rotation by SDS while traffic flows: sidecar B's certificate is replaced
//! mid-traffic; every request succeeds, new handshakes present the new certificate at once,
//! and a connection established before the rotation goes on with the old one.

use crate::common;
use crate::tls_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::{WAIT, wait_snapshot};
use outrider::config::ResourceType;
use serde_json::{Value, json};
use tls_support::pki::{self, Ca};
use tls_support::yaml::{self, Http};
use tls_support::*;
use tokio::sync::watch;

/// Concurrent clients of sidecar A.
const CLIENTS: usize = 4;
/// Upper bound on all requests, so that a broken rotation cannot loop forever.
const MAX_REQUESTS: u64 = 4000;

#[tokio::test]
async fn the_server_certificate_rotates_mid_traffic_without_a_failed_request() {
    let ca = Ca::new("mesh root");
    let backend = echo_backend().await;
    let (port_a, port_b) = (free_port(), free_port());
    let (old, new) = (ca.leaf(&pki::spiffe("server")), ca.leaf(&pki::spiffe("server")));

    // B: STRICT mTLS inbound, certificate `old`.
    let tls = yaml::common_tls(&["h2", "http/1.1"], json!({ "exact": pki::spiffe("client") }));
    let chain = yaml::chain(
        "mtls",
        json!({ "transport_protocol": "tls" }),
        yaml::downstream_tls(tls, true),
        yaml::hcm_edge("app"),
    );
    let listener = yaml::listener("inbound", port_b, true, vec![chain], Value::Null);
    let app = yaml::cluster("app", backend, Http::Http1, Value::Null, Value::Null);
    let roots = yaml::roots_secret(&ca);
    let b = Sidecar::start(&[&listener], &[&app], &[&yaml::certificate_secret(&old), &roots]).await;

    // A: a new mTLS connection to B every 10 requests, so handshakes go on all along.
    let tls = yaml::common_tls(&[], json!({ "exact": pki::spiffe("server") }));
    let extra = json!({ "max_requests_per_connection": 10 });
    let cluster = yaml::cluster("b", port_b, Http::Http1, yaml::upstream_tls(tls, "b.test"), extra);
    let chain = yaml::chain("http", json!({}), Value::Null, yaml::hcm("b"));
    let outbound = yaml::listener("outbound", port_a, false, vec![chain], Value::Null);
    let identity = ca.leaf(&pki::spiffe("client"));
    let a = Sidecar::start(&[&outbound], &[&cluster], &[&yaml::certificate_secret(&identity), &roots]).await;

    // A connection made before the rotation, kept open across it.
    let direct = client_config(&ca, Some(&identity), &["http/1.1"]);
    let early = tls_connect(port_b, direct.clone()).await.unwrap();
    assert_eq!(early.get_ref().1.peer_certificates().unwrap()[0], old.der());
    let (mut early, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(early)).await.unwrap();
    tokio::spawn(connection);

    // Traffic through A until told to stop; every answer must be a 200.
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (progress, mut watched) = watch::channel(0u64);
    let progress = Arc::new(progress);
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (done, stop, progress) = (done.clone(), stop.clone(), progress.clone());
        clients.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) && done.load(Ordering::Relaxed) < MAX_REQUESTS {
                match plain_get(port_a).await {
                    Ok((200, _)) => {}
                    other => failures.push(format!("{other:?}")),
                }
                progress.send_replace(done.fetch_add(1, Ordering::Relaxed) + 1);
            }
            failures
        }));
    }

    // Rotate after 100 requests, wait until B serves the new secret, let 100 more pass.
    watched.wait_for(|n| *n >= 100).await.unwrap();
    b.control_plane.set(ResourceType::Secret, &[&yaml::certificate_secret(&new), &roots]);
    let before = b.outrider.store.load().secrets["default"].last_updated;
    wait_snapshot(&b.outrider.store, |s| s.secrets["default"].last_updated != before).await;
    let rotated_at = *watched.borrow();
    let handshakes_at_rotation = b.outrider.tls.downstream.handshakes();
    tokio::time::timeout(WAIT, watched.wait_for(|n| *n >= rotated_at + 100)).await.unwrap().unwrap();
    stop.store(true, Ordering::Relaxed);

    for client in clients {
        let failures = client.await.unwrap();
        assert!(failures.is_empty(), "failed requests: {failures:?}");
    }
    let total = done.load(Ordering::Relaxed);
    assert!(total < MAX_REQUESTS, "traffic ran into its bound: {total}");
    assert!(
        b.outrider.tls.downstream.handshakes() > handshakes_at_rotation + 5,
        "handshakes went on after the rotation: {} then {}",
        handshakes_at_rotation,
        b.outrider.tls.downstream.handshakes()
    );
    assert_eq!(a.outrider.tls.upstream.counters().iter().skip(1).map(|(_, n)| n).sum::<u64>(), 0);

    // New handshakes present the new certificate...
    assert_eq!(server_certificate(port_b, direct.clone()).await, new.der());
    // ...while the connection made before the rotation still works, on the old one.
    let request =
        http::Request::get("/").header("host", "app").body(http_body_util::Empty::<bytes::Bytes>::new()).unwrap();
    assert_eq!(early.send_request(request).await.unwrap().status(), 200);

    a.stop();
    b.stop();
}
