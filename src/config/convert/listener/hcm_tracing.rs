//! `HttpConnectionManager.tracing` → [`HcmTracing`]: the three sampling percentages in
//! the units Envoy rounds them to, the custom tags, and the `provider` — an
//! OpenTelemetry tracer (`envoy.tracers.opentelemetry`) exporting over OTLP/gRPC to a
//! cluster (`envoy_grpc`) or a target (`google_grpc`), as Istio's Telemetry API renders it,
//! or over HTTP (`http_service` to a cluster and path). Other tracers, samplers and
//! resource detectors are refused with their path: each would change which requests are
//! sampled or what the spans say.

use std::sync::Arc;

use super::super::common;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::fractional_percent::FractionalPercent;
use crate::config::tracing::{DEFAULT_MAX_PATH_TAG_LENGTH, HcmTracing, Sampling};
use crate::config::tracing::{TraceCollector, TracingConfig};
use crate::pb::envoy::config::core::v3::grpc_service::TargetSpecifier;
use crate::pb::envoy::config::core::v3::{HttpService, HttpUri, http_uri};
use crate::pb::envoy::config::trace::v3 as trace;
use crate::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::Tracing;
use crate::pb::envoy::r#type::v3::Percent;

const OPENTELEMETRY: &str = "envoy.config.trace.v3.OpenTelemetryConfig";

pub fn hcm_tracing(tracing: Tracing, warnings: &mut Warnings) -> Result<HcmTracing> {
    let Tracing {
        client_sampling,
        random_sampling,
        overall_sampling,
        verbose,
        max_path_tag_length,
        custom_tags,
        provider,
        spawn_upstream_span,
        operation,
        upstream_operation,
        no_context_propagation,
    } = tracing;
    if no_context_propagation {
        return Err(ConfigError::new("no_context_propagation", "the trace context is always propagated upstream"));
    }
    if verbose {
        warnings.ignored("verbose", "spans carry no per-filter log events");
    }
    if !operation.is_empty() || !upstream_operation.is_empty() {
        let field = if operation.is_empty() { "upstream_operation" } else { "operation" };
        warnings.ignored(field, "spans keep Envoy's default names");
    }
    let provider = provider
        .map(|p| warnings.within("provider", |w| opentelemetry(p, w)).map_err(|e| e.at("provider")))
        .transpose()?
        .map(Arc::new);
    let custom_tags = super::super::custom_tags::custom_tags(custom_tags)?;
    let max_path_tag_length =
        max_path_tag_length.map_or(DEFAULT_MAX_PATH_TAG_LENGTH, |v| usize::try_from(v.value).unwrap_or(usize::MAX));
    Ok(HcmTracing {
        provider,
        sampling: Sampling {
            client: FractionalPercent { numerator: truncated(&client_sampling, "client_sampling")?, denominator: 100 },
            random: FractionalPercent {
                numerator: rounded(&random_sampling, 10_000, "random_sampling")?,
                denominator: 10_000,
            },
            overall: FractionalPercent {
                numerator: rounded(&overall_sampling, 10_000, "overall_sampling")?,
                denominator: 10_000,
            },
        },
        custom_tags,
        max_path_tag_length,
        spawn_upstream_span: common::bool_or(&spawn_upstream_span, false),
        ..HcmTracing::default()
    })
}

/// A percentage as Envoy stores it: rounded to a numerator over `denominator` (HUNDRED
/// for `client_sampling`, TEN_THOUSAND for the others); unset is everything.
fn rounded(value: &Option<Percent>, denominator: u32, field: &str) -> Result<u32> {
    let percent = common::percent_or(value, 100.0, field)?;
    // In [0, 100] by the check above, so the product is in [0, denominator].
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let numerator = (percent * f64::from(denominator) / 100.0).round() as u32;
    Ok(numerator.min(denominator))
}

/// `client_sampling` as Envoy stores it: the percent's whole part over HUNDRED (its
/// numerator is set from the double, which truncates).
fn truncated(value: &Option<Percent>, field: &str) -> Result<u32> {
    let percent = common::percent_or(value, 100.0, field)?;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let numerator = percent.trunc() as u32;
    Ok(numerator.min(100))
}

/// `provider` (and the bootstrap's `tracing.http`): the OpenTelemetry tracer and where it
/// exports.
pub(in crate::config::convert) fn opentelemetry(
    provider: trace::tracing::Http,
    warnings: &mut Warnings,
) -> Result<TracingConfig> {
    let trace::tracing::Http { name: _, config_type } = provider;
    let Some(trace::tracing::http::ConfigType::TypedConfig(any)) = config_type else {
        return Err(ConfigError::new("typed_config", "a tracer needs a typed_config"));
    };
    if common::type_name(&any.type_url) != OPENTELEMETRY {
        return Err(ConfigError::new(
            "typed_config",
            format!("tracer {} is not supported (only OpenTelemetry)", common::type_name(&any.type_url)),
        ));
    }
    let config: trace::OpenTelemetryConfig = common::unpack(&any).map_err(|e| e.at("typed_config"))?;
    let trace::OpenTelemetryConfig {
        grpc_service,
        http_service,
        exporter,
        service_name,
        resource_detectors,
        sampler,
        max_cache_size,
        set_telemetry_sdk_resource_attributes,
        set_service_name_resource_attribute,
        set_instrumentation_scope,
    } = config;
    let at = |field: &str| format!("typed_config.{field}");
    if exporter.is_some() {
        return Err(ConfigError::new(at("exporter"), "exporter extensions are not supported"));
    }
    if sampler.is_some() {
        return Err(ConfigError::new(at("sampler"), "sampler extensions are not supported"));
    }
    if !resource_detectors.is_empty() {
        return Err(ConfigError::new(at("resource_detectors"), "resource detectors are not supported"));
    }
    for (set, field, what) in [
        (max_cache_size.is_some(), "max_cache_size", "there is no sampler cache"),
        (
            set_telemetry_sdk_resource_attributes.is_some() || set_service_name_resource_attribute.is_some(),
            "set_telemetry_sdk_resource_attributes",
            "the resource carries service.name and the SDK's attributes",
        ),
        (set_instrumentation_scope.is_some(), "set_instrumentation_scope", "the scope is outrider"),
    ] {
        if set {
            warnings.ignored(at(field), what);
        }
    }
    let service_name = if service_name.is_empty() { "outrider".to_owned() } else { service_name };
    if let Some(http) = http_service {
        if grpc_service.is_some() {
            return Err(ConfigError::new(at("http_service"), "conflicts with grpc_service"));
        }
        let collector = http_collector(http).map_err(|e| e.at(at("http_service")))?;
        return Ok(TracingConfig { collector, service_name });
    }
    let service = grpc_service.ok_or_else(|| ConfigError::new(at("grpc_service"), "is required"))?;
    let collector = match service.target_specifier {
        Some(TargetSpecifier::EnvoyGrpc(grpc)) if !grpc.cluster_name.is_empty() => {
            TraceCollector::Cluster(grpc.cluster_name)
        }
        Some(TargetSpecifier::GoogleGrpc(grpc)) if !grpc.target_uri.is_empty() => {
            let uri = grpc.target_uri;
            TraceCollector::Uri(if uri.contains("://") { uri } else { format!("http://{uri}") })
        }
        _ => return Err(ConfigError::new(at("grpc_service"), "names no cluster or target URI")),
    };
    Ok(TracingConfig { collector, service_name })
}

/// `http_service`: OTLP/HTTP to `http_uri.cluster` at the URI's path, with the headers to
/// add. The URI's host names the collector only for humans; the cluster is where it is.
fn http_collector(http: HttpService) -> Result<TraceCollector> {
    let HttpService { http_uri, request_headers_to_add, formatters } = http;
    if !formatters.is_empty() {
        return Err(ConfigError::new("formatters", "formatter extensions are not supported"));
    }
    let HttpUri { uri, timeout: _, http_upstream_type } =
        http_uri.ok_or_else(|| ConfigError::new("http_uri", "is required"))?;
    let Some(http_uri::HttpUpstreamType::Cluster(cluster)) = http_upstream_type.filter(|t| match t {
        http_uri::HttpUpstreamType::Cluster(c) => !c.is_empty(),
    }) else {
        return Err(ConfigError::new("http_uri.cluster", "is required"));
    };
    let parsed = http::Uri::try_from(uri.as_str())
        .map_err(|e| ConfigError::new("http_uri.uri", format!("{uri:?} is not a URI: {e}")))?;
    let path = parsed.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let headers = request_headers_to_add
        .into_iter()
        .enumerate()
        .map(|(i, option)| {
            let header = option
                .header
                .ok_or_else(|| ConfigError::new(format!("request_headers_to_add[{i}].header"), "is required"))?;
            let value = if header.value.is_empty() {
                String::from_utf8(header.raw_value).map_err(|_| {
                    ConfigError::new(format!("request_headers_to_add[{i}].header.raw_value"), "is not UTF-8")
                })?
            } else {
                header.value
            };
            Ok((header.key.to_ascii_lowercase(), value))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(TraceCollector::HttpCluster { cluster, path, headers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tracing::{CustomTag, CustomTagValue};
    use crate::pb::envoy::config::core::v3::GrpcService;
    use crate::pb::envoy::config::core::v3::grpc_service::EnvoyGrpc;
    use crate::pb::envoy::r#type::metadata::v3::metadata_kind;
    use crate::pb::envoy::r#type::metadata::v3::{MetadataKey, MetadataKind};
    use crate::pb::envoy::r#type::tracing::v3::{CustomTag as ProtoTag, custom_tag};
    use crate::pb::google::protobuf::Any;
    use prost::{Message, Name};

    fn provider(config: trace::OpenTelemetryConfig) -> Option<trace::tracing::Http> {
        let any = Any { type_url: trace::OpenTelemetryConfig::type_url(), value: config.encode_to_vec() };
        Some(trace::tracing::Http {
            name: "envoy.tracers.opentelemetry".into(),
            config_type: Some(trace::tracing::http::ConfigType::TypedConfig(any)),
        })
    }

    fn to_cluster(name: &str) -> trace::OpenTelemetryConfig {
        trace::OpenTelemetryConfig {
            grpc_service: Some(GrpcService {
                target_specifier: Some(TargetSpecifier::EnvoyGrpc(EnvoyGrpc {
                    cluster_name: name.into(),
                    authority: "otel-collector.observability.svc.cluster.local".into(),
                    ..Default::default()
                })),
                ..Default::default()
            }),
            service_name: "reviews.default".into(),
            ..Default::default()
        }
    }

    fn error_path(result: Result<HcmTracing>) -> String {
        result.err().map(|e| e.path().to_owned()).unwrap_or_default()
    }

    #[test]
    fn istios_opentelemetry_provider_converts() {
        let cluster = "outbound|4317||otel-collector.observability.svc.cluster.local";
        let tracing = Tracing {
            provider: provider(to_cluster(cluster)),
            random_sampling: Some(Percent { value: 1.0 }),
            client_sampling: Some(Percent { value: 50.0 }),
            custom_tags: vec![ProtoTag {
                tag: "istio.canonical_service".into(),
                r#type: Some(custom_tag::Type::Literal(custom_tag::Literal { value: "reviews".into() })),
            }],
            ..Tracing::default()
        };
        let mut warnings = Warnings::new();
        let converted = hcm_tracing(tracing, &mut warnings).ok();
        assert_eq!(
            converted,
            Some(HcmTracing {
                provider: Some(Arc::new(TracingConfig {
                    collector: TraceCollector::Cluster(cluster.into()),
                    service_name: "reviews.default".into(),
                })),
                sampling: Sampling {
                    client: FractionalPercent { numerator: 50, denominator: 100 },
                    random: FractionalPercent { numerator: 100, denominator: 10_000 },
                    ..Sampling::default()
                },
                custom_tags: vec![CustomTag {
                    tag: "istio.canonical_service".into(),
                    value: CustomTagValue::Literal("reviews".into()),
                }],
                ..HcmTracing::default()
            })
        );
    }

    #[test]
    fn what_would_change_sampling_or_export_is_refused_with_its_path() {
        let mut warnings = Warnings::new();
        let zipkin = Tracing {
            provider: Some(trace::tracing::Http {
                name: "envoy.tracers.zipkin".into(),
                config_type: Some(trace::tracing::http::ConfigType::TypedConfig(Any {
                    type_url: "type.googleapis.com/envoy.config.trace.v3.ZipkinConfig".into(),
                    value: Vec::new(),
                })),
            }),
            ..Tracing::default()
        };
        assert_eq!(error_path(hcm_tracing(zipkin, &mut warnings)), "provider.typed_config");
        let with_sampler = trace::OpenTelemetryConfig {
            sampler: Some(crate::pb::envoy::config::core::v3::TypedExtensionConfig {
                name: "sampler".into(),
                typed_config: Some(crate::pb::google::protobuf::Any {
                    type_url: "type.googleapis.com/acme.Sampler".into(),
                    value: Vec::new(),
                }),
            }),
            ..to_cluster("otel")
        };
        let sampled = Tracing { provider: provider(with_sampler), ..Tracing::default() };
        assert_eq!(error_path(hcm_tracing(sampled, &mut warnings)), "provider.typed_config.sampler");
        let both = trace::OpenTelemetryConfig { http_service: Some(Default::default()), ..to_cluster("otel") };
        let both = Tracing { provider: provider(both), ..Tracing::default() };
        assert_eq!(error_path(hcm_tracing(both, &mut warnings)), "provider.typed_config.http_service");
        let route_metadata = Tracing {
            custom_tags: vec![
                ProtoTag { tag: "ok".into(), r#type: Some(custom_tag::Type::Literal(Default::default())) },
                ProtoTag {
                    tag: "route".into(),
                    r#type: Some(custom_tag::Type::Metadata(custom_tag::Metadata {
                        kind: Some(MetadataKind { kind: Some(metadata_kind::Kind::Route(Default::default())) }),
                        metadata_key: Some(MetadataKey { key: "istio".into(), path: Vec::new() }),
                        default_value: String::new(),
                    })),
                },
            ],
            ..Tracing::default()
        };
        assert_eq!(error_path(hcm_tracing(route_metadata, &mut warnings)), "custom_tags[1].metadata.kind");
        let unpropagated = Tracing { no_context_propagation: true, ..Tracing::default() };
        assert_eq!(error_path(hcm_tracing(unpropagated, &mut warnings)), "no_context_propagation");
    }

    #[test]
    fn otlp_over_http_goes_to_the_uris_path_on_the_cluster() {
        use crate::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
        let http = HttpService {
            http_uri: Some(HttpUri {
                uri: "http://otel-collector.observability.svc.cluster.local:4318/v1/traces".into(),
                timeout: Some(crate::pb::google::protobuf::Duration { seconds: 1, nanos: 0 }), // required
                http_upstream_type: Some(http_uri::HttpUpstreamType::Cluster(
                    "outbound|4318||otel-collector.observability.svc.cluster.local".into(),
                )),
            }),
            request_headers_to_add: vec![HeaderValueOption {
                header: Some(HeaderValue { key: "X-Tenant".into(), value: "t1".into(), ..Default::default() }),
                ..Default::default()
            }],
            formatters: Vec::new(),
        };
        let config = trace::OpenTelemetryConfig { http_service: Some(http), ..Default::default() };
        let tracing = Tracing { provider: provider(config), ..Tracing::default() };
        let converted = hcm_tracing(tracing, &mut Warnings::new()).ok().and_then(|t| t.provider);
        assert_eq!(
            converted.map(|p| p.collector.clone()),
            Some(TraceCollector::HttpCluster {
                cluster: "outbound|4318||otel-collector.observability.svc.cluster.local".into(),
                path: "/v1/traces".into(),
                headers: vec![("x-tenant".into(), "t1".into())],
            })
        );
    }

    #[test]
    fn percentages_round_as_envoy_rounds_them() {
        let percent = |value| Some(Percent { value });
        assert_eq!(rounded(&percent(0.005), 10_000, "f").ok(), Some(1));
        assert_eq!(rounded(&percent(0.004), 10_000, "f").ok(), Some(0));
        assert_eq!(rounded(&None, 10_000, "f").ok(), Some(10_000));
        assert_eq!(truncated(&percent(50.9), "f").ok(), Some(50));
        assert!(rounded(&percent(101.0), 100, "f").is_err());
    }
}
