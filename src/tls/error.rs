//! Why a TLS config could not be built.

/// A TLS context that cannot be turned into a rustls config with the secrets at hand.
/// Connections that need it are refused (and logged); the proxy keeps running.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("secret {0:?} has not been received")]
    SecretMissing(String),
    #[error("secret {name:?} is not a {expected}")]
    SecretKind { name: String, expected: &'static str },
    #[error("{what}: {reason}")]
    Source { what: String, reason: String },
    #[error("{what}: no PEM {kind} found")]
    NoPem { what: String, kind: &'static str },
    #[error("private key does not fit its certificate or is not supported: {0}")]
    Key(String),
    #[error("trusted CA: {0}")]
    TrustedCa(String),
    #[error("SAN matchers need a trusted CA (matching names on an unverified chain proves nothing)")]
    SanWithoutCa,
    #[error("a server needs a certificate")]
    NoServerCertificate,
    #[error("rustls: {0}")]
    Rustls(#[from] rustls::Error),
}
