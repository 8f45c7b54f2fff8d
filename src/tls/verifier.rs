//! Peer certificate checks, as Envoy's default certificate validator makes them: the chain
//! must lead to a trusted CA (webpki: signatures, validity dates, key usage), and then the
//! certificate must carry a SAN one of the matchers accepts. There is no host-name check
//! against SNI: a mesh authorizes peers by identity (SPIFFE URI SAN), not by name.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::server::ParsedCertificate;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, OtherError, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use super::san::{SanMismatch, Sans};
use super::{TlsError, source};
use crate::config::secret::{CertificateValidationContext, SanMatcher, TrustChainVerification};

/// What a validation context asks of a peer certificate.
#[derive(Debug)]
pub(crate) struct PeerCheck {
    /// `None`: no trusted CA, so the chain is not verified (and no SAN matchers exist).
    roots: Option<Arc<rustls::RootCertStore>>,
    matchers: Vec<SanMatcher>,
    accept_untrusted: bool,
    max_verify_depth: Option<u32>,
    provider: Arc<CryptoProvider>,
}

impl PeerCheck {
    pub fn new(context: &CertificateValidationContext, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let roots = context.trusted_ca.as_ref().map(source::roots).transpose()?;
        if roots.is_none() && !context.match_subject_alt_names.is_empty() {
            return Err(TlsError::SanWithoutCa);
        }
        Ok(Self {
            roots,
            matchers: context.match_subject_alt_names.clone(),
            accept_untrusted: context.trust_chain_verification == TrustChainVerification::AcceptUntrusted,
            max_verify_depth: context.max_verify_depth,
            provider,
        })
    }

    /// Checks nothing but the handshake signatures: a client without a validation context
    /// trusts any server, as Envoy does.
    pub fn none(provider: Arc<CryptoProvider>) -> Self {
        Self { roots: None, matchers: Vec::new(), accept_untrusted: false, max_verify_depth: None, provider }
    }

    /// Envoy counts the chain without the leaf and with the trust anchor; the anchor is
    /// rarely sent, so a presented chain of n intermediates needs depth n + 1.
    fn check_depth(&self, intermediates: &[CertificateDer<'_>]) -> Result<(), Error> {
        match self.max_verify_depth {
            Some(depth) if intermediates.len() as u64 >= u64::from(depth) => {
                Err(Error::InvalidCertificate(CertificateError::UnknownIssuer))
            }
            _ => Ok(()),
        }
    }

    fn check_names(&self, end_entity: &CertificateDer<'_>) -> Result<(), Error> {
        if self.matchers.is_empty() {
            return Ok(());
        }
        let sans = Sans::of(end_entity).map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
        if sans.accepted_by(&self.matchers) {
            Ok(())
        } else {
            let mismatch = SanMismatch { presented: sans };
            Err(Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(mismatch)))))
        }
    }

    fn signature_12(&self, m: &[u8], c: &CertificateDer<'_>, d: &DigitallySignedStruct) -> SignatureResult {
        verify_tls12_signature(m, c, d, &self.provider.signature_verification_algorithms)
    }

    fn signature_13(&self, m: &[u8], c: &CertificateDer<'_>, d: &DigitallySignedStruct) -> SignatureResult {
        verify_tls13_signature(m, c, d, &self.provider.signature_verification_algorithms)
    }

    fn schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

type SignatureResult = Result<HandshakeSignatureValid, Error>;

// === impl ServerVerifier ===

/// How a client (upstream TLS) checks the server it connected to.
#[derive(Debug)]
pub(crate) struct ServerVerifier(pub PeerCheck);

impl ServerCertVerifier for ServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let check = &self.0;
        if let Some(roots) = &check.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            let algorithms = check.provider.signature_verification_algorithms.all;
            let chain =
                rustls::client::verify_server_cert_signed_by_trust_anchor(&cert, roots, intermediates, now, algorithms)
                    .and_then(|()| check.check_depth(intermediates));
            if let Err(error) = chain
                && !check.accept_untrusted
            {
                return Err(error);
            }
        }
        check.check_names(end_entity)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(&self, m: &[u8], c: &CertificateDer<'_>, d: &DigitallySignedStruct) -> SignatureResult {
        self.0.signature_12(m, c, d)
    }

    fn verify_tls13_signature(&self, m: &[u8], c: &CertificateDer<'_>, d: &DigitallySignedStruct) -> SignatureResult {
        self.0.signature_13(m, c, d)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.schemes()
    }
}

// === impl ClientVerifier ===

/// How a server (downstream TLS) checks client certificates.
#[derive(Debug)]
pub(crate) struct ClientVerifier {
    check: PeerCheck,
    /// webpki's client verifier for the chain (it checks the clientAuth key usage).
    chain: Option<Arc<dyn ClientCertVerifier>>,
    mandatory: bool,
}

impl ClientVerifier {
    /// `mandatory`: refuse clients without a certificate (`require_client_certificate`).
    pub fn new(check: PeerCheck, mandatory: bool) -> Result<Self, TlsError> {
        let chain = match &check.roots {
            Some(roots) => Some(
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), check.provider.clone())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| TlsError::TrustedCa(e.to_string()))?,
            ),
            None => None,
        };
        Ok(Self { check, chain, mandatory })
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.chain.as_ref().map_or(&[], |c| c.root_hint_subjects())
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let check = &self.check;
        if let Some(chain) = &self.chain {
            let verified =
                chain.verify_client_cert(end_entity, intermediates, now).and_then(|_| check.check_depth(intermediates));
            if let Err(error) = verified
                && !check.accept_untrusted
            {
                return Err(error);
            }
        }
        check.check_names(end_entity)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(&self, m: &[u8], c: &CertificateDer<'_>, d: &DigitallySignedStruct) -> SignatureResult {
        self.check.signature_12(m, c, d)
    }

    fn verify_tls13_signature(&self, m: &[u8], c: &CertificateDer<'_>, d: &DigitallySignedStruct) -> SignatureResult {
        self.check.signature_13(m, c, d)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.check.schemes()
    }
}
