//! The bootstrap's `tracing.http` → [`TracingConfig`]: the OpenTelemetry tracer
//! (`envoy.tracers.opentelemetry`) exporting over OTLP/gRPC to a static cluster
//! (`envoy_grpc`) or a target URI (`google_grpc`), converted as a connection manager's
//! `tracing.provider` is: other tracers, samplers and resource detectors are refused.

use crate::config::error::{Result, Warnings};
use crate::config::tracing::TracingConfig;
use crate::pb::envoy::config::trace::v3 as proto;

pub fn tracing(tracing: proto::Tracing, warnings: &mut Warnings) -> Result<Option<TracingConfig>> {
    let proto::Tracing { http } = tracing;
    let Some(http) = http else { return Ok(None) };
    // The same tracer a connection manager's `tracing.provider` names.
    let config = warnings
        .within("http", |w| crate::config::convert::listener::opentelemetry_tracer(http, w))
        .map_err(|e| e.at("http"))?;
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tracing::TraceCollector;
    use crate::pb::envoy::config::core::v3::GrpcService;
    use crate::pb::envoy::config::core::v3::grpc_service::TargetSpecifier;
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
                    stat_prefix: "otel".into(), // min_len 1
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

    #[test]
    fn a_sampler_would_change_decisions_and_is_refused() {
        let with_sampler = proto::OpenTelemetryConfig {
            grpc_service: Some(GrpcService {
                target_specifier: Some(TargetSpecifier::GoogleGrpc(GoogleGrpc {
                    target_uri: "collector:4317".into(),
                    stat_prefix: "otel".into(), // min_len 1
                    ..Default::default()
                })),
                ..Default::default()
            }),
            sampler: Some(crate::pb::envoy::config::core::v3::TypedExtensionConfig {
                name: "sampler".into(), // min_len 1
                typed_config: Some(crate::pb::google::protobuf::Any {
                    type_url: "type.googleapis.com/acme.Sampler".into(),
                    value: Vec::new(),
                }),
            }),
            ..Default::default()
        };
        let refused = tracing(tracing_with(with_sampler), &mut Warnings::new());
        assert_eq!(refused.err().map(|e| e.path().to_owned()).as_deref(), Some("http.typed_config.sampler"));
    }
}
