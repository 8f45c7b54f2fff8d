//! `envoy.extensions.filters.http.ext_authz.v3.ExtAuthz` → [`ExtAuthz`], its per-route
//! `ExtAuthzPerRoute`, and the network filter's `ExtAuthz` → [`NetworkExtAuthz`].

use std::time::Duration;

use super::super::common;
use super::super::matchers::string_matcher;
use super::grpc_service::{envoy_grpc, error_status, require_v3};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::ext_authz::{
    AuthzService, BufferSettings, ExtAuthz, ExtAuthzPerRoute, HttpAuthzService, NetworkExtAuthz,
};
use crate::config::route::StringMatcher;
use crate::pb::envoy::extensions::filters::http::ext_authz::v3 as proto;
use crate::pb::envoy::extensions::filters::network::ext_authz::v3 as network;
use crate::pb::envoy::r#type::matcher::v3::ListStringMatcher;
use crate::pb::google::protobuf::Any;

pub const TYPE: &str = "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz";
pub const PER_ROUTE_TYPE: &str = "envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute";
pub const NETWORK_TYPE: &str = "envoy.extensions.filters.network.ext_authz.v3.ExtAuthz";

/// Envoy's default timeout of a check through the gRPC service.
const DEFAULT_GRPC_TIMEOUT: Duration = Duration::from_millis(200);

/// The request headers the HTTP service always sees, besides `allowed_headers`.
const HTTP_SERVICE_HEADERS: [&str; 4] = ["authorization", ":method", ":path", ":authority"];

#[allow(deprecated)]
pub fn ext_authz(any: &Any, warnings: &mut Warnings) -> Result<ExtAuthz> {
    let proto::ExtAuthz {
        transport_api_version,
        failure_mode_allow,
        failure_mode_allow_header_add,
        with_request_body,
        clear_route_cache,
        status_on_error,
        validate_mutations,
        metadata_context_namespaces,
        typed_metadata_context_namespaces,
        route_metadata_context_namespaces,
        route_typed_metadata_context_namespaces,
        filter_enabled,
        filter_enabled_metadata,
        deny_at_disable,
        include_peer_certificate,
        stat_prefix,
        bootstrap_metadata_labels_key,
        allowed_headers,
        disallowed_headers,
        include_tls_session,
        charge_cluster_response_stats,
        encode_raw_headers,
        decoder_header_mutation_rules,
        enable_dynamic_metadata_ingestion,
        filter_metadata,
        emit_filter_state_stats,
        max_denied_response_body_bytes,
        enforce_response_header_limits,
        shadow_mode,
        emit_client_span,
        services,
    } = common::unpack::<proto::ExtAuthz>(any)?;
    let refuse = |field: &str, what: &str| Err(ConfigError::new(field, format!("{what} is not supported")));
    let with_request_body =
        with_request_body.map(buffer_settings).transpose().map_err(|e| e.at("with_request_body"))?;
    if clear_route_cache {
        return refuse("clear_route_cache", "routing again after the authorization service changed headers");
    }
    if !typed_metadata_context_namespaces.is_empty() {
        return refuse("typed_metadata_context_namespaces", "typed dynamic metadata");
    }
    if !route_metadata_context_namespaces.is_empty() {
        return refuse("route_metadata_context_namespaces", "route metadata in the check");
    }
    if !route_typed_metadata_context_namespaces.is_empty() {
        return refuse("route_typed_metadata_context_namespaces", "route metadata in the check");
    }
    if filter_enabled.is_some() {
        return refuse("filter_enabled", "enabling the filter for a runtime fraction of requests");
    }
    let filter_enabled_metadata = filter_enabled_metadata
        .map(|m| {
            warnings
                .within("filter_enabled_metadata", |w| super::rbac::policy::metadata_matcher(m, w))
                .map_err(|e| e.at("filter_enabled_metadata"))
        })
        .transpose()?;
    if deny_at_disable.as_ref().is_some_and(|d| d.default_value.as_ref().is_some_and(|v| v.value)) {
        return refuse("deny_at_disable", "denying requests the filter is disabled for");
    }
    if include_peer_certificate {
        return refuse("include_peer_certificate", "sending the client certificate to the authorization service");
    }
    if !bootstrap_metadata_labels_key.is_empty() {
        return refuse("bootstrap_metadata_labels_key", "destination labels from node metadata");
    }
    if decoder_header_mutation_rules.is_some() {
        return refuse("decoder_header_mutation_rules", "header mutation rules");
    }
    if shadow_mode {
        return refuse("shadow_mode", "shadow mode");
    }
    // Outrider always refuses a header the service asks for that is not a valid HTTP
    // header (500, `ext_authz.invalid`), which is what `validate_mutations` turns on.
    let _ = validate_mutations;
    if filter_metadata.is_some() || emit_filter_state_stats {
        warnings.ignored("filter_metadata", "ext_authz logging info is not kept (access logs only)");
    }
    if charge_cluster_response_stats.is_some() {
        warnings.ignored("charge_cluster_response_stats", "the route cluster's response-code stats are not charged");
    }
    if enforce_response_header_limits {
        warnings.ignored("enforce_response_header_limits", "response headers are not counted against a limit");
    }
    if emit_client_span.is_some() {
        warnings.ignored("emit_client_span", "the check is not traced");
    }
    let stats_matchers =
        |list: Option<ListStringMatcher>, field: &str, w: &mut Warnings| -> Result<Option<Vec<StringMatcher>>> {
            list.map(|l| list_string_matcher(l, w).map_err(|e| e.at(field))).transpose()
        };
    let allowed_headers = stats_matchers(allowed_headers, "allowed_headers", warnings)?;
    let disallowed_headers = stats_matchers(disallowed_headers, "disallowed_headers", warnings)?.unwrap_or_default();
    let (service, allowed_headers) = match services {
        Some(proto::ext_authz::Services::GrpcService(grpc)) => {
            require_v3(transport_api_version, "transport_api_version")?;
            let service = warnings.within("grpc_service", |w| envoy_grpc(grpc, w)).map_err(|e| e.at("grpc_service"))?;
            let timeout = service.timeout.unwrap_or(DEFAULT_GRPC_TIMEOUT);
            (AuthzService::Grpc { service, timeout }, allowed_headers)
        }
        Some(proto::ext_authz::Services::HttpService(http)) => {
            let (service, request_allowed) =
                warnings.within("http_service", |w| http_service(http, w)).map_err(|e| e.at("http_service"))?;
            if allowed_headers.is_some() && request_allowed.is_some() {
                return Err(ConfigError::new(
                    "allowed_headers",
                    "may not be set with http_service.authorization_request.allowed_headers",
                ));
            }
            let mut allowed = request_allowed.or(allowed_headers).unwrap_or_default();
            allowed
                .extend(HTTP_SERVICE_HEADERS.map(|h| StringMatcher::Exact { value: h.to_owned(), ignore_case: false }));
            (AuthzService::Http(service), Some(allowed))
        }
        None => return Err(ConfigError::new("grpc_service", "one of grpc_service and http_service is required")),
    };
    Ok(ExtAuthz {
        service,
        failure_mode_allow,
        failure_mode_allow_header_add,
        status_on_error: error_status(status_on_error, 403),
        stat_prefix,
        allowed_headers,
        disallowed_headers,
        include_tls_session,
        encode_raw_headers,
        metadata_context_namespaces,
        dynamic_metadata_ingestion: common::bool_or(&enable_dynamic_metadata_ingestion, true),
        max_denied_response_body_bytes,
        with_request_body,
        filter_enabled_metadata,
    })
}

/// The HTTP service, and its `authorization_request.allowed_headers` when set.
fn http_service(
    proto: proto::HttpService,
    warnings: &mut Warnings,
) -> Result<(HttpAuthzService, Option<Vec<StringMatcher>>)> {
    use crate::pb::envoy::config::core::v3 as core;
    let proto::HttpService {
        server_uri,
        path_prefix,
        path_override,
        authorization_request,
        authorization_response,
        retry_policy,
    } = proto;
    if !path_override.is_empty() {
        return Err(ConfigError::new("path_override", "overriding the check's path is not supported"));
    }
    if retry_policy.is_some() {
        return Err(ConfigError::new("retry_policy", "retrying checks is not supported"));
    }
    let core::HttpUri { uri: _, timeout, http_upstream_type } =
        server_uri.ok_or_else(|| ConfigError::new("server_uri", "is required"))?;
    let cluster = match http_upstream_type {
        Some(core::http_uri::HttpUpstreamType::Cluster(c)) if !c.is_empty() => c,
        _ => return Err(ConfigError::new("server_uri.cluster", "is required")),
    };
    let timeout = match timeout {
        Some(t) => common::duration(&t).map_err(|e| e.at("server_uri.timeout"))?,
        None => return Err(ConfigError::new("server_uri.timeout", "is required")),
    };
    let proto::AuthorizationRequest { allowed_headers, headers_to_add } = authorization_request.unwrap_or_default();
    let allowed = allowed_headers
        .map(|l| list_string_matcher(l, warnings).map_err(|e| e.at("authorization_request.allowed_headers")))
        .transpose()?;
    let headers_to_add = headers_to_add
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            let at = format!("authorization_request.headers_to_add[{i}]");
            let core::HeaderValue { key, value, raw_value } = h;
            let name = http::HeaderName::from_bytes(key.as_bytes())
                .map_err(|_| ConfigError::new(format!("{at}.key"), format!("{key:?} is not a header name")))?;
            let value = if raw_value.is_empty() {
                value
            } else {
                String::from_utf8(raw_value)
                    .map_err(|_| ConfigError::new(format!("{at}.raw_value"), "must be UTF-8"))?
            };
            if value.contains('%') {
                return Err(ConfigError::new(format!("{at}.value"), "substitution formatters are not supported"));
            }
            Ok((name, value))
        })
        .collect::<Result<_>>()?;
    let proto::AuthorizationResponse {
        allowed_upstream_headers,
        allowed_upstream_headers_to_append,
        allowed_client_headers,
        allowed_client_headers_on_success,
        dynamic_metadata_from_headers,
    } = authorization_response.unwrap_or_default();
    if dynamic_metadata_from_headers.is_some() {
        return Err(ConfigError::new(
            "authorization_response.dynamic_metadata_from_headers",
            "dynamic metadata from the check's headers is not supported",
        ));
    }
    let mut list = |l: Option<ListStringMatcher>, field: &str| -> Result<Vec<StringMatcher>> {
        l.map(|l| list_string_matcher(l, warnings).map_err(|e| e.at(format!("authorization_response.{field}"))))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let service = HttpAuthzService {
        cluster,
        timeout,
        path_prefix,
        headers_to_add,
        allowed_upstream_headers: list(allowed_upstream_headers, "allowed_upstream_headers")?,
        allowed_upstream_headers_to_append: list(
            allowed_upstream_headers_to_append,
            "allowed_upstream_headers_to_append",
        )?,
        allowed_client_headers: list(allowed_client_headers, "allowed_client_headers")?,
        allowed_client_headers_on_success: list(
            allowed_client_headers_on_success,
            "allowed_client_headers_on_success",
        )?,
    };
    Ok((service, allowed))
}

fn list_string_matcher(proto: ListStringMatcher, warnings: &mut Warnings) -> Result<Vec<StringMatcher>> {
    proto
        .patterns
        .into_iter()
        .enumerate()
        .map(|(i, p)| string_matcher(p, warnings).map_err(|e| e.at(format!("patterns[{i}]"))))
        .collect()
}

/// `BufferSettings`, with Envoy's constraint that `max_request_bytes` is above 0.
fn buffer_settings(proto: proto::BufferSettings) -> Result<BufferSettings> {
    let proto::BufferSettings { max_request_bytes, allow_partial_message, pack_as_bytes } = proto;
    if max_request_bytes == 0 {
        return Err(ConfigError::new("max_request_bytes", "must be greater than 0"));
    }
    Ok(BufferSettings { max_request_bytes, allow_partial_message, pack_as_bytes })
}

pub fn per_route(any: &Any, warnings: &mut Warnings) -> Result<ExtAuthzPerRoute> {
    use proto::ext_authz_per_route::Override as O;
    let proto::ExtAuthzPerRoute { r#override } = common::unpack::<proto::ExtAuthzPerRoute>(any)?;
    match r#override {
        None => Err(ConfigError::new("override", "one of disabled and check_settings is required")),
        Some(O::Disabled(false)) => Err(ConfigError::new("disabled", "must be true when set")),
        Some(O::Disabled(true)) => Ok(ExtAuthzPerRoute { disabled: true, ..ExtAuthzPerRoute::default() }),
        Some(O::CheckSettings(settings)) => {
            let proto::CheckSettings {
                context_extensions,
                disable_request_body_buffering,
                with_request_body,
                emit_client_span,
                service_override,
            } = settings;
            let with_request_body = with_request_body
                .map(buffer_settings)
                .transpose()
                .map_err(|e| e.at("check_settings.with_request_body"))?;
            if service_override.is_some() {
                return Err(ConfigError::new(
                    "check_settings.service_override",
                    "a per-route authorization service is not supported",
                ));
            }
            if emit_client_span.is_some() {
                warnings.ignored("check_settings.emit_client_span", "the check is not traced");
            }
            Ok(ExtAuthzPerRoute {
                disabled: false,
                context_extensions: context_extensions.into_iter().collect(),
                disable_request_body_buffering,
                with_request_body,
            })
        }
    }
}

pub fn network(any: &Any, warnings: &mut Warnings) -> Result<NetworkExtAuthz> {
    let network::ExtAuthz {
        stat_prefix,
        grpc_service,
        failure_mode_allow,
        include_peer_certificate,
        transport_api_version,
        filter_enabled_metadata,
        bootstrap_metadata_labels_key,
        include_tls_session,
        send_tls_alert_on_denial,
        metadata_context_namespaces,
        typed_metadata_context_namespaces,
        shadow_mode,
    } = common::unpack::<network::ExtAuthz>(any)?;
    let refuse = |field: &str, what: &str| Err(ConfigError::new(field, format!("{what} is not supported")));
    if include_peer_certificate {
        return refuse("include_peer_certificate", "sending the client certificate to the authorization service");
    }
    if filter_enabled_metadata.is_some() {
        return refuse("filter_enabled_metadata", "enabling the filter by metadata");
    }
    if !bootstrap_metadata_labels_key.is_empty() {
        return refuse("bootstrap_metadata_labels_key", "destination labels from node metadata");
    }
    if send_tls_alert_on_denial {
        return refuse("send_tls_alert_on_denial", "a TLS alert on denial");
    }
    if !metadata_context_namespaces.is_empty() || !typed_metadata_context_namespaces.is_empty() {
        return refuse("metadata_context_namespaces", "connection metadata in the check");
    }
    if shadow_mode {
        return refuse("shadow_mode", "shadow mode");
    }
    if stat_prefix.is_empty() {
        return Err(ConfigError::new("stat_prefix", "must not be empty"));
    }
    require_v3(transport_api_version, "transport_api_version")?;
    let grpc = grpc_service.ok_or_else(|| ConfigError::new("grpc_service", "is required"))?;
    let service = warnings.within("grpc_service", |w| envoy_grpc(grpc, w)).map_err(|e| e.at("grpc_service"))?;
    let timeout = service.timeout.unwrap_or(DEFAULT_GRPC_TIMEOUT);
    Ok(NetworkExtAuthz { stat_prefix, service, timeout, failure_mode_allow, include_tls_session })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::config::core::v3 as core;

    fn any(config: &proto::ExtAuthz) -> Any {
        Any { type_url: format!("type.googleapis.com/{TYPE}"), value: prost::Message::encode_to_vec(config) }
    }

    fn grpc(cluster: &str) -> Option<proto::ext_authz::Services> {
        Some(proto::ext_authz::Services::GrpcService(core::GrpcService {
            target_specifier: Some(core::grpc_service::TargetSpecifier::EnvoyGrpc(core::grpc_service::EnvoyGrpc {
                cluster_name: cluster.into(),
                ..Default::default()
            })),
            ..Default::default()
        }))
    }

    #[test]
    fn grpc_service_gets_envoy_defaults() {
        let config = proto::ExtAuthz {
            services: grpc("authz"),
            transport_api_version: core::ApiVersion::V3 as i32,
            ..Default::default()
        };
        let converted = ext_authz(&any(&config), &mut Warnings::new()).unwrap();
        let AuthzService::Grpc { service, timeout } = &converted.service else { panic!("not gRPC") };
        assert_eq!((service.authority.as_str(), *timeout), ("authz", Duration::from_millis(200)));
        assert_eq!(converted.status_on_error, 403);
        assert_eq!(converted.allowed_headers, None, "the gRPC service sees every header");
    }

    #[test]
    fn unsupported_settings_are_refused_with_their_path() {
        let base = proto::ExtAuthz {
            services: grpc("authz"),
            transport_api_version: core::ApiVersion::V3 as i32,
            ..Default::default()
        };
        let cases = [
            (
                proto::ExtAuthz { with_request_body: Some(Default::default()), ..base.clone() },
                "with_request_body.max_request_bytes",
            ),
            (proto::ExtAuthz { clear_route_cache: true, ..base.clone() }, "clear_route_cache"),
            (proto::ExtAuthz { transport_api_version: 0, ..base.clone() }, "transport_api_version"),
            (
                proto::ExtAuthz {
                    services: Some(proto::ext_authz::Services::GrpcService(core::GrpcService {
                        target_specifier: Some(core::grpc_service::TargetSpecifier::GoogleGrpc(Default::default())),
                        ..Default::default()
                    })),
                    ..base.clone()
                },
                "grpc_service.google_grpc",
            ),
        ];
        for (config, path) in cases {
            let error = ext_authz(&any(&config), &mut Warnings::new()).unwrap_err();
            assert!(error.to_string().contains(path), "{path}: {error}");
        }
    }

    #[test]
    fn per_route_settings() {
        let settings = proto::ExtAuthzPerRoute {
            r#override: Some(proto::ext_authz_per_route::Override::CheckSettings(proto::CheckSettings {
                context_extensions: [("k".to_owned(), "v".to_owned())].into_iter().collect(),
                ..Default::default()
            })),
        };
        let any = Any {
            type_url: format!("type.googleapis.com/{PER_ROUTE_TYPE}"),
            value: prost::Message::encode_to_vec(&settings),
        };
        let converted = per_route(&any, &mut Warnings::new()).unwrap();
        assert_eq!(converted.context_extensions.get("k").map(String::as_str), Some("v"));
        let disabled_false =
            proto::ExtAuthzPerRoute { r#override: Some(proto::ext_authz_per_route::Override::Disabled(false)) };
        let any = Any { type_url: any.type_url, value: prost::Message::encode_to_vec(&disabled_false) };
        assert!(per_route(&any, &mut Warnings::new()).unwrap_err().to_string().contains("disabled"));
    }
}
