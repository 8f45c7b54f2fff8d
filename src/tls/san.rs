//! Subject Alternative Names of a peer certificate, and the validation context's SAN
//! matchers (`match_typed_subject_alt_names`): the peer is accepted when any matcher
//! matches any SAN of its type. SPIFFE identities are URI SANs.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use x509_parser::extensions::GeneralName;

use crate::config::secret::{SanMatcher, SanType, StringPattern};

/// The SANs of a certificate as Envoy prints them (IP addresses in text form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sans(pub Vec<(SanType, String)>);

/// A peer certificate whose SANs match none of the matchers: why the peer was refused.
#[derive(Debug)]
pub(crate) struct SanMismatch {
    pub presented: Sans,
}

impl Sans {
    /// Parses the SAN extension of a DER certificate. A certificate without one has none;
    /// one that does not parse is an error.
    pub fn of(der: &[u8]) -> Result<Self, String> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
        let Some(extension) = cert.subject_alternative_name().map_err(|e| e.to_string())? else {
            return Ok(Self(Vec::new()));
        };
        let sans = extension
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                GeneralName::DNSName(dns) => Some((SanType::Dns, (*dns).to_owned())),
                GeneralName::URI(uri) => Some((SanType::Uri, (*uri).to_owned())),
                GeneralName::RFC822Name(email) => Some((SanType::Email, (*email).to_owned())),
                GeneralName::IPAddress(bytes) => ip_text(bytes).map(|ip| (SanType::IpAddress, ip)),
                _ => None,
            })
            .collect();
        Ok(Self(sans))
    }

    /// Whether any matcher matches a SAN of its type; no matchers accept any certificate.
    pub fn accepted_by(&self, matchers: &[SanMatcher]) -> bool {
        matchers.is_empty()
            || matchers.iter().any(|m| self.0.iter().any(|(t, value)| *t == m.san_type && san_matches(m, value)))
    }
}

fn san_matches(matcher: &SanMatcher, san: &str) -> bool {
    match (&matcher.san_type, &matcher.matcher.pattern) {
        // Envoy lets an exact DNS matcher match a wildcard certificate (`*.example.com`
        // covers `api.example.com`), as a TLS client matches a host name.
        (SanType::Dns, StringPattern::Exact(name)) if san.starts_with("*.") => dns_wildcard_matches(san, name),
        _ => matcher.matcher.matches(san),
    }
}

/// `*.example.com` matches exactly one more label: `a.example.com`, not `a.b.example.com`.
fn dns_wildcard_matches(wildcard: &str, name: &str) -> bool {
    let suffix = &wildcard[1..];
    match name.find('.') {
        Some(dot) if dot > 0 => name[dot..].eq_ignore_ascii_case(suffix),
        _ => false,
    }
}

fn ip_text(bytes: &[u8]) -> Option<String> {
    let ip = match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => return None,
    };
    Some(ip.to_string())
}

impl fmt::Display for Sans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        for (i, (san_type, value)) in self.0.iter().enumerate() {
            let kind = match san_type {
                SanType::Dns => "DNS",
                SanType::Uri => "URI",
                SanType::Email => "email",
                SanType::IpAddress => "IP",
            };
            write!(f, "{}{kind}:{value}", if i == 0 { "" } else { ", " })?;
        }
        Ok(())
    }
}

impl fmt::Display for SanMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "certificate SANs ({}) match no configured SAN matcher", self.presented)
    }
}

impl std::error::Error for SanMismatch {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::secret::{SafeRegex, StringMatcher};

    fn matcher(san_type: SanType, pattern: StringPattern) -> SanMatcher {
        SanMatcher { san_type, matcher: StringMatcher { pattern, ignore_case: false } }
    }

    fn spiffe(id: &str) -> Sans {
        Sans(vec![(SanType::Uri, id.to_owned())])
    }

    #[test]
    fn spiffe_ids_match_exactly_by_prefix_or_by_regex() {
        let id = spiffe("spiffe://cluster.local/ns/default/sa/app");
        let exact = matcher(SanType::Uri, StringPattern::Exact("spiffe://cluster.local/ns/default/sa/app".into()));
        let prefix = matcher(SanType::Uri, StringPattern::Prefix("spiffe://cluster.local/".into()));
        let regex = matcher(
            SanType::Uri,
            StringPattern::SafeRegex(SafeRegex::new("spiffe://cluster\\.local/ns/[^/]+/sa/app").unwrap()),
        );
        for m in [exact, prefix, regex] {
            assert!(id.accepted_by(std::slice::from_ref(&m)), "{m:?}");
        }
        let other = matcher(SanType::Uri, StringPattern::Exact("spiffe://cluster.local/ns/default/sa/db".into()));
        assert!(!id.accepted_by(&[other]));
    }

    #[test]
    fn a_matcher_only_sees_sans_of_its_type() {
        let sans = Sans(vec![(SanType::Dns, "spiffe://cluster.local/x".into())]);
        assert!(!sans.accepted_by(&[matcher(SanType::Uri, StringPattern::Prefix("spiffe://".into()))]));
        assert!(sans.accepted_by(&[]), "no matchers accept any certificate");
    }

    #[test]
    fn an_exact_dns_matcher_accepts_a_wildcard_certificate_one_label_deep() {
        let sans = Sans(vec![(SanType::Dns, "*.example.com".into())]);
        let m = |name: &str| matcher(SanType::Dns, StringPattern::Exact(name.into()));
        assert!(sans.accepted_by(&[m("api.example.com")]));
        assert!(!sans.accepted_by(&[m("a.b.example.com")]));
        assert!(!sans.accepted_by(&[m("example.com")]));
    }

    #[test]
    fn ip_sans_are_text() {
        assert_eq!(ip_text(&[10, 0, 0, 1]).as_deref(), Some("10.0.0.1"));
        assert_eq!(ip_text(&[0; 16]).as_deref(), Some("::"));
        assert_eq!(ip_text(&[1, 2, 3]), None);
    }
}
