//! The one crypto provider of the binary: `ring`.
//!
//! rustls needs a provider for key exchange, ciphers and signatures. Outrider compiles in
//! exactly one so that nothing picks a different one by accident: `ring` builds in seconds
//! with a plain C compiler, while `aws-lc-rs` adds a cmake build of AWS-LC (tens of seconds
//! on every cold build) for no feature Outrider uses (no FIPS mode, no post-quantum key
//! exchange requirement). Every config is built with [`provider`] explicitly, and
//! [`install_default`] also installs it as the process default, so a library that asks
//! rustls for "the" provider gets the same one.

use std::sync::Arc;

use rustls::SupportedProtocolVersion;
use rustls::crypto::CryptoProvider;

use crate::config::tls::{TlsParams, TlsVersion};

/// The provider every config is built with.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs [`provider`] as the process-wide default. Idempotent: a second call (another
/// in-process instance, as tests start) finds it installed and changes nothing.
pub fn install_default() {
    if CryptoProvider::get_default().is_none() {
        // Losing a race to another thread installing the same provider is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The protocol versions `params` allows, newest first.
pub(crate) fn versions(params: &TlsParams) -> Vec<&'static SupportedProtocolVersion> {
    let mut versions = Vec::with_capacity(2);
    if params.allows(TlsVersion::Tls13) {
        versions.push(&rustls::version::TLS13);
    }
    if params.allows(TlsVersion::Tls12) {
        versions.push(&rustls::version::TLS12);
    }
    versions
}
