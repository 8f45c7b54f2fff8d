//! One certificate from istiod's CA, asked for as pilot-agent asks: a fresh ECDSA P-256 key,
//! a CSR whose only SAN is the workload's SPIFFE identity, and
//! `istio.v1.auth.IstioCertificateService/CreateCertificate` with the pod's token as
//! `authorization: Bearer …` and the cluster's id as `ClusterID`. The answer is checked
//! before it is used: a chain that does not name the identity asked for is refused.

use std::sync::Arc;
use std::time::SystemTime;

use rcgen::{CertificateParams, DistinguishedName, KeyPair, PublicKeyData, SanType, string::Ia5String};
use tonic::transport::Channel;

use super::settings::AgentSettings;
use crate::pb::istio_ca::IstioCertificateRequest;
use crate::pb::istio_ca::istio_certificate_service_client::IstioCertificateServiceClient;

/// Why a certificate could not be had. Every one is retried by the rotation loop.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("root certificate {0}")]
    Root(String),
    #[error("header {0}")]
    Header(String),
    #[error("{0}")]
    Token(String),
    #[error("CSR: {0}")]
    Csr(String),
    #[error("CreateCertificate: {0}")]
    Call(#[from] tonic::Status),
    #[error("CreateCertificate answered {0}")]
    Response(String),
    #[error("channel to the CA: {0}")]
    Channel(#[from] super::channel::ChannelError),
}

/// A workload certificate and what goes with it, all PEM.
#[derive(Clone)]
pub struct Issued {
    /// The private key (PKCS#8); it never leaves the process unless `OUTPUT_CERTS` says so.
    pub key_pem: String,
    /// The workload certificate, then any intermediates.
    pub chain_pem: String,
    /// The trust anchor: the last certificate of the CA's answer (or the configured root
    /// when the CA sent the leaf alone).
    pub root_pem: String,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// When the answer arrived: renewal counts from here, not from `not_before`, which a CA
    /// may backdate (istiod backdates by two minutes against clock skew).
    pub received: SystemTime,
}

impl std::fmt::Debug for Issued {
    // Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").field("not_before", &self.not_before).field("not_after", &self.not_after).finish()
    }
}

/// The client of istiod's certificate service.
#[derive(Clone)]
pub struct CaClient {
    settings: Arc<AgentSettings>,
    channel: Channel,
}

impl CaClient {
    /// A client over a lazily connected TLS channel to `settings.ca_address`.
    pub fn new(settings: Arc<AgentSettings>) -> Result<Self, CaError> {
        let channel =
            super::channel::secure_channel(&settings.ca_address, &settings.ca_server_name, &settings.root_cert)?;
        Ok(Self { settings, channel })
    }

    /// Asks for a new certificate with a new key.
    pub async fn issue(&self) -> Result<Issued, CaError> {
        let settings = &self.settings;
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| CaError::Csr(e.to_string()))?;
        let csr = csr(&key, &settings.identity)?;
        let bearer = settings.bearer().map_err(CaError::Token)?;
        let cluster = settings
            .cluster_id
            .parse()
            .map_err(|_| CaError::Header(format!("cluster id {:?}: not a header value", settings.cluster_id)))?;
        let validity = i64::try_from(settings.ttl.as_secs()).unwrap_or(i64::MAX);
        let mut request =
            tonic::Request::new(IstioCertificateRequest { csr, validity_duration: validity, metadata: None });
        request.metadata_mut().insert("authorization", bearer);
        request.metadata_mut().insert("clusterid", cluster);
        let response = IstioCertificateServiceClient::new(self.channel.clone()).create_certificate(request).await?;
        let chain = response.into_inner().cert_chain;
        issued(&key, &settings.identity, &chain, &settings.root_cert)
    }
}

/// A PEM CSR for `identity` (its only SAN, the subject left empty as pilot-agent's).
fn csr(key: &KeyPair, identity: &str) -> Result<String, CaError> {
    let uri = Ia5String::try_from(identity).map_err(|e| CaError::Csr(format!("{identity:?}: {e}")))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.subject_alt_names = vec![SanType::URI(uri)];
    params.serialize_request(key).and_then(|r| r.pem()).map_err(|e| CaError::Csr(e.to_string()))
}

/// Checks the CA's answer and assembles what the proxy serves.
fn issued(key: &KeyPair, identity: &str, chain: &[String], root_file: &std::path::Path) -> Result<Issued, CaError> {
    let pems: Vec<&str> = chain.iter().map(|c| c.trim()).filter(|c| !c.is_empty()).collect();
    let Some(leaf_pem) = pems.first() else {
        return Err(CaError::Response("an empty chain".into()));
    };
    let (_, pem) = x509_parser::pem::parse_x509_pem(leaf_pem.as_bytes())
        .map_err(|e| CaError::Response(format!("a leaf that is not PEM: {e}")))?;
    let leaf = pem.parse_x509().map_err(|e| CaError::Response(format!("a leaf that is not X.509: {e}")))?;
    if leaf.public_key().raw != key.subject_public_key_info().as_slice() {
        return Err(CaError::Response("a certificate for another key".into()));
    }
    let uris = crate::tls::PeerIdentity::of(&pem.contents).map(|peer| peer.uri_sans).unwrap_or_default();
    if !uris.iter().any(|u| u == identity) {
        return Err(CaError::Response(format!("a certificate for {uris:?}, not {identity}")));
    }
    let validity = leaf.validity();
    let at = |t: x509_parser::time::ASN1Time| {
        u64::try_from(t.timestamp())
            .ok()
            .and_then(|s| SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(s)))
            .ok_or_else(|| CaError::Response(format!("a validity time out of range: {t}")))
    };
    let (not_before, not_after) = (at(validity.not_before)?, at(validity.not_after)?);
    // The last certificate is the root when there is more than one; it is not sent to peers
    // (istiod's answer repeats it: its signing chain ends with the root, then the root).
    let (served, root_pem) = match pems.split_last() {
        Some((root, rest)) if !rest.is_empty() => {
            let served: Vec<&str> = rest.iter().copied().filter(|pem| pem != root).collect();
            (served, format!("{root}\n"))
        }
        _ => {
            let root = std::fs::read_to_string(root_file)
                .map_err(|e| CaError::Root(format!("{}: {e}", root_file.display())))?;
            (pems.clone(), root)
        }
    };
    Ok(Issued {
        key_pem: key.serialize_pem(),
        chain_pem: served.iter().map(|p| format!("{p}\n")).collect(),
        root_pem,
        not_before,
        not_after,
        received: SystemTime::now(),
    })
}

#[cfg(test)]
mod tests;
