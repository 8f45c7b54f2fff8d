//! TLS contexts of listeners (downstream) and clusters (upstream): protocol versions, the
//! certificates to present and how to verify the peer, each given inline or by SDS name.
//!
//! Outrider terminates TLS with rustls, so only TLS 1.2 and 1.3 exist here; the converter
//! refuses what cannot be honoured rather than silently weakening it.

use std::time::Duration;

use super::secret::{CertificateValidationContext, TlsCertificate};

/// Settings shared by both directions.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CommonTlsContext {
    pub tls_params: TlsParams,
    pub certificates: Certificates,
    /// How to verify the peer; `None` does not verify it (a client then trusts any server,
    /// a server requests no client certificate).
    pub validation: Option<Validation>,
    /// Offered (client) or accepted (server) ALPN protocols, in order of preference.
    pub alpn_protocols: Vec<String>,
}

/// The range of protocol versions to negotiate; `min <= max` always holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsParams {
    pub min: TlsVersion,
    pub max: TlsVersion,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// The certificates this side presents.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Certificates {
    #[default]
    None,
    /// `tls_certificates`: one or more (e.g. RSA and ECDSA), chosen per handshake.
    Inline(Vec<TlsCertificate>),
    /// `tls_certificate_sds_secret_configs`: Istio's `default`.
    Sds(Vec<SdsSecretConfig>),
}

/// Where the peer validation context comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Validation {
    Inline(CertificateValidationContext),
    Sds(SdsSecretConfig),
    /// Istio's form: SAN matchers given inline, trusted CAs from SDS (`ROOTCA`). The
    /// effective context is `secret.merged_over(&default)`.
    Combined {
        default: CertificateValidationContext,
        sds: SdsSecretConfig,
    },
}

/// A reference to a secret delivered by SDS.
#[derive(Debug, Clone, PartialEq)]
pub struct SdsSecretConfig {
    pub name: String,
    pub source: SdsSource,
    /// How long a listener or cluster waits for this secret before it is served without it.
    /// `None` (Envoy's `0s`, Istio's setting) waits forever; unset is Envoy's 15 s.
    pub initial_fetch_timeout: Option<Duration>,
}

/// The server an SDS secret is fetched from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SdsSource {
    /// The ADS stream that delivers the rest of the configuration.
    Ads,
    /// A separate gRPC SDS stream to a (usually bootstrap) cluster. Istio serves SDS from
    /// its agent on the Unix-socket cluster `sds-grpc`, never on the xDS stream.
    Grpc { cluster_name: String, delta: bool },
    /// No `sds_config`: the secret is one of the bootstrap's `static_resources.secrets`.
    Bootstrap,
}

/// A cluster's `envoy.transport_sockets.tls` configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamTlsContext {
    pub common: CommonTlsContext,
    /// Server name to send; empty sends none.
    pub sni: String,
}

/// A listener filter chain's `envoy.transport_sockets.tls` configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct DownstreamTlsContext {
    pub common: CommonTlsContext,
    /// Refuse clients without a valid certificate (mTLS). Envoy's default: false.
    pub require_client_certificate: bool,
    /// Refuse clients that send no SNI. Envoy's default: false.
    pub require_sni: bool,
}

// === impl TlsParams ===

impl TlsParams {
    /// Envoy's defaults for a client: TLS 1.2 only.
    pub const CLIENT_DEFAULT: TlsParams = TlsParams { min: TlsVersion::Tls12, max: TlsVersion::Tls12 };
    /// Envoy's defaults for a server: TLS 1.2 and 1.3.
    pub const SERVER_DEFAULT: TlsParams = TlsParams { min: TlsVersion::Tls12, max: TlsVersion::Tls13 };

    /// Whether `version` may be negotiated.
    pub fn allows(&self, version: TlsVersion) -> bool {
        (self.min..=self.max).contains(&version)
    }
}

impl Default for TlsParams {
    fn default() -> Self {
        Self::SERVER_DEFAULT
    }
}

// === impl CommonTlsContext ===

impl CommonTlsContext {
    /// The SDS secrets this context refers to: certificates first, then validation.
    pub fn secret_names(&self) -> Vec<&str> {
        self.sds_secret_configs().into_iter().map(|c| c.name.as_str()).collect()
    }

    /// The SDS references of this context, for subscribing on the right stream.
    pub fn sds_secret_configs(&self) -> Vec<&SdsSecretConfig> {
        let certificates = match &self.certificates {
            Certificates::Sds(configs) => configs.as_slice(),
            Certificates::None | Certificates::Inline(_) => &[],
        };
        let validation = match &self.validation {
            Some(Validation::Sds(sds) | Validation::Combined { sds, .. }) => Some(sds),
            Some(Validation::Inline(_)) | None => None,
        };
        certificates.iter().chain(validation).collect()
    }
}

// === impl UpstreamTlsContext / DownstreamTlsContext ===

impl Default for UpstreamTlsContext {
    fn default() -> Self {
        let common = CommonTlsContext { tls_params: TlsParams::CLIENT_DEFAULT, ..Default::default() };
        Self { common, sni: String::new() }
    }
}

impl Default for DownstreamTlsContext {
    fn default() -> Self {
        let common = CommonTlsContext { tls_params: TlsParams::SERVER_DEFAULT, ..Default::default() };
        Self { common, require_client_certificate: false, require_sni: false }
    }
}
