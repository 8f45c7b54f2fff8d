//! `/certs`: the certificates in use, in Envoy's shape: one entry per TLS context (each
//! listener filter chain's and each cluster transport socket's), with `ca_cert` (the CAs
//! it verifies peers with) and `cert_chain` (the certificates it presents), inline or from
//! static or SDS secrets; each certificate with its serial number, SANs, days until
//! expiration, `valid_from` and `expiration_time`. The same certificates give
//! `server.days_until_first_cert_expiring`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

use crate::config::secret::{DataSource, SecretKind};
use crate::config::tls::{Certificates, CommonTlsContext, SdsSecretConfig, Validation};
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

/// Where one TLS context's certificates come from.
struct ContextSources<'a> {
    ca: Vec<&'a DataSource>,
    chain: Vec<&'a DataSource>,
}

/// Every TLS context of the snapshot's listeners and clusters, its secrets resolved (a
/// secret not delivered yet contributes nothing).
fn contexts(snapshot: &Snapshot) -> Vec<ContextSources<'_>> {
    let listeners = snapshot.listeners.values().flat_map(|l| {
        let listener = &l.resource;
        listener.filter_chains.iter().chain(listener.default_filter_chain.as_deref()).filter_map(|c| c.tls.as_ref())
    });
    let clusters = snapshot.clusters.values().flat_map(|c| {
        let cluster = &c.resource;
        std::iter::once(&cluster.transport_socket).chain(cluster.transport_socket_matches.iter().map(|m| &m.transport))
    });
    let upstream = clusters.filter_map(|t| t.tls().map(|tls| &tls.common));
    listeners.map(|tls| &tls.common).chain(upstream).map(|common| sources(snapshot, common)).collect()
}

fn sources<'a>(snapshot: &'a Snapshot, common: &'a CommonTlsContext) -> ContextSources<'a> {
    let secret = |config: &SdsSecretConfig| snapshot.secrets.get(&config.name).map(|s| &s.resource.kind);
    let ca = match &common.validation {
        None => Vec::new(),
        Some(Validation::Inline(validation)) => validation.trusted_ca.iter().collect(),
        Some(Validation::Sds(config) | Validation::Combined { sds: config, .. }) => match secret(config) {
            Some(SecretKind::ValidationContext(validation)) => validation.trusted_ca.iter().collect(),
            _ => Vec::new(),
        },
    };
    let chain = match &common.certificates {
        Certificates::None => Vec::new(),
        Certificates::Inline(certificates) => certificates.iter().map(|c| &c.certificate_chain).collect(),
        Certificates::Sds(configs) => configs
            .iter()
            .filter_map(|config| match secret(config) {
                Some(SecretKind::TlsCertificate(tls)) => Some(&tls.certificate_chain),
                _ => None,
            })
            .collect(),
    };
    ContextSources { ca, chain }
}

/// `{"certificates": [{"ca_cert": […], "cert_chain": […]}…]}`, one entry per context.
pub fn json(snapshot: &Snapshot, now: SystemTime) -> Value {
    let list = |sources: &[&DataSource]| -> Vec<Value> {
        sources.iter().flat_map(|source| parse(source)).map(|cert| cert.json(now)).collect()
    };
    let certificates: Vec<Value> = contexts(snapshot)
        .iter()
        .map(|context| json!({ "ca_cert": list(&context.ca), "cert_chain": list(&context.chain) }))
        .collect();
    json!({ "certificates": certificates })
}

/// Days until the first certificate in use expires (`u32::MAX` with none, as Envoy). Each
/// distinct source is parsed once, however many contexts share it.
pub fn days_until_first_expiring(snapshot: &Snapshot, now: SystemTime) -> u64 {
    let mut distinct: Vec<&DataSource> = Vec::new();
    for context in contexts(snapshot) {
        for source in context.ca.into_iter().chain(context.chain) {
            if !distinct.contains(&source) {
                distinct.push(source);
            }
        }
    }
    distinct
        .into_iter()
        .flat_map(parse)
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
                serial_number: serial_hex(cert.raw_serial()),
                subject_alt_names: sans,
                not_before: time(validity.not_before.timestamp()),
                not_after: time(validity.not_after.timestamp()),
            })
        })
        .collect()
}

/// The serial as Envoy prints it: the DER integer's bytes in hex, with the zero byte DER
/// puts before a serial whose first bit is set (the parser's bytes leave it out).
fn serial_hex(raw: &[u8]) -> String {
    let sign = if raw.first().is_some_and(|b| b & 0x80 != 0) { "00" } else { "" };
    sign.to_owned() + &raw.iter().map(|b| format!("{b:02x}")).collect::<String>()
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
        // A serial whose first bit is set keeps DER's zero byte, as Envoy prints it.
        assert_eq!(serial_hex(&[0xa5, 0x48]), "00a548");
        assert_eq!(cert.subject_alt_names[0], json!({ "dns": "a.example" }));
        assert_eq!(cert.subject_alt_names[1], json!({ "uri": "spiffe://cluster.local/ns/a/sa/b" }));
        let shown = cert.json(cert.not_before);
        assert!(shown["valid_from"].as_str().unwrap().ends_with('Z'), "{shown}");
        assert!(shown["days_until_expiration"].as_str().unwrap().parse::<u64>().unwrap() > 365);
    }
}
