//! The bootstrap's `tracing.http` → [`TracingConfig`]: the OpenTelemetry tracer
//! (`envoy.tracers.opentelemetry`) exporting over OTLP/gRPC to a static cluster
//! (`envoy_grpc`) or a target URI (`google_grpc`). Other tracers are refused; the
//! OpenTelemetry options Outrider does not apply are reported as ignored.

use super::super::common;
use crate::config::bootstrap::{TraceCollector, TracingConfig};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::pb::envoy::config::core::v3::grpc_service::TargetSpecifier;
use crate::pb::envoy::config::trace::v3 as proto;

const OPENTELEMETRY: &str = "envoy.config.trace.v3.OpenTelemetryConfig";

pub fn tracing(tracing: proto::Tracing, warnings: &mut Warnings) -> Result<Option<TracingConfig>> {
    let proto::Tracing { http } = tracing;
    let Some(proto::tracing::Http { name: _, config_type }) = http else { return Ok(None) };
    let Some(proto::tracing::http::ConfigType::TypedConfig(any)) = config_type else {
        return Err(ConfigError::new("http.typed_config", "a tracer needs a typed_config"));
    };
    if common::type_name(&any.type_url) != OPENTELEMETRY {
        return Err(ConfigError::new(
            "http.typed_config",
            format!("tracer {} is not supported (only OpenTelemetry)", common::type_name(&any.type_url)),
        ));
    }
    let config: proto::OpenTelemetryConfig = common::unpack(&any).map_err(|e| e.at("http.typed_config"))?;
    let proto::OpenTelemetryConfig {
        grpc_service,
        http_service,
        exporter,
        service_name,
        resource_detectors,
        sampler,
        max_cache_size,
        set_telemetry_sdk_resource_attributes,
        ..
    } = config;
    let at = |field: &str| format!("http.typed_config.{field}");
    if http_service.is_some() || exporter.is_some() {
        return Err(ConfigError::new(at("http_service"), "only OTLP over gRPC (grpc_service) is supported"));
    }
    for (set, field) in [
        (!resource_detectors.is_empty(), "resource_detectors"),
        (sampler.is_some(), "sampler"),
        (max_cache_size.is_some(), "max_cache_size"),
        (set_telemetry_sdk_resource_attributes.is_some(), "set_telemetry_sdk_resource_attributes"),
    ] {
        if set {
            warnings.ignored(at(field), "spans are sampled when the parent is, else always");
        }
    }
    let collector = match grpc_service.and_then(|g| g.target_specifier) {
        Some(TargetSpecifier::EnvoyGrpc(grpc)) if !grpc.cluster_name.is_empty() => {
            TraceCollector::Cluster(grpc.cluster_name)
        }
        Some(TargetSpecifier::GoogleGrpc(grpc)) if !grpc.target_uri.is_empty() => {
            let uri = grpc.target_uri;
            TraceCollector::Uri(if uri.contains("://") { uri } else { format!("http://{uri}") })
        }
        _ => return Err(ConfigError::new(at("grpc_service"), "names no cluster or target URI")),
    };
    let service_name = if service_name.is_empty() { "outrider".to_owned() } else { service_name };
    Ok(Some(TracingConfig { collector, service_name }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::config::core::v3::GrpcService;
    use crate::pb::envoy::config::core::v3::grpc_service::{EnvoyGrpc, GoogleGrpc};
    use crate::pb::google::protobuf::Any;
    use prost::{Message, Name};

    fn tracing_with(config: proto::OpenTelemetryConfig) -> proto::Tracing {
        let any = Any { type_url: proto::OpenTelemetryConfig::type_url(), value: config.encode_to_vec() };
        proto::Tracing {
            http: Some(proto::tracing::Http {
                name: "envoy.tracers.opentelemetry".into(),
                config_type: Some(proto::tracing::http::ConfigType::TypedConfig(any)),
            }),
        }
    }

    #[test]
    fn opentelemetry_to_a_cluster_or_a_uri() {
        let to_cluster = proto::OpenTelemetryConfig {
            grpc_service: Some(GrpcService {
                target_specifier: Some(TargetSpecifier::EnvoyGrpc(EnvoyGrpc {
                    cluster_name: "otel".into(),
                    ..Default::default()
                })),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut warnings = Warnings::new();
        let config = tracing(tracing_with(to_cluster), &mut warnings).ok().flatten();
        assert_eq!(
            config,
            Some(TracingConfig { collector: TraceCollector::Cluster("otel".into()), service_name: "outrider".into() })
        );
        let to_uri = proto::OpenTelemetryConfig {
            grpc_service: Some(GrpcService {
                target_specifier: Some(TargetSpecifier::GoogleGrpc(GoogleGrpc {
                    target_uri: "collector:4317".into(),
                    ..Default::default()
                })),
                ..Default::default()
            }),
            service_name: "mesh".into(),
            ..Default::default()
        };
        let config = tracing(tracing_with(to_uri), &mut warnings).ok().flatten();
        assert_eq!(
            config,
            Some(TracingConfig {
                collector: TraceCollector::Uri("http://collector:4317".into()),
                service_name: "mesh".into()
            })
        );
        let nowhere = tracing(tracing_with(proto::OpenTelemetryConfig::default()), &mut warnings);
        assert!(nowhere.is_err_and(|e| e.to_string().contains("grpc_service")));
    }
}
