//! TLS transport socket configs → [`UpstreamTlsContext`] / [`DownstreamTlsContext`].

use self::sds::sds_secret_config;
use super::common;
use super::secret::{certificate_validation_context, tls_certificate};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::tls::{
    Certificates, CommonTlsContext, DownstreamTlsContext, TlsParams, TlsVersion, UpstreamTlsContext, Validation,
};
use crate::pb::envoy::extensions::transport_sockets::tls::v3 as proto;

pub fn upstream_tls_context(proto: proto::UpstreamTlsContext, warnings: &mut Warnings) -> Result<UpstreamTlsContext> {
    #[allow(deprecated)]
    let proto::UpstreamTlsContext {
        common_tls_context,
        sni,
        auto_host_sni,
        auto_sni_san_validation,
        allow_renegotiation,
        max_session_keys,
        enforce_rsa_key_usage,
    } = proto;
    if allow_renegotiation {
        return Err(ConfigError::new("allow_renegotiation", "TLS renegotiation is not supported"));
    }
    if auto_host_sni {
        return Err(ConfigError::new("auto_host_sni", "SNI from the upstream host name is not supported"));
    }
    if auto_sni_san_validation {
        return Err(ConfigError::new("auto_sni_san_validation", "SAN validation against SNI is not supported"));
    }
    if max_session_keys.is_some() {
        warnings.ignored("max_session_keys", "the session cache size is rustls' own");
    }
    if enforce_rsa_key_usage.is_some() {
        warnings.ignored("enforce_rsa_key_usage", "key usage is always enforced");
    }
    let common = common_of(common_tls_context, TlsParams::CLIENT_DEFAULT, warnings)?;
    let field = match &common.certificates {
        Certificates::Inline(c) if c.len() > 1 => "tls_certificates",
        Certificates::Sds(c) if c.len() > 1 => "tls_certificate_sds_secret_configs",
        _ => "",
    };
    if !field.is_empty() {
        return Err(ConfigError::new(field, "a client presents at most one certificate").at("common_tls_context"));
    }
    Ok(UpstreamTlsContext { common, sni })
}

pub fn downstream_tls_context(
    proto: proto::DownstreamTlsContext,
    warnings: &mut Warnings,
) -> Result<DownstreamTlsContext> {
    let proto::DownstreamTlsContext {
        common_tls_context,
        require_client_certificate,
        require_sni,
        disable_stateful_session_resumption,
        session_timeout,
        ocsp_staple_policy,
        full_scan_certs_on_sni_mismatch,
        prefer_client_ciphers,
        session_ticket_keys_type,
    } = proto;
    let ignored = [
        (disable_stateful_session_resumption, "disable_stateful_session_resumption", "session resumption is rustls'"),
        (session_timeout.is_some(), "session_timeout", "session lifetimes are rustls'"),
        (ocsp_staple_policy != 0, "ocsp_staple_policy", "OCSP responses are not stapled"),
        (full_scan_certs_on_sni_mismatch.is_some(), "full_scan_certs_on_sni_mismatch", "not used"),
        (prefer_client_ciphers, "prefer_client_ciphers", "rustls picks the cipher suite"),
    ];
    for (_, field, what) in ignored.into_iter().filter(|(set, _, _)| *set) {
        warnings.ignored(field, what);
    }
    if let Some(keys) = session_ticket_keys_type {
        use proto::downstream_tls_context::SessionTicketKeysType as K;
        let field = match keys {
            K::SessionTicketKeys(_) => "session_ticket_keys",
            K::SessionTicketKeysSdsSecretConfig(_) => "session_ticket_keys_sds_secret_config",
            K::DisableStatelessSessionResumption(_) => "disable_stateless_session_resumption",
        };
        warnings.ignored(field, "session tickets are rustls' own");
    }
    let common = common_of(common_tls_context, TlsParams::SERVER_DEFAULT, warnings)?;
    if common.certificates == Certificates::None {
        return Err(ConfigError::new("common_tls_context", "a server needs tls_certificates or their SDS configs"));
    }
    Ok(DownstreamTlsContext {
        common,
        require_client_certificate: common::bool_or(&require_client_certificate, false),
        require_sni: common::bool_or(&require_sni, false),
    })
}

/// The `common_tls_context` field (absent means all defaults), with its path.
fn common_of(proto: Option<proto::CommonTlsContext>, side: TlsParams, w: &mut Warnings) -> Result<CommonTlsContext> {
    let proto = proto.unwrap_or_default();
    w.within("common_tls_context", |w| common_tls_context(proto, side, w)).map_err(|e| e.at("common_tls_context"))
}

fn common_tls_context(
    proto: proto::CommonTlsContext,
    side_default: TlsParams,
    warnings: &mut Warnings,
) -> Result<CommonTlsContext> {
    #[allow(deprecated)]
    let proto::CommonTlsContext {
        tls_params,
        tls_certificates,
        tls_certificate_sds_secret_configs,
        tls_certificate_provider_instance,
        custom_tls_certificate_selector,
        tls_certificate_certificate_provider,
        tls_certificate_certificate_provider_instance,
        alpn_protocols,
        custom_handshaker,
        key_log,
        validation_context_type,
    } = proto;
    let unsupported = [
        (tls_certificate_provider_instance.is_some(), "tls_certificate_provider_instance"),
        (custom_tls_certificate_selector.is_some(), "custom_tls_certificate_selector"),
        (tls_certificate_certificate_provider.is_some(), "tls_certificate_certificate_provider"),
        (tls_certificate_certificate_provider_instance.is_some(), "tls_certificate_certificate_provider_instance"),
        (custom_handshaker.is_some(), "custom_handshaker"),
    ];
    if let Some((_, field)) = unsupported.into_iter().find(|(set, _)| *set) {
        return Err(ConfigError::new(field, "not supported"));
    }
    if let Some(i) = alpn_protocols.iter().position(|p| p.is_empty() || p.len() > 255) {
        return Err(ConfigError::new(format!("alpn_protocols[{i}]"), "must be 1 to 255 bytes"));
    }
    if key_log.is_some() {
        warnings.ignored("key_log", "TLS keys are never logged");
    }
    let tls_params = match tls_params {
        None => side_default,
        Some(p) => warnings.within("tls_params", |w| params(p, side_default, w)).map_err(|e| e.at("tls_params"))?,
    };
    let certificates = match (tls_certificates.is_empty(), tls_certificate_sds_secret_configs.is_empty()) {
        (true, true) => Certificates::None,
        (false, true) => {
            Certificates::Inline(indexed(tls_certificates, "tls_certificates", warnings, tls_certificate)?)
        }
        (true, false) => {
            let configs = tls_certificate_sds_secret_configs;
            Certificates::Sds(indexed(configs, "tls_certificate_sds_secret_configs", warnings, sds_secret_config)?)
        }
        (false, false) => {
            return Err(ConfigError::new(
                "tls_certificate_sds_secret_configs",
                "only one of tls_certificates and tls_certificate_sds_secret_configs may be set",
            ));
        }
    };
    let validation = validation_context_type.map(|v| validation(v, warnings)).transpose()?;
    Ok(CommonTlsContext { tls_params, certificates, validation, alpn_protocols })
}

fn params(proto: proto::TlsParameters, side_default: TlsParams, warnings: &mut Warnings) -> Result<TlsParams> {
    let proto::TlsParameters {
        tls_minimum_protocol_version,
        tls_maximum_protocol_version,
        cipher_suites,
        ecdh_curves,
        signature_algorithms,
        compliance_policies,
    } = proto;
    if !compliance_policies.is_empty() {
        return Err(ConfigError::new("compliance_policies", "compliance policies are not supported"));
    }
    let ignored = [
        (cipher_suites.is_empty(), "cipher_suites", "rustls' own cipher suites are used"),
        (ecdh_curves.is_empty(), "ecdh_curves", "rustls' own key exchange groups are used"),
        (signature_algorithms.is_empty(), "signature_algorithms", "rustls' own signature schemes are used"),
    ];
    for (_, field, what) in ignored.into_iter().filter(|(empty, _, _)| !*empty) {
        warnings.ignored(field, what);
    }
    let min = match version(tls_minimum_protocol_version, "tls_minimum_protocol_version")? {
        Some(v) => v,
        None if tls_minimum_protocol_version == 0 => side_default.min,
        None => {
            warnings.ignored("tls_minimum_protocol_version", "TLS 1.0 and 1.1 are not offered; the minimum is TLS 1.2");
            TlsVersion::Tls12
        }
    };
    let max = match version(tls_maximum_protocol_version, "tls_maximum_protocol_version")? {
        Some(v) => v,
        None if tls_maximum_protocol_version == 0 => side_default.max,
        None => return Err(ConfigError::new("tls_maximum_protocol_version", "below TLSv1_2 is not supported")),
    };
    if min > max {
        return Err(ConfigError::new("", format!("minimum {min:?} is above maximum {max:?}")));
    }
    Ok(TlsParams { min, max })
}

/// A supported version, `None` for TLS_AUTO and versions below 1.2, an error if unknown.
fn version(value: i32, field: &str) -> Result<Option<TlsVersion>> {
    use proto::tls_parameters::TlsProtocol as P;
    match P::try_from(value) {
        Ok(P::TlSv12) => Ok(Some(TlsVersion::Tls12)),
        Ok(P::TlSv13) => Ok(Some(TlsVersion::Tls13)),
        Ok(P::TlsAuto | P::TlSv10 | P::TlSv11) => Ok(None),
        Err(_) => Err(ConfigError::new(field, format!("unknown TLS version {value}"))),
    }
}

fn validation(proto: proto::common_tls_context::ValidationContextType, w: &mut Warnings) -> Result<Validation> {
    use proto::common_tls_context::ValidationContextType as V;
    #[allow(deprecated)]
    match proto {
        V::ValidationContext(v) => {
            let v = w.within("validation_context", |w| certificate_validation_context(v, w));
            let v = v.map_err(|e| e.at("validation_context"))?;
            if v.trusted_ca.is_none() && !v.match_subject_alt_names.is_empty() {
                return Err(ConfigError::new("validation_context.trusted_ca", "SAN checks need a trusted CA"));
            }
            Ok(Validation::Inline(v))
        }
        V::ValidationContextSdsSecretConfig(s) => Ok(Validation::Sds(
            w.within("validation_context_sds_secret_config", |w| sds_secret_config(s, w))
                .map_err(|e| e.at("validation_context_sds_secret_config"))?,
        )),
        V::CombinedValidationContext(c) => {
            w.within("combined_validation_context", |w| combined(c, w)).map_err(|e| e.at("combined_validation_context"))
        }
        V::ValidationContextCertificateProvider(_) => {
            Err(ConfigError::new("validation_context_certificate_provider", "not supported"))
        }
        V::ValidationContextCertificateProviderInstance(_) => {
            Err(ConfigError::new("validation_context_certificate_provider_instance", "not supported"))
        }
    }
}

fn combined(
    proto: proto::common_tls_context::CombinedCertificateValidationContext,
    w: &mut Warnings,
) -> Result<Validation> {
    #[allow(deprecated)]
    let proto::common_tls_context::CombinedCertificateValidationContext {
        default_validation_context,
        validation_context_sds_secret_config,
        validation_context_certificate_provider,
        validation_context_certificate_provider_instance,
    } = proto;
    if validation_context_certificate_provider.is_some() {
        return Err(ConfigError::new("validation_context_certificate_provider", "not supported"));
    }
    if validation_context_certificate_provider_instance.is_some() {
        return Err(ConfigError::new("validation_context_certificate_provider_instance", "not supported"));
    }
    let default = default_validation_context.unwrap_or_default();
    let default = w
        .within("default_validation_context", |w| certificate_validation_context(default, w))
        .map_err(|e| e.at("default_validation_context"))?;
    let field = "validation_context_sds_secret_config";
    let sds = validation_context_sds_secret_config.ok_or_else(|| ConfigError::new(field, "is required"))?;
    let sds = w.within(field, |w| sds_secret_config(sds, w)).map_err(|e| e.at(field))?;
    Ok(Validation::Combined { default, sds })
}

/// Converts each element of a repeated field, with `field[i]` in paths.
fn indexed<P, T>(
    items: Vec<P>,
    field: &str,
    warnings: &mut Warnings,
    convert: impl Fn(P, &mut Warnings) -> Result<T>,
) -> Result<Vec<T>> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let at = format!("{field}[{i}]");
            warnings.within(&at, |w| convert(p, w)).map_err(|e| e.at(&at))
        })
        .collect()
}

mod sds;
#[cfg(test)]
pub(crate) mod tests;
