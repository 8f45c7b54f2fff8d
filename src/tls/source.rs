//! Reading certificates, keys and CA bundles from where a [`DataSource`] says they are,
//! and parsing their PEM. Files and environment variables are read when a config is built
//! (a new context or secret version), never per handshake.

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsError;
use crate::config::secret::{DataSource, TlsCertificate};

/// The bytes behind `source`; `what` names it in errors.
pub(crate) fn read(source: &DataSource, what: &str) -> Result<Vec<u8>, TlsError> {
    let failed = |reason: String| TlsError::Source { what: what.to_owned(), reason };
    match source {
        DataSource::InlineBytes(bytes) => Ok(bytes.clone()),
        DataSource::InlineString(text) => Ok(text.as_bytes().to_vec()),
        DataSource::Filename(path) => std::fs::read(path).map_err(|e| failed(format!("{}: {e}", path.display()))),
        DataSource::EnvironmentVariable(name) => {
            std::env::var(name).map(String::into_bytes).map_err(|e| failed(format!("${name}: {e}")))
        }
    }
}

/// Every certificate of a PEM bundle, in order.
pub(crate) fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Source { what: what.to_owned(), reason: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::NoPem { what: what.to_owned(), kind: "certificate" });
    }
    Ok(certs)
}

/// The first URI SAN of the leaf certificate a context presents (its first
/// `tls_certificates` entry): the proxy's own SPIFFE identity in a mesh, which Istio's
/// telemetry reports as the local principal. `None` when there is none or it cannot be
/// read (the config build reports unreadable certificates itself).
pub(crate) fn local_uri_san(certificates: &[std::borrow::Cow<'_, TlsCertificate>]) -> Option<Arc<str>> {
    let first = certificates.first()?;
    let pem = read(&first.certificate_chain, "certificate_chain").ok()?;
    let leaf = CertificateDer::pem_slice_iter(&pem).next()?.ok()?;
    let identity = super::PeerIdentity::of(&leaf)?;
    identity.uri_sans.into_iter().next().map(Arc::from)
}

/// A certificate chain with its private key, ready to present.
pub(crate) fn certified_key(
    certificate: &TlsCertificate,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = certificates(&read(&certificate.certificate_chain, "certificate_chain")?, "certificate_chain")?;
    let key_pem = read(certificate.private_key.source(), "private_key")?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Source {
        what: "private_key".to_owned(),
        // The key's bytes never reach an error message; the parser's reason names no data.
        reason: e.to_string(),
    })?;
    let key = CertifiedKey::from_der(chain, key, provider).map_err(|e| TlsError::Key(e.to_string()))?;
    Ok(Arc::new(key))
}

/// The trust anchors of a CA bundle.
pub fn roots(trusted_ca: &DataSource) -> Result<Arc<RootCertStore>, TlsError> {
    let pem = read(trusted_ca, "trusted_ca")?;
    let mut roots = RootCertStore::empty();
    for cert in certificates(&pem, "trusted_ca")? {
        roots.add(cert).map_err(|e| TlsError::TrustedCa(e.to_string()))?;
    }
    Ok(Arc::new(roots))
}
