//! Mutual TLS between two Outrider sidecars, as a mesh uses it: a client speaks plaintext
//! to sidecar A, A originates mTLS to sidecar B (client certificate, SNI, ALPN, the
//! server's SPIFFE identity checked), B terminates it (the client's identity checked) and
//! forwards plaintext to the backend. Certificates and roots come by SDS on each sidecar's
//! ADS stream.

use crate::tls_support;

use serde_json::{Value, json};
use tls_support::pki::{self, Ca};
use tls_support::yaml::{self, Http};
use tls_support::*;

/// Sidecar B: STRICT mTLS inbound on `port` (TLS inspector, one `tls` chain) accepting only
/// `client_sa`, forwarding with the downstream's protocol to the backend on `backend`.
async fn inbound(ca: &Ca, port: u16, backend: u16, server_sa: &str, client_sa: &str) -> Sidecar {
    let tls = yaml::common_tls(&["h2", "http/1.1"], json!({ "exact": pki::spiffe(client_sa) }));
    let chain = yaml::chain(
        "mtls",
        json!({ "transport_protocol": "tls" }),
        yaml::downstream_tls(tls, true),
        yaml::hcm_edge("app"),
    );
    let listener = yaml::listener("inbound", port, true, vec![chain], Value::Null);
    let cluster = yaml::cluster("app", backend, Http::Downstream, Value::Null, Value::Null);
    let secrets = [yaml::certificate_secret(&ca.leaf(&pki::spiffe(server_sa))), yaml::roots_secret(ca)];
    Sidecar::start(&[&listener], &[&cluster], &[&secrets[0], &secrets[1]]).await
}

/// Sidecar A: plaintext HTTP on `port`, mTLS to sidecar B on `upstream` expecting the
/// server identity `server_sa`, speaking `http` to it.
async fn outbound(ca: &Ca, port: u16, upstream: u16, http: Http, server_sa: &str) -> Sidecar {
    let tls = yaml::common_tls(&[], json!({ "exact": pki::spiffe(server_sa) }));
    let transport = yaml::upstream_tls(tls, "outbound_.80_._.b.default.svc.cluster.local");
    let cluster = yaml::cluster("b", upstream, http, transport, Value::Null);
    let chain = yaml::chain("http", json!({}), Value::Null, yaml::hcm("b"));
    let listener = yaml::listener("outbound", port, false, vec![chain], Value::Null);
    let secrets = [yaml::certificate_secret(&ca.leaf(&pki::spiffe("client"))), yaml::roots_secret(ca)];
    Sidecar::start(&[&listener], &[&cluster], &[&secrets[0], &secrets[1]]).await
}

/// Ten requests through A and B; the backend sees `expected` (version and scheme), and the
/// ten share one mTLS connection between the sidecars.
async fn mesh_round_trip(http: Http, expected: &str) {
    let ca = Ca::new("mesh root");
    let backend = echo_backend().await;
    let (port_a, port_b) = (free_port(), free_port());
    let b = inbound(&ca, port_b, backend, "server", "client").await;
    let a = outbound(&ca, port_a, port_b, http, "server").await;
    for _ in 0..10 {
        assert_eq!(plain_get(port_a).await, Ok((200, expected.to_owned())));
    }
    assert_eq!(a.outrider.tls.upstream.handshakes(), 1, "A reuses its pooled mTLS connection");
    assert_eq!(b.outrider.tls.downstream.handshakes(), 1);
    a.stop();
    b.stop();
}

#[tokio::test]
async fn http1_goes_through_two_sidecars_over_mutual_tls() {
    mesh_round_trip(Http::Http1, "HTTP/1.1 https").await;
}

#[tokio::test]
async fn http2_is_chosen_by_alpn_between_the_sidecars() {
    // A offers `h2` (its cluster speaks HTTP/2), B serves HTTP/2 because ALPN chose it,
    // and B's backend cluster follows the downstream protocol.
    mesh_round_trip(Http::Http2, "HTTP/2.0 https").await;
}

#[tokio::test]
async fn a_server_with_the_wrong_identity_is_refused_by_the_client_sidecar() {
    let ca = Ca::new("mesh root");
    let backend = echo_backend().await;
    let (port_a, port_b) = (free_port(), free_port());
    let b = inbound(&ca, port_b, backend, "impostor", "client").await;
    let a = outbound(&ca, port_a, port_b, Http::Http1, "server").await;
    let (status, body) = plain_get(port_a).await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("upstream connect error or disconnect/reset before headers"), "{body}");
    assert_eq!(a.outrider.tls.upstream.refusals(outrider::tls::Refusal::VerifySan), 1);
    assert_eq!(a.outrider.tls.upstream.handshakes(), 0);
    a.stop();
    b.stop();
}

#[tokio::test]
async fn tcp_proxy_runs_over_mutual_tls_on_both_sidecars() {
    // B terminates mTLS in front of a TCP proxy; A's TCP proxy originates it.
    let ca = Ca::new("mesh root");
    let backend = echo_backend().await;
    let (port_a, port_b) = (free_port(), free_port());

    let tls = yaml::common_tls(&["istio-peer-exchange", "istio"], json!({ "exact": pki::spiffe("client") }));
    let matching = json!({ "transport_protocol": "tls", "application_protocols": ["istio-peer-exchange", "istio"] });
    let chain = yaml::chain("tcp", matching, yaml::downstream_tls(tls, true), yaml::tcp_proxy("app"));
    let listener = yaml::listener("inbound", port_b, true, vec![chain], Value::Null);
    let cluster = yaml::cluster("app", backend, Http::Http1, Value::Null, Value::Null);
    let secrets = [yaml::certificate_secret(&ca.leaf(&pki::spiffe("server"))), yaml::roots_secret(&ca)];
    let b = Sidecar::start(&[&listener], &[&cluster], &[&secrets[0], &secrets[1]]).await;

    // Istio's outbound TCP: ALPN `istio-peer-exchange, istio` selects B's TCP chain.
    let tls = yaml::common_tls(&["istio-peer-exchange", "istio"], json!({ "exact": pki::spiffe("server") }));
    let cluster = yaml::cluster("b", port_b, Http::Http1, yaml::upstream_tls(tls, "b.test"), Value::Null);
    let chain = yaml::chain("tcp", json!({}), Value::Null, yaml::tcp_proxy("b"));
    let listener = yaml::listener("outbound", port_a, false, vec![chain], Value::Null);
    let secrets = [yaml::certificate_secret(&ca.leaf(&pki::spiffe("client"))), yaml::roots_secret(&ca)];
    let a = Sidecar::start(&[&listener], &[&cluster], &[&secrets[0], &secrets[1]]).await;

    // Bytes pass untouched: the backend sees plaintext HTTP/1.1 without forwarding headers.
    assert_eq!(plain_get(port_a).await, Ok((200, "HTTP/1.1 -".to_owned())));
    assert_eq!(a.outrider.tls.upstream.handshakes(), 1);
    assert_eq!(b.outrider.tls.downstream.handshakes(), 1);
    a.stop();
    b.stop();
}
