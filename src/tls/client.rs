//! A cluster's `UpstreamTlsContext` → rustls `ClientConfig`, one per ALPN use.

use std::sync::Arc;

use rustls::ClientConfig;
use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;

use super::secrets::Material;
use super::verifier::{PeerCheck, ServerVerifier};
use super::{TlsError, alpn, provider, source};
use crate::config::tls::UpstreamTlsContext;

/// What the connection will carry, which decides the ALPN offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientAlpn {
    Http1,
    Http2,
    /// Bytes of the TCP proxy: the configured protocols as they are.
    Tcp,
}

/// Istio marks its mTLS with ALPN `istio`; its `istio.alpn` HTTP filter then offers these
/// instead, so that the peer sidecar picks its HTTP filter chain (`istio-http/1.1`,
/// `istio-h2`) rather than its TCP one.
const ISTIO_MARKER: &str = "istio";
const ISTIO_HTTP1: [&str; 3] = ["istio-http/1.1", "istio", "http/1.1"];
const ISTIO_HTTP2: [&str; 3] = ["istio-h2", "istio", "h2"];

/// The ALPN protocols offered for `use_`: the context's own, Istio's HTTP override, or
/// when none are configured the protocol the HTTP pool speaks (as Envoy's fallback).
pub(crate) fn offered(context: &UpstreamTlsContext, use_: ClientAlpn) -> Vec<Vec<u8>> {
    let configured = &context.common.alpn_protocols;
    let istio = configured.iter().any(|p| p == ISTIO_MARKER);
    let names: Vec<&str> = match use_ {
        ClientAlpn::Http1 if istio => ISTIO_HTTP1.to_vec(),
        ClientAlpn::Http2 if istio => ISTIO_HTTP2.to_vec(),
        ClientAlpn::Http1 if configured.is_empty() => vec![alpn::HTTP11],
        ClientAlpn::Http2 if configured.is_empty() => vec![alpn::HTTP2],
        _ => configured.iter().map(String::as_str).collect(),
    };
    names.into_iter().map(|n| n.as_bytes().to_vec()).collect()
}

/// Builds the client config of `context` (without ALPN) from its resolved `material`.
pub(crate) fn client_config(context: &UpstreamTlsContext, material: &Material<'_>) -> Result<ClientConfig, TlsError> {
    let crypto = provider::provider();
    let check = match &material.validation {
        Some(validation) => PeerCheck::new(validation, crypto.clone())?,
        // Envoy: an upstream TLS context without a validation context trusts any server.
        None => PeerCheck::none(crypto.clone()),
    };
    let builder = ClientConfig::builder_with_provider(crypto.clone())
        .with_protocol_versions(&provider::versions(&context.common.tls_params))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ServerVerifier(check)));
    let mut config = match material.certificates.first() {
        Some(cert) => {
            let key = source::certified_key(cert, &crypto)?;
            builder.with_client_cert_resolver(Arc::new(OneCertificate(key)))
        }
        None => builder.with_no_client_auth(),
    };
    config.enable_sni = !context.sni.is_empty();
    Ok(config)
}

/// A client config that trusts any server, as an upstream TLS context without a validation
/// context does in Envoy (and as the kubelet's HTTPS probes do): only the handshake's own
/// signatures are checked.
pub fn unverified_client_config() -> Result<ClientConfig, TlsError> {
    let crypto = provider::provider();
    Ok(ClientConfig::builder_with_provider(crypto.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ServerVerifier(PeerCheck::none(crypto))))
        .with_no_client_auth())
}

/// The client certificate, presented whenever the server asks for one.
#[derive(Debug)]
struct OneCertificate(Arc<CertifiedKey>);

impl ResolvesClientCert for OneCertificate {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}
