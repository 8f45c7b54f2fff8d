//! `x-forwarded-client-cert` as Envoy's `mutateXfccRequestHeader` writes it:
//! `forward_client_cert_details` says whether the client's header is removed, kept,
//! appended to or replaced, and `set_current_client_cert_details` what this hop adds of
//! the client's certificate — `By=<our URI SAN>;Hash=<SHA-256 of the peer's DER>` then, in
//! Envoy's fixed order, `Cert="…"`, `Chain="…"` (URL-encoded PEM), `Subject="…"`, `URI=…`
//! (one per URI SAN; empty when it has none), `DNS=…` (one per DNS SAN).

use std::fmt::Write as _;

use base64::Engine as _;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::listener::http_connection_manager::{ForwardClientCertDetails, HttpConnectionManager};
use crate::tls::PeerIdentity;

pub(crate) const X_FORWARDED_CLIENT_CERT: HeaderName = HeaderName::from_static("x-forwarded-client-cert");

/// Applies `forward_client_cert_details` to `headers`. `tls`: the connection is TLS;
/// `peer`: the certificate the client presented on it; `local_uri_san`: the first URI
/// SAN of the certificate this side presented.
pub(super) fn mutate(
    hcm: &HttpConnectionManager,
    tls: bool,
    peer: Option<&PeerIdentity>,
    local_uri_san: Option<&str>,
    headers: &mut HeaderMap,
) {
    use ForwardClientCertDetails as F;
    let mode = hcm.forward_client_cert_details;
    if mode == F::AlwaysForwardOnly {
        return;
    }
    // Without mutual TLS nothing a client wrote is believed, whatever the mode (only
    // ALWAYS_FORWARD_ONLY above trusts it).
    let peer = match (mode, peer.filter(|_| tls)) {
        (F::Sanitize, _) | (_, None) => {
            headers.remove(X_FORWARDED_CLIENT_CERT);
            return;
        }
        (_, Some(peer)) => peer,
    };
    let value = match mode {
        F::ForwardOnly | F::Sanitize | F::AlwaysForwardOnly => return,
        F::AppendForward | F::SanitizeSet => details(hcm, peer, local_uri_san),
    };
    if mode == F::AppendForward {
        // Envoy's header map joins repeated lines with `,`, and appends with `,`.
        super::append_list(headers, X_FORWARDED_CLIENT_CERT, &value, ",");
    } else if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(X_FORWARDED_CLIENT_CERT, value);
    } else {
        // Never forward what the client wrote in place of what this hop would say.
        headers.remove(X_FORWARDED_CLIENT_CERT);
    }
}

/// This hop's element: `;`-separated `key=value` pairs in Envoy's order.
fn details(hcm: &HttpConnectionManager, peer: &PeerIdentity, local_uri_san: Option<&str>) -> String {
    let wanted = hcm.set_current_client_cert_details;
    let mut parts: Vec<String> = Vec::new();
    if let Some(by) = local_uri_san.filter(|s| !s.is_empty()) {
        parts.push(format!("By={by}"));
    }
    if let Some(der) = peer.certificate() {
        parts.push(format!("Hash={}", sha256_hex(der)));
    }
    if wanted.cert
        && let Some(der) = peer.certificate()
    {
        parts.push(format!("Cert=\"{}\"", url_encode(&pem(der))));
    }
    if wanted.chain && !peer.certificates.is_empty() {
        let chain: String = peer.certificates.iter().map(|der| url_encode(&pem(der))).collect();
        parts.push(format!("Chain=\"{chain}\""));
    }
    if wanted.subject {
        // Present even when the subject is empty, as Envoy.
        parts.push(format!("Subject=\"{}\"", peer.subject));
    }
    if wanted.uri {
        if peer.uri_sans.is_empty() {
            parts.push("URI=".to_owned());
        }
        parts.extend(peer.uri_sans.iter().map(|uri| format!("URI={uri}")));
    }
    if wanted.dns {
        parts.extend(peer.dns_sans.iter().map(|dns| format!("DNS={dns}")));
    }
    parts.join(";")
}

/// Lower-case hex of the SHA-256 of `der` (Envoy's `sha256PeerCertificateDigest`).
fn sha256_hex(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    let mut hex = String::with_capacity(64);
    digest.as_ref().iter().for_each(|b| {
        let _ = write!(hex, "{b:02x}");
    });
    hex
}

/// A certificate as OpenSSL's `PEM_write_bio_X509` writes it: 64 base64 characters a
/// line, each line ending in `\n`.
fn pem(der: &[u8]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in encoded.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Envoy's `PercentEncoding::urlEncode`: everything but RFC 3986's unreserved characters
/// as `%XX` (upper-case hex), so PEM's `+`, `/`, `=`, spaces and newlines.
fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::listener::http_connection_manager::ClientCertDetails;
    use crate::proxy::headers::tests::hcm;

    fn peer() -> PeerIdentity {
        PeerIdentity {
            uri_sans: vec!["spiffe://cluster.local/ns/a/sa/client".into()],
            dns_sans: vec!["one.test".into(), "two.test".into()],
            subject: "CN=client,O=example".into(),
            certificates: std::sync::Arc::from(vec![b"leaf".to_vec(), b"root".to_vec()]),
        }
    }

    fn run(
        mode: ForwardClientCertDetails,
        tls: bool,
        peer: Option<&PeerIdentity>,
        client: Option<&str>,
    ) -> Option<String> {
        let mut config = hcm();
        config.forward_client_cert_details = mode;
        config.set_current_client_cert_details =
            ClientCertDetails { subject: true, dns: true, uri: true, ..Default::default() };
        let mut headers = HeaderMap::new();
        if let Some(client) = client {
            headers.insert(X_FORWARDED_CLIENT_CERT, client.parse().unwrap());
        }
        mutate(&config, tls, peer, Some("spiffe://cluster.local/ns/b/sa/server"), &mut headers);
        headers.get(X_FORWARDED_CLIENT_CERT).map(|v| v.to_str().unwrap().to_owned())
    }

    #[test]
    fn modes_on_plaintext_and_mutual_tls() {
        use ForwardClientCertDetails as F;
        let forged = Some("By=x;URI=spiffe://cluster.local/ns/kube-system/sa/admin");
        for mode in [F::Sanitize, F::ForwardOnly, F::AppendForward, F::SanitizeSet] {
            assert_eq!(run(mode, false, None, forged), None, "{mode:?} on plaintext removes it");
        }
        assert_eq!(run(F::AlwaysForwardOnly, false, None, forged).as_deref(), forged);
        let peer = peer();
        assert_eq!(run(F::Sanitize, true, Some(&peer), forged), None);
        assert_eq!(run(F::ForwardOnly, true, Some(&peer), forged).as_deref(), forged);
        let own = format!(
            "By=spiffe://cluster.local/ns/b/sa/server;Hash={};Subject=\"CN=client,O=example\";\
             URI=spiffe://cluster.local/ns/a/sa/client;DNS=one.test;DNS=two.test",
            sha256_hex(b"leaf")
        );
        assert_eq!(run(F::SanitizeSet, true, Some(&peer), forged), Some(own.clone()));
        assert_eq!(run(F::AppendForward, true, Some(&peer), None), Some(own.clone()));
        assert_eq!(run(F::AppendForward, true, Some(&peer), Some("By=a")), Some(format!("By=a,{own}")));
    }

    #[test]
    fn pem_is_url_encoded() {
        assert_eq!(url_encode("-----BEGIN A+/=\n"), "-----BEGIN%20A%2B%2F%3D%0A");
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
