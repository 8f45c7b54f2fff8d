//! The HTTP protocol of a cluster's upstream connections → [`UpstreamHttpOptions`], from the
//! `envoy.extensions.upstreams.http.v3.HttpProtocolOptions` extension or, for older
//! configs, the cluster's legacy fields (never both, as in Envoy).

use std::collections::HashMap;
use std::time::Duration;

use prost::Name;

use super::http_codec::{http1_options, http2_settings};
use crate::config::cluster::{UpstreamHttpOptions, UpstreamProtocol};
use crate::config::convert::common;
use crate::config::error::{AtField, ConfigError, Result, Warnings};
use crate::pb::envoy::config::cluster::v3::cluster::ClusterProtocolSelection;
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::extensions::upstreams::http::v3 as ext;
use crate::pb::google::protobuf as gpb;

use ext::http_protocol_options::{UpstreamProtocolOptions as Upo, explicit_http_config::ProtocolConfig};

/// The protocol fields of a cluster, taken out of it together.
pub(super) struct ProtocolFields {
    pub typed_extension_protocol_options: HashMap<String, gpb::Any>,
    pub http_protocol_options: Option<core::Http1ProtocolOptions>,
    pub http2_protocol_options: Option<core::Http2ProtocolOptions>,
    pub common_http_protocol_options: Option<core::HttpProtocolOptions>,
    pub upstream_http_protocol_options: Option<core::UpstreamHttpProtocolOptions>,
    pub protocol_selection: i32,
    pub max_requests_per_connection: Option<gpb::UInt32Value>,
}

pub(super) fn http_options(fields: ProtocolFields, warnings: &mut Warnings) -> Result<UpstreamHttpOptions> {
    let ProtocolFields {
        typed_extension_protocol_options,
        http_protocol_options,
        http2_protocol_options,
        common_http_protocol_options,
        upstream_http_protocol_options,
        protocol_selection,
        max_requests_per_connection,
    } = fields;
    let typed = typed_extension(typed_extension_protocol_options)?;
    let legacy_fields = [
        ("http_protocol_options", http_protocol_options.is_some()),
        ("http2_protocol_options", http2_protocol_options.is_some()),
        ("common_http_protocol_options", common_http_protocol_options.is_some()),
        ("upstream_http_protocol_options", upstream_http_protocol_options.is_some()),
        ("protocol_selection", protocol_selection != ClusterProtocolSelection::UseConfiguredProtocol as i32),
    ];
    let mut options = match typed {
        Some((key, proto)) => {
            if let Some((field, _)) = legacy_fields.iter().find(|(_, set)| *set) {
                return Err(ConfigError::new(*field, "cannot be combined with typed_extension_protocol_options"));
            }
            let at = format!("typed_extension_protocol_options[{key}]");
            warnings.within(&at, |w| extension(proto, w)).at_field(&at)?
        }
        None => {
            let legacy = Legacy {
                http1: http_protocol_options,
                http2: http2_protocol_options,
                common: common_http_protocol_options,
                upstream: upstream_http_protocol_options,
                protocol_selection,
            };
            legacy_options(legacy, warnings)?
        }
    };
    // The cluster-level field is the fallback of the common options' own, 0 meaning unlimited.
    if options.max_requests_per_connection.is_none() {
        options.max_requests_per_connection = max_requests_per_connection.map(|v| v.value).filter(|&n| n > 0);
    }
    Ok(options)
}

/// The one entry Outrider understands, with its key; any other entry is refused.
fn typed_extension(map: HashMap<String, gpb::Any>) -> Result<Option<(String, ext::HttpProtocolOptions)>> {
    let mut entries: Vec<_> = map.into_iter().collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut found = None;
    for (key, any) in entries {
        let at = format!("typed_extension_protocol_options[{key}]");
        if common::type_name(&any.type_url) != ext::HttpProtocolOptions::full_name() {
            let what = format!("protocol options {} are not supported", common::type_name(&any.type_url));
            return Err(ConfigError::new(at, what));
        }
        if found.is_some() {
            return Err(ConfigError::new(at, "HTTP protocol options are given twice"));
        }
        found = Some((key, common::unpack::<ext::HttpProtocolOptions>(&any).at_field(&at)?));
    }
    Ok(found)
}

fn extension(proto: ext::HttpProtocolOptions, warnings: &mut Warnings) -> Result<UpstreamHttpOptions> {
    let ext::HttpProtocolOptions {
        common_http_protocol_options,
        upstream_http_protocol_options,
        http_filters,
        header_validation_config,
        outlier_detection,
        request_mirror_policies,
        hash_policy,
        retry_policy,
        upstream_protocol_options,
    } = proto;
    let refused = [
        ("http_filters", !http_filters.is_empty()),
        ("header_validation_config", header_validation_config.is_some()),
        ("outlier_detection", outlier_detection.is_some()),
        ("request_mirror_policies", !request_mirror_policies.is_empty()),
        ("hash_policy", !hash_policy.is_empty()),
        ("retry_policy", retry_policy.is_some()),
    ];
    if let Some((field, _)) = refused.iter().find(|(_, set)| *set) {
        return Err(ConfigError::new(*field, "not supported in upstream HTTP protocol options"));
    }
    let mut options = UpstreamHttpOptions::default();
    options.protocol = match upstream_protocol_options {
        Some(Upo::ExplicitHttpConfig(ext::http_protocol_options::ExplicitHttpConfig { protocol_config })) => {
            match protocol_config {
                Some(ProtocolConfig::HttpProtocolOptions(h1)) => {
                    let at = "explicit_http_config.http_protocol_options";
                    warnings.within(at, |w| http1_options(h1, w)).at_field(at)?;
                    UpstreamProtocol::Http1
                }
                Some(ProtocolConfig::Http2ProtocolOptions(h2)) => {
                    let at = "explicit_http_config.http2_protocol_options";
                    options.http2 = warnings.within(at, |w| http2_settings(h2, w)).at_field(at)?;
                    UpstreamProtocol::Http2
                }
                Some(ProtocolConfig::Http3ProtocolOptions(_)) => {
                    return Err(ConfigError::new(
                        "explicit_http_config.http3_protocol_options",
                        "HTTP/3 is not supported",
                    ));
                }
                None => return Err(ConfigError::new("explicit_http_config", "a protocol is required")),
            }
        }
        Some(Upo::UseDownstreamProtocolConfig(config)) => {
            let ext::http_protocol_options::UseDownstreamHttpConfig {
                http_protocol_options,
                http2_protocol_options,
                http3_protocol_options,
            } = config;
            let at = "use_downstream_protocol_config";
            if http3_protocol_options.is_some() {
                return Err(ConfigError::new(format!("{at}.http3_protocol_options"), "HTTP/3 is not supported"));
            }
            if let Some(h1) = http_protocol_options {
                let inner = format!("{at}.http_protocol_options");
                warnings.within(&inner, |w| http1_options(h1, w)).at_field(&inner)?;
            }
            if let Some(h2) = http2_protocol_options {
                let inner = format!("{at}.http2_protocol_options");
                options.http2 = warnings.within(&inner, |w| http2_settings(h2, w)).at_field(&inner)?;
            }
            UpstreamProtocol::UseDownstream
        }
        Some(Upo::AutoConfig(_)) => {
            return Err(ConfigError::new("auto_config", "ALPN protocol selection is not supported"));
        }
        None => return Err(ConfigError::new("upstream_protocol_options", "is required")),
    };
    if let Some(common) = common_http_protocol_options {
        let at = "common_http_protocol_options";
        warnings.within(at, |w| apply_common(common, &mut options, w)).at_field(at)?;
    }
    if let Some(upstream) = upstream_http_protocol_options {
        apply_upstream(upstream, &mut options);
    }
    Ok(options)
}

struct Legacy {
    http1: Option<core::Http1ProtocolOptions>,
    http2: Option<core::Http2ProtocolOptions>,
    common: Option<core::HttpProtocolOptions>,
    upstream: Option<core::UpstreamHttpProtocolOptions>,
    protocol_selection: i32,
}

fn legacy_options(legacy: Legacy, warnings: &mut Warnings) -> Result<UpstreamHttpOptions> {
    let Legacy { http1, http2, common, upstream, protocol_selection } = legacy;
    let use_downstream = match ClusterProtocolSelection::try_from(protocol_selection) {
        Ok(ClusterProtocolSelection::UseConfiguredProtocol) => false,
        Ok(ClusterProtocolSelection::UseDownstreamProtocol) => true,
        Err(_) => return Err(ConfigError::new("protocol_selection", format!("unknown value {protocol_selection}"))),
    };
    if !use_downstream && http1.is_some() && http2.is_some() {
        return Err(ConfigError::new(
            "http2_protocol_options",
            "HTTP/1.1 and HTTP/2 options together need protocol_selection USE_DOWNSTREAM_PROTOCOL",
        ));
    }
    let protocol = match (use_downstream, http2.is_some()) {
        (true, _) => UpstreamProtocol::UseDownstream,
        (false, true) => UpstreamProtocol::Http2,
        (false, false) => UpstreamProtocol::Http1,
    };
    let mut options = UpstreamHttpOptions { protocol, ..Default::default() };
    if let Some(h1) = http1 {
        warnings.within("http_protocol_options", |w| http1_options(h1, w)).at_field("http_protocol_options")?;
    }
    if let Some(h2) = http2 {
        options.http2 =
            warnings.within("http2_protocol_options", |w| http2_settings(h2, w)).at_field("http2_protocol_options")?;
    }
    if let Some(common) = common {
        let at = "common_http_protocol_options";
        warnings.within(at, |w| apply_common(common, &mut options, w)).at_field(at)?;
    }
    if let Some(upstream) = upstream {
        apply_upstream(upstream, &mut options);
    }
    Ok(options)
}

/// `envoy.config.core.v3.HttpProtocolOptions`: timeouts and limits of upstream connections.
fn apply_common(
    proto: core::HttpProtocolOptions,
    options: &mut UpstreamHttpOptions,
    warnings: &mut Warnings,
) -> Result<()> {
    let core::HttpProtocolOptions {
        idle_timeout,
        max_connection_duration,
        max_connection_duration_jitter,
        max_headers_count,
        max_response_headers_kb,
        max_stream_duration,
        headers_with_underscores_action,
        max_requests_per_connection,
    } = proto;
    let ignored = [
        (
            "max_connection_duration_jitter",
            max_connection_duration_jitter.is_some(),
            "connections drain at exactly max_connection_duration",
        ),
        ("max_headers_count", max_headers_count.is_some(), "the HTTP stack applies its own header limits"),
        ("max_response_headers_kb", max_response_headers_kb.is_some(), "the HTTP stack applies its own header limits"),
        (
            "headers_with_underscores_action",
            headers_with_underscores_action != 0,
            "only applies to downstream requests",
        ),
    ];
    for (field, set, why) in ignored {
        if set {
            warnings.ignored(field, why);
        }
    }
    // `0s` disables each of these timeouts.
    let enabled = |value: &Option<gpb::Duration>, field: &str| -> Result<Option<Option<Duration>>> {
        Ok(common::opt_duration(value, field)?.map(|d| Some(d).filter(|d| !d.is_zero())))
    };
    if let Some(idle) = enabled(&idle_timeout, "idle_timeout")? {
        options.idle_timeout = idle;
    }
    options.max_connection_duration = enabled(&max_connection_duration, "max_connection_duration")?.flatten();
    options.max_stream_duration = enabled(&max_stream_duration, "max_stream_duration")?.flatten();
    options.max_requests_per_connection = max_requests_per_connection.map(|v| v.value).filter(|&n| n > 0);
    Ok(())
}

fn apply_upstream(proto: core::UpstreamHttpProtocolOptions, options: &mut UpstreamHttpOptions) {
    let core::UpstreamHttpProtocolOptions { auto_sni, auto_san_validation, override_auto_sni_header } = proto;
    options.auto_sni = auto_sni;
    options.auto_san_validation = auto_san_validation;
    options.override_auto_sni_header = Some(override_auto_sni_header).filter(|h| !h.is_empty());
}
