//! Who the peer of a TLS connection is, as policies see it: the URI SANs (SPIFFE
//! identities), DNS SANs and subject of the certificate it presented, and the certificates
//! themselves (DER), which `x-forwarded-client-cert` carries (its hash, PEM, chain).

use std::fmt::Write as _;
use std::sync::Arc;

use x509_parser::extensions::GeneralName;
use x509_parser::x509::X509Name;

/// The identity a downstream peer proved with its certificate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PeerIdentity {
    /// URI SANs, in certificate order (`spiffe://cluster.local/ns/default/sa/app`).
    pub uri_sans: Vec<String>,
    pub dns_sans: Vec<String>,
    /// The subject in RFC 2253 form (`CN=app,O=example`), as Envoy prints it (OpenSSL's
    /// `XN_FLAG_RFC2253`: last RDN first, `,` between RDNs, `+` inside one).
    pub subject: String,
    /// The certificates the peer presented, DER, its own first (empty when only the
    /// identity is known). Shared: every request on the connection may quote them.
    pub certificates: Arc<[Vec<u8>]>,
}

impl PeerIdentity {
    /// Reads the identity from a DER certificate; `None` when it does not parse (the
    /// handshake verified it, so that only happens for certificates rustls accepts and
    /// x509-parser does not).
    pub fn of(der: &[u8]) -> Option<Self> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let mut identity =
            Self { subject: rfc2253(cert.subject()), certificates: Arc::from(vec![der.to_vec()]), ..Self::default() };
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

    /// [`Self::of`] the first certificate of a presented chain, keeping the whole chain
    /// (Envoy's `Chain=` of `x-forwarded-client-cert` quotes every certificate the peer sent).
    pub fn of_chain<C: AsRef<[u8]>>(chain: &[C]) -> Option<Self> {
        let mut identity = Self::of(chain.first()?.as_ref())?;
        identity.certificates = chain.iter().map(|c| c.as_ref().to_vec()).collect();
        Some(identity)
    }

    /// Envoy's "principal name" of the peer, as RBAC's `authenticated.principal_name`
    /// matches it: the first URI SAN, else the first DNS SAN, else the subject.
    pub fn principal_names(&self) -> impl Iterator<Item = &str> {
        self.uri_sans.iter().chain(&self.dns_sans).map(String::as_str).chain(std::iter::once(self.subject.as_str()))
    }

    /// The peer's own certificate (DER), when kept.
    pub fn certificate(&self) -> Option<&[u8]> {
        self.certificates.first().map(Vec::as_slice)
    }
}

/// A name as OpenSSL's `X509_NAME_print_ex(…, XN_FLAG_RFC2253)` writes it, which is what
/// Envoy reports as a peer's subject: RDNs in reverse order joined by `,`, the attributes
/// of one RDN by `+`, short names (`CN`, `O`…) or the dotted OID, values escaped as RFC 2253
/// says (and bytes outside printable ASCII as `\XX`); a value that is not a string is
/// dumped as `#` and the hex of its DER.
pub fn rfc2253(name: &X509Name<'_>) -> String {
    let mut out = String::new();
    let rdns: Vec<_> = name.iter().collect();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, attribute) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = attribute.attr_type().to_id_string();
            match short_name(&oid) {
                Some(short) => out.push_str(short),
                None => out.push_str(&oid),
            }
            out.push('=');
            match attribute.as_str() {
                Ok(value) => escape_value(value, &mut out),
                Err(_) => {
                    out.push('#');
                    let any = attribute.attr_value();
                    // The attribute's DER: tag, length, then the content.
                    let mut der = vec![any.header.tag().0 as u8];
                    let len = any.data.len();
                    if len < 0x80 {
                        der.push(len as u8);
                    } else {
                        let bytes: Vec<u8> = len.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
                        der.push(0x80 | bytes.len() as u8);
                        der.extend(bytes);
                    }
                    der.extend_from_slice(any.data);
                    der.iter().for_each(|b| {
                        let _ = write!(out, "{b:02X}");
                    });
                }
            }
        }
    }
    out
}

/// OpenSSL's short names of the attribute types certificates use.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.4" => "SN",
        "2.5.4.5" => "serialNumber",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "street",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.12" => "title",
        "2.5.4.15" => "businessCategory",
        "2.5.4.17" => "postalCode",
        "2.5.4.41" => "name",
        "2.5.4.42" => "GN",
        "2.5.4.43" => "initials",
        "2.5.4.44" => "generationQualifier",
        "2.5.4.46" => "dnQualifier",
        "2.5.4.65" => "pseudonym",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        "1.2.840.113549.1.9.1" => "emailAddress",
        _ => return None,
    })
}

/// RFC 2253 escaping as OpenSSL's `ASN1_STRFLGS_RFC2253`: `,+"\<>;` get a backslash, so
/// do a leading `#` or space and a trailing space; control and non-ASCII bytes (of the
/// UTF-8) become `\XX`.
fn escape_value(value: &str, out: &mut String) {
    let bytes = value.as_bytes();
    let last = bytes.len().saturating_sub(1);
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b',' | b'+' | b'"' | b'\\' | b'<' | b'>' | b';' => {
                out.push('\\');
                out.push(char::from(b));
            }
            b'#' if i == 0 => out.push_str("\\#"),
            b' ' if i == 0 || i == last => out.push_str("\\ "),
            0..0x20 | 0x7f.. => {
                let _ = write!(out, "\\{b:02X}");
            }
            _ => out.push(char::from(b)),
        }
    }
}
