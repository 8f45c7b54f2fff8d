//! Downstream TLS on one sidecar, as a mesh's inbound listener uses it: STRICT (only a TLS
//! chain), PERMISSIVE (TLS and plaintext chains on one port, told apart by the TLS
//! inspector), and every way a client is refused: wrong CA, expired certificate, wrong
//! SPIFFE identity, no certificate, plaintext, TLS 1.1, no handshake at all. Each refusal
//! is counted under its reason before the connection closes.

use crate::tls_support;

use outrider::tls::Refusal;
use serde_json::{Value, json};
use tls_support::pki::{self, Ca};
use tls_support::yaml::{self, Http};
use tls_support::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

struct Inbound {
    sidecar: Sidecar,
    port: u16,
    ca: Ca,
}

/// The mTLS chain: only `spiffe://cluster.local/ns/default/sa/client` is let in.
fn mtls_chain(filter_chain_match: Value) -> Value {
    let tls = yaml::common_tls(&["h2", "http/1.1"], json!({ "exact": pki::spiffe("client") }));
    yaml::chain("mtls", filter_chain_match, yaml::downstream_tls(tls, true), yaml::hcm_edge("app"))
}

async fn inbound(chains: Vec<Value>, inspector: bool, listener_extra: Value) -> Inbound {
    let ca = Ca::new("mesh root");
    let backend = echo_backend().await;
    let port = free_port();
    let listener = yaml::listener("inbound", port, inspector, chains, listener_extra);
    let cluster = yaml::cluster("app", backend, Http::Downstream, Value::Null, Value::Null);
    let secrets = [yaml::certificate_secret(&ca.leaf(&pki::spiffe("server"))), yaml::roots_secret(&ca)];
    let sidecar = Sidecar::start(&[&listener], &[&cluster], &[&secrets[0], &secrets[1]]).await;
    Inbound { sidecar, port, ca }
}

/// Istio's STRICT inbound: the TLS inspector, one chain for `transport_protocol: tls`.
async fn strict() -> Inbound {
    inbound(vec![mtls_chain(json!({ "transport_protocol": "tls" }))], true, Value::Null).await
}

impl Inbound {
    fn client(&self, identity: &pki::Leaf) -> rustls::ClientConfig {
        client_config(&self.ca, Some(identity), &["http/1.1"])
    }

    /// Asserts that `refusal` was counted once and nothing else happened.
    fn assert_refused_once(&self, refusal: Refusal, client_saw: &str) {
        let stats = &self.sidecar.outrider.tls.downstream;
        assert_eq!(stats.refusals(refusal), 1, "{refusal}; the client saw: {client_saw}; {:?}", stats.counters());
        let total: u64 = stats.counters().iter().skip(1).map(|(_, n)| n).sum();
        assert_eq!(total, 1, "{:?}", stats.counters());
        assert_eq!(stats.handshakes(), 0);
    }
}

#[tokio::test]
async fn a_client_with_the_allowed_identity_is_served_over_http1_and_http2() {
    let inbound = strict().await;
    let client = inbound.ca.leaf(&pki::spiffe("client"));
    let served = tls_get(inbound.port, inbound.client(&client)).await;
    assert_eq!(served, Ok((200, "HTTP/1.1 https".to_owned())));

    // ALPN h2: HTTP/2 without prior knowledge of anything but the handshake.
    let stream = tls_connect(inbound.port, client_config(&inbound.ca, Some(&client), &["h2"])).await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let request = http::Request::get("https://app/").body(http_body_util::Empty::<bytes::Bytes>::new()).unwrap();
    let response = sender.send_request(request).await.unwrap();
    use http_body_util::BodyExt;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"HTTP/2.0 https");
    assert_eq!(inbound.sidecar.outrider.tls.downstream.handshakes(), 2);
    inbound.sidecar.stop();
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused() {
    let inbound = strict().await;
    let stranger = Ca::new("another root").leaf(&pki::spiffe("client"));
    let seen = refused(inbound.port, inbound.client(&stranger)).await;
    inbound.assert_refused_once(Refusal::VerifyError, &seen);
    inbound.sidecar.stop();
}

#[tokio::test]
async fn an_expired_certificate_is_refused() {
    let inbound = strict().await;
    let expired = inbound.ca.expired_leaf(&pki::spiffe("client"));
    let seen = refused(inbound.port, inbound.client(&expired)).await;
    inbound.assert_refused_once(Refusal::VerifyError, &seen);
    inbound.sidecar.stop();
}

#[tokio::test]
async fn a_certificate_with_another_spiffe_identity_is_refused() {
    let inbound = strict().await;
    let other = inbound.ca.leaf(&pki::spiffe("other"));
    let seen = refused(inbound.port, inbound.client(&other)).await;
    inbound.assert_refused_once(Refusal::VerifySan, &seen);
    inbound.sidecar.stop();
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    let inbound = strict().await;
    let seen = refused(inbound.port, client_config(&inbound.ca, None, &["http/1.1"])).await;
    inbound.assert_refused_once(Refusal::NoCertificate, &seen);
    inbound.sidecar.stop();
}

#[tokio::test]
async fn plaintext_on_a_strict_port_matches_no_chain_and_is_closed() {
    let inbound = strict().await;
    let mut stream = TcpStream::connect(("127.0.0.1", inbound.port)).await.unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\nhost: app\r\n\r\n").await.unwrap();
    assert_eq!(read_until_closed(stream).await, b"", "closed without an answer");
    assert_eq!(inbound.sidecar.outrider.tls.downstream.counters().iter().map(|(_, n)| n).sum::<u64>(), 0);
    inbound.sidecar.stop();
}

/// A TLS 1.1 ClientHello (rustls cannot send one): `legacy_version` 0x0302, no
/// `supported_versions` extension, two TLS 1.0/1.1 cipher suites. It carries
/// `signature_algorithms` so that the version is what the server objects to (without it,
/// rustls refuses earlier, with a `handshake_failure` alert).
fn tls11_client_hello() -> Vec<u8> {
    let mut body = vec![0x03, 0x02];
    body.extend_from_slice(&[0x5a; 32]); // random
    body.push(0); // no session id
    body.extend_from_slice(&[0x00, 0x04, 0xc0, 0x13, 0x00, 0x2f]); // ECDHE-RSA-AES128-SHA, AES128-SHA
    body.extend_from_slice(&[0x01, 0x00]); // null compression
    // signature_algorithms: rsa_pkcs1_sha256, ecdsa_secp256r1_sha256.
    let extension = [0x00, 0x0d, 0x00, 0x06, 0x00, 0x04, 0x04, 0x01, 0x04, 0x03];
    body.extend_from_slice(&(extension.len() as u16).to_be_bytes());
    body.extend_from_slice(&extension);
    let mut handshake = vec![0x01, 0x00];
    handshake.extend_from_slice(&(body.len() as u16).to_be_bytes());
    handshake.extend_from_slice(&body);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}

#[tokio::test]
async fn a_tls_1_1_client_is_refused_with_a_protocol_version_alert() {
    let inbound = strict().await;
    let mut stream = TcpStream::connect(("127.0.0.1", inbound.port)).await.unwrap();
    stream.write_all(&tls11_client_hello()).await.unwrap();
    let answer = read_until_closed(stream).await;
    // One alert record: fatal (2), protocol_version (70).
    assert_eq!(answer.first(), Some(&0x15), "{answer:?}");
    assert_eq!(answer.get(5..7), Some(&[2, 70][..]), "{answer:?}");
    inbound.assert_refused_once(Refusal::ConnectionError, "protocol_version alert");
    inbound.sidecar.stop();
}

#[tokio::test]
async fn a_client_that_never_sends_its_handshake_is_timed_out() {
    // No TLS inspector (it would time out first): the chain's own handshake timeout.
    let mut chain = mtls_chain(json!({}));
    chain["transport_socket_connect_timeout"] = json!("0.2s");
    let inbound = inbound(vec![chain], false, Value::Null).await;
    let stream = TcpStream::connect(("127.0.0.1", inbound.port)).await.unwrap();
    assert_eq!(read_until_closed(stream).await, b"");
    inbound.assert_refused_once(Refusal::Timeout, "closed");
    // The slot is free: a real client is served.
    let client = inbound.ca.leaf(&pki::spiffe("client"));
    assert_eq!(tls_get(inbound.port, inbound.client(&client)).await, Ok((200, "HTTP/1.1 https".to_owned())));
    inbound.sidecar.stop();
}

#[tokio::test]
async fn a_silent_client_is_closed_by_the_listener_filters_timeout() {
    let chains = vec![mtls_chain(json!({ "transport_protocol": "tls" }))];
    let inbound = inbound(chains, true, json!({ "listener_filters_timeout": "0.2s" })).await;
    let stream = TcpStream::connect(("127.0.0.1", inbound.port)).await.unwrap();
    assert_eq!(read_until_closed(stream).await, b"");
    inbound.sidecar.stop();
}

#[tokio::test]
async fn a_permissive_port_serves_mutual_tls_and_plaintext() {
    // Istio's PERMISSIVE inbound: the same service behind a `tls` and a `raw_buffer` chain.
    let plaintext =
        yaml::chain("plaintext", json!({ "transport_protocol": "raw_buffer" }), Value::Null, yaml::hcm_edge("app"));
    let chains = vec![mtls_chain(json!({ "transport_protocol": "tls" })), plaintext];
    let inbound = inbound(chains, true, Value::Null).await;
    let client = inbound.ca.leaf(&pki::spiffe("client"));
    for _ in 0..3 {
        assert_eq!(tls_get(inbound.port, inbound.client(&client)).await, Ok((200, "HTTP/1.1 https".to_owned())));
        assert_eq!(plain_get(inbound.port).await, Ok((200, "HTTP/1.1 http".to_owned())));
    }
    assert_eq!(inbound.sidecar.outrider.tls.downstream.handshakes(), 3);
    // Still mutual: TLS without the right identity is refused on the TLS chain.
    let seen = refused(inbound.port, client_config(&inbound.ca, None, &["http/1.1"])).await;
    assert_eq!(inbound.sidecar.downstream(Refusal::NoCertificate), 1, "{seen}");
    inbound.sidecar.stop();
}

#[tokio::test]
async fn sni_and_alpn_from_the_client_hello_choose_the_chain() {
    // Two TLS chains told apart by SNI; the inspector's SNI picks one, whose certificate
    // checks differ (the `*.other` chain lets any identity in).
    let open = yaml::common_tls(&["http/1.1"], json!({ "prefix": "spiffe://cluster.local/" }));
    let named = yaml::chain(
        "open",
        json!({ "server_names": ["*.other"] }),
        yaml::downstream_tls(open, true),
        yaml::hcm_edge("app"),
    );
    let chains = vec![mtls_chain(json!({ "server_names": ["server.test"] })), named];
    let inbound = inbound(chains, true, Value::Null).await;
    let other = inbound.ca.leaf(&pki::spiffe("other"));
    // `server.test` → the strict chain refuses `sa/other`.
    let seen = refused(inbound.port, inbound.client(&other)).await;
    assert_eq!(inbound.sidecar.downstream(Refusal::VerifySan), 1, "{seen}");
    // `a.other` → the open chain serves it.
    let stream = TcpStream::connect(("127.0.0.1", inbound.port)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("a.other").unwrap();
    let mut config = inbound.client(&other);
    config.dangerous().set_certificate_verifier(std::sync::Arc::new(AnyServer));
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, stream).await.unwrap();
    assert_eq!(get_h1(tls).await, Ok((200, "HTTP/1.1 https".to_owned())));
    inbound.sidecar.stop();
}

/// The server certificate names `server.test`, not `a.other`: this test checks the chain
/// choice, not the server's name.
#[derive(Debug)]
struct AnyServer;

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        outrider::tls::provider::provider().signature_verification_algorithms.supported_schemes()
    }
}
