//! Secrets delivered by SDS (or given inline in a TLS context): a certificate with its
//! private key, or a validation context (trusted CAs and peer-name checks).
//!
//! Nothing here reads files or the environment: a [`DataSource`] says where the bytes are,
//! and the `tls` module loads them when it builds rustls configs (it rebuilds them when a
//! file's modification time changes), so a rotated file is picked up without a config push
//! and conversion stays pure.

use std::fmt;
use std::path::PathBuf;

use regex::Regex;

/// One SDS resource, by the name TLS contexts refer to it with.
#[derive(Debug, Clone, PartialEq)]
pub struct Secret {
    pub name: String,
    pub kind: SecretKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SecretKind {
    /// A certificate to present (Istio's `default`).
    TlsCertificate(TlsCertificate),
    /// How to verify the peer (Istio's `ROOTCA`).
    ValidationContext(CertificateValidationContext),
}

/// Where the bytes of a certificate, key or CA bundle come from.
#[derive(Clone, PartialEq, Eq)]
pub enum DataSource {
    Filename(PathBuf),
    InlineBytes(Vec<u8>),
    InlineString(String),
    EnvironmentVariable(String),
}

/// A certificate chain and its private key, both PEM.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsCertificate {
    pub certificate_chain: DataSource,
    pub private_key: PrivateKey,
}

/// The source of a private key. Its `Debug` never shows inline key material, so a key
/// cannot leak through a log line or `outrider validate` output.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKey(DataSource);

/// How a peer's certificate is verified.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CertificateValidationContext {
    /// PEM bundle of trusted CAs. `None` in a combined context's default part means the
    /// SDS secret supplies it.
    pub trusted_ca: Option<DataSource>,
    /// The peer is accepted if any matcher matches one of its SANs (none: any name).
    pub match_subject_alt_names: Vec<SanMatcher>,
    pub trust_chain_verification: TrustChainVerification,
    /// Maximum chain length, trust anchor included, leaf excluded (Envoy's semantics).
    pub max_verify_depth: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrustChainVerification {
    #[default]
    VerifyTrustChain,
    /// Connections with untrusted chains are accepted (and only counted, in Envoy).
    AcceptUntrusted,
}

/// A check on one kind of Subject Alternative Name.
#[derive(Debug, Clone, PartialEq)]
pub struct SanMatcher {
    pub san_type: SanType,
    pub matcher: StringMatcher,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SanType {
    Email,
    Dns,
    /// SPIFFE identities (`spiffe://cluster.local/ns/default/sa/app`) are URI SANs.
    Uri,
    IpAddress,
}

/// `envoy.type.matcher.v3.StringMatcher`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct StringMatcher {
    pub pattern: StringPattern,
    /// ASCII case-insensitive comparison; as in Envoy, no effect on `SafeRegex`.
    pub ignore_case: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StringPattern {
    Exact(String),
    Prefix(String),
    Suffix(String),
    Contains(String),
    SafeRegex(SafeRegex),
}

/// A compiled RE2-style regex that must match the whole value, as Envoy's `safe_regex`.
#[derive(Clone)]
pub struct SafeRegex {
    source: String,
    anchored: Regex,
}

// === impl DataSource ===

impl fmt::Debug for DataSource {
    /// Inline contents are summarised by length: a PEM bundle in a log line helps nobody.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataSource::Filename(path) => f.debug_tuple("Filename").field(path).finish(),
            DataSource::InlineBytes(b) => write!(f, "InlineBytes(<{} bytes>)", b.len()),
            DataSource::InlineString(s) => write!(f, "InlineString(<{} bytes>)", s.len()),
            DataSource::EnvironmentVariable(name) => f.debug_tuple("EnvironmentVariable").field(name).finish(),
        }
    }
}

// === impl PrivateKey ===

impl PrivateKey {
    pub fn new(source: DataSource) -> Self {
        Self(source)
    }

    pub fn source(&self) -> &DataSource {
        &self.0
    }
}

impl fmt::Debug for PrivateKey {
    /// File names and variable names are shown; key material never is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            DataSource::InlineBytes(_) | DataSource::InlineString(_) => f.write_str("PrivateKey(<redacted>)"),
            other => f.debug_tuple("PrivateKey").field(other).finish(),
        }
    }
}

// === impl CertificateValidationContext ===

impl CertificateValidationContext {
    /// A combined validation context: Envoy merges the SDS secret (`self`) over the
    /// listener's or cluster's default part with protobuf `MergeFrom` semantics, so set
    /// values of the secret win and SAN matchers of both apply.
    pub fn merged_over(&self, default: &CertificateValidationContext) -> CertificateValidationContext {
        let mut match_subject_alt_names = default.match_subject_alt_names.clone();
        match_subject_alt_names.extend(self.match_subject_alt_names.iter().cloned());
        CertificateValidationContext {
            trusted_ca: self.trusted_ca.clone().or_else(|| default.trusted_ca.clone()),
            match_subject_alt_names,
            trust_chain_verification: match self.trust_chain_verification {
                TrustChainVerification::VerifyTrustChain => default.trust_chain_verification,
                accept => accept,
            },
            max_verify_depth: self.max_verify_depth.or(default.max_verify_depth),
        }
    }
}

// === impl StringMatcher ===

impl StringMatcher {
    pub fn matches(&self, value: &str) -> bool {
        let ic = self.ignore_case;
        match &self.pattern {
            StringPattern::Exact(p) => {
                if ic {
                    value.eq_ignore_ascii_case(p)
                } else {
                    value == p
                }
            }
            StringPattern::Prefix(p) => value.get(..p.len()).is_some_and(|v| eq(v, p, ic)),
            StringPattern::Suffix(p) => {
                value.len().checked_sub(p.len()).and_then(|i| value.get(i..)).is_some_and(|v| eq(v, p, ic))
            }
            StringPattern::Contains(p) if ic => value.to_ascii_lowercase().contains(&p.to_ascii_lowercase()),
            StringPattern::Contains(p) => value.contains(p.as_str()),
            StringPattern::SafeRegex(re) => re.is_match(value),
        }
    }
}

fn eq(a: &str, b: &str, ignore_case: bool) -> bool {
    if ignore_case { a.eq_ignore_ascii_case(b) } else { a == b }
}

// === impl SafeRegex ===

impl SafeRegex {
    /// Compiles `source` so that it must match a whole value.
    pub fn new(source: &str) -> Result<Self, regex::Error> {
        let anchored = Regex::new(&format!("^(?:{source})$"))?;
        Ok(Self { source: source.to_owned(), anchored })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn is_match(&self, value: &str) -> bool {
        self.anchored.is_match(value)
    }
}

impl PartialEq for SafeRegex {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl fmt::Debug for SafeRegex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SafeRegex").field(&self.source).finish()
    }
}
