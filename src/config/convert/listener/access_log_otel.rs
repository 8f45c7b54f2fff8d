//! `envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig` →
//! [`OpenTelemetryAccessLog`], as Istio's Telemetry API renders it for an `envoyOtelAls`
//! provider. Only OTLP over gRPC to a cluster of this proxy (`envoy_grpc`) is supported;
//! OTLP over HTTP, resource detectors, formatter extensions and custom tags are refused
//! with their path. Body and attribute strings are parsed here as format strings.

use std::time::Duration;

use prost::Message;

use super::super::common;
use crate::config::access_log::open_telemetry::{OpenTelemetryAccessLog, OtelTemplate};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::format;
use crate::pb::envoy::config::core::v3::{ApiVersion, GrpcService, grpc_service};
use crate::pb::envoy::extensions::access_loggers::grpc::v3::CommonGrpcAccessLogConfig;
use crate::pb::envoy::extensions::access_loggers::open_telemetry::v3::OpenTelemetryAccessLogConfig;
use crate::pb::opentelemetry::proto::common::v1::{AnyValue, KeyValueList, any_value};

const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
const DEFAULT_BUFFER_BYTES: usize = 16 * 1024;

#[allow(deprecated)]
pub fn open_telemetry(config: OpenTelemetryAccessLogConfig, warnings: &mut Warnings) -> Result<OpenTelemetryAccessLog> {
    let OpenTelemetryAccessLogConfig {
        common_config,
        http_service,
        grpc_service,
        disable_builtin_labels,
        resource_attributes,
        resource_detectors,
        body,
        attributes,
        stat_prefix,
        formatters,
        log_name,
        buffer_flush_interval,
        buffer_size_bytes,
        filter_state_objects_to_log,
        custom_tags,
    } = config;
    if http_service.is_some() {
        return Err(ConfigError::new("http_service", "OTLP over HTTP is not supported (use grpc_service)"));
    }
    if !resource_detectors.is_empty() {
        return Err(ConfigError::new("resource_detectors", "resource detectors are not supported"));
    }
    if !formatters.is_empty() {
        return Err(ConfigError::new("formatters", "formatter extensions are not supported"));
    }
    if !custom_tags.is_empty() {
        return Err(ConfigError::new("custom_tags", "custom tags are not supported"));
    }
    if !stat_prefix.is_empty() {
        warnings.ignored("stat_prefix", "the logger keeps no stats of its own");
    }
    if !filter_state_objects_to_log.is_empty() {
        warnings.ignored("filter_state_objects_to_log", "Outrider keeps no filter state to log");
    }
    let common = common_config.unwrap_or_default();
    let CommonGrpcAccessLogConfig {
        log_name: common_log_name,
        grpc_service: common_service,
        transport_api_version,
        buffer_flush_interval: common_flush_interval,
        buffer_size_bytes: common_buffer_size,
        filter_state_objects_to_log: common_filter_state,
        grpc_stream_retry_policy,
        custom_tags: common_custom_tags,
    } = common;
    if transport_api_version != ApiVersion::V3 as i32 {
        return Err(ConfigError::new("common_config.transport_api_version", "only V3 is supported"));
    }
    if !common_custom_tags.is_empty() {
        return Err(ConfigError::new("common_config.custom_tags", "custom tags are not supported"));
    }
    if !common_filter_state.is_empty() {
        warnings.ignored("common_config.filter_state_objects_to_log", "Outrider keeps no filter state to log");
    }
    if grpc_stream_retry_policy.is_some() {
        warnings.ignored(
            "common_config.grpc_stream_retry_policy",
            "a batch that cannot be sent is dropped and counted; the next one tries again",
        );
    }
    // The top-level fields win over `common_config`'s, as in Envoy.
    let (service, service_at) = match grpc_service {
        Some(service) => (service, "grpc_service"),
        None => (
            common_service
                .ok_or_else(|| ConfigError::new("grpc_service", "an OpenTelemetry logger needs a grpc_service"))?,
            "common_config.grpc_service",
        ),
    };
    let (cluster, authority) = envoy_grpc(service).map_err(|e| e.at(service_at))?;
    let log_name = if log_name.is_empty() { common_log_name } else { log_name };
    let (flush_interval, flush_at) = match buffer_flush_interval {
        Some(interval) => (Some(interval), "buffer_flush_interval"),
        None => (common_flush_interval, "common_config.buffer_flush_interval"),
    };
    let flush_interval =
        common::opt_duration(&flush_interval, flush_at)?.filter(|d| !d.is_zero()).unwrap_or(DEFAULT_FLUSH_INTERVAL);
    let buffer_size_bytes = buffer_size_bytes
        .or(common_buffer_size)
        .map_or(DEFAULT_BUFFER_BYTES, |b| usize::try_from(b.value).unwrap_or(usize::MAX));
    let body = body.map(|b| template(b).map_err(|e| e.at("body"))).transpose()?;
    let attributes = key_values(attributes.unwrap_or_default()).map_err(|e| e.at("attributes"))?;
    Ok(OpenTelemetryAccessLog {
        log_name,
        cluster,
        authority,
        flush_interval,
        buffer_size_bytes,
        builtin_labels: !disable_builtin_labels,
        resource_attributes: resource_attributes.unwrap_or_default().encode_to_vec(),
        body,
        attributes,
    })
}

fn envoy_grpc(service: GrpcService) -> Result<(String, String)> {
    match service.target_specifier {
        Some(grpc_service::TargetSpecifier::EnvoyGrpc(envoy)) if !envoy.cluster_name.is_empty() => {
            let authority = if envoy.authority.is_empty() { envoy.cluster_name.clone() } else { envoy.authority };
            Ok((envoy.cluster_name, authority))
        }
        _ => Err(ConfigError::new("", "only envoy_grpc with a cluster_name is supported")),
    }
}

fn key_values(list: KeyValueList) -> Result<Vec<(String, OtelTemplate)>> {
    list.values
        .into_iter()
        .enumerate()
        .map(|(i, kv)| {
            let value = kv.value.unwrap_or_default();
            Ok((kv.key, template(value).map_err(|e| e.at(format!("values[{i}].value")))?))
        })
        .collect()
}

/// Strings, lists and key-value lists; Envoy refuses any other value in a format.
fn template(value: AnyValue) -> Result<OtelTemplate> {
    match value.value {
        Some(any_value::Value::StringValue(text)) => {
            Ok(OtelTemplate::Text(format::parse(&text).map_err(|e| ConfigError::new("string_value", e.to_string()))?))
        }
        Some(any_value::Value::ArrayValue(array)) => array
            .values
            .into_iter()
            .enumerate()
            .map(|(i, v)| template(v).map_err(|e| e.at(format!("array_value.values[{i}]"))))
            .collect::<Result<Vec<_>>>()
            .map(OtelTemplate::Array),
        Some(any_value::Value::KvlistValue(list)) => {
            key_values(list).map(OtelTemplate::KvList).map_err(|e| e.at("kvlist_value"))
        }
        _ => Err(ConfigError::new(
            "",
            "only string values, nested key value lists and array values are supported in an OpenTelemetry access log format",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::opentelemetry::proto::common::v1::KeyValue;

    fn string(text: &str) -> AnyValue {
        AnyValue { value: Some(any_value::Value::StringValue(text.into())) }
    }

    /// What Istio renders for an `envoyOtelAls` provider.
    fn istio() -> OpenTelemetryAccessLogConfig {
        #[allow(deprecated)]
        OpenTelemetryAccessLogConfig {
            common_config: Some(CommonGrpcAccessLogConfig {
                log_name: "otel_envoy_accesslog".into(),
                grpc_service: Some(GrpcService {
                    target_specifier: Some(grpc_service::TargetSpecifier::EnvoyGrpc(grpc_service::EnvoyGrpc {
                        cluster_name: "outbound|4317||otel-collector.observability.svc.cluster.local".into(),
                        authority: "otel-collector.observability.svc.cluster.local".into(),
                        ..Default::default()
                    })),
                    ..Default::default()
                }),
                transport_api_version: ApiVersion::V3 as i32,
                filter_state_objects_to_log: vec!["upstream_peer".into(), "downstream_peer".into()],
                ..Default::default()
            }),
            disable_builtin_labels: true,
            body: Some(string("[%START_TIME%] \"%REQ(:METHOD)%\" %RESPONSE_CODE%\n")),
            attributes: Some(KeyValueList {
                values: vec![KeyValue {
                    key: "pod".into(),
                    value: Some(string("%ENVIRONMENT(POD_NAME)%")),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }
    }

    fn error_path(result: Result<OpenTelemetryAccessLog>) -> String {
        result.err().map(|e| e.path().to_owned()).unwrap_or_default()
    }

    #[test]
    fn istios_provider_converts_with_a_warning_for_filter_state() {
        let mut warnings = Warnings::new();
        let log = open_telemetry(istio(), &mut warnings).ok();
        assert_eq!(
            log.as_ref().map(|l| l.cluster.as_str()),
            Some("outbound|4317||otel-collector.observability.svc.cluster.local")
        );
        assert_eq!(
            log.as_ref().map(|l| (l.log_name.as_str(), l.builtin_labels)),
            Some(("otel_envoy_accesslog", false))
        );
        assert_eq!(log.map(|l| l.attributes.len()), Some(1));
        assert!(!warnings.is_empty());
    }

    #[test]
    fn what_cannot_be_exported_as_configured_is_refused_with_its_path() {
        let mut warnings = Warnings::new();
        let over_http = OpenTelemetryAccessLogConfig { http_service: Some(Default::default()), ..istio() };
        assert_eq!(error_path(open_telemetry(over_http, &mut warnings)), "http_service");
        let number = OpenTelemetryAccessLogConfig {
            attributes: Some(KeyValueList {
                values: vec![KeyValue {
                    key: "n".into(),
                    value: Some(AnyValue { value: Some(any_value::Value::IntValue(1)) }),
                    ..Default::default()
                }],
            }),
            ..istio()
        };
        assert_eq!(error_path(open_telemetry(number, &mut warnings)), "attributes.values[0].value");
        let unknown = OpenTelemetryAccessLogConfig { body: Some(string("%NO_SUCH_COMMAND%")), ..istio() };
        assert_eq!(error_path(open_telemetry(unknown, &mut warnings)), "body.string_value");
        let formatters = OpenTelemetryAccessLogConfig { formatters: vec![Default::default()], ..istio() };
        assert_eq!(error_path(open_telemetry(formatters, &mut warnings)), "formatters");
    }
}
