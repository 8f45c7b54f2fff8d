//! A listener filter chain's `DownstreamTlsContext` → rustls `ServerConfig`.

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::{ClientHello, NoClientAuth, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::secrets::Material;
use super::verifier::{ClientVerifier, PeerCheck};
use super::{TlsError, provider, source};
use crate::config::tls::DownstreamTlsContext;

/// Builds the server config of `context` from its resolved `material`.
pub(crate) fn server_config(context: &DownstreamTlsContext, material: &Material<'_>) -> Result<ServerConfig, TlsError> {
    let crypto = provider::provider();
    let keys =
        material.certificates.iter().map(|cert| source::certified_key(cert, &crypto)).collect::<Result<Vec<_>, _>>()?;
    if keys.is_empty() {
        return Err(TlsError::NoServerCertificate);
    }
    let builder = ServerConfig::builder_with_provider(crypto.clone())
        .with_protocol_versions(&provider::versions(&context.common.tls_params))?;
    let builder = match &material.validation {
        Some(validation) => {
            let check = PeerCheck::new(validation, crypto.clone())?;
            builder.with_client_cert_verifier(Arc::new(ClientVerifier::new(check, context.require_client_certificate)?))
        }
        // Envoy without a validation context but requiring a certificate asks for one and
        // accepts any (its chain cannot be checked against anything).
        None if context.require_client_certificate => {
            builder.with_client_cert_verifier(Arc::new(ClientVerifier::new(PeerCheck::none(crypto.clone()), true)?))
        }
        None => builder.with_client_cert_verifier(Arc::new(NoClientAuth)),
    };
    let mut config = builder.with_cert_resolver(Arc::new(CertificateSet(keys)));
    config.alpn_protocols = context.common.alpn_protocols.iter().map(|p| p.as_bytes().to_vec()).collect();
    Ok(config)
}

/// Several certificates (say RSA and ECDSA): the first the client can verify is presented,
/// as Envoy chooses among `tls_certificates`.
#[derive(Debug)]
struct CertificateSet(Vec<Arc<CertifiedKey>>);

impl ResolvesServerCert for CertificateSet {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let schemes = hello.signature_schemes();
        self.0.iter().find(|key| key.key.choose_scheme(schemes).is_some()).or_else(|| self.0.first()).cloned()
    }
}
