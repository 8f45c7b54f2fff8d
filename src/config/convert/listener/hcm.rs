//! `envoy.filters.network.http_connection_manager` → [`HttpConnectionManager`].

use std::sync::Arc;

use super::super::filter_kind::{self, ROUTER};
use super::super::{common, filters, route};
use super::protocol_options::{common_options, http1_options, http2_options, ignore_all};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::HttpFilter;
use crate::config::listener::SkippedFilter;
use crate::config::listener::http_connection_manager::{
    ClientCertDetails, CodecType, DEFAULT_DELAYED_CLOSE_TIMEOUT, DEFAULT_DRAIN_TIMEOUT, DEFAULT_MAX_REQUEST_HEADERS_KB,
    DEFAULT_STREAM_IDLE_TIMEOUT, EscapedSlashesAction, ForwardClientCertDetails, HttpConnectionManager,
    InternalAddresses, RouteSource, ServerHeaderTransformation, StripPort,
};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::extensions::filters::http::router::v3::Router;
use crate::pb::envoy::extensions::filters::network::http_connection_manager::v3 as proto;
use crate::pb::envoy::extensions::request_id::uuid::v3::UuidRequestIdConfig;
use proto::http_connection_manager as hcm_proto;

const UUID_REQUEST_ID: &str = "envoy.extensions.request_id.uuid.v3.UuidRequestIdConfig";

#[allow(deprecated)]
pub fn http_connection_manager(
    proto: proto::HttpConnectionManager,
    warnings: &mut Warnings,
) -> Result<HttpConnectionManager> {
    use proto::http_connection_manager as hcm;
    let proto::HttpConnectionManager {
        codec_type,
        stat_prefix,
        http_filters,
        add_user_agent,
        tracing,
        common_http_protocol_options,
        http1_safe_max_connection_duration,
        http_protocol_options,
        http2_protocol_options,
        http3_protocol_options,
        server_name,
        server_header_transformation,
        scheme_header_transformation,
        max_request_headers_kb,
        stream_idle_timeout,
        stream_flush_timeout,
        request_timeout,
        request_headers_timeout,
        drain_timeout,
        drain_timeout_jitter,
        delayed_close_timeout,
        access_log,
        access_log_flush_interval,
        flush_access_log_on_new_request,
        access_log_options,
        use_remote_address,
        xff_num_trusted_hops,
        original_ip_detection_extensions,
        early_header_mutation_extensions,
        internal_address_config,
        skip_xff_append,
        via,
        generate_request_id,
        preserve_external_request_id,
        always_set_request_id_in_response,
        forward_client_cert_details,
        set_current_client_cert_details,
        forward_client_cert_matcher,
        proxy_100_continue,
        represent_ipv4_remote_address_as_ipv4_mapped_ipv6,
        upgrade_configs,
        normalize_path,
        merge_slashes,
        path_with_escaped_slashes_action,
        request_id_extension,
        local_reply_config,
        strip_matching_host_port,
        stream_error_on_invalid_http_message,
        path_normalization_options,
        strip_trailing_host_dot,
        proxy_status_config,
        typed_header_validation_config,
        append_x_forwarded_port,
        append_local_overload,
        add_proxy_protocol_connection_state,
        forward_proto_config,
        route_specifier,
        strip_port_mode,
    } = proto;
    let refuse = |field: &str, what: &str| Err(ConfigError::new(field, format!("{what} is not supported")));
    if !original_ip_detection_extensions.is_empty() {
        return refuse("original_ip_detection_extensions", "client IP detection extensions");
    }
    if !early_header_mutation_extensions.is_empty() {
        return refuse("early_header_mutation_extensions", "early header mutation");
    }
    if forward_client_cert_matcher.is_some() {
        return refuse("forward_client_cert_matcher", "matching the XFCC configuration");
    }
    if path_normalization_options.is_some() {
        return refuse("path_normalization_options", "custom path normalization");
    }
    if local_reply_config.as_ref().is_some_and(|c| !c.mappers.is_empty() || c.body_format.is_some()) {
        return refuse("local_reply_config", "rewriting local replies");
    }
    // A drain is hyper's: GOAWAY, then the final GOAWAY one round trip later (HTTP/2), or
    // `connection: close` on the next response (HTTP/1.1); a close is at once after the
    // last write. Other lengths than Envoy's defaults would change when a client's new
    // requests stop being served and how long a closing connection waits for the client.
    if common::opt_duration(&drain_timeout, "drain_timeout")?.is_some_and(|d| d != DEFAULT_DRAIN_TIMEOUT) {
        return refuse("drain_timeout", "a drain_timeout other than 5s");
    }
    if common::opt_duration(&delayed_close_timeout, "delayed_close_timeout")?
        .is_some_and(|d| d != DEFAULT_DELAYED_CLOSE_TIMEOUT)
    {
        return refuse("delayed_close_timeout", "a delayed_close_timeout other than 1s");
    }
    // Both change what the request says (its `:scheme`, the client address in
    // `x-forwarded-for`); neither is done, so asking for one is refused.
    if scheme_header_transformation.as_ref().is_some_and(|t| t.match_upstream || t.transformation.is_some()) {
        return refuse("scheme_header_transformation", "rewriting :scheme");
    }
    if represent_ipv4_remote_address_as_ipv4_mapped_ipv6 {
        return refuse("represent_ipv4_remote_address_as_ipv4_mapped_ipv6", "IPv4 clients shown as IPv4-mapped IPv6");
    }
    // Envoy's proxy-status header on local replies (RFC 9209) names each reply's details
    // in its own vocabulary; Outrider adds none, so asking for it is refused.
    if proxy_status_config.is_some() {
        return refuse("proxy_status_config", "the proxy-status header");
    }
    let internal_address = match internal_address_config {
        None => InternalAddresses::None,
        Some(config) => internal_addresses(config).map_err(|e| e.at("internal_address_config"))?,
    };
    let request_id_custom = request_id_extension
        .as_ref()
        .and_then(|r| r.typed_config.as_ref())
        .is_some_and(|any| common::type_name(&any.type_url) != UUID_REQUEST_ID);
    ignore_all(
        warnings,
        &[
            (
                http1_safe_max_connection_duration,
                "http1_safe_max_connection_duration",
                "HTTP/1 connections are closed at max_connection_duration",
            ),
            (http3_protocol_options.is_some(), "http3_protocol_options", "HTTP/3 is not served"),
            (stream_flush_timeout.is_some(), "stream_flush_timeout", "stream_idle_timeout bounds flushing"),
            (drain_timeout_jitter.is_some(), "drain_timeout_jitter", "no jitter is applied"),
            (
                access_log_flush_interval.is_some() || flush_access_log_on_new_request || access_log_options.is_some(),
                "access_log_options",
                "access logs are written when each request ends",
            ),
            (request_id_custom, "request_id_extension", "request IDs are UUIDs"),
            (local_reply_config.is_some(), "local_reply_config", "empty local reply configuration"),
            (
                stream_error_on_invalid_http_message.is_some(),
                "stream_error_on_invalid_http_message",
                "invalid messages close the connection",
            ),
            (
                typed_header_validation_config.is_some(),
                "typed_header_validation_config",
                "the codec's header validation applies",
            ),
            (
                add_proxy_protocol_connection_state.is_some(),
                "add_proxy_protocol_connection_state",
                "PROXY protocol is not supported",
            ),
            (forward_proto_config.is_some(), "forward_proto_config", "x-forwarded-proto is taken from the connection"),
        ],
    );
    let route_source = match route_specifier {
        Some(hcm::RouteSpecifier::Rds(rds)) => RouteSource::Rds(rds_name(rds).map_err(|e| e.at("rds"))?),
        Some(hcm::RouteSpecifier::RouteConfig(config)) => RouteSource::Inline(Arc::new(
            warnings
                .within("route_config", |w| route::route_configuration(config, w))
                .map_err(|e| e.at("route_config"))?,
        )),
        Some(hcm::RouteSpecifier::ScopedRoutes(_)) => return refuse("scoped_routes", "scoped routes"),
        None => return Err(ConfigError::new("route_specifier", "one of rds and route_config is required")),
    };
    let HttpFilters { run: http_filters, skipped: skipped_http_filters, suppress_envoy_headers } =
        warnings.within("http_filters", |w| check_http_filters(http_filters, w)).map_err(|e| e.at("http_filters"))?;
    let codec_type = match hcm::CodecType::try_from(codec_type) {
        Ok(hcm::CodecType::Auto) => CodecType::Auto,
        Ok(hcm::CodecType::Http1) => CodecType::Http1,
        Ok(hcm::CodecType::Http2) => CodecType::Http2,
        Ok(hcm::CodecType::Http3) => return refuse("codec_type", "HTTP/3"),
        Err(_) => return Err(ConfigError::new("codec_type", format!("unknown value {codec_type}"))),
    };
    let max_request_headers_kb = common::u32_or(&max_request_headers_kb, DEFAULT_MAX_REQUEST_HEADERS_KB);
    if !(1..=8192).contains(&max_request_headers_kb) {
        return Err(ConfigError::new(
            "max_request_headers_kb",
            format!("{max_request_headers_kb} is outside [1, 8192]"),
        ));
    }
    let timeout = |value, field: &str, default| -> Result<_> {
        Ok(common::opt_duration(value, field)?.or(default).filter(|d| !d.is_zero()))
    };
    let strip_port = match (strip_matching_host_port, strip_port_mode) {
        (true, Some(_)) => {
            return Err(ConfigError::new("strip_any_host_port", "conflicts with strip_matching_host_port"));
        }
        (true, None) => StripPort::Matching,
        (false, Some(hcm::StripPortMode::StripAnyHostPort(true))) => StripPort::Any,
        (false, _) => StripPort::None,
    };
    let access_log = super::access_log::access_logs(access_log, warnings)?;
    let upgrade_configs = super::super::upgrade::hcm_upgrades(upgrade_configs)?;
    let mut tracing = tracing
        .map(|t| warnings.within("tracing", |w| super::hcm_tracing::hcm_tracing(t, w)).map_err(|e| e.at("tracing")))
        .transpose()?;
    if let (Some(tracing), Some(any)) = (tracing.as_mut(), request_id_extension.and_then(|r| r.typed_config))
        && common::type_name(&any.type_url) == UUID_REQUEST_ID
    {
        let UuidRequestIdConfig { pack_trace_reason, use_request_id_for_trace_sampling } =
            common::unpack(&any).map_err(|e| e.at("request_id_extension.typed_config"))?;
        tracing.pack_trace_reason = common::bool_or(&pack_trace_reason, true);
        tracing.request_id_sampling = common::bool_or(&use_request_id_for_trace_sampling, true);
    }
    Ok(HttpConnectionManager {
        tracing,
        access_log,
        stat_prefix,
        codec_type,
        route_source,
        http_filters,
        skipped_http_filters,
        suppress_envoy_headers,
        append_local_overload,
        use_remote_address: common::bool_or(&use_remote_address, false),
        xff_num_trusted_hops,
        skip_xff_append,
        internal_address,
        via,
        generate_request_id: common::bool_or(&generate_request_id, true),
        preserve_external_request_id,
        always_set_request_id_in_response,
        stream_idle_timeout: timeout(&stream_idle_timeout, "stream_idle_timeout", Some(DEFAULT_STREAM_IDLE_TIMEOUT))?,
        request_timeout: timeout(&request_timeout, "request_timeout", None)?,
        request_headers_timeout: timeout(&request_headers_timeout, "request_headers_timeout", None)?,
        common: warnings
            .within("common_http_protocol_options", |w| {
                common_options(common_http_protocol_options.unwrap_or_default(), w)
            })
            .map_err(|e| e.at("common_http_protocol_options"))?,
        http1: warnings
            .within("http_protocol_options", |w| http1_options(http_protocol_options.unwrap_or_default(), w))
            .map_err(|e| e.at("http_protocol_options"))?,
        http2: warnings
            .within("http2_protocol_options", |w| http2_options(http2_protocol_options.unwrap_or_default(), w))
            .map_err(|e| e.at("http2_protocol_options"))?,
        max_request_headers_kb,
        server_name: if server_name.is_empty() { "envoy".to_owned() } else { server_name },
        server_header_transformation: match hcm::ServerHeaderTransformation::try_from(server_header_transformation) {
            Ok(hcm::ServerHeaderTransformation::Overwrite) => ServerHeaderTransformation::Overwrite,
            Ok(hcm::ServerHeaderTransformation::AppendIfAbsent) => ServerHeaderTransformation::AppendIfAbsent,
            Ok(hcm::ServerHeaderTransformation::PassThrough) => ServerHeaderTransformation::PassThrough,
            Err(_) => return Err(ConfigError::new("server_header_transformation", "unknown value")),
        },
        normalize_path: common::bool_or(&normalize_path, false),
        merge_slashes,
        path_with_escaped_slashes_action: {
            use hcm::PathWithEscapedSlashesAction as A;
            match A::try_from(path_with_escaped_slashes_action) {
                Ok(A::ImplementationSpecificDefault | A::KeepUnchanged) => EscapedSlashesAction::KeepUnchanged,
                Ok(A::RejectRequest) => EscapedSlashesAction::RejectRequest,
                Ok(A::UnescapeAndRedirect) => EscapedSlashesAction::UnescapeAndRedirect,
                Ok(A::UnescapeAndForward) => EscapedSlashesAction::UnescapeAndForward,
                Err(_) => return Err(ConfigError::new("path_with_escaped_slashes_action", "unknown value")),
            }
        },
        strip_port,
        strip_trailing_host_dot,
        forward_client_cert_details: {
            use hcm::ForwardClientCertDetails as F;
            match F::try_from(forward_client_cert_details) {
                Ok(F::Sanitize) => ForwardClientCertDetails::Sanitize,
                Ok(F::ForwardOnly) => ForwardClientCertDetails::ForwardOnly,
                Ok(F::AppendForward) => ForwardClientCertDetails::AppendForward,
                Ok(F::SanitizeSet) => ForwardClientCertDetails::SanitizeSet,
                Ok(F::AlwaysForwardOnly) => ForwardClientCertDetails::AlwaysForwardOnly,
                Err(_) => return Err(ConfigError::new("forward_client_cert_details", "unknown value")),
            }
        },
        set_current_client_cert_details: match set_current_client_cert_details {
            None => ClientCertDetails::default(),
            Some(details) => client_cert_details(details)?,
        },
        proxy_100_continue,
        append_x_forwarded_port,
        add_user_agent: add_user_agent.is_some_and(|v| v.value),
        upgrade_configs,
    })
}

/// `set_current_client_cert_details`. The issuer and the other header formats change what
/// the upstream is told: refused, not skipped.
fn client_cert_details(details: hcm_proto::SetCurrentClientCertDetails) -> Result<ClientCertDetails> {
    let hcm_proto::SetCurrentClientCertDetails { subject, cert, chain, dns, uri, issuer, format } = details;
    if issuer {
        return Err(ConfigError::new(
            "set_current_client_cert_details.issuer",
            "adding the issuer to XFCC is not supported",
        ));
    }
    if format != 0 {
        return Err(ConfigError::new(
            "set_current_client_cert_details.format",
            "the JSON format of XFCC is not supported",
        ));
    }
    Ok(ClientCertDetails { subject: common::bool_or(&subject, false), cert, chain, dns, uri })
}

/// `internal_address_config`: its CIDR ranges (none: Envoy's private and loopback list).
/// `unix_sockets` needs nothing: Outrider's listeners accept on IP sockets only, so no
/// client comes from a Unix socket.
fn internal_addresses(config: hcm_proto::InternalAddressConfig) -> Result<InternalAddresses> {
    let hcm_proto::InternalAddressConfig { unix_sockets: _, cidr_ranges } = config;
    let cidr_ranges = cidr_ranges
        .iter()
        .enumerate()
        .map(|(i, r)| {
            super::super::common::cidr(&r.address_prefix, r.prefix_len.map(|l| l.value))
                .map_err(|e| e.at(format!("cidr_ranges[{i}]")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(InternalAddresses::Configured { cidr_ranges })
}

/// `rds`: the route configuration name, which must come over the ADS stream.
fn rds_name(proto: proto::Rds) -> Result<String> {
    use core::config_source::ConfigSourceSpecifier as S;
    let proto::Rds { config_source, route_config_name } = proto;
    if route_config_name.is_empty() {
        return Err(ConfigError::new("route_config_name", "must not be empty"));
    }
    match config_source.and_then(|c| c.config_source_specifier) {
        // `self` means "the server this listener came from", which is the ADS stream.
        Some(S::Ads(_) | S::Self_(_)) => Ok(route_config_name),
        Some(_) => Err(ConfigError::new("config_source", "only ads is supported")),
        None => Err(ConfigError::new("config_source", "is required")),
    }
}

/// What the filter list converts to: the filters Outrider runs, the ones it skips because
/// they only observe, and the router's `suppress_envoy_headers`.
struct HttpFilters {
    run: Vec<HttpFilter>,
    skipped: Vec<SkippedFilter>,
    suppress_envoy_headers: bool,
}

/// Converts the filter list: the router must be present and last; every filter before it
/// is run, skipped because its type only observes traffic (or, optional, is unknown to
/// Envoy too), or refused with its path. Filters are known by type, never by name.
fn check_http_filters(filters: Vec<proto::HttpFilter>, warnings: &mut Warnings) -> Result<HttpFilters> {
    use proto::http_filter::ConfigType;
    let last = filters.len().checked_sub(1);
    let mut out = HttpFilters { run: Vec::new(), skipped: Vec::new(), suppress_envoy_headers: false };
    for (i, filter) in filters.into_iter().enumerate() {
        let proto::HttpFilter { name, is_optional, disabled, config_type } = filter;
        let any = match &config_type {
            Some(ConfigType::TypedConfig(any)) => Some(any),
            _ => None,
        };
        let is_router = match any {
            Some(any) => filter_kind::config_type(any) == ROUTER,
            None => name == "envoy.filters.http.router",
        };
        let at = format!("[{i}]");
        if is_router {
            if Some(i) != last {
                return Err(ConfigError::new(at, "the router must be the last HTTP filter"));
            }
            if disabled {
                return Err(ConfigError::new(format!("{at}.disabled"), "the router may not be disabled"));
            }
            if let Some(any) = any {
                out.suppress_envoy_headers = router(any, warnings).map_err(|e| e.at(format!("{at}.typed_config")))?;
            }
            return Ok(out);
        }
        if let Some(ConfigType::ConfigDiscovery(discovery)) = &config_type {
            let at = format!("{at}.config_discovery");
            if !is_optional {
                return Err(ConfigError::new(
                    at,
                    format!(
                        "filter {name:?}: extension config discovery is not supported and the filter is not is_optional"
                    ),
                ));
            }
            // Optional is not enough: Envoy would fetch and run it. Left out only when
            // every type it may take only observes.
            out.skipped.push(filter_kind::skip_discovered(&name, &discovery.type_urls, &at, warnings)?);
            continue;
        }
        if let Some(any) = any {
            let typed_at = format!("{at}.typed_config");
            let converted =
                warnings.within(&typed_at, |w| filters::http_filter(any, w)).map_err(|e| e.at(typed_at.clone()))?;
            if let Some(config) = converted {
                out.run.push(HttpFilter { name, disabled, config });
                continue;
            }
        }
        out.skipped.push(filter_kind::skip(&name, any, is_optional, &at, warnings)?);
    }
    Err(ConfigError::new("", "the last HTTP filter must be envoy.filters.http.router"))
}

/// The router's own settings; returns `suppress_envoy_headers`.
#[allow(deprecated)]
fn router(any: &crate::pb::google::protobuf::Any, warnings: &mut Warnings) -> Result<bool> {
    let Router {
        dynamic_stats: _,
        start_child_span,
        upstream_log,
        upstream_log_options,
        suppress_envoy_headers,
        strict_check_headers,
        respect_expected_rq_timeout,
        suppress_grpc_request_failure_code_stats: _,
        upstream_http_filters,
        reject_connect_request_early_data: _,
    } = common::unpack::<Router>(any)?;
    if !upstream_http_filters.is_empty() {
        return Err(ConfigError::new("upstream_http_filters", "upstream HTTP filters are not supported"));
    }
    ignore_all(
        warnings,
        &[
            (start_child_span, "start_child_span", "no tracing spans are started"),
            (
                !upstream_log.is_empty() || upstream_log_options.is_some(),
                "upstream_log",
                "upstream access logs are not written",
            ),
            (!strict_check_headers.is_empty(), "strict_check_headers", "x-envoy-* request headers are not read"),
            (respect_expected_rq_timeout, "respect_expected_rq_timeout", "x-envoy-expected-rq-timeout-ms is not read"),
        ],
    );
    Ok(suppress_envoy_headers)
}
