//! `envoy.extensions.transport_sockets.tls.v3.Secret` → [`Secret`], and the parts a TLS
//! context may also carry inline: certificates, validation contexts, data sources.

use super::common;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::secret::{
    CertificateValidationContext, DataSource, PrivateKey, SafeRegex, SanMatcher, SanType, Secret, SecretKind,
    StringMatcher, StringPattern, TlsCertificate, TrustChainVerification,
};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::extensions::transport_sockets::tls::v3 as proto;
use crate::pb::envoy::r#type::matcher::v3 as matcher;

pub fn secret(proto: proto::Secret, warnings: &mut Warnings) -> Result<Secret> {
    use proto::secret::Type;
    let proto::Secret { name, r#type } = proto;
    if name.is_empty() {
        return Err(ConfigError::new("name", "must not be empty"));
    }
    let kind = match r#type {
        Some(Type::TlsCertificate(c)) => SecretKind::TlsCertificate(
            warnings.within("tls_certificate", |w| tls_certificate(c, w)).map_err(|e| e.at("tls_certificate"))?,
        ),
        Some(Type::ValidationContext(v)) => SecretKind::ValidationContext(
            warnings
                .within("validation_context", |w| certificate_validation_context(v, w))
                .map_err(|e| e.at("validation_context"))?,
        ),
        Some(Type::SessionTicketKeys(_)) => {
            return Err(ConfigError::new("session_ticket_keys", "session ticket key secrets are not supported"));
        }
        Some(Type::GenericSecret(_)) => {
            return Err(ConfigError::new("generic_secret", "generic secrets are not supported"));
        }
        None => return Err(ConfigError::new("", "a secret type is required")),
    };
    Ok(Secret { name, kind })
}

pub fn tls_certificate(proto: proto::TlsCertificate, warnings: &mut Warnings) -> Result<TlsCertificate> {
    let proto::TlsCertificate {
        certificate_chain,
        private_key,
        pkcs12,
        watched_directory,
        private_key_provider,
        password,
        ocsp_staple,
        signed_certificate_timestamp,
        tls_params,
    } = proto;
    if pkcs12.is_some() {
        return Err(ConfigError::new("pkcs12", "PKCS#12 is not supported; give PEM certificate_chain and private_key"));
    }
    if private_key_provider.is_some() {
        return Err(ConfigError::new("private_key_provider", "private key providers are not supported"));
    }
    if password.is_some() {
        return Err(ConfigError::new("password", "encrypted private keys are not supported"));
    }
    if tls_params.is_some() {
        return Err(ConfigError::new("tls_params", "per-certificate TLS parameters are not supported"));
    }
    if watched_directory.is_some() {
        warnings.ignored("watched_directory", "files are re-read when TLS configs are rebuilt");
    }
    if ocsp_staple.is_some() {
        warnings.ignored("ocsp_staple", "OCSP responses are not stapled");
    }
    if !signed_certificate_timestamp.is_empty() {
        warnings.ignored("signed_certificate_timestamp", "SCTs are not sent");
    }
    let certificate_chain = required_data_source(certificate_chain, "certificate_chain", warnings)?;
    let private_key = PrivateKey::new(required_data_source(private_key, "private_key", warnings)?);
    let certificate = TlsCertificate { certificate_chain, private_key };
    check_inline(&certificate)?;
    Ok(certificate)
}

/// Refuses an inline certificate chain that does not parse, or a key that does not parse
/// or match the chain's leaf: Envoy fails to build the TLS context from such a secret and
/// NACKs it, keeping the previous certificate in use. (Files are read when the contexts
/// are built, as Envoy reads them then too.)
fn check_inline(certificate: &TlsCertificate) -> Result<()> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let inline = |source: &DataSource| match source {
        DataSource::InlineString(text) => Some(text.as_bytes().to_vec()),
        DataSource::InlineBytes(bytes) => Some(bytes.clone()),
        DataSource::Filename(_) | DataSource::EnvironmentVariable(_) => None,
    };
    let chain = match inline(&certificate.certificate_chain) {
        Some(pem) => {
            let chain = CertificateDer::pem_slice_iter(&pem).collect::<std::result::Result<Vec<_>, _>>().ok();
            let chain = chain
                .filter(|c| !c.is_empty())
                .filter(|c| c.iter().all(|der| x509_parser::parse_x509_certificate(der).is_ok()));
            Some(chain.ok_or_else(|| {
                ConfigError::new("certificate_chain", "Failed to load certificate chain from <inline>")
            })?)
        }
        None => None,
    };
    // The key is checked with its chain; with the chain in a file, both are read when the
    // contexts are built.
    let (Some(chain), Some(key_pem)) = (chain, inline(certificate.private_key.source())) else { return Ok(()) };
    // The key's bytes never reach an error message.
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|_| ConfigError::new("private_key", "Failed to load private key from <inline>"))?;
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(chain, key, &provider)
        .map(|_| ())
        .map_err(|e| ConfigError::new("private_key", format!("does not match the certificate chain: {e}")))
}

pub fn certificate_validation_context(
    proto: proto::CertificateValidationContext,
    warnings: &mut Warnings,
) -> Result<CertificateValidationContext> {
    use proto::certificate_validation_context::TrustChainVerification as Tcv;
    #[allow(deprecated)]
    let proto::CertificateValidationContext {
        trusted_ca,
        ca_certificate_provider_instance,
        system_root_certs,
        watched_directory,
        verify_certificate_spki,
        verify_certificate_hash,
        match_typed_subject_alt_names,
        match_subject_alt_names,
        require_signed_certificate_timestamp,
        crl,
        allow_expired_certificate,
        trust_chain_verification,
        custom_validator_config,
        only_verify_leaf_cert_crl,
        max_verify_depth,
        suppress_client_ca_list,
    } = proto;
    let unsupported = [
        (ca_certificate_provider_instance.is_some(), "ca_certificate_provider_instance", "certificate providers"),
        (system_root_certs.is_some(), "system_root_certs", "the system trust store"),
        (!verify_certificate_spki.is_empty(), "verify_certificate_spki", "certificate pinning"),
        (!verify_certificate_hash.is_empty(), "verify_certificate_hash", "certificate pinning"),
        (common::bool_or(&require_signed_certificate_timestamp, false), "require_signed_certificate_timestamp", "SCTs"),
        (crl.is_some(), "crl", "certificate revocation lists"),
        (allow_expired_certificate, "allow_expired_certificate", "accepting expired certificates"),
        (custom_validator_config.is_some(), "custom_validator_config", "custom certificate validators"),
    ];
    if let Some((_, field, what)) = unsupported.into_iter().find(|(set, _, _)| *set) {
        return Err(ConfigError::new(field, format!("{what} not supported")));
    }
    if watched_directory.is_some() {
        warnings.ignored("watched_directory", "files are re-read when TLS configs are rebuilt");
    }
    if only_verify_leaf_cert_crl {
        warnings.ignored("only_verify_leaf_cert_crl", "has no effect without crl");
    }
    if suppress_client_ca_list {
        warnings.ignored("suppress_client_ca_list", "the CA list is always sent to clients");
    }
    let trusted_ca = trusted_ca.map(|d| data_source(d, warnings)).transpose().map_err(|e| e.at("trusted_ca"))?;
    let trust_chain_verification = match Tcv::try_from(trust_chain_verification) {
        Ok(Tcv::VerifyTrustChain) => TrustChainVerification::VerifyTrustChain,
        Ok(Tcv::AcceptUntrusted) => TrustChainVerification::AcceptUntrusted,
        Err(_) => return Err(ConfigError::new("trust_chain_verification", "unknown value")),
    };
    let mut matchers = match_typed_subject_alt_names
        .into_iter()
        .enumerate()
        .map(|(i, m)| san_matcher(m, warnings).map_err(|e| e.at(format_args!("match_typed_subject_alt_names[{i}]"))))
        .collect::<Result<Vec<_>>>()?;
    if !matchers.is_empty() && !match_subject_alt_names.is_empty() {
        warnings.ignored("match_subject_alt_names", "match_typed_subject_alt_names takes precedence (as in Envoy)");
    } else {
        // Envoy checks an untyped matcher against DNS, URI, email and IP SANs alike.
        for (i, m) in match_subject_alt_names.into_iter().enumerate() {
            let m = string_matcher(m).map_err(|e| e.at(format_args!("match_subject_alt_names[{i}]")))?;
            for san_type in [SanType::Dns, SanType::Uri, SanType::Email, SanType::IpAddress] {
                matchers.push(SanMatcher { san_type, matcher: m.clone() });
            }
        }
    }
    Ok(CertificateValidationContext {
        trusted_ca,
        match_subject_alt_names: matchers,
        trust_chain_verification,
        max_verify_depth: max_verify_depth.map(|d| d.value),
    })
}

fn san_matcher(proto: proto::SubjectAltNameMatcher, warnings: &mut Warnings) -> Result<SanMatcher> {
    use proto::subject_alt_name_matcher::SanType as T;
    let proto::SubjectAltNameMatcher { san_type, matcher, oid } = proto;
    let san_type = match T::try_from(san_type) {
        Ok(T::Email) => SanType::Email,
        Ok(T::Dns) => SanType::Dns,
        Ok(T::Uri) => SanType::Uri,
        Ok(T::IpAddress) => SanType::IpAddress,
        Ok(T::OtherName) => return Err(ConfigError::new("san_type", "OTHER_NAME SANs are not supported")),
        Ok(T::Unspecified) | Err(_) => {
            return Err(ConfigError::new("san_type", "must be EMAIL, DNS, URI or IP_ADDRESS"));
        }
    };
    if !oid.is_empty() {
        warnings.ignored("oid", "only used with OTHER_NAME");
    }
    let matcher = matcher.ok_or_else(|| ConfigError::new("matcher", "is required"))?;
    let matcher = string_matcher(matcher).map_err(|e| e.at("matcher"))?;
    Ok(SanMatcher { san_type, matcher })
}

/// `envoy.type.matcher.v3.StringMatcher` → [`StringMatcher`]; regexes are compiled here so
/// that an invalid one is refused with its path instead of failing at handshake time.
pub fn string_matcher(proto: matcher::StringMatcher) -> Result<StringMatcher> {
    use matcher::string_matcher::MatchPattern as P;
    let matcher::StringMatcher { ignore_case, match_pattern } = proto;
    let pattern = match match_pattern {
        Some(P::Exact(s)) => StringPattern::Exact(s),
        Some(P::Prefix(s)) => StringPattern::Prefix(s),
        Some(P::Suffix(s)) => StringPattern::Suffix(s),
        Some(P::Contains(s)) => StringPattern::Contains(s),
        Some(P::SafeRegex(matcher::RegexMatcher { regex, engine_type: _ })) => StringPattern::SafeRegex(
            SafeRegex::new(&regex)
                .map_err(|e| ConfigError::new("safe_regex.regex", format!("invalid regex {regex:?}: {e}")))?,
        ),
        Some(P::Custom(_)) => return Err(ConfigError::new("custom", "custom string matchers are not supported")),
        None => return Err(ConfigError::new("", "a match pattern is required")),
    };
    Ok(StringMatcher { pattern, ignore_case })
}

/// A data source that must be present, named `field` for errors and warnings.
fn required_data_source(proto: Option<core::DataSource>, field: &str, warnings: &mut Warnings) -> Result<DataSource> {
    let proto = proto.ok_or_else(|| ConfigError::new(field, "is required"))?;
    warnings.within(field, |w| data_source(proto, w)).map_err(|e| e.at(field))
}

/// `envoy.config.core.v3.DataSource` → [`DataSource`]. Nothing is read here.
pub fn data_source(proto: core::DataSource, warnings: &mut Warnings) -> Result<DataSource> {
    use core::data_source::Specifier;
    let core::DataSource { watched_directory, specifier } = proto;
    if watched_directory.is_some() {
        warnings.ignored("watched_directory", "files are re-read when TLS configs are rebuilt");
    }
    let (field, empty, source) = match specifier {
        Some(Specifier::Filename(f)) => ("filename", f.is_empty(), DataSource::Filename(f.into())),
        Some(Specifier::InlineBytes(b)) => ("inline_bytes", b.is_empty(), DataSource::InlineBytes(b)),
        Some(Specifier::InlineString(s)) => ("inline_string", s.is_empty(), DataSource::InlineString(s)),
        Some(Specifier::EnvironmentVariable(v)) => {
            ("environment_variable", v.is_empty(), DataSource::EnvironmentVariable(v))
        }
        None => return Err(ConfigError::new("", "a filename, inline value or environment variable is required")),
    };
    if empty {
        return Err(ConfigError::new(field, "must not be empty"));
    }
    Ok(source)
}

#[cfg(test)]
mod tests;
