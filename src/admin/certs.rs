//! `/certs`: the certificates in use (static and SDS secrets), in Envoy's shape: one entry
//! per secret with `ca_cert` (a validation context's trusted CAs) or `cert_chain` (a
//! certificate to present), each certificate with its serial number, SANs, days until
//! expiration, `valid_from` and `expiration_time`.
//!
//! Envoy groups them by TLS context; Outrider's contexts refer to secrets by name, so it
//! lists each secret once. The same parse gives `server.days_until_first_cert_expiring`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

use crate::config::secret::{DataSource, SecretKind};
use crate::store::Snapshot;

/// One parsed certificate.
#[derive(Debug, Clone, PartialEq)]
pub struct CertInfo {
    pub path: String,
    pub serial_number: String,
    pub subject_alt_names: Vec<Value>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl CertInfo {
    /// Whole days left (0 once expired), as Envoy counts them.
    pub fn days_until_expiration(&self, now: SystemTime) -> u64 {
        self.not_after.duration_since(now).map_or(0, |left| left.as_secs() / 86_400)
    }

    fn json(&self, now: SystemTime) -> Value {
        json!({
            "path": self.path,
            "serial_number": self.serial_number,
            "subject_alt_names": self.subject_alt_names,
            "days_until_expiration": self.days_until_expiration(now).to_string(),
            "valid_from": humantime::format_rfc3339_seconds(self.not_before).to_string(),
            "expiration_time": humantime::format_rfc3339_seconds(self.not_after).to_string(),
        })
    }
}

/// `{"certificates": [{"ca_cert": […], "cert_chain": […]}…]}`.
pub fn json(snapshot: &Snapshot, now: SystemTime) -> Value {
    let certificates: Vec<Value> = snapshot
        .secrets
        .values()
        .map(|secret| {
            let (ca, chain) = match &secret.resource.kind {
                SecretKind::TlsCertificate(tls) => (Vec::new(), parse(&tls.certificate_chain)),
                SecretKind::ValidationContext(validation) => {
                    (validation.trusted_ca.as_ref().map(parse).unwrap_or_default(), Vec::new())
                }
            };
            let list = |certs: Vec<CertInfo>| certs.iter().map(|c| c.json(now)).collect::<Vec<_>>();
            json!({ "ca_cert": list(ca), "cert_chain": list(chain) })
        })
        .collect();
    json!({ "certificates": certificates })
}

/// Days until the first certificate in use expires (`u32::MAX` with none, as Envoy).
pub fn days_until_first_expiring(snapshot: &Snapshot, now: SystemTime) -> u64 {
    snapshot
        .secrets
        .values()
        .flat_map(|secret| match &secret.resource.kind {
            SecretKind::TlsCertificate(tls) => parse(&tls.certificate_chain),
            SecretKind::ValidationContext(validation) => validation.trusted_ca.as_ref().map(parse).unwrap_or_default(),
        })
        .map(|cert| cert.days_until_expiration(now))
        .min()
        .unwrap_or(u64::from(u32::MAX))
}

/// Every certificate of a PEM source; what does not read or parse is left out (the TLS
/// layer reports those when it builds its configuration).
pub fn parse(source: &DataSource) -> Vec<CertInfo> {
    let (path, bytes) = match source {
        DataSource::Filename(path) => (path.display().to_string(), std::fs::read(path).ok()),
        DataSource::InlineBytes(bytes) => ("<inline>".to_owned(), Some(bytes.clone())),
        DataSource::InlineString(text) => ("<inline>".to_owned(), Some(text.as_bytes().to_vec())),
        DataSource::EnvironmentVariable(name) => {
            (format!("<env:{name}>"), std::env::var(name).ok().map(String::into_bytes))
        }
    };
    let Some(bytes) = bytes else { return Vec::new() };
    Pem::iter_from_buffer(&bytes)
        .filter_map(Result::ok)
        .filter(|pem| pem.label == "CERTIFICATE")
        .filter_map(|pem| {
            let cert = pem.parse_x509().ok()?;
            let validity = cert.validity();
            let sans = cert
                .subject_alternative_name()
                .ok()
                .flatten()
                .map(|ext| ext.value.general_names.iter().filter_map(san).collect())
                .unwrap_or_default();
            Some(CertInfo {
                path: path.clone(),
                serial_number: cert.raw_serial().iter().map(|b| format!("{b:02x}")).collect(),
                subject_alt_names: sans,
                not_before: time(validity.not_before.timestamp()),
                not_after: time(validity.not_after.timestamp()),
            })
        })
        .collect()
}

fn san(name: &GeneralName<'_>) -> Option<Value> {
    match name {
        GeneralName::URI(uri) => Some(json!({ "uri": uri })),
        GeneralName::DNSName(dns) => Some(json!({ "dns": dns })),
        GeneralName::IPAddress(bytes) => {
            let ip = match bytes.len() {
                4 => <[u8; 4]>::try_from(*bytes).ok().map(|b| std::net::IpAddr::from(b).to_string()),
                16 => <[u8; 16]>::try_from(*bytes).ok().map(|b| std::net::IpAddr::from(b).to_string()),
                _ => None,
            }?;
            Some(json!({ "ip_address": ip }))
        }
        _ => None,
    }
}

fn time(unix: i64) -> SystemTime {
    u64::try_from(unix).ok().and_then(|s| UNIX_EPOCH.checked_add(Duration::from_secs(s))).unwrap_or(UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_serial_sans_and_validity() {
        let mut params = rcgen::CertificateParams::new(vec!["a.example".to_owned()]).unwrap();
        params.subject_alt_names.push(rcgen::SanType::URI("spiffe://cluster.local/ns/a/sa/b".try_into().unwrap()));
        params.serial_number = Some(rcgen::SerialNumber::from(vec![0x0a, 0xbc]));
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        let certs = parse(&DataSource::InlineString(pem));
        assert_eq!(certs.len(), 1);
        let cert = &certs[0];
        assert_eq!(cert.serial_number, "0abc");
        assert_eq!(cert.subject_alt_names[0], json!({ "dns": "a.example" }));
        assert_eq!(cert.subject_alt_names[1], json!({ "uri": "spiffe://cluster.local/ns/a/sa/b" }));
        let shown = cert.json(cert.not_before);
        assert!(shown["valid_from"].as_str().unwrap().ends_with('Z'), "{shown}");
        assert!(shown["days_until_expiration"].as_str().unwrap().parse::<u64>().unwrap() > 365);
    }
}
