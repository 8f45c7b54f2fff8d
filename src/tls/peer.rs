//! Who the peer of a TLS connection is, as policies see it: the URI SANs (SPIFFE
//! identities), DNS SANs and subject of the certificate it presented.

use x509_parser::extensions::GeneralName;

/// The identity a downstream peer proved with its certificate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PeerIdentity {
    /// URI SANs, in certificate order (`spiffe://cluster.local/ns/default/sa/app`).
    pub uri_sans: Vec<String>,
    pub dns_sans: Vec<String>,
    /// The subject in RFC 2253 form (`CN=app,O=example`).
    pub subject: String,
}

impl PeerIdentity {
    /// Reads the identity from a DER certificate; `None` when it does not parse (the
    /// handshake verified it, so that only happens for certificates rustls accepts and
    /// x509-parser does not).
    pub fn of(der: &[u8]) -> Option<Self> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let mut identity = Self { subject: cert.subject().to_string(), ..Self::default() };
        if let Ok(Some(extension)) = cert.subject_alternative_name() {
            for name in &extension.value.general_names {
                match name {
                    GeneralName::URI(uri) => identity.uri_sans.push((*uri).to_owned()),
                    GeneralName::DNSName(dns) => identity.dns_sans.push((*dns).to_owned()),
                    _ => {}
                }
            }
        }
        Some(identity)
    }

    /// Envoy's "principal name" of the peer, as RBAC's `authenticated.principal_name`
    /// matches it: the first URI SAN, else the first DNS SAN, else the subject.
    pub fn principal_names(&self) -> impl Iterator<Item = &str> {
        self.uri_sans.iter().chain(&self.dns_sans).map(String::as_str).chain(std::iter::once(self.subject.as_str()))
    }
}
