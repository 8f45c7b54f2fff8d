//! Why handshakes were refused, counted per reason with Envoy's `ssl.*` stat names, and the
//! one log line each refusal writes.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use rustls::{CertificateError, Error};

use super::san::SanMismatch;

/// Why a TLS handshake did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The peer sent no certificate where one is required (`ssl.fail_verify_no_cert`).
    NoCertificate,
    /// The peer's chain did not verify: unknown CA, expired, bad signature
    /// (`ssl.fail_verify_error`).
    VerifyError,
    /// The peer's certificate has no SAN the matchers accept (`ssl.fail_verify_san`).
    VerifySan,
    /// Any other handshake failure: not TLS, no common protocol version or cipher, an alert
    /// from the peer, a reset (`ssl.connection_error`).
    ConnectionError,
    /// The handshake did not finish in time (`downstream_cx_transport_socket_connect_timeout`).
    Timeout,
    /// The chain requires SNI and the client sent none.
    MissingSni,
    /// The TLS config could not be built (a secret missing or unusable).
    NoConfig,
}

const REFUSALS: [Refusal; 7] = [
    Refusal::NoCertificate,
    Refusal::VerifyError,
    Refusal::VerifySan,
    Refusal::ConnectionError,
    Refusal::Timeout,
    Refusal::MissingSni,
    Refusal::NoConfig,
];

/// Handshake counters of one side (downstream or upstream), shared by every worker.
#[derive(Debug, Default)]
pub struct TlsStats {
    handshakes: AtomicU64,
    refused: [AtomicU64; REFUSALS.len()],
}

impl TlsStats {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn handshake(&self) {
        self.handshakes.fetch_add(1, Ordering::Relaxed);
    }

    pub fn refused(&self, refusal: Refusal) {
        self.refused[refusal as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Completed handshakes (`ssl.handshake`).
    pub fn handshakes(&self) -> u64 {
        self.handshakes.load(Ordering::Relaxed)
    }

    pub fn refusals(&self, refusal: Refusal) -> u64 {
        self.refused[refusal as usize].load(Ordering::Relaxed)
    }

    /// Every counter by its stat name, for display.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut all = vec![("ssl.handshake", self.handshakes())];
        all.extend(REFUSALS.iter().map(|r| (r.stat_name(), self.refusals(*r))));
        all
    }
}

impl Refusal {
    /// Classifies the error a rustls handshake ended with.
    pub fn of(error: &io::Error) -> Self {
        match error.get_ref().and_then(|e| e.downcast_ref::<Error>()) {
            Some(Error::NoCertificatesPresented) => Self::NoCertificate,
            Some(Error::InvalidCertificate(CertificateError::Other(other)))
                if other.0.downcast_ref::<SanMismatch>().is_some() =>
            {
                Self::VerifySan
            }
            Some(Error::InvalidCertificate(_)) => Self::VerifyError,
            _ => Self::ConnectionError,
        }
    }

    pub fn stat_name(self) -> &'static str {
        match self {
            Self::NoCertificate => "ssl.fail_verify_no_cert",
            Self::VerifyError => "ssl.fail_verify_error",
            Self::VerifySan => "ssl.fail_verify_san",
            Self::ConnectionError => "ssl.connection_error",
            Self::Timeout => "ssl.handshake_timeout",
            Self::MissingSni => "ssl.missing_sni",
            Self::NoConfig => "ssl.no_config",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.stat_name())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::tls::san::Sans;

    fn wrapped(error: Error) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, error)
    }

    #[test]
    fn handshake_errors_are_classified_as_envoy_counts_them() {
        let san = SanMismatch { presented: Sans(Vec::new()) };
        let cases = [
            (Error::NoCertificatesPresented, Refusal::NoCertificate),
            (Error::InvalidCertificate(CertificateError::UnknownIssuer), Refusal::VerifyError),
            (Error::InvalidCertificate(CertificateError::Expired), Refusal::VerifyError),
            (Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(san)))), Refusal::VerifySan),
            (Error::General("x".into()), Refusal::ConnectionError),
        ];
        for (error, refusal) in cases {
            assert_eq!(Refusal::of(&wrapped(error)), refusal);
        }
        assert_eq!(Refusal::of(&io::Error::from(io::ErrorKind::ConnectionReset)), Refusal::ConnectionError);
    }

    #[test]
    fn counters_count_per_reason() {
        let stats = TlsStats::new();
        stats.refused(Refusal::VerifySan);
        stats.refused(Refusal::VerifySan);
        stats.handshake();
        assert_eq!(stats.refusals(Refusal::VerifySan), 2);
        assert_eq!(stats.refusals(Refusal::Timeout), 0);
        assert_eq!(stats.handshakes(), 1);
    }
}
