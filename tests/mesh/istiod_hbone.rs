//! HBONE as a real istiod renders it for a sidecar whose node metadata says `ENABLE_HBONE`
//! (istiod with ambient mode on, file mode): the inbound `connect_terminate` listener on
//! 15008 (mutual TLS, HTTP/2 `CONNECT`, Istio's `connect_authority` filter state),
//! `main_internal` (one filter chain per inbound port, the tunnel's destination restored),
//! `connect_originate` and the ORIGINAL_DST cluster that tunnels to a destination's 15008,
//! and endpoints labelled `networking.istio.io/tunnel: http` rendered as internal addresses.
//! Everything is ACKed; a call to such an endpoint goes out as HBONE and comes back in
//! through this same sidecar's 15008 to the application, through the inbound chain of its
//! port, whose AuthorizationPolicy sees the tunnel's peer identity; an HBONE client with
//! another identity gets what its identity allows.

use crate::common;
use crate::istiod_file_mode::{Agent, get, inbound_configs, named_backend, sidecar_bootstrap_with, xds_updates};
use crate::tls_support;

use bytes::Bytes;
use common::istiod::Istiod;
use common::wait;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use outrider::app;
use tls_support::pki;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The HBONE port istiod renders (`connect_terminate` binds it on every address).
const HBONE: u16 = 15008;

/// The workload `app` (a Sidecar ingress port `inbound` in front of the application on
/// `application`, STRICT mutual TLS, a DENY for `/admin*` and one for the principal
/// `caller` on `/caller-denied*`), and the service `amb.default.svc.cluster.local` on
/// `outbound` whose one endpoint is that inbound port, reached by HBONE only (an ambient
/// workload: `tunnel: http`, no sidecar mutual TLS).
fn configs(outbound: u16, inbound: u16, application: u16) -> String {
    format!(
        r#"{}---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{ name: deny-caller, namespace: default }}
spec:
  selector: {{ matchLabels: {{ app: app }} }}
  action: DENY
  rules:
  - from: [{{ source: {{ principals: ["cluster.local/ns/default/sa/caller"] }} }}]
    to: [{{ operation: {{ paths: ["/caller-denied*"] }} }}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{ name: amb, namespace: default }}
spec:
  hosts: [amb.default.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {{ number: {outbound}, name: http, protocol: HTTP, targetPort: {inbound} }}
  endpoints:
  - address: 127.0.0.1
    serviceAccount: default
    labels: {{ app: app, security.istio.io/tlsMode: disabled, networking.istio.io/tunnel: http }}
"#,
        inbound_configs(inbound, application, "STRICT")
    )
}

/// An HBONE client: mutual TLS to 15008 as `identity` (none: no certificate), an HTTP/2
/// `CONNECT` to `destination`, then an HTTP/1.1 GET of `path` inside the tunnel. The
/// `CONNECT`'s status, and the GET's status and body (`(0, "")` when there was no tunnel);
/// `Err` when the TLS handshake or HTTP/2 failed.
async fn hbone_get(
    agent: &Agent,
    identity: Option<&pki::Leaf>,
    destination: &str,
    path: &str,
) -> Result<(u16, u16, String), String> {
    let config = tls_support::client_config(&agent.ca, identity, &["h2"]);
    let stream = tls_support::tls_connect(HBONE, config).await.map_err(|e| e.to_string())?;
    let (mut sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(connection);
    let request = http::Request::connect(destination).body(Empty::<Bytes>::new()).unwrap();
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let mut inner = (0, String::new());
    if status == 200 {
        let mut tunnel = TokioIo::new(hyper::upgrade::on(response).await.unwrap());
        let request = format!("GET {path} HTTP/1.1\r\nhost: app\r\nconnection: close\r\n\r\n");
        tunnel.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(common::WAIT, tunnel.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let code = answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        inner = (code, body);
    } else {
        drop(response);
    }
    drop(sender);
    let _ = tokio::time::timeout(common::WAIT, driver).await;
    Ok((status, inner.0, inner.1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hbone_out_of_and_into_a_sidecar_as_istiod_renders_it() {
    let Some(binary) = Istiod::binary("hbone_out_of_and_into_a_sidecar_as_istiod_renders_it") else { return };
    let app = named_backend("app").await;
    let (outbound, inbound) = (tls_support::free_port(), tls_support::free_port());
    let istiod = Istiod::start_ambient(&binary, &[("mesh.yaml", &configs(outbound, inbound, app.port))]).await;
    let agent = Agent::start().await;
    let bootstrap = sidecar_bootstrap_with(&istiod, &agent, "GRPC", "    ENABLE_HBONE: \"true\"\n");
    let outrider = app::start(bootstrap).await.unwrap();
    let host = "amb.default.svc.cluster.local";
    wait::until_true("HBONE to amb serves", async || get(outbound, host, "/").await.0 == 200).await;

    // Out as HBONE (connect_originate, mutual TLS to 127.0.0.1:15008) and back in through
    // connect_terminate and main_internal to the inbound chain of `inbound`.
    assert_eq!(get(outbound, host, "/ok").await.2, "app");
    assert!(outrider.tls.upstream.handshakes() >= 1, "the tunnel is mutual TLS");
    assert!(outrider.tls.downstream.handshakes() >= 1, "15008 terminated it");
    let (status, _, body) = get(outbound, host, "/admin").await;
    assert_eq!((status, body.as_str()), (403, "RBAC: access denied"), "the inbound chain's policy applies");
    // The sidecar's own identity (`default`) is not the denied one.
    assert_eq!(get(outbound, host, "/caller-denied").await.2, "app");

    // Into 15008 from an HBONE client (ztunnel's part) with the identity `caller`: the
    // inbound chain's policy sees it as the tunnel's peer.
    let caller = agent.ca.leaf(&pki::spiffe("caller"));
    let destination = format!("127.0.0.1:{inbound}");
    assert_eq!(hbone_get(&agent, Some(&caller), &destination, "/ok").await, Ok((200, 200, "app".to_owned())));
    let denied = hbone_get(&agent, Some(&caller), &destination, "/caller-denied").await;
    assert_eq!(denied, Ok((200, 403, "RBAC: access denied".to_owned())));
    // A destination that is not this pod (main_internal's chains take only the pod's own
    // addresses, Istio's guard against tunnels to anywhere): refused at the CONNECT, with
    // Envoy's 503.
    let elsewhere = format!("10.1.2.3:{inbound}");
    assert_eq!(hbone_get(&agent, Some(&caller), &elsewhere, "/ok").await.map(|r| r.0), Ok(503));
    // No client certificate: 15008 requires one.
    assert!(hbone_get(&agent, None, &destination, "/ok").await.is_err());

    let updates = xds_updates(&outrider).await;
    assert!(updates.values().all(|(_, rejected)| *rejected == 0), "rejected: {updates:?}");
    outrider.stop();
}
